#include "sched/plugins/data_locality/data_locality.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(DataLocality, FavoursTheClusterHoldingTheDataset) {
  // testing::TwoClusters: "onprem" holds imagenet, "cloud" holds nothing.
  Snapshot s = testing::Build({{"p", "H100-80GB", 8, 64000, 512 * 1024, "onprem"},
                               {"c", "H100-80GB", 8, 64000, 512 * 1024, "cloud"}});
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  PluginContext ctx{s, t, cycle};
  DataLocality local;
  EXPECT_DOUBLE_EQ(local.Score(ctx, {0, {}}), 0.0);  // no dataset named: neutral
  EXPECT_DOUBLE_EQ(local.Score(ctx, {1, {}}), 0.0);
  t.dataset = "imagenet";
  EXPECT_DOUBLE_EQ(local.Score(ctx, {0, {}}), 100.0);
  EXPECT_DOUBLE_EQ(local.Score(ctx, {1, {}}), 0.0);
  t.dataset = "laion";
  EXPECT_DOUBLE_EQ(local.Score(ctx, {0, {}}), 0.0);
}

}  // namespace
}  // namespace meridian::sched::plugins
