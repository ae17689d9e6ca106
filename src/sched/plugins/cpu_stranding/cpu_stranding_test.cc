#include "sched/plugins/cpu_stranding/cpu_stranding.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(CpuStranding, PenalisesLeavingGpusWithoutCpuToFeedThem) {
  // Typical task: 10 cores per GPU (10 milli-CPU per milli-GPU).
  FragmentationModel model({{10000, 0, 1000, 1, kAll, 1.0}});
  CpuStranding score(model);
  EXPECT_DOUBLE_EQ(score.ratio(), 10.0);
  // Node: 4 idle GPUs, 40 cores: exactly balanced.
  Snapshot s = testing::Build({{"n", "G2", 4, 40000}});
  CycleState cycle;
  // A CPU-heavy one-GPU task (25 cores) leaves 3 GPUs with 15 cores: 1.5 GPUs stranded.
  TaskSpec heavy = testing::Whole(1, 25000);
  PluginContext heavy_ctx{s, heavy, cycle};
  DeviceGrant g0{0, 1000, 0, -1, -1, MigChange::kNone};
  Candidate on0{0, std::span<const DeviceGrant>(&g0, 1)};
  EXPECT_DOUBLE_EQ(score.Score(heavy_ctx, on0), -1.5);
  // A balanced task (10 cores) strands nothing.
  TaskSpec balanced = testing::Whole(1, 10000);
  PluginContext balanced_ctx{s, balanced, cycle};
  EXPECT_DOUBLE_EQ(score.Score(balanced_ctx, on0), 0.0);
  // A CPU-only task on this node strands a whole GPU's worth per 10 cores it takes.
  TaskSpec cpu = testing::CpuOnly(10000);
  PluginContext cpu_ctx{s, cpu, cycle};
  EXPECT_DOUBLE_EQ(score.Score(cpu_ctx, {0, {}}), -1.0);
  // Without GPU shapes there is no ratio and the score is neutral.
  CpuStranding none(FragmentationModel({{4000, 0, 0, 0, kAll, 1.0}}));
  EXPECT_DOUBLE_EQ(none.Score(heavy_ctx, on0), 0.0);
}

TEST(CpuStranding, CpuOnlyDemandRaisesTheRatio) {
  // Half the tasks are GPU tasks (10 cores, 1 GPU), half CPU-only (10 cores): the node's CPU
  // must serve both, so a GPU needs 20 cores of the node to stay usable.
  FragmentationModel model({{10000, 0, 1000, 1, kAll, 0.5}, {10000, 0, 0, 0, kAll, 0.5}});
  EXPECT_DOUBLE_EQ(CpuStranding(model).ratio(), 20.0);
}

}  // namespace
}  // namespace meridian::sched::plugins
