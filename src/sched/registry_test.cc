#include "sched/registry.h"

#include <gtest/gtest.h>

#include "sched/placer.h"
#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

TEST(Registry, RefusesDuplicatesAndUnknownNames) {
  Registry r;
  auto factory = [](const PluginArgs&) -> base::Result<std::unique_ptr<ScorePlugin>> {
    return base::Status::Invalid("unused");
  };
  EXPECT_TRUE(r.RegisterScore("x", factory).ok());
  EXPECT_FALSE(r.RegisterScore("x", factory).ok());
  ProfileSpec spec;
  spec.name = "p";
  spec.scores = {{"nope", 1}};
  auto p = r.Build(spec, {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("nope"), std::string::npos);
}

TEST(Registry, EveryNamedPolicyBuilds) {
  PluginArgs args;
  args.fragmentation = std::make_shared<FragmentationModel>();
  for (const std::string& name : PolicyNames()) {
    auto spec = PolicySpec(name);
    ASSERT_TRUE(spec.ok()) << name;
    auto profile = BuiltinRegistry().Build(*spec, args);
    ASSERT_TRUE(profile.ok()) << name << ": " << profile.status().message();
    std::vector<std::string> filters;
    for (const auto& f : profile->filters) filters.emplace_back(f->Name());
    // Every policy the server may be configured with honours pools, selectors and taints.
    EXPECT_EQ(filters,
              (std::vector<std::string>{"cluster", "pool-purpose", "gpu-sharing", "node-selector",
                                        "taint-toleration", "node-resources", "reservation"}))
        << name;
  }
  EXPECT_FALSE(PolicySpec("tetris").ok());
  // The fragmentation scores cannot be built without a workload mix.
  auto fgd = PolicySpec("fgd");
  EXPECT_FALSE(BuiltinRegistry().Build(*fgd, PluginArgs{}).ok());
}

TEST(Registry, MeridianFillsOnPremBeforeBurstingToTheCloud) {
  // A cloud node that fits the task more tightly still loses to an idle on-prem node; once
  // on-prem is full, the task bursts to the cloud.
  Snapshot s = testing::Build({{"onprem-0", "H100-80GB", 8, 128000, 1024 * 1024, "onprem"},
                               {"cloud-0", "H100-80GB", 4, 32000, 256 * 1024, "cloud"}});
  auto spec = PolicySpec("meridian");
  ASSERT_TRUE(spec.ok());
  PluginArgs args;
  const TaskSpec task = testing::Whole(4);
  args.fragmentation =
      std::make_shared<FragmentationModel>(FragmentationModel::FromTasks({task}, 0.95));
  auto profile = BuiltinRegistry().Build(*spec, args);
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  Placer placer(&s, &*profile, 1);
  CycleState cycle;
  std::vector<std::string> where;
  for (int i = 0; i < 3; ++i) {
    PlaceOutcome o = placer.Place(task, cycle);
    ASSERT_TRUE(o.placed) << i;
    placer.Commit(task, o.placement, &cycle);
    where.push_back(s.nodes[o.placement.node].name);
  }
  EXPECT_EQ(where, (std::vector<std::string>{"onprem-0", "onprem-0", "cloud-0"}));
}

}  // namespace
}  // namespace meridian::sched
