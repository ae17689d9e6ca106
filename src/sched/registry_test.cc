#include "sched/registry.h"

#include <gtest/gtest.h>

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
    EXPECT_EQ(profile->filters.size(), 5u) << name;
  }
  EXPECT_FALSE(PolicySpec("tetris").ok());
  // The fragmentation scores cannot be built without a workload mix.
  auto fgd = PolicySpec("fgd");
  EXPECT_FALSE(BuiltinRegistry().Build(*fgd, PluginArgs{}).ok());
}

}  // namespace
}  // namespace meridian::sched
