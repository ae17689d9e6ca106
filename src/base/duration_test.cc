#include "base/duration.h"

#include <gtest/gtest.h>

namespace meridian::base {
namespace {

TEST(Duration, ReadsEveryFormPeopleType) {
  const struct {
    const char* text;
    double seconds;
  } kCases[] = {
      {"0", 0},
      {"90", 90},
      {"1.5", 1.5},
      {"90s", 90},
      {"15m", 900},
      {"2h", 7200},
      {"30d", 2592000},
      {"1h30m", 5400},
      {"1d12h", 129600},
      {"1h0m30s", 3630},
      {"1.5h", 5400},
      {"2H", 7200},
      {" 45s ", 45},
      {"05:30", 330},
      {"01:30:00", 5400},
      {"90:00", 5400},
      {"0:00:01.5", 1.5},
      {"1-02:03:04", 93784},
      {"2-00:00:00", 172800},
  };
  for (const auto& c : kCases) {
    auto d = ParseDuration(c.text);
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.status().message();
    EXPECT_DOUBLE_EQ(*d, c.seconds) << c.text;
  }
}

TEST(Duration, RefusesWhatIsNotOneAndSaysWhichFormsAreAccepted) {
  for (const char* text : {"",        " ",    "h",       "1x",     "1h1h",    "30m1h", "-5",  "-5m",
                           "1:2:3:4", "1:60", "1:00:60", "1.5:00", "1-02:03", "abc",   "1e3", "5 m",
                           "1h 30m",  "nan",  "inf",     "1-",     ":",       "1::2"}) {
    auto d = ParseDuration(text);
    ASSERT_FALSE(d.ok()) << "\"" << text << "\" was read as a duration";
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find(std::string("\"") + text + "\" is not a duration"),
              std::string::npos)
        << d.status().message();
    EXPECT_NE(d.status().message().find("1h30m, HH:MM:SS"), std::string::npos);
  }
}

TEST(Duration, FormatsElapsedTimesAsSacctDoes) {
  EXPECT_EQ(FormatElapsed(0), "00:00:00");
  EXPECT_EQ(FormatElapsed(59.9), "00:00:59");
  EXPECT_EQ(FormatElapsed(5400), "01:30:00");
  EXPECT_EQ(FormatElapsed(93784), "1-02:03:04");
  EXPECT_EQ(FormatElapsed(-3), "00:00:00");
  // What it prints reads back as the same duration.
  EXPECT_DOUBLE_EQ(*ParseDuration(FormatElapsed(93784)), 93784);
}

}  // namespace
}  // namespace meridian::base
