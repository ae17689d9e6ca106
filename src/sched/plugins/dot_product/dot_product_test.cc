#include "sched/plugins/dot_product/dot_product.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(DotProduct, PrefersTheLessAlignedNode) {
  Snapshot s = testing::Build({{"full", "G2", 8, 96000}, {"busy", "G2", 8, 96000}});
  s.nodes[1].cpu_free = 8000;
  CycleState cycle;
  TaskSpec t = testing::Whole(1, 8000);
  PluginContext ctx{s, t, cycle};
  DotProduct dot;
  EXPECT_GT(dot.Score(ctx, {1, {}}), dot.Score(ctx, {0, {}}));
  double cpu = 96000.0 / 128000 * 8000.0 / 128000, gpu = 8000.0 / 8000 * 1000.0 / 8000;
  EXPECT_DOUBLE_EQ(dot.Score(ctx, {0, {}}), (1 - (cpu + gpu) / 2) * 100);
}

}  // namespace
}  // namespace meridian::sched::plugins
