#include "sched/plugins/on_prem_first/on_prem_first.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(OnPremFirst, OnPremNodesScoreAboveCloudNodes) {
  Snapshot s = testing::Build({{"p", "H100-80GB", 8, 64000, 512 * 1024, "onprem"},
                               {"c", "H100-80GB", 8, 64000, 512 * 1024, "cloud"}});
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  PluginContext ctx{s, t, cycle};
  OnPremFirst score;
  EXPECT_DOUBLE_EQ(score.Score(ctx, {0, {}}), 100.0);
  EXPECT_DOUBLE_EQ(score.Score(ctx, {1, {}}), 0.0);
}

}  // namespace
}  // namespace meridian::sched::plugins
