#include "sched/plugins/gpu_clustering/gpu_clustering.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(GpuClustering, GroupsTasksOfOneShape) {
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

}  // namespace
}  // namespace meridian::sched::plugins
