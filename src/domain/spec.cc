#include "domain/spec.h"

#include <yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/duration.h"

namespace meridian::domain {

namespace {

bool IsNullScalar(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

bool ParseBool(const std::string& s, bool* out) {
  if (s == "true" || s == "True" || s == "TRUE") return *out = true, true;
  if (s == "false" || s == "False" || s == "FALSE") return *out = false, true;
  return false;
}

bool ParseInteger(const std::string& s, int64_t* out) {
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(s[k]))) return false;
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseFloat(const std::string& s, double* out) {
  // Digits, one dot, an exponent: what YAML 1.2's core schema calls a float (no hex, no words).
  bool digit = false;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit = true;
    } else if (c != '.' && c != 'e' && c != 'E' && c != '-' && c != '+') {
      return false;
    }
  }
  if (!digit) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

Json ScalarToJson(const std::string& s, bool quoted) {
  if (quoted) return s;
  if (IsNullScalar(s)) return nullptr;
  bool b = false;
  if (ParseBool(s, &b)) return b;
  int64_t i = 0;
  if (ParseInteger(s, &i)) return i;
  double d = 0;
  if (ParseFloat(s, &d)) return d;
  return s;
}

// Deeper documents are refused rather than risking the stack: no configuration needs more.
constexpr int kMaxDepth = 64;

// Builds JSON from libyaml's event stream, one document at a time. libyaml is the parser that
// OSS-Fuzz has hammered for years; yaml-cpp 0.7 hung for ever on some malformed flow mappings
// that our fuzzer found, which would let one request occupy a server thread.
class EventReader {
 public:
  EventReader(const std::string& text, std::string file) : file_(std::move(file)) {
    yaml_parser_initialize(&parser_);
    yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                                 text.size());
  }
  ~EventReader() {
    if (has_event_) yaml_event_delete(&event_);
    yaml_parser_delete(&parser_);
  }

  // Reads every document; false with `error` set on the first syntax error.
  bool ReadAll(std::vector<SourceDoc>* docs, ErrorList* errors, FieldError* error) {
    if (!Next(error) || event_.type != YAML_STREAM_START_EVENT) return Fail(error);
    for (;;) {
      if (!Next(error)) return false;
      if (event_.type == YAML_STREAM_END_EVENT) return true;
      if (event_.type != YAML_DOCUMENT_START_EVENT) return Fail(error);
      SourceDoc doc;
      doc.file = file_;
      if (!Next(error)) return false;
      if (!Value("", 0, &doc, &doc.value, errors, error)) return false;
      if (!Next(error) || event_.type != YAML_DOCUMENT_END_EVENT) return Fail(error);
      if (!doc.value.is_null()) docs->push_back(std::move(doc));
    }
  }

 private:
  bool Next(FieldError* error) {
    if (has_event_) yaml_event_delete(&event_);
    has_event_ = false;
    if (!yaml_parser_parse(&parser_, &event_)) {
      *error = {file_, static_cast<int>(parser_.problem_mark.line) + 1,
                static_cast<int>(parser_.problem_mark.column) + 1, "",
                std::string(parser_.problem ? parser_.problem : "invalid YAML") +
                    (parser_.context ? std::string(" ") + parser_.context : "")};
      return false;
    }
    has_event_ = true;
    return true;
  }
  bool Fail(FieldError* error) {
    if (error->message.empty()) {
      *error = {file_, Line(), Column(), "", "unexpected YAML structure"};
    }
    return false;
  }
  int Line() const { return static_cast<int>(event_.start_mark.line) + 1; }
  int Column() const { return static_cast<int>(event_.start_mark.column) + 1; }

  // Reads the value that starts at the current event (which it consumes).
  bool Value(const std::string& path, int depth, SourceDoc* doc, Json* out, ErrorList* errors,
             FieldError* error) {
    doc->marks[path] = {Line(), Column()};
    if (depth > kMaxDepth) {
      *error = {file_, Line(), Column(), path,
                "nested deeper than " + std::to_string(kMaxDepth) + " levels"};
      return false;
    }
    switch (event_.type) {
      case YAML_ALIAS_EVENT:
        *error = {file_, Line(), Column(), path, "aliases (*name) are not supported"};
        return false;
      case YAML_SCALAR_EVENT: {
        const std::string value(reinterpret_cast<const char*>(event_.data.scalar.value),
                                event_.data.scalar.length);
        const bool quoted = event_.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        *out = ScalarToJson(value, quoted);
        return true;
      }
      case YAML_SEQUENCE_START_EVENT: {
        *out = Json::array();
        for (size_t i = 0;; ++i) {
          if (!Next(error)) return false;
          if (event_.type == YAML_SEQUENCE_END_EVENT) return true;
          Json v;
          if (!Value(path + "[" + std::to_string(i) + "]", depth + 1, doc, &v, errors, error)) {
            return false;
          }
          out->push_back(std::move(v));
        }
      }
      case YAML_MAPPING_START_EVENT: {
        *out = Json::object();
        const std::string prefix = path.empty() ? "" : path + ".";
        for (;;) {
          if (!Next(error)) return false;
          if (event_.type == YAML_MAPPING_END_EVENT) return true;
          if (event_.type != YAML_SCALAR_EVENT) {
            *error = {file_, Line(), Column(), path, "keys must be plain strings"};
            return false;
          }
          const std::string key(reinterpret_cast<const char*>(event_.data.scalar.value),
                                event_.data.scalar.length);
          const std::pair<int, int> key_mark = {Line(), Column()};
          const bool duplicate = out->contains(key);
          if (!Next(error)) return false;
          Json v;
          if (!Value(prefix + key, depth + 1, doc, &v, errors, error)) return false;
          // A key's position is where the key is written, which is where people look.
          doc->marks[prefix + key] = key_mark;
          if (duplicate) {
            errors->Add(*doc, prefix + key, "duplicate key");
            continue;
          }
          (*out)[key] = std::move(v);
        }
      }
      default:
        return Fail(error);
    }
  }

  std::string file_;
  yaml_parser_t parser_;
  yaml_event_t event_;
  bool has_event_ = false;
};

std::string TypeName(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "a mapping";
}

}  // namespace

std::string FieldError::ToString() const {
  std::string s = file;
  if (line > 0) s += (s.empty() ? "" : ":") + std::to_string(line) + ":" + std::to_string(column);
  if (!s.empty()) s += ": ";
  if (!field.empty()) s += field + ": ";
  return s + message;
}

base::Result<std::vector<SourceDoc>> ParseYamlDocuments(const std::string& text,
                                                        const std::string& file,
                                                        std::vector<FieldError>* errors) {
  std::vector<SourceDoc> docs;
  ErrorList list;
  FieldError syntax;
  EventReader reader(text, file);
  if (!reader.ReadAll(&docs, &list, &syntax)) list.Add(syntax);
  if (!list.empty()) {
    if (errors) {
      for (const FieldError& e : list.errors()) errors->push_back(e);
    }
    return base::Status::Invalid(list.ToString());
  }
  return docs;
}

void ErrorList::Add(const SourceDoc& doc, const std::string& field, const std::string& message) {
  FieldError e{doc.file, 0, 0, field, message};
  // The field itself, else the closest enclosing field that was written down.
  std::string p = field;
  for (;;) {
    auto it = doc.marks.find(p);
    if (it != doc.marks.end()) {
      e.line = it->second.first;
      e.column = it->second.second;
      break;
    }
    if (p.empty()) break;
    const size_t cut = p.find_last_of(".[");
    p = cut == std::string::npos ? "" : p.substr(0, cut);
  }
  errors_.push_back(std::move(e));
}

std::string ErrorList::ToString() const {
  std::string s;
  for (const FieldError& e : errors_) s += (s.empty() ? "" : "\n") + e.ToString();
  return s;
}

base::Status ErrorList::First() const {
  if (errors_.empty()) return base::Status::Ok();
  return base::Status::Invalid(errors_.front().field + ": " + errors_.front().message);
}

bool IsValidName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
      return false;
    }
  }
  return name.front() != '-' && name.back() != '-';
}

FieldReader::FieldReader(const SourceDoc& doc, const Json& object, std::string prefix,
                         ErrorList* errors, Json* out)
    : doc_(doc), object_(object), prefix_(std::move(prefix)), errors_(errors), out_(out) {
  if (!object_.is_null() && !object_.is_object()) {
    errors_->Add(doc_, prefix_, "must be a mapping, not " + TypeName(object_));
  }
  if (!out_->is_object()) *out_ = Json::object();
}

std::string FieldReader::Path(const std::string& key) const {
  return prefix_.empty() ? key : prefix_ + "." + key;
}

bool FieldReader::Has(const std::string& key) const {
  return object_.is_object() && object_.contains(key) && !object_.at(key).is_null();
}

const Json* FieldReader::Get(const std::string& key) {
  seen_.push_back(key);
  if (!Has(key)) return nullptr;
  return &object_.at(key);
}

void FieldReader::Error(const std::string& key, const std::string& message) {
  errors_->Add(doc_, Path(key), message);
}

std::string FieldReader::String(const std::string& key, bool required,
                                const std::string& fallback) {
  const Json* v = Get(key);
  if (!v) {
    if (required) Error(key, "is required");
    if (!fallback.empty()) (*out_)[key] = fallback;
    return fallback;
  }
  if (!v->is_string()) {
    Error(key, "must be a string, not " + TypeName(*v));
    return fallback;
  }
  (*out_)[key] = *v;
  return v->get<std::string>();
}

std::string FieldReader::Enum(const std::string& key, const std::vector<std::string>& allowed,
                              const std::string& fallback) {
  const bool present = Has(key);
  std::string s = String(key, false, fallback);
  if (!present) return s;
  for (const std::string& a : allowed) {
    if (s == a) return s;
  }
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  Error(key, "\"" + s + "\" is not one of " + list);
  (*out_)[key] = fallback;
  return fallback;
}

std::string FieldReader::Name(const std::string& key, bool required) {
  const bool present = Has(key);
  std::string s = String(key, required);
  if (present && !s.empty() && !IsValidName(s)) {
    Error(key, "\"" + s +
                   "\" is not a valid name (lower-case letters, digits and '-', at most 63, "
                   "starting and ending with a letter or digit)");
  }
  return s;
}

int64_t FieldReader::Int(const std::string& key, int64_t min, int64_t max, int64_t fallback,
                         bool required) {
  const Json* v = Get(key);
  if (!v) {
    if (required) Error(key, "is required");
    (*out_)[key] = fallback;
    return fallback;
  }
  if (!v->is_number_integer()) {
    Error(key, "must be an integer, not " + TypeName(*v));
    return fallback;
  }
  const int64_t i = v->get<int64_t>();
  if (i < min || i > max) {
    Error(key, std::to_string(i) + " is out of range [" + std::to_string(min) + ", " +
                   std::to_string(max) + "]");
    return fallback;
  }
  (*out_)[key] = i;
  return i;
}

double FieldReader::Number(const std::string& key, double min, double max, double fallback) {
  const Json* v = Get(key);
  if (!v) {
    (*out_)[key] = fallback;
    return fallback;
  }
  if (!v->is_number()) {
    Error(key, "must be a number, not " + TypeName(*v));
    return fallback;
  }
  const double d = v->get<double>();
  if (!(d >= min && d <= max)) {
    // Whole bounds as people write them: "between 0 and 100", not "0.0 and 100.0".
    auto bound = [](double b) {
      return b == std::floor(b) && std::abs(b) < 1e15 ? std::to_string(static_cast<int64_t>(b))
                                                      : Json(b).dump();
    };
    Error(key, "must be between " + bound(min) + " and " + bound(max));
    return fallback;
  }
  (*out_)[key] = d;
  return d;
}

double FieldReader::Duration(const std::string& key, double min, double max, double fallback) {
  const Json* v = Get(key);
  if (!v) {
    (*out_)[key] = fallback;
    return fallback;
  }
  double d = 0;
  if (v->is_number()) {
    d = v->get<double>();
  } else if (v->is_string()) {
    auto parsed = base::ParseDuration(v->get<std::string>());
    if (!parsed.ok()) {
      Error(key, parsed.status().message());
      return fallback;
    }
    d = *parsed;
  } else {
    Error(key, "must be a duration (seconds, or a string such as \"90s\" or \"1h30m\"), not " +
                   TypeName(*v));
    return fallback;
  }
  if (!(d >= min && d <= max)) {
    char range[96];
    std::snprintf(range, sizeof range, "must be between %.10g and %.10g seconds", min, max);
    Error(key, range);
    return fallback;
  }
  (*out_)[key] = d;
  return d;
}

bool FieldReader::Bool(const std::string& key, bool fallback) {
  const Json* v = Get(key);
  if (!v) {
    (*out_)[key] = fallback;
    return fallback;
  }
  if (!v->is_boolean()) {
    Error(key, "must be true or false, not " + TypeName(*v));
    return fallback;
  }
  (*out_)[key] = v->get<bool>();
  return v->get<bool>();
}

std::vector<std::string> FieldReader::StringList(const std::string& key) {
  std::vector<std::string> out;
  const Json* v = Get(key);
  if (!v) return out;
  if (!v->is_array()) {
    Error(key, "must be a list, not " + TypeName(*v));
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      errors_->Add(doc_, Path(key) + "[" + std::to_string(i) + "]",
                   "must be a string, not " + TypeName((*v)[i]));
      continue;
    }
    out.push_back((*v)[i].get<std::string>());
  }
  (*out_)[key] = out;
  return out;
}

std::vector<int64_t> FieldReader::IntList(const std::string& key, int64_t min, int64_t max) {
  std::vector<int64_t> out;
  const Json* v = Get(key);
  if (!v) return out;
  if (!v->is_array()) {
    Error(key, "must be a list, not " + TypeName(*v));
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& item = (*v)[i];
    const std::string where = Path(key) + "[" + std::to_string(i) + "]";
    if (!item.is_number_integer()) {
      errors_->Add(doc_, where, "must be an integer, not " + TypeName(item));
      continue;
    }
    const int64_t n = item.get<int64_t>();
    if (n < min || n > max) {
      errors_->Add(doc_, where,
                   "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                       ", not " + std::to_string(n));
      continue;
    }
    out.push_back(n);
  }
  (*out_)[key] = out;
  return out;
}

std::map<std::string, std::string> FieldReader::StringMap(const std::string& key) {
  std::map<std::string, std::string> out;
  const Json* v = Get(key);
  if (!v) return out;
  if (!v->is_object()) {
    Error(key, "must be a mapping, not " + TypeName(*v));
    return out;
  }
  for (const auto& [k, value] : v->items()) {
    if (value.is_string()) {
      out[k] = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      out[k] = value.dump();  // env: FOO: 1 means "1"
    } else {
      errors_->Add(doc_, Path(key) + "." + k, "must be a string, not " + TypeName(value));
    }
  }
  (*out_)[key] = out;
  return out;
}

std::map<std::string, double> FieldReader::NumberMap(const std::string& key, double min) {
  std::map<std::string, double> out;
  const Json* v = Get(key);
  if (!v) return out;
  if (!v->is_object()) {
    Error(key, "must be a mapping, not " + TypeName(*v));
    return out;
  }
  for (const auto& [k, value] : v->items()) {
    if (!value.is_number() || value.get<double>() < min) {
      errors_->Add(doc_, Path(key) + "." + k, "must be a number >= " + Json(min).dump());
      continue;
    }
    out[k] = value.get<double>();
  }
  (*out_)[key] = out;
  return out;
}

const Json* FieldReader::Array(const std::string& key, bool required) {
  const Json* v = Get(key);
  if (!v) {
    if (required) Error(key, "is required");
    return nullptr;
  }
  if (!v->is_array()) {
    Error(key, "must be a list, not " + TypeName(*v));
    return nullptr;
  }
  return v;
}

FieldReader FieldReader::Object(const std::string& key, Json* out) {
  static const Json kEmpty = Json::object();
  const Json* v = Get(key);
  FieldReader child(doc_, v ? *v : kEmpty, Path(key), errors_, out);
  child.ignore_unknown_ = ignore_unknown_;
  return child;
}

FieldReader FieldReader::Nested(const std::string& key) {
  Json& slot = (*out_)[key];
  slot = Json::object();
  return Object(key, &slot);
}

size_t FieldReader::ObjectList(const std::string& key,
                               const std::function<void(FieldReader&)>& item) {
  const Json* v = Array(key, false);
  if (!v) return 0;
  Json out = Json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    Json item_out = Json::object();
    FieldReader r(doc_, (*v)[i], Path(key) + "[" + std::to_string(i) + "]", errors_, &item_out);
    r.ignore_unknown_ = ignore_unknown_;
    item(r);
    r.Finish();
    out.push_back(std::move(item_out));
  }
  (*out_)[key] = std::move(out);
  return v->size();
}

void FieldReader::Finish() {
  if (!object_.is_object() || ignore_unknown_) return;
  for (const auto& [k, v] : object_.items()) {
    if (std::find(seen_.begin(), seen_.end(), k) == seen_.end()) {
      Error(k, "unknown field");
    }
  }
}

}  // namespace meridian::domain
