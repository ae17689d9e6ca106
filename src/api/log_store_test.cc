#include <gtest/gtest.h>

#include "api/api.h"
#include "base/testing/temp_dir.h"

namespace meridian::api {
namespace {

TEST(LogStore, AppendsOnlyAtItsSizeSoRetriesNeitherRepeatNorLose) {
  base::testing::TempDir dir;
  LogStore logs(dir.path());
  EXPECT_EQ(*logs.Append(7, 0, 1, 0, "hello "), 6);
  EXPECT_EQ(*logs.Append(7, 0, 1, 0, "hello "), 6);  // a retry of what landed: ignored
  EXPECT_EQ(*logs.Append(7, 0, 1, 9, "gap"), 6);     // ahead of the file: refused, size given
  EXPECT_EQ(*logs.Append(7, 0, 1, 6, "world"), 11);
  int64_t size = 0;
  EXPECT_EQ(*logs.Read(7, 0, 0, 100, &size), "hello world");
  EXPECT_EQ(size, 11);
  EXPECT_EQ(*logs.Read(7, 0, 6, 3, &size), "wor");
  EXPECT_EQ(*logs.Read(7, 0, 11, 100, &size), "");
  // The newest generation is what a reader gets.
  EXPECT_EQ(*logs.Append(7, 0, 2, 0, "second run"), 10);
  EXPECT_EQ(*logs.Read(7, 0, 0, 100, &size), "second run");
  EXPECT_EQ(logs.Read(7, 1, 0, 100, &size).status().code(), base::StatusCode::kNotFound);
}

TEST(LogStore, KeepsAtMostItsLimitAndSaysWhereItCut) {
  base::testing::TempDir dir;
  LogStore logs(dir.path(), 100);
  const std::string big(150, 'x');
  auto size = logs.Append(1, 0, 1, 0, big);
  ASSERT_TRUE(size.ok());
  EXPECT_GE(*size, logs.max_bytes());
  int64_t total = 0;
  const std::string kept = *logs.Read(1, 0, 0, 1000, &total);
  EXPECT_NE(kept.find("output truncated here"), std::string::npos);
  EXPECT_EQ(kept.substr(0, 10), std::string(10, 'x'));
  EXPECT_EQ(*logs.Append(1, 0, 1, *size, "more"), *size);  // full: nothing more is kept
}

}  // namespace
}  // namespace meridian::api
