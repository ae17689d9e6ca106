#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace meridian::domain {

using Json = nlohmann::json;

// One error in a document: where (file, line, column when known) and which field.
struct FieldError {
  std::string file;
  int line = 0;  // 1-based; 0 when the input had no positions (a JSON request body)
  int column = 0;
  std::string field;  // "spec.gpusPerNode", "metadata.name", "tasks[1]"
  std::string message;

  std::string ToString() const;  // "file:line:col: field: message"
};

// A decoded document: its value as JSON, and where each field was written, keyed by the same
// paths that FieldError uses. YAML and JSON input both end up here, so one validator serves the
// API, the CLI and configuration files.
struct SourceDoc {
  Json value;
  std::string file;
  std::map<std::string, std::pair<int, int>> marks;  // path -> line, column (1-based)
};

// Parses every document of a YAML stream (JSON is accepted too: it is YAML). Scalars become
// JSON numbers, booleans and nulls as YAML 1.2's core schema reads them, and strings otherwise;
// quoted scalars are always strings. A syntax error comes back as one FieldError.
base::Result<std::vector<SourceDoc>> ParseYamlDocuments(const std::string& text,
                                                        const std::string& file,
                                                        std::vector<FieldError>* errors);

// Collects errors against one document, placing each at the position of its field (or of the
// nearest enclosing field that has one).
class ErrorList {
 public:
  void Add(const SourceDoc& doc, const std::string& field, const std::string& message);
  void Add(FieldError e) { errors_.push_back(std::move(e)); }
  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }
  const std::vector<FieldError>& errors() const { return errors_; }
  std::string ToString() const;  // one error per line
  // Ok when empty; otherwise the first error as "field: message" (kInvalidArgument), for a
  // request body whose answer names one field.
  base::Status First() const;

 private:
  std::vector<FieldError> errors_;
};

// Reads the fields of one JSON object of a document, checks their types and ranges, writes the
// canonical value (with defaults) to `out`, and reports fields it was never asked for as
// unknown when Finish is called. Paths are built from `prefix` ("spec").
class FieldReader {
 public:
  FieldReader(const SourceDoc& doc, const Json& object, std::string prefix, ErrorList* errors,
              Json* out);

  bool Has(const std::string& key) const;
  std::string String(const std::string& key, bool required, const std::string& fallback = "");
  // One of `allowed`; the fallback when absent and not required.
  std::string Enum(const std::string& key, const std::vector<std::string>& allowed,
                   const std::string& fallback);
  std::string Name(const std::string& key, bool required);  // a DNS-1123 label
  int64_t Int(const std::string& key, int64_t min, int64_t max, int64_t fallback,
              bool required = false);
  double Number(const std::string& key, double min, double max, double fallback);
  // A duration in seconds: a number, or a string with units as base::ParseDuration reads it
  // ("45s", "1h30m", "01:30:00"). The canonical form is the number of seconds.
  double Duration(const std::string& key, double min, double max, double fallback);
  bool Bool(const std::string& key, bool fallback);
  std::vector<std::string> StringList(const std::string& key);
  // A list of integers, each within [min, max]; an item out of range is reported by its index.
  std::vector<int64_t> IntList(const std::string& key, int64_t min, int64_t max);
  std::map<std::string, std::string> StringMap(const std::string& key);
  std::map<std::string, double> NumberMap(const std::string& key, double min);
  // A list (nullptr when absent, or when it is not a list: then an error is reported).
  const Json* Array(const std::string& key, bool required);
  // A nested object (empty when absent); the child reports its own unknown fields.
  FieldReader Object(const std::string& key, Json* out);
  // A nested object whose canonical form is written into this reader's own under `key`.
  FieldReader Nested(const std::string& key);
  // A list of mappings: `item` reads each one through its own reader (paths "key[i].field"),
  // whose unknown fields are reported; the canonical list is written out. Returns the count.
  size_t ObjectList(const std::string& key, const std::function<void(FieldReader&)>& item);
  void Error(const std::string& key, const std::string& message);
  // Takes the field as read without reading it: one already reported with a better message than
  // "unknown field" (a field the document's other choices leave unused).
  void Skip(const std::string& key) { seen_.push_back(key); }
  // Fields never read are ignored at Finish, here and in every nested reader made from this
  // one: for protocols, where a newer peer may send what this version does not know.
  void IgnoreUnknown() { ignore_unknown_ = true; }
  // Reports every field present but never read.
  void Finish();

  std::string Path(const std::string& key) const;

 private:
  const Json* Get(const std::string& key);

  const SourceDoc& doc_;
  const Json& object_;
  std::string prefix_;
  ErrorList* errors_;
  Json* out_;
  std::vector<std::string> seen_;
  bool ignore_unknown_ = false;
};

// A DNS-1123 label: lower-case letters, digits and '-', starting and ending with an
// alphanumeric, at most 63 characters. Names go into URLs, file names and metric labels.
bool IsValidName(const std::string& name);

}  // namespace meridian::domain
