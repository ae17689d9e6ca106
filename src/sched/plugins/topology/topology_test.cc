#include "sched/plugins/topology/topology.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(Topology, FewerNvlinkDomainsAndTheGroupsRackScoreHigher) {
  Snapshot s = testing::Build({{"a", "H100-80GB", 8, 64000, 512 * 1024, "onprem", "r1", 4},
                               {"b", "H100-80GB", 8, 64000, 512 * 1024, "onprem", "r2", 4}});
  Topology topo;
  CycleState cycle;
  TaskSpec t = testing::Whole(2);
  PluginContext ctx{s, t, cycle};
  DeviceGrant same[] = {{0, 1000, 0, -1, -1, MigChange::kNone},
                        {1, 1000, 0, -1, -1, MigChange::kNone}};
  DeviceGrant split[] = {{0, 1000, 0, -1, -1, MigChange::kNone},
                         {4, 1000, 0, -1, -1, MigChange::kNone}};
  EXPECT_DOUBLE_EQ(topo.Score(ctx, {0, same}), 100.0);
  EXPECT_DOUBLE_EQ(topo.Score(ctx, {0, split}), 75.0);
  t.group = 3;
  cycle.group_racks[3] = {s.nodes[1].rack};
  DeviceGrant on_b[] = {{8, 1000, 0, -1, -1, MigChange::kNone},
                        {9, 1000, 0, -1, -1, MigChange::kNone}};
  EXPECT_DOUBLE_EQ(topo.Score(ctx, {1, on_b}), 100.0);
  EXPECT_DOUBLE_EQ(topo.Score(ctx, {0, same}), 50.0);
}

}  // namespace
}  // namespace meridian::sched::plugins
