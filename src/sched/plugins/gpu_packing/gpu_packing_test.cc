#include "sched/plugins/gpu_packing/gpu_packing.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(GpuPacking, PrefersSharedGpusThenUsedNodesThenIdleNodes) {
  Snapshot s = testing::Build({{"idle", "G2", 8}, {"used", "G2", 8}, {"shared", "G2", 8}});
  s.gpus[8].free_milli = 0;  // node "used": one GPU taken whole
  s.gpus[8].sharers = 1;
  s.gpus[16].free_milli = 400;  // node "shared": one GPU 60% used
  s.gpus[16].sharers = 1;
  CycleState cycle;
  TaskSpec t = testing::Fraction(300);
  PluginContext ctx{s, t, cycle};
  GpuPacking packing;
  DeviceGrant g0{0, 300, 0, -1, -1, MigChange::kNone};
  DeviceGrant g9{9, 300, 0, -1, -1, MigChange::kNone};
  DeviceGrant g16{16, 300, 0, -1, -1, MigChange::kNone};
  EXPECT_DOUBLE_EQ(packing.Score(ctx, {0, std::span(&g0, 1)}), 25.0);   // 33 - 8 idle GPUs
  EXPECT_DOUBLE_EQ(packing.Score(ctx, {1, std::span(&g9, 1)}), 49.0);   // 50 - 1 idle GPU taken
  EXPECT_DOUBLE_EQ(packing.Score(ctx, {2, std::span(&g16, 1)}), 96.0);  // 100 - 40/10
}

}  // namespace
}  // namespace meridian::sched::plugins
