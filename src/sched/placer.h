#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/rng.h"
#include "sched/node_index.h"
#include "sched/placement.h"
#include "sched/profile.h"
#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sched {

// The placement engine: finds where a task goes in a snapshot under a profile, and commits or
// releases placements. Pure with respect to the outside world: it reads no clock, file or
// global; randomness (tie-breaking, the random device choice) comes from the seed, so the same
// snapshot, profile, seed and calls give the same decisions.
//
// It works from a NodeIndex and remembers, per task shape, that nothing fits until capacity is
// released, so a pass over many pending tasks of few shapes costs little more than the tasks
// that place. Not thread-safe; use one Placer per thread, each with its own snapshot.
class Placer {
 public:
  Placer(Snapshot* snapshot, const Profile* profile, uint64_t seed);

  // Where `task` would go now; nothing is changed.
  PlaceOutcome Place(const TaskSpec& task, const CycleState& cycle);
  // Applies a placement returned by Place (for the same task) to the snapshot. A placement with
  // no node (-1) holds nothing: Commit, Release and Fits pass over it (Scheduler::AdoptStopping
  // gives one to a stopping task whose node left the estate).
  void Commit(const TaskSpec& task, const Placement& placement, CycleState* cycle);
  // Gives a committed placement's resources back.
  void Release(const TaskSpec& task, const Placement& placement);
  // True when every resource of `placement` is free now, so that Commit would not oversubscribe
  // (used to give a placement back to a job that was about to be preempted).
  bool Fits(const TaskSpec& task, const Placement& placement) const;

  // Forgets which task shapes fit nowhere: the caller changed something the placer cannot see
  // (the cycle's reservation), so earlier answers may no longer hold.
  void InvalidateCache() { ++epoch_; }
  // Whether whole-GPU tasks may take idle MIG GPUs back (MigChange::kDisableMig). Off during a
  // preemption search, whose trial placements are undone by Release, which does not undo a
  // layout change.
  void set_reclaim_mig(bool on) {
    if (reclaim_mig_ != on) ++epoch_;
    reclaim_mig_ = on;
  }
  // Whether any node that fits will do: Place then takes the first feasible node it visits,
  // scoring nothing (a what-if that asks only whether a job fits, not where it would be best).
  void set_first_fit(bool on) { first_fit_ = on; }
  // The snapshot gained a node (the last), or one changed other than by Commit and Release
  // (it became unschedulable, a GPU's health moved).
  void NodeAdded(int32_t node);
  void NodeChanged(int32_t node);

  const Snapshot& snapshot() const { return *s_; }
  const NodeIndex& index() const { return index_; }
  int64_t cache_hits() const { return cache_hits_; }

 private:
  struct Option {
    int32_t begin = 0;  // into grants_
    int32_t count = 0;
  };
  // Fills options_/grants_ with the device choices for `task` on `node`; false if none fits.
  bool DeviceOptions(const TaskSpec& task, const NodeState& node);
  bool WholeOption(const TaskSpec& task, const NodeState& node);
  bool FractionOptions(const TaskSpec& task, const NodeState& node);
  bool MigOptions(const NodeState& node);
  bool BreaksTie(int32_t node, int32_t incumbent, int64_t ties);
  double ScoreOf(const PluginContext& ctx, const Candidate& c) const;

  Snapshot* s_;
  const Profile* profile_;
  base::Rng rng_;
  NodeIndex index_;
  std::vector<uint32_t> visited_;
  bool reclaim_mig_ = true;
  bool first_fit_ = false;
  uint32_t stamp_ = 0;
  uint64_t rotor_ = 0;
  uint64_t epoch_ = 0;  // bumped whenever capacity is released
  // Shapes that fit nowhere, by FeasibilityHash; the full key guards against collisions.
  struct Infeasible {
    std::string key;
    uint64_t epoch = 0;
    Unschedulable why;  // what Place answered when the shape failed
  };
  std::unordered_map<uint64_t, Infeasible> infeasible_;
  int64_t cache_hits_ = 0;
  std::vector<Option> options_;
  std::vector<DeviceGrant> grants_;
  std::vector<const std::vector<int32_t>*> lists_;
  std::vector<int64_t> filter_rejects_;
  // The nodes each filter turned away in the current Place, asked why only if nothing fits.
  std::vector<std::vector<int32_t>> rejected_nodes_;
  // For the MIG task being placed: its profile's index in each model (-1: the model lacks it),
  // looked up once per Place rather than once per node.
  std::vector<int16_t> mig_profile_of_model_;
};

}  // namespace meridian::sched
