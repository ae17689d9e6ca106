#include <gtest/gtest.h>

#include "api/api.h"

namespace meridian::api {
namespace {

// A row per body: the error expected ("" when it decodes).
TEST(DecodeJsonBody, RejectsKeysGivenTwiceNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"a": 1, "b": {"a": 2}})", ""},
      {R"([{"a": 1}, {"a": 2}])", ""},
      {R"({"a": 1, "a": 2})", "a: the key appears twice in one object"},
      {R"({"metadata": {"name": "x", "project": "p", "project": "q"}})",
       "metadata.project: the key appears twice"},
      {R"({"spec": {"tasks": [{"env": {"K": "1", "K": "2"}}]}})", "spec.tasks.env.K: the key"},
      {R"({"a": {"b": 1}, "c": {"b": 1}, "c": 2})", "c: the key appears twice"},
      {R"({"a": 1e999999})", "invalid JSON"},
  };
  for (const auto& [body, error] : cases) {
    auto decoded = DecodeJsonBody(body);
    if (std::string(error).empty()) {
      EXPECT_TRUE(decoded.ok()) << body << ": " << decoded.status().message();
    } else {
      ASSERT_FALSE(decoded.ok()) << body;
      EXPECT_NE(decoded.status().message().find(error), std::string::npos)
          << body << ": " << decoded.status().message();
    }
  }
}

// A body that is not JSON: our message with the place (line, column, byte) and what was found
// there, never the parser's exception text.
TEST(DecodeJsonBody, SaysWhatAndWhereAMalformedBodyBreaks) {
  struct Case {
    std::string body;
    std::string message;
    int64_t line, column, byte;
  };
  const Case cases[] = {
      {"{\"a\": 1,}", "malformed JSON at line 1, column 9 (byte 9): unexpected '}'", 1, 9, 9},
      {"{\n  \"metadata\": {\n    \"name\": x\n", "at line 3, column 13 (byte 31): unexpected 'x'",
       3, 13, 31},
      {"{\"a\": [1, 2", "(byte 12): the body ends before the JSON value does", 1, 12, 12},
      {"", "the body is empty", 1, 1, 1},
      {"{\"a\": \"\x01\"}", "unexpected byte 0x01", 1, 8, 8},
      {"{} {}", "at line 1, column 4 (byte 4): unexpected '{'", 1, 4, 4},
  };
  for (const Case& c : cases) {
    JsonBodyError where;
    auto decoded = DecodeJsonBody(c.body, &where);
    ASSERT_FALSE(decoded.ok()) << c.body;
    const std::string& message = decoded.status().message();
    EXPECT_NE(message.find(c.message), std::string::npos) << c.body << ": " << message;
    EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
    EXPECT_EQ(message.find("parse_error"), std::string::npos) << message;
    EXPECT_EQ(where.line, c.line) << c.body;
    EXPECT_EQ(where.column, c.column) << c.body;
    EXPECT_EQ(where.byte, c.byte) << c.body;
  }
  auto huge = DecodeJsonBody(R"({"a": 1e999999})");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(), "invalid JSON: a number is too large for any number type");
}

}  // namespace
}  // namespace meridian::api
