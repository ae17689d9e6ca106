#include "api/rate_limit.h"

#include <gtest/gtest.h>

#include <string>

namespace meridian::api {
namespace {

TEST(RateLimiterTest, ABurstThenTheRateAndKeysApart) {
  RateLimiter l(10, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(l.Take("a", 100), 0) << i;
  const double wait = l.Take("a", 100);
  EXPECT_NEAR(wait, 0.1, 1e-9);    // one request comes back every 1/10 s
  EXPECT_EQ(l.Take("b", 100), 0);  // another key has its own bucket
  EXPECT_GT(l.Take("a", 100.05), 0);
  EXPECT_EQ(l.Take("a", 100.1), 0);
  EXPECT_GT(l.Take("a", 100.1), 0);
  // Refilled up to the burst, not past it.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(l.Take("a", 200), 0) << i;
  EXPECT_GT(l.Take("a", 200), 0);
}

TEST(RateLimiterTest, WaitTakesNothing) {
  RateLimiter l(1, 2);
  EXPECT_EQ(l.Wait("a", 0), 0);
  EXPECT_EQ(l.Take("a", 0), 0);
  EXPECT_EQ(l.Wait("a", 0), 0);
  EXPECT_EQ(l.Take("a", 0), 0);
  EXPECT_NEAR(l.Wait("a", 0), 1, 1e-9);
  EXPECT_NEAR(l.Wait("a", 0.5), 0.5, 1e-9);
  EXPECT_EQ(l.Take("a", 1), 0);
  // Refilled, the bucket is forgotten, and a fresh one holds the whole burst again.
  EXPECT_EQ(l.Wait("a", 100), 0);
  EXPECT_EQ(l.Take("a", 100), 0);
  EXPECT_EQ(l.Take("a", 100), 0);
  EXPECT_GT(l.Take("a", 100), 0);
}

TEST(RateLimiterTest, ARateOfZeroIsOff) {
  RateLimiter l(0, 1);
  EXPECT_FALSE(l.on());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(l.Take("a", 0), 0);
}

// Many keys are held within max_keys: refilled buckets go first, then the least recently used;
// a key still in use keeps its (empty) bucket.
TEST(RateLimiterTest, KeysAreBoundedAndTheBusyOneIsKept) {
  RateLimiter l(1, 3, 100);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(l.Take("busy", 0), 0);
  EXPECT_GT(l.Take("busy", 0), 0);
  for (int i = 0; i < 10000; ++i) {
    l.Take("k" + std::to_string(i), 0.0001 * i);
    EXPECT_GT(l.Take("busy", 0.0001 * i), 0) << i;  // touched: never the oldest
  }
}

TEST(ConcurrencyLimit, HoldsAtMostTheLimitPerKeyAndGivesBackWhenReleased) {
  ConcurrencyLimit limit(2);
  auto a = limit.Acquire("t1");
  auto b = limit.Acquire("t1");
  EXPECT_TRUE(a && b);
  EXPECT_EQ(limit.Acquire("t1"), nullptr);
  EXPECT_NE(limit.Acquire("t2"), nullptr);  // another key has its own
  a.reset();
  EXPECT_NE(limit.Acquire("t1"), nullptr);
}

}  // namespace
}  // namespace meridian::api
