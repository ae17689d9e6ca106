#include "sched/plugins/spread/spread.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(Spread, PrefersTheNodeThatKeepsMoreFree) {
  Snapshot s = testing::Build({{"big", "H100-80GB", 8, 128000}, {"small", "H100-80GB", 2, 16000}});
  CycleState cycle;
  TaskSpec t = testing::Whole(1, 8000);
  PluginContext ctx{s, t, cycle};
  DeviceGrant big_gpu{0, 1000, 0, -1, -1, MigChange::kNone};
  DeviceGrant small_gpu{8, 1000, 0, -1, -1, MigChange::kNone};
  Spread spread;
  // Small node after: half its CPU and half its GPUs left -> 50. Big node: 90.625.
  EXPECT_DOUBLE_EQ(spread.Score(ctx, {1, std::span<const DeviceGrant>(&small_gpu, 1)}), 50.0);
  EXPECT_DOUBLE_EQ(spread.Score(ctx, {0, std::span<const DeviceGrant>(&big_gpu, 1)}),
                   100.0 * (0.5 * 120.0 / 128 + 0.5 * 7.0 / 8));
}

}  // namespace
}  // namespace meridian::sched::plugins
