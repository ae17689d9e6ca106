#include "sched/assembly.h"

#include "sched/registry.h"

namespace meridian::sched {

namespace {

constexpr size_t kBoundedSearchAbove = 512;  // nodes
constexpr int32_t kBoundedSearchNodes = 16;
constexpr size_t kMixTasks = 100000;  // live tasks a mix is learnt from, at most

}  // namespace

base::Result<Profile> BuildProfile(const Assembly& a, size_t nodes,
                                   std::shared_ptr<const FragmentationModel> fragmentation) {
  auto spec = PolicySpec(a.policy);
  if (!spec.ok()) return spec.status();
  if (!a.data_aware) {
    std::erase_if(spec->scores, [](const auto& s) { return s.first == "data-locality"; });
  }
  if (a.max_feasible_nodes >= 0) {
    spec->max_feasible_nodes = a.max_feasible_nodes;
  } else if (a.bound_large_estates && nodes > kBoundedSearchAbove) {
    spec->max_feasible_nodes = kBoundedSearchNodes;
  }
  PluginArgs args;
  args.fragmentation = std::move(fragmentation);
  return BuiltinRegistry().Build(*spec, args);
}

std::shared_ptr<const FragmentationModel> LearnMix(const Assembly& a,
                                                   const std::vector<TaskSpec>& tasks) {
  return std::make_shared<FragmentationModel>(
      FragmentationModel::FromTasks(tasks, a.typical_coverage));
}

base::Result<Profile> BuildProfile(const Assembly& a, size_t nodes,
                                   const std::vector<TaskSpec>& shapes) {
  return BuildProfile(a, nodes, LearnMix(a, shapes));
}

base::Result<std::unique_ptr<Scheduler>> BuildScheduler(
    const Assembly& a, Snapshot snapshot, QuotaTree quotas,
    std::shared_ptr<const FragmentationModel> fragmentation) {
  auto profile = BuildProfile(a, snapshot.nodes.size(), std::move(fragmentation));
  if (!profile.ok()) return profile.status();
  return std::make_unique<Scheduler>(std::move(snapshot), std::move(*profile), std::move(quotas),
                                     a.options, a.seed);
}

base::Result<std::unique_ptr<Scheduler>> BuildScheduler(const Assembly& a, Snapshot snapshot,
                                                        QuotaTree quotas,
                                                        const std::vector<TaskSpec>& shapes) {
  return BuildScheduler(a, std::move(snapshot), std::move(quotas), LearnMix(a, shapes));
}

std::shared_ptr<const FragmentationModel> MovedMix(const Assembly& a, const Scheduler& scheduler,
                                                   const FragmentationModel* current) {
  const std::vector<TaskSpec> live = scheduler.LiveTasks(kMixTasks);
  if (live.empty()) return nullptr;
  std::shared_ptr<const FragmentationModel> next = LearnMix(a, live);
  if (current && current->Distance(*next) <= kMixMoved) return nullptr;
  return next;
}

}  // namespace meridian::sched
