#include "sched/plugins/multi_gpu_reserve/multi_gpu_reserve.h"

#include <gtest/gtest.h>

#include "sched/node_index.h"
#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

// One large node (8 A100s, 128 cores) and four with 8 H100s and 64 cores each; the workload is
// mostly single GPUs, and an 8-GPU shape of 100 cores that only the large node can hold.
struct Estate {
  Snapshot s = testing::Build({{"big", "A100-80GB", 8, 128000},
                               {"h1", "H100-80GB", 8, 64000},
                               {"h2", "H100-80GB", 8, 64000},
                               {"h3", "H100-80GB", 8, 64000},
                               {"h4", "H100-80GB", 8, 64000}});
  FragmentationModel mix{{{1000, 0, 1000, 1, kAll, 0.9}, {100000, 0, 1000, 8, kAll, 0.1}}};
};

TEST(MultiGpuReserve, CostsTheRoomOfAShapeOnlyTheFewNodesThatHoldItHave) {
  Estate e;
  ASSERT_EQ(e.mix.multi_gpu_shapes().size(), 1u);
  // Its share of GPU demand: 0.1 x 8 GPUs of 0.9 x 1 + 0.1 x 8.
  const double share = 0.8 / 1.7;
  EXPECT_NEAR(e.mix.multi_gpu_shapes()[0].weight, share, 1e-12);
  MultiGpuReserve score(e.mix);
  NodeIndex index(e.s);
  CycleState cycle;
  TaskSpec one = testing::Whole(1);
  PluginContext ctx{e.s, one, cycle, &index};
  DeviceGrant on_big{0, 1000, 0, -1, -1, MigChange::kNone};
  DeviceGrant on_h1{8, 1000, 0, -1, -1, MigChange::kNone};
  // 40 GPUs free, 8 on the one node that holds the shape: pressure share x 40 / 8, less the
  // share; taking a GPU there removes its one place, 8 GPUs.
  EXPECT_NEAR(score.Score(ctx, {0, std::span<const DeviceGrant>(&on_big, 1)}),
              -8 * (share * 40 / 8 - share), 1e-9);
  // The small nodes cannot hold it (64 cores): nothing is lost there.
  EXPECT_DOUBLE_EQ(score.Score(ctx, {1, std::span<const DeviceGrant>(&on_h1, 1)}), 0.0);
  // Without the engine's index the score is neutral.
  PluginContext untracked{e.s, one, cycle};
  EXPECT_DOUBLE_EQ(score.Score(untracked, {0, std::span<const DeviceGrant>(&on_big, 1)}), 0.0);
}

TEST(MultiGpuReserve, TheEngineKeepsTheLargeNodeForTheWorkOnlyItCanHold) {
  Estate e;
  auto mix = std::make_shared<FragmentationModel>(e.mix);
  const TaskSpec one = testing::Whole(1);
  auto big_placed = [&](const Profile& profile) {
    const std::vector<bool> p =
        testing::PlaceInTurn(e.s, profile, {one, one, one, one, testing::Whole(8, 100000)});
    EXPECT_TRUE(p[0] && p[1] && p[2] && p[3]);
    return p[4];
  };
  EXPECT_TRUE(
      big_placed(testing::MakeProfile({{"multi-gpu-reserve", 1}}, DeviceChoice::kEnumerate, mix)));
  // Without it, every node ties, and ties go to the node listed first: the large one.
  Profile plain = testing::MakeProfile({}, DeviceChoice::kEnumerate, mix);
  plain.tie_break = TieBreak::kNodeOrder;
  EXPECT_FALSE(big_placed(plain));
}

TEST(NodeIndex, KeepsFreeGpusByModelAndNodesByIdleGpus) {
  Estate e;
  NodeIndex index(e.s);
  const ModelId a100 = e.s.FindModel("A100-80GB");
  const ModelId h100 = e.s.FindModel("H100-80GB");
  EXPECT_EQ(index.FreeGpuMilliByModel()[a100], 8000);
  EXPECT_EQ(index.FreeGpuMilliByModel()[h100], 32000);
  EXPECT_EQ(index.NodesWithIdleGpus(h100, 8), 4);
  EXPECT_EQ(index.LargestNode(a100).cpu_milli, 128000);
  EXPECT_EQ(index.LargestNode(h100).gpus, 8);
  // A share taken on h1 and the node h2 cordoned.
  e.s.gpus[8].free_milli = 600;
  index.Update(e.s, 1);
  e.s.nodes[2].schedulable = false;
  index.Update(e.s, 2);
  EXPECT_EQ(index.FreeGpuMilliByModel()[h100], 32000 - 400 - 8000);
  EXPECT_EQ(index.NodesWithIdleGpus(h100, 8), 2);
  EXPECT_EQ(index.NodesWithIdleGpus(h100, 7), 3);
  // Back again.
  e.s.gpus[8].free_milli = 1000;
  index.Update(e.s, 1);
  e.s.nodes[2].schedulable = true;
  index.Update(e.s, 2);
  EXPECT_EQ(index.FreeGpuMilliByModel()[h100], 32000);
  EXPECT_EQ(index.NodesWithIdleGpus(h100, 8), 4);
}

}  // namespace
}  // namespace meridian::sched::plugins
