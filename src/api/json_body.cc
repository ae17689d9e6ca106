#include "api/json_body.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

namespace meridian::api {

using base::Status;

namespace {

// What the parser stopped at, in our words: the body ended, or this byte came where no JSON
// could. The parser's own text names its internals ("[json.exception.parse_error.101]").
std::string Unexpected(const std::string& body, size_t byte) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return "the body is empty";
  if (byte == 0 || byte > body.size()) return "the body ends before the JSON value does";
  const unsigned char c = static_cast<unsigned char>(body[byte - 1]);
  if (c >= 0x20 && c < 0x7f) return std::string("unexpected '") + static_cast<char>(c) + "'";
  return fmt::format("unexpected byte 0x{:02x}", c);
}

}  // namespace

base::Result<Json> DecodeJsonBody(const std::string& body, JsonBodyError* where) {
  // No request needs deep nesting, and a body of a few hundred thousand '[' would otherwise
  // exhaust the stack of the thread that holds it.
  constexpr int kMaxDepth = 64;
  struct TooDeep {};
  struct Duplicate {
    std::string key;
  };
  // The keys seen in each object being parsed, innermost last, with the path to it.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> path;
  try {
    return Json::parse(body, [&](int depth, Json::parse_event_t event, Json& parsed) {
      if (depth > kMaxDepth) throw TooDeep{};
      switch (event) {
        case Json::parse_event_t::object_start:
          keys.emplace_back();
          path.emplace_back();
          break;
        case Json::parse_event_t::key: {
          const std::string key = parsed.get<std::string>();
          if (!keys.back().insert(key).second) {
            std::string at;
            for (size_t i = 0; i + 1 < path.size(); ++i) {
              if (!path[i].empty()) at += path[i] + ".";
            }
            throw Duplicate{at + key};
          }
          path.back() = key;
          break;
        }
        case Json::parse_event_t::object_end:
          keys.pop_back();
          path.pop_back();
          break;
        default:
          break;
      }
      return true;
    });
  } catch (const Json::parse_error& e) {
    // Where, as an editor counts: lines and columns from 1, the column in bytes.
    const size_t stop = std::min(e.byte, body.size() + 1);
    int64_t line = 1, column = 1;
    for (size_t i = 0; i + 1 < stop && i < body.size(); ++i) {
      if (body[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    if (where) *where = {static_cast<int64_t>(e.byte), line, column};
    return Status::Invalid(fmt::format("malformed JSON at line {}, column {} (byte {}): {}", line,
                                       column, e.byte, Unexpected(body, e.byte)));
  } catch (const Json::out_of_range&) {
    // A number too large for any type, found by fuzz/request_fuzzer.
    return Status::Invalid("invalid JSON: a number is too large for any number type");
  } catch (const Json::exception&) {
    return Status::Invalid("invalid JSON: the body does not decode");
  } catch (const TooDeep&) {
    return Status::Invalid("JSON nested deeper than " + std::to_string(kMaxDepth) + " levels");
  } catch (const Duplicate& d) {
    return Status::Invalid(d.key + ": the key appears twice in one object; give it once");
  }
}

}  // namespace meridian::api
