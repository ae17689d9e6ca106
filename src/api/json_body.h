#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace meridian::api {

using Json = nlohmann::json;

// Decodes a request body: JSON nested at most 64 deep, no object with a key twice (a body with
// two "project" keys means two things; which one wins is a guess, as YAML's rule says). The one
// decoder of untrusted JSON. A body that is not JSON is refused with a message of our own that
// says what was found where ("malformed JSON at line 2, column 7 (byte 19): unexpected '}'"),
// never the parser's exception text; `where`, when given, gets that place (line 0: none).
struct JsonBodyError {
  int64_t byte = 0;  // 1-based offset of the byte the parser stopped at
  int64_t line = 0;
  int64_t column = 0;
};
base::Result<Json> DecodeJsonBody(const std::string& body, JsonBodyError* where = nullptr);

}  // namespace meridian::api
