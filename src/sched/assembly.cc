#include "sched/assembly.h"

#include "sched/registry.h"

namespace meridian::sched {

namespace {

constexpr size_t kBoundedSearchAbove = 512;  // nodes
constexpr int32_t kBoundedSearchNodes = 16;

}  // namespace

base::Result<Profile> BuildProfile(const Assembly& a, size_t nodes,
                                   std::shared_ptr<const FragmentationModel> fragmentation) {
  auto spec = PolicySpec(a.policy);
  if (!spec.ok()) return spec.status();
  if (a.max_feasible_nodes >= 0) {
    spec->max_feasible_nodes = a.max_feasible_nodes;
  } else if (a.bound_large_estates && nodes > kBoundedSearchAbove) {
    spec->max_feasible_nodes = kBoundedSearchNodes;
  }
  PluginArgs args;
  args.fragmentation = std::move(fragmentation);
  return BuiltinRegistry().Build(*spec, args);
}

base::Result<Profile> BuildProfile(const Assembly& a, size_t nodes,
                                   const std::vector<TaskSpec>& shapes) {
  return BuildProfile(a, nodes,
                      std::make_shared<FragmentationModel>(
                          FragmentationModel::FromTasks(shapes, a.typical_coverage)));
}

base::Result<std::unique_ptr<Scheduler>> BuildScheduler(const Assembly& a, Snapshot snapshot,
                                                        QuotaTree quotas,
                                                        const std::vector<TaskSpec>& shapes) {
  auto profile = BuildProfile(a, snapshot.nodes.size(), shapes);
  if (!profile.ok()) return profile.status();
  return std::make_unique<Scheduler>(std::move(snapshot), std::move(*profile), std::move(quotas),
                                     a.options, a.seed);
}

}  // namespace meridian::sched
