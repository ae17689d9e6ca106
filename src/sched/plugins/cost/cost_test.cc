#include "sched/plugins/cost/cost.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(Cost, CheaperScoresHigher) {
  // On-prem H100 costs 2.0/h, cloud H100 6.0/h (the dearest): 66.7 and 0.
  Snapshot s = testing::Build({{"p", "H100-80GB", 8, 64000, 512 * 1024, "onprem"},
                               {"c", "H100-80GB", 8, 64000, 512 * 1024, "cloud"}});
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  PluginContext ctx{s, t, cycle};
  Cost cost;
  EXPECT_NEAR(cost.Score(ctx, {0, {}}), 100.0 * (1 - 2.0 / 6.0), 1e-9);
  EXPECT_NEAR(cost.Score(ctx, {1, {}}), 0.0, 1e-9);
  TaskSpec cpu = testing::CpuOnly(1000);
  PluginContext cpu_ctx{s, cpu, cycle};
  EXPECT_DOUBLE_EQ(cost.Score(cpu_ctx, {1, {}}), 100.0);
}

}  // namespace
}  // namespace meridian::sched::plugins
