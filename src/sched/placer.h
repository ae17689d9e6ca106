#pragma once

#include <cstdint>
#include <map>
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
// that place. A caller that places several tasks as one (a gang) can keep what it learns the
// same way (Remember), and try placements it takes back (a trial) without that counting as a
// release. Not thread-safe; use one Placer per thread, each with its own snapshot.
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
  // (scores' inputs, the estate), so earlier answers may no longer hold.
  void InvalidateCache() { epoch_ = version_ = ++last_epoch_; }
  // Forgets the answers alone, the snapshot unchanged (an explanation wants reasons afresh).
  void ForgetAnswers() { epoch_ = ++last_epoch_; }
  // The cycle's reservation (CycleState::reserved_nodes) changed: what was learnt while keeping
  // off the reserved nodes no longer holds; what was learnt with the reservation ignored does.
  // Which of the two a Place asks is CycleState::avoid_reserved, part of what is remembered.
  void ReservationChanged() { ++reservation_; }
  // A static MIG layout (what a replay compares the layout shaped by demand with): MIG tasks
  // take only the instances there are, whole-GPU and fractional tasks only GPUs outside MIG mode;
  // no layout ever changes.
  void set_static_mig(bool on) {
    if (static_mig_ != on) ForgetAnswers();
    static_mig_ = on;
  }
  // Whether whole-GPU tasks may take idle MIG GPUs back (MigChange::kDisableMig). Off during a
  // preemption search, whose trial placements are undone by Release, which does not undo a
  // layout change.
  void set_reclaim_mig(bool on) {
    if (reclaim_mig_ != on) ForgetAnswers();  // other answers; the snapshot is the same
    reclaim_mig_ = on;
  }

  // A trial: placements committed after BeginTrial and taken back by Undo leave the snapshot
  // as it was, so what fit nowhere before still fits nowhere, and the trial costs no release
  // (a gang that fit in part and was rolled back released nothing). Nothing is learnt inside a
  // trial while it holds a placement: it saw less capacity than there is. A placement that
  // changed a GPU's MIG layout, which Release leaves changed, makes its trial's undoing count
  // as releases. Trials do not nest; Undo outside one is Release.
  void BeginTrial();
  void Undo(const TaskSpec& task, const Placement& placement);
  void EndTrial();
  // BeginTrial for the scope, EndTrial at its end.
  class Trial {
   public:
    explicit Trial(Placer& placer) : p_(placer) { p_.BeginTrial(); }
    ~Trial() { p_.EndTrial(); }
    Trial(const Trial&) = delete;
    Trial& operator=(const Trial&) = delete;

   private:
    Placer& p_;
  };
  // The same for a caller that released and committed again what it released (a preemption
  // search that stopped nobody): Rewind(mark) says the snapshot is as it was at MarkState(), and
  // the placer takes up what it knew then. A placement in between that changed a MIG layout, which
  // Release leaves changed, makes Rewind a no-op: the snapshot is not as it was.
  struct Mark {
    uint64_t epoch, version, layout_changes;
  };
  Mark MarkState() const { return {epoch_, version_, layout_changes_}; }
  void Rewind(const Mark& mark) {
    if (layout_changes_ != mark.layout_changes) return;
    epoch_ = mark.epoch;
    version_ = mark.version;
  }

  // Why what a caller learnt fits nowhere under `key` (a gang: its tasks' keys; a task: its
  // FeasibilityKey, as Place remembers it) fits nowhere, in words (Unschedulable::Summary, made
  // once per answer); null when nothing is known. With `while_unchanged` the answer holds only
  // while the snapshot stays as it was (version()), not also through commits: a gang of unlike
  // tasks placed one by one may fit after a commit moved where its first task goes. Otherwise it is
  // kept and forgotten under the same rule as a task shape's.
  const std::string* Known(uint64_t hash, const std::string& key, const CycleState& cycle);
  // Whether an answer that still holds is kept under `hash` (its key not compared).
  bool Remembers(uint64_t hash, const CycleState& cycle) const {
    return Slot(hash, cycle) != nullptr;
  }
  void Remember(uint64_t hash, std::string key, const CycleState& cycle, Unschedulable why,
                bool while_unchanged = false);
  // Whether any node that fits will do: Place then takes the first feasible node it visits,
  // scoring nothing (a what-if that asks only whether a job fits, not where it would be best).
  void set_first_fit(bool on) { first_fit_ = on; }
  // The snapshot gained a node (the last), or one changed other than by Commit and Release
  // (it became unschedulable, a GPU's health moved).
  // The placement's layout changes are carried out (its job started): giving it back no longer
  // undoes them.
  void Settle(const Placement& p);
  void NodeAdded(int32_t node);
  void NodeChanged(int32_t node);

  // Tells states of the snapshot apart: a new value after every Commit, Release and change the
  // placer is told of, and the old one again once a trial is undone. A caller keeps what it
  // computed from the state while the version stays.
  uint64_t version() const { return version_; }

  const Snapshot& snapshot() const { return *s_; }
  const NodeIndex& index() const { return index_; }
  int64_t cache_hits() const { return cache_hits_; }
  // How many Place calls searched the nodes (not answered from what was remembered).
  int64_t searches() const { return searches_; }

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
  bool frozen_seen_ = false;  // DeviceOptions passed over a GPU whose layout is frozen
  bool static_mig_ = false;
  // GPUs a committed placement reshaped, as they were before, until the placement is settled.
  std::map<int32_t, GpuState> reshaped_;
  bool first_fit_ = false;
  uint32_t stamp_ = 0;
  uint64_t rotor_ = 0;
  uint64_t epoch_ = 0;          // a new one whenever capacity is released
  uint64_t last_epoch_ = 1;     // the last epoch or version handed out: each is new
  uint64_t version_ = 1;        // never 0 (Infeasible::version's "always")
  uint64_t trial_version_ = 0;  // the version when the trial began
  uint64_t reservation_ = 0;
  bool in_trial_ = false;
  int32_t trial_held_ = 0;       // placements committed in the trial and not undone
  bool trial_changed_ = false;   // a placement in the trial changed a MIG layout
  uint64_t layout_changes_ = 0;  // placements that changed a MIG layout, ever
  // Shapes that fit nowhere, by hash (FeasibilityHash, or the caller's) and whether the
  // reservation was kept off; the full key guards against collisions.
  struct Infeasible {
    std::string key;
    uint64_t epoch = 0;
    uint64_t reservation = 0;     // when learnt keeping off the reserved nodes
    uint64_t version = 0;         // when it holds only while the snapshot is unchanged; else 0
    Unschedulable why;            // what Place answered when the shape failed
    mutable std::string summary;  // why.Summary(), made when first asked for (Known)
  };
  std::unordered_map<uint64_t, Infeasible> infeasible_;
  // The entry for `hash` if it still holds (its key still to be compared), else null.
  const Infeasible* Slot(uint64_t hash, const CycleState& cycle) const;
  int64_t cache_hits_ = 0;
  int64_t searches_ = 0;
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
