#include "sched/plugins/data_locality/data_locality.h"

#include <gtest/gtest.h>

#include "sched/data.h"
#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

// testing::TwoClusters: "onprem" (H100 at 2.0 a GPU-hour) lists imagenet, "cloud" (6.0) nothing.
Snapshot TwoSites(std::vector<domain::Cluster> clusters = testing::TwoClusters()) {
  return testing::Build({{"p", "H100-80GB", 8, 64000, 512 * 1024, "onprem"},
                         {"c", "H100-80GB", 8, 64000, 512 * 1024, "cloud"}},
                        std::move(clusters));
}

TEST(DataLocality, ATaskThatReadsNothingScoresAlike) {
  Snapshot s = TwoSites();
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  PluginContext ctx{s, t, cycle};
  DataLocality local;
  EXPECT_DOUBLE_EQ(local.Score(ctx, {0, {}}), 100.0);
  EXPECT_DOUBLE_EQ(local.Score(ctx, {1, {}}), 100.0);
}

TEST(DataLocality, ADatasetOfUnknownSizeCountsOnlyWhereItIs) {
  Snapshot s = TwoSites();
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  t.datasets = {s.FindDataset("imagenet")};
  ASSERT_GE(t.datasets[0], 0);
  PluginContext ctx{s, t, cycle};
  DataLocality local;
  EXPECT_DOUBLE_EQ(local.Score(ctx, {0, {}}), 100.0);
  EXPECT_DOUBLE_EQ(local.Score(ctx, {1, {}}), 0.0) << "unknown size: the worst";
}

TEST(DataLocality, TransferTimeAndEgressLowerTheScore) {
  std::vector<domain::Cluster> clusters = testing::TwoClusters();
  clusters[0].bandwidth_gbps = {{"cloud", 10}};
  Snapshot s = TwoSites(clusters);
  const int32_t imagenet = s.FindDataset("imagenet");
  s.SetDatasetSize(imagenet, 1000);  // 8,590 Gbit: 859 s at 10 Gbit/s
  CycleState cycle;
  TaskSpec t = testing::Whole(2);
  t.datasets = {imagenet};
  PluginContext ctx{s, t, cycle};
  DataLocality local;
  EXPECT_DOUBLE_EQ(local.Score(ctx, {0, {}}), 100.0);
  EXPECT_NEAR(local.Score(ctx, {1, {}}), 100.0 * (1 - 858.99 / 3600), 0.01);

  // Leaving onprem costs 0.06 a GiB: 60 for the copy, 5 hours of the task's two GPUs at 6.0.
  clusters[0].egress_per_gib = 0.06;
  s.UpdateCluster(0, clusters[0]);
  EXPECT_NEAR(local.Score(ctx, {1, {}}), 0.0, 1e-9);
  clusters[0].egress_per_gib = 0.006;  // 6: half an hour of them
  s.UpdateCluster(0, clusters[0]);
  EXPECT_NEAR(local.Score(ctx, {1, {}}), 100.0 * (1 - 858.99 / 3600 - 0.5), 0.01);

  // Staged into the cloud's cache, it is there.
  s.SetCached(imagenet, 1, true);
  EXPECT_DOUBLE_EQ(local.Score(ctx, {1, {}}), 100.0);
  s.SetCached(imagenet, 1, false);
  EXPECT_LT(local.Score(ctx, {1, {}}), 100.0);
}

TEST(DataCost, CopiesFromTheFastestSiteAndSaysSo) {
  std::vector<domain::Cluster> clusters = testing::TwoClusters();
  domain::Cluster third = clusters[1];
  third.name = "cloud-b";
  third.datasets = {"imagenet"};
  third.egress_per_gib = 0.09;
  clusters.push_back(third);
  clusters[1].bandwidth_gbps = {{"cloud-b", 100}};  // either end may declare a link
  Snapshot s = testing::Build({{"p", "H100-80GB", 8, 64000, 512 * 1024, "onprem"},
                               {"c", "H100-80GB", 8, 64000, 512 * 1024, "cloud"}},
                              clusters);
  const int32_t imagenet = s.FindDataset("imagenet");
  s.SetDatasetSize(imagenet, 100);
  EXPECT_DOUBLE_EQ(s.LinkGbps(2, 1), 100);
  EXPECT_DOUBLE_EQ(s.LinkGbps(0, 1), 0) << "undeclared";
  const DataCost cost = DataCostAt(s, {imagenet}, 1);
  ASSERT_EQ(cost.moves.size(), 1u);
  EXPECT_EQ(cost.moves[0].from, 2) << "100 Gbit/s from cloud-b beats the default from onprem";
  EXPECT_NEAR(cost.seconds, 8.59, 0.01);
  EXPECT_NEAR(cost.egress, 9.0, 1e-9);
  EXPECT_EQ(DescribeDataCost(s, cost), "stage imagenet 100 GiB from cloud-b (9 s, egress 9.00)");
  EXPECT_EQ(DescribeDataCost(s, DataCostAt(s, {imagenet}, 0)), "local");
  // At the default 1 Gbit/s from onprem alone, were cloud-b to lose it.
  clusters[2].datasets.clear();
  s.UpdateCluster(2, clusters[2]);
  EXPECT_NEAR(DataCostAt(s, {imagenet}, 1).seconds, 859.0, 0.1);
  EXPECT_EQ(DescribeDataCost(s, DataCostAt(s, {imagenet}, 1)),
            "stage imagenet 100 GiB from onprem (14 min)");
}

}  // namespace
}  // namespace meridian::sched::plugins
