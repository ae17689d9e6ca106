#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "sched/fragmentation.h"
#include "sched/profile.h"
#include "sched/quota.h"
#include "sched/scheduler.h"
#include "sched/snapshot.h"
#include "sched/task.h"

// The one assembly of a scheduler: the server, `sim replay`, `sim fgd`, `sim demo` and the
// benchmarks build their placement profile and their Scheduler here, from the same inputs with
// the same defaults, so that what the simulator measures is what the server runs.
namespace meridian::sched {

struct Assembly {
  std::string policy = "meridian";  // a named placement policy (PolicySpec)
  SchedulerOptions options;
  uint64_t seed = 1;
  // What the fragmentation score counts as the workload: the shapes covering this share of
  // tasks (FGD's "typical tasks").
  double typical_coverage = 0.95;
  // Feasible nodes scored per task; -1: the policy's own, bounded to 16 on estates past 512
  // nodes (where scoring them all costs more than it gains) unless `bound_large_estates` is
  // false (the FGD protocol scores every node, as published).
  int32_t max_feasible_nodes = -1;
  bool bound_large_estates = true;
  // Off: placement leaves out the data-locality score (what `sim replay` compares it with).
  bool data_aware = true;
};

// The profile of `a.policy` for an estate of `nodes` nodes, its fragmentation model learnt from
// `shapes` (or given, when the caller shares one across runs).
base::Result<Profile> BuildProfile(const Assembly& a, size_t nodes,
                                   const std::vector<TaskSpec>& shapes);
base::Result<Profile> BuildProfile(const Assembly& a, size_t nodes,
                                   std::shared_ptr<const FragmentationModel> fragmentation);

base::Result<std::unique_ptr<Scheduler>> BuildScheduler(const Assembly& a, Snapshot snapshot,
                                                        QuotaTree quotas,
                                                        const std::vector<TaskSpec>& shapes);
base::Result<std::unique_ptr<Scheduler>> BuildScheduler(
    const Assembly& a, Snapshot snapshot, QuotaTree quotas,
    std::shared_ptr<const FragmentationModel> fragmentation);

// The workload mix of `tasks` as `a` learns it (its typical coverage).
std::shared_ptr<const FragmentationModel> LearnMix(const Assembly& a,
                                                   const std::vector<TaskSpec>& tasks);

// A live scheduler's mix moved (by more than kMixMoved, FragmentationModel::Distance) from
// `current`: the mix of its live tasks, to rebuild its profile with; null when it has not moved,
// or there are no live tasks to learn from (an empty queue keeps the mix it had).
inline constexpr double kMixMoved = 0.1;
std::shared_ptr<const FragmentationModel> MovedMix(const Assembly& a, const Scheduler& scheduler,
                                                   const FragmentationModel* current);

}  // namespace meridian::sched
