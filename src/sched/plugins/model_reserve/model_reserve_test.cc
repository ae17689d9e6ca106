#include "sched/plugins/model_reserve/model_reserve.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "sched/node_index.h"
#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

// Two models, 4 GPUs each; half of the typical demand may run only on the first.
struct TwoModels {
  Snapshot s = testing::Build({{"a", "A100-80GB", 4}, {"h", "H100-80GB", 4}});
  ModelId a = s.FindModel("A100-80GB");
  ModelId h = s.FindModel("H100-80GB");
  FragmentationModel mix{{{1000, 0, 1000, 1, kAll, 0.5}, {1000, 0, 1000, 1, Bit(a), 0.5}}};
};

TEST(ModelReserve, CostsOnlyTheModelsConstrainedWorkNeedsBeyondBalance) {
  TwoModels e;
  ModelReserve score(e.mix);
  CycleState cycle;
  TaskSpec any = testing::Whole(1);
  NodeIndex index(e.s);
  PluginContext ctx{e.s, any, cycle, &index};
  DeviceGrant on_a{0, 1000, 0, -1, -1, MigChange::kNone};
  DeviceGrant on_h{4, 1000, 0, -1, -1, MigChange::kNone};
  // The A100s carry a claim of half the demand against half the free GPUs: pressure 1, balance
  // 0.5 (the constrained share), so a GPU taken there costs 0.5; the H100s carry no claim.
  EXPECT_DOUBLE_EQ(score.Score(ctx, {0, std::span<const DeviceGrant>(&on_a, 1)}), -0.5);
  EXPECT_DOUBLE_EQ(score.Score(ctx, {1, std::span<const DeviceGrant>(&on_h, 1)}), 0.0);
  // Three A100s used: the claim presses on one free GPU in five, pressure 2.5.
  for (int g = 0; g < 3; ++g) e.s.gpus[g].free_milli = 0;
  index.Update(e.s, 0);
  PluginContext later{e.s, any, cycle, &index};
  DeviceGrant last_a{3, 1000, 0, -1, -1, MigChange::kNone};
  EXPECT_DOUBLE_EQ(score.Score(later, {0, std::span<const DeviceGrant>(&last_a, 1)}), -2.0);
  // With the H100s full, the A100s are all there is: no shape needs them in particular.
  for (int g = 4; g < 8; ++g) e.s.gpus[g].free_milli = 0;
  index.Update(e.s, 1);
  PluginContext only_a{e.s, any, cycle, &index};
  EXPECT_DOUBLE_EQ(score.Score(only_a, {0, std::span<const DeviceGrant>(&last_a, 1)}), 0.0);
  // A caller that keeps no free GPUs by model gets a neutral score.
  PluginContext untracked{e.s, any, cycle};
  EXPECT_DOUBLE_EQ(score.Score(untracked, {0, std::span<const DeviceGrant>(&last_a, 1)}), 0.0);
  // A mix with no constrained shape costs nothing anywhere.
  ModelReserve unconstrained(FragmentationModel({{1000, 0, 1000, 1, kAll, 1.0}}));
  EXPECT_DOUBLE_EQ(unconstrained.Score(ctx, {0, std::span<const DeviceGrant>(&on_a, 1)}), 0.0);
}

// Through the engine: unconstrained work arriving first leaves the A100s to the constrained work
// that follows, so all of it places; with no score, the first tasks take the A100s and the
// constrained tasks find their model full.
TEST(ModelReserve, TheEngineKeepsAConstrainedModelForItsWork) {
  TwoModels e;
  auto mix = std::make_shared<FragmentationModel>(e.mix);
  TaskSpec any = testing::Whole(1);
  TaskSpec on_a = testing::Whole(1);
  on_a.allowed_models = Bit(e.a);
  auto placed = [&](const Profile& profile) {
    const std::vector<bool> p =
        testing::PlaceInTurn(e.s, profile, {any, any, any, any, on_a, on_a, on_a, on_a});
    return std::count(p.begin(), p.end(), true);
  };
  EXPECT_EQ(placed(testing::MakeProfile({{"model-reserve", 1}}, DeviceChoice::kEnumerate, mix)), 8);
  // Without it, every node ties, and ties go to the node listed first: the A100s.
  Profile plain = testing::MakeProfile({}, DeviceChoice::kEnumerate, mix);
  plain.tie_break = TieBreak::kNodeOrder;
  EXPECT_EQ(placed(plain), 4);
}

}  // namespace
}  // namespace meridian::sched::plugins
