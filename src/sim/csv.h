#pragma once

#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/strings.h"

namespace meridian::sim {

// A CSV table whose first line names the columns. Fields hold no quotes or commas in the formats
// Meridian reads; a quote is reported as an error rather than misread. Not thread-safe.
class CsvTable {
  // Reads `text` line by line; `file` names it in errors ("file:line:column: what").
 public:
  CsvTable(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  base::Status ReadHeader(const std::vector<std::string>& required) {
    if (!NextLine()) return Error(1, 1, "empty file: expected a header line");
    for (size_t i = 0; i < fields_.size(); ++i) {
      columns_[std::string(base::Trim(fields_[i]))] = static_cast<int>(i);
    }
    header_width_ = fields_.size();
    for (const std::string& name : required) {
      if (!columns_.count(name)) return Error(line_no_, 1, "missing column \"" + name + "\"");
    }
    return base::Status::Ok();
  }

  // Advances to the next non-empty line; false at the end.
  bool NextLine() {
    while (pos_ < text_.size() || (pos_ == text_.size() && !done_)) {
      size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) {
        end = text_.size();
        done_ = true;
      }
      std::string_view line = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      ++line_no_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (base::Trim(line).empty()) {
        if (done_) return false;
        continue;
      }
      line_ = line;
      fields_ = base::Split(line, ',');
      return true;
    }
    return false;
  }

  base::Status CheckWidth() const {
    if (fields_.size() != header_width_) {
      return Error(line_no_, 1,
                   "expected " + std::to_string(header_width_) + " fields, found " +
                       std::to_string(fields_.size()));
    }
    if (line_.find('"') != std::string_view::npos) {
      return Error(line_no_, static_cast<int>(line_.find('"')) + 1,
                   "quoted fields are not supported");
    }
    return base::Status::Ok();
  }

  bool Has(const std::string& column) const { return columns_.count(column) > 0; }

  // A number in [lo, hi]; an empty field is `empty_value` when that is given.
  base::Status Double(const std::string& column, double lo, double hi, double* out,
                      const double* empty_value = nullptr) const {
    std::string_view f = Field(column);
    if (f.empty() && empty_value) {
      *out = *empty_value;
      return base::Status::Ok();
    }
    char* end = nullptr;
    std::string text(f);
    *out = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size()) {
      return Error(line_no_, Column(column),
                   column + ": expected a number, found \"" + text + "\"");
    }
    if (!(*out >= lo && *out <= hi)) {
      return Error(line_no_, Column(column),
                   column + ": " + text + " is outside [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
    }
    return base::Status::Ok();
  }

  std::string_view Field(const std::string& column) const {
    return base::Trim(fields_[columns_.at(column)]);
  }

  int Column(const std::string& column) const {
    int idx = columns_.at(column);
    int col = 1;
    for (int i = 0; i < idx; ++i) col += static_cast<int>(fields_[i].size()) + 1;
    return col;
  }

  // A non-negative integer in [lo, hi]; an empty field is `empty_value` when that is allowed.
  base::Status Int(const std::string& column, long long lo, long long hi, long long* out,
                   const long long* empty_value = nullptr) const {
    std::string_view f = Field(column);
    if (f.empty() && empty_value) {
      *out = *empty_value;
      return base::Status::Ok();
    }
    if (!base::ParseInt64(f, out)) {
      return Error(line_no_, Column(column),
                   column + ": expected an integer, found \"" + std::string(f) + "\"");
    }
    if (*out < lo || *out > hi) {
      return Error(line_no_, Column(column),
                   column + ": " + std::to_string(*out) + " is outside [" + std::to_string(lo) +
                       ", " + std::to_string(hi) + "]");
    }
    return base::Status::Ok();
  }

  base::Status Error(int line, int col, const std::string& what) const {
    return base::Status::Invalid(std::string(file_) + ":" + std::to_string(line) + ":" +
                                 std::to_string(col) + ": " + what);
  }
  int line_no() const { return line_no_; }

 private:
  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
  bool done_ = false;
  int line_no_ = 0;
  std::string_view line_;
  std::vector<std::string_view> fields_;
  std::map<std::string, int> columns_;
  size_t header_width_ = 0;
};

}  // namespace meridian::sim
