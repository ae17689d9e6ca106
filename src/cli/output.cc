#include "cli/output.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "base/duration.h"
#include "base/strings.h"

namespace meridian::cli {

namespace {

YAML::Node ToNode(const Json& v) {
  YAML::Node n;
  if (v.is_object()) {
    n = YAML::Node(YAML::NodeType::Map);
    for (const auto& [k, x] : v.items()) n[k] = ToNode(x);
  } else if (v.is_array()) {
    n = YAML::Node(YAML::NodeType::Sequence);
    for (const Json& x : v) n.push_back(ToNode(x));
  } else if (v.is_string()) {
    n = v.get<std::string>();
  } else if (v.is_null()) {
    n = YAML::Node(YAML::NodeType::Null);
  } else if (v.is_number_float()) {
    n = v.dump();  // every digit, as JSON has it: a time is not 1.79611e+09
  } else {
    n = Num(v);
  }
  return n;
}

}  // namespace

namespace {

void PrintLine(std::ostream& out, const std::vector<std::string>& cells,
               const std::vector<size_t>& width) {
  std::string s;
  for (size_t c = 0; c < cells.size() && c < width.size(); ++c) {
    std::string cell = cells[c];
    if (c + 1 < cells.size() && cell.size() < width[c] + 3) cell.resize(width[c] + 3, ' ');
    if (c + 1 < cells.size() && cell.back() != ' ') cell += "   ";
    s += cell;
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  out << s << "\n";
}

}  // namespace

std::vector<size_t> Table::Print(std::ostream& out) const {
  std::vector<size_t> width(headers.size(), 0);
  for (size_t c = 0; c < headers.size(); ++c) width[c] = headers[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::vector<std::string> upper;
  for (std::string h : headers) {
    std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::toupper(c); });
    upper.push_back(h);
  }
  PrintLine(out, upper, width);
  for (const auto& row : rows) PrintLine(out, row, width);
  return width;
}

void Table::PrintRows(std::ostream& out, const std::vector<size_t>& widths) const {
  std::vector<size_t> width = widths;
  width.resize(headers.size(), 0);
  for (const auto& row : rows) PrintLine(out, row, width);
}

std::string ToYaml(const Json& value) {
  YAML::Emitter e;
  e << ToNode(value);
  return std::string(e.c_str()) + "\n";
}

std::string Age(double then, double now) {
  const double s = std::max(0.0, now - then);
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof buf, "%.0fm", s / 60);
  } else if (s < 2 * 86400) {
    std::snprintf(buf, sizeof buf, "%.0fh", s / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%.0fd", s / 86400);
  }
  return buf;
}

std::string Num(const Json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return base::Decimal(v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string UtcTimestamp(double t) {
  if (t <= 0) return "Unknown";
  std::string at = base::FormatUtc(t);
  at.pop_back();  // as sacct writes it, without the Z
  return at;
}

}  // namespace meridian::cli
