#include <gtest/gtest.h>

#include <set>

#include "base/rng.h"
#include "base/status.h"
#include "base/strings.h"

namespace meridian::base {
namespace {

TEST(Rng, SameSeedSameStream) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    EXPECT_NE(x, c.Next());
  }
}

TEST(Rng, UniformStaysInRangeAndCoversIt) {
  Rng rng(7);
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    uint64_t v = rng.Uniform(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
    double d = rng.UniformDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Result, CarriesValueOrStatus) {
  Result<int> good(5);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
  Result<int> bad(Status::Invalid("f.csv:3:2: not a number"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "f.csv:3:2: not a number");
}

TEST(Strings, SplitKeepsEmptyFields) {
  auto parts = Split("a,,b,", ',');
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0], "a");
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[2], "b");
  EXPECT_EQ(parts[3], "");
}

TEST(Strings, ParseInt64RejectsGarbage) {
  long long v = 0;
  EXPECT_TRUE(ParseInt64("12000", &v));
  EXPECT_EQ(v, 12000);
  EXPECT_TRUE(ParseInt64("-3", &v));
  EXPECT_EQ(v, -3);
  EXPECT_FALSE(ParseInt64("", &v));
  EXPECT_FALSE(ParseInt64("12a", &v));
  EXPECT_FALSE(ParseInt64("1.5", &v));
  EXPECT_EQ(Trim("  x \r\n"), "x");
}

}  // namespace
}  // namespace meridian::base
