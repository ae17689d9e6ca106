#include "sched/plugins/gpu_packing/gpu_packing.h"

#include <gtest/gtest.h>

#include "sched/plugins/dot_product/dot_product.h"
#include "sched/plugins/gpu_clustering/gpu_clustering.h"
#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

// The three published baselines, checked against their bands as the FGD artifact defines them.
TEST(PublishedBaselines, PackingPrefersSharedGpusThenUsedNodesThenIdleNodes) {
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

TEST(PublishedBaselines, ClusteringGroupsTasksOfOneShape) {
  Snapshot s = testing::Build({{"a", "G2", 8}, {"b", "G2", 8}, {"c", "G2", 8}});
  TaskSpec t = testing::Fraction(500);
  s.nodes[0].gpu_affinity = {{t.AffinityTag(), 1}};
  s.nodes[1].gpu_affinity = {{testing::Whole(1).AffinityTag(), 1}};
  CycleState cycle;
  PluginContext ctx{s, t, cycle};
  GpuClustering clustering;
  EXPECT_DOUBLE_EQ(clustering.Score(ctx, {0, {}}), 75.0);  // same shape only, 8 GPUs left
  EXPECT_DOUBLE_EQ(clustering.Score(ctx, {1, {}}), 0.0);   // another shape
  EXPECT_DOUBLE_EQ(clustering.Score(ctx, {2, {}}), 25.0);  // idle
  TaskSpec cpu = testing::CpuOnly(1000);
  PluginContext cpu_ctx{s, cpu, cycle};
  EXPECT_DOUBLE_EQ(clustering.Score(cpu_ctx, {2, {}}), 0.0);
  // As in the artifact, every fraction is one kind whatever its share; whole GPUs go by count.
  EXPECT_EQ(testing::Fraction(200).AffinityTag(), testing::Fraction(500).AffinityTag());
  EXPECT_NE(testing::Whole(1).AffinityTag(), testing::Whole(2).AffinityTag());
  EXPECT_NE(testing::Whole(1).AffinityTag(), testing::Fraction(500).AffinityTag());
}

TEST(PublishedBaselines, DotProductPrefersTheLessAlignedNode) {
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
