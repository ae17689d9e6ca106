#include "sched/plugins/fragmentation/fragmentation.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(FragmentationScore, PrefersTheGpuThatLeavesUsableShares) {
  // One node, GPU0 has 500 free, GPU1 is idle. The mix is all 500-milli fractions: putting a
  // 500 fraction on GPU0 fills it (no fragment), on GPU1 it leaves 500 that still fits (none
  // either); a 700 fraction can only go on GPU1, leaving 300 that no typical task can use.
  Snapshot s = testing::Build({{"n", "A100-80GB", 2}});
  s.gpus[0].free_milli = 500;
  auto model =
      std::make_shared<FragmentationModel>(std::vector<TypicalShape>{{1000, 0, 400, 1, kAll, 1.0}});
  Fragmentation exact(model, Fragmentation::Mode::kExact);
  CycleState cycle;
  TaskSpec t = testing::Fraction(200);
  PluginContext ctx{s, t, cycle};
  DeviceGrant on0{0, 200, 0, -1, -1, MigChange::kNone};
  DeviceGrant on1{1, 200, 0, -1, -1, MigChange::kNone};
  double s0 = exact.Score(ctx, {0, std::span<const DeviceGrant>(&on0, 1)});
  double s1 = exact.Score(ctx, {0, std::span<const DeviceGrant>(&on1, 1)});
  // On GPU0: 500 -> 300, which a 400 task cannot use: fragmentation grows by 300 milli.
  EXPECT_DOUBLE_EQ(s0, -0.3);
  // On GPU1: 1000 -> 800, still usable: nothing grows.
  EXPECT_DOUBLE_EQ(s1, 0.0);
  Fragmentation paper(model, Fragmentation::Mode::kPaper);
  EXPECT_NEAR(paper.Score(ctx, {0, std::span<const DeviceGrant>(&on1, 1)}), 50.0, 1e-9);
  EXPECT_LT(paper.Score(ctx, {0, std::span<const DeviceGrant>(&on0, 1)}), 50.0);
}

}  // namespace
}  // namespace meridian::sched::plugins
