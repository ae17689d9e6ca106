#include "base/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

namespace meridian::base::log {
namespace {

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { Init(LogOptions{}); }  // back to stderr for the other tests
  void Start(Format format, Level level) {
    LogOptions o;
    o.program = "meridian test";
    o.level = level;
    o.format = format;
    o.out = &out_;
    Init(o);
  }
  std::ostringstream out_;
};

TEST_F(LogTest, JsonLinesParseAndCarryTheirFields) {
  Start(Format::kJson, Level::kInfo);
  Info(Fields{{"job", "42"}, {"project", "vision"}}, "event Job/{} {}: {}", 42, "Placed", "on a1");
  Warn("plain");
  const auto lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 2u);
  const auto a = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(a["msg"], "event Job/42 Placed: on a1");
  EXPECT_EQ(a["level"], "info");
  EXPECT_EQ(a["program"], "meridian test");
  EXPECT_EQ(a["job"], "42");
  EXPECT_EQ(a["project"], "vision");
  EXPECT_TRUE(std::regex_match(a["ts"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << a["ts"];
  const auto b = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(b["level"], "warn");
  EXPECT_EQ(b["msg"], "plain");
  EXPECT_EQ(b.size(), 4u);  // ts, level, program, msg
}

TEST_F(LogTest, JsonEscapesQuotesNewlinesAndBadBytes) {
  Start(Format::kJson, Level::kDebug);
  const std::string nasty = "say \"hi\"\nthen \\ leave\t\x01 \xff";
  Error(Fields{{"path", nasty}, {"msg", "not the message"}}, "{}", nasty);
  const auto lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 1u) << out_.str();  // the newline did not split the line
  EXPECT_NE(lines[0].find(R"("msg":"say \"hi\"\nthen \\ leave\t\u0001 )"), std::string::npos)
      << lines[0];
  const auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["level"], "error");
  // The byte that is not UTF-8 becomes U+FFFD; the rest comes back as it was.
  const std::string back = "say \"hi\"\nthen \\ leave\t\x01 \xEF\xBF\xBD";
  EXPECT_EQ(j["msg"], back);
  EXPECT_EQ(j["path"], back);
}

TEST_F(LogTest, LevelsBelowTheSetOneAreDropped) {
  Start(Format::kJson, Level::kWarn);
  Debug("d");
  Info("i");
  Warn("w");
  Error("e");
  const auto lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  EXPECT_EQ(nlohmann::json::parse(lines[0])["msg"], "w");
  EXPECT_EQ(nlohmann::json::parse(lines[1])["msg"], "e");
  EXPECT_FALSE(Enabled(Level::kInfo));
  EXPECT_TRUE(Enabled(Level::kError));
}

TEST_F(LogTest, TextLinesHaveTimeLevelProgramMessageAndFields) {
  Start(Format::kText, Level::kDebug);
  Debug(Fields{{"route", "jobs.create"}, {"user", "ada lovelace"}}, "POST /api/v1/jobs {}", 201);
  const auto lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(std::regex_match(
      lines[0], std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z debug meridian test: )"
                           R"(POST /api/v1/jobs 201 route=jobs.create user="ada lovelace")")))
      << lines[0];
}

TEST(LogNames, ParseAndRefuse) {
  EXPECT_EQ(*ParseLevel("warn"), Level::kWarn);
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  EXPECT_FALSE(ParseLevel("verbose").ok());
  EXPECT_FALSE(ParseFormat("xml").ok());
  EXPECT_STREQ(LevelName(Level::kError), "error");
}

}  // namespace
}  // namespace meridian::base::log
