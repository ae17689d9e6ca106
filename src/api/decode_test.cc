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

}  // namespace
}  // namespace meridian::api
