#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "sched/pending_queue.h"
#include "sched/placer.h"
#include "sched/profile.h"
#include "sched/quota.h"
#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sched {

// A time that never comes: no reservation, no expected end.
inline constexpr double kNever = std::numeric_limits<double>::infinity();

// A job as the queueing half of the scheduler sees it. Times are seconds on the caller's clock.
struct JobSpec {
  int64_t id = 0;
  int32_t tenant = -1;  // a leaf (project) of the QuotaTree
  int32_t priority = 0;
  bool preempting = true;   // may preempt jobs of lower priority
  bool preemptible = true;  // may be preempted
  bool gang = false;        // every task in one cluster (all-or-nothing holds for every job)
  std::vector<TaskSpec> tasks;
  double submit_time = 0;
  double runtime_estimate = 0;  // 0: unknown
  double runtime_limit = 0;     // 0: none
  double min_runtime = 0;       // not preempted before it has run this long
  double grace_period = 0;      // between the preemption notice and the stop
  // Keeps its work through a stop (it checkpoints and resumes), so that a preemption costs it
  // little: such jobs are stopped first, and of them the one with the most time left.
  bool resumes = false;
  // It ran before (a job requeued after a preemption or a lost node, before a server restart):
  // the first-start guarantee is for jobs that have never run.
  bool started_before = false;
};

enum class QueueOrder {
  kFifo,                  // submit time; a blocked head blocks the queue
  kShortestJobFirst,      // runtime estimate
  kLeastAttainedService,  // Tiresias: queues by attained GPU-seconds, FIFO within a queue
  kMeridian,  // priority (with aging); then the tenant of least weighted dominant share, and
              // within it the shortest runtime estimate; then age
};

struct SchedulerOptions {
  QueueOrder order = QueueOrder::kMeridian;
  bool preemption = true;
  bool backfill = true;
  // A blocked job gets a backfill reservation only after waiting this long; before that, jobs
  // behind it fill free capacity greedily (as Slurm's bf_min_age_reserve does). Reserving at
  // once for whichever job heads the queue holds nodes idle on estimates that users overstate.
  double reserve_after = 3600;
  // A GPU whose MIG layout changed (MIG mode on or off, a re-partition) keeps it this long before
  // it may change again, so that alternating demand does not flap a GPU between layouts (each
  // change takes the GPU from whatever could use it while the agent carries it out). 0: no limit.
  double mig_reconfigure_interval = 60;
  // The MIG layout as the estate has it, never changed (Placer::set_static_mig): what a replay
  // compares the layout shaped by demand with.
  bool mig_static = false;
  // Reserved nodes are lent to preemptible jobs that could not start elsewhere; the job
  // holding the reservation takes them back by preemption when it could otherwise start. A
  // reservation then costs the work since the borrowers' last checkpoint, not idle nodes.
  bool lend_reserved = true;
  // Whether a preempted job holds its resources until the caller reports Evicted whatever its
  // grace period. The control plane says yes: a task stops only when its runner says so, even
  // with no grace. The simulator, where a stop with no grace is instant, says no.
  bool await_stop_reports = false;
  int32_t queue_depth = 256;  // pending jobs considered per cycle
  // Pending jobs per cycle that may try preemption: preemption searches are the dear part of a
  // cycle, and the jobs first in order are the ones it is for.
  int32_t preemptors_per_cycle = 4;
  // How long past use counts against a tenant. Short by default: with a long memory, a tenant
  // that was lucky yesterday waits behind everyone for hours today (docs/adr/0004).
  double fair_share_half_life = 3600.0;
  // Meridian order: how much more a job's estimate counts per hour of the whole estate its tenant
  // (with its team and organization) has received, decayed at fair_share_half_life. 0: the
  // shortest estimate first across tenants, shares breaking ties only. Measured on deep traces
  // (docs/adr/0034-deep-queues.md): 0.36 gives a mean JCT 8-15% below SJF's with the best
  // fairness of the four policies.
  double usage_stretch = 0.36;
  // Priority steps a pending job gains per hour waited, across priority classes. 0: classes
  // are strict (within a class, starvation_horizon bounds waiting).
  double aging_per_hour = 0;
  // Meridian order: within a tenant, a job's estimate counts for less the longer it waits (it
  // halves after one horizon, thirds after two), so that long jobs are not starved by a stream
  // of short ones. 0: plain shortest-estimate-first.
  double starvation_horizon = 24 * 3600.0;
  // Meridian order: a job that has waited this long and never run goes before the rest of its
  // priority class (oldest first, across tenants by share) and may stop running jobs of its class,
  // chosen as any preemption chooses, that have run first_start_preempts_after in their current
  // run: no one waits for ever behind a stream of shorter jobs, as Volcano's sla-waiting-time
  // promises. 0: off. Measured on deep traces (docs/adr/0034-deep-queues.md, "First starts").
  double first_start_within = 1800;
  double first_start_preempts_after = 600;
  // Tiresias queue boundaries in attained GPU-seconds (level k below thresholds[k]).
  std::vector<double> las_thresholds = {3600.0, 36000.0};
};

struct StartDecision {
  int64_t job = 0;
  std::vector<Placement> placements;  // one per task
  bool borrowed = false;              // beyond its tenant's guarantee
  int64_t on_loan_from = -1;  // runs on nodes reserved for this job, which may take them back
  // The MIG layout changes its start carries out (the placements' grants no longer say, once
  // committed), for its events: each grant that made an instance or changed a GPU's layout.
  std::vector<DeviceGrant> layout_changes = {};
};

struct PreemptDecision {
  int64_t job = 0;
  int64_t for_job = 0;
  std::string reason;  // "priority", "quota reclaim", "reservation" or "first start due"
  double stop_at = 0;  // the caller reports Evicted(job) then
};

struct CycleResult {
  std::vector<StartDecision> started;
  std::vector<PreemptDecision> preempted;
  std::vector<std::pair<int64_t, std::string>> pending;  // job, why it still waits
  // Of those, the jobs that passed their quota and found no room: what more nodes would start
  // (an elastic pool's, sched/elastic.h).
  std::vector<int64_t> short_of_capacity;
  int64_t reserved_job = -1;  // backfill reservation for the blocked head of the queue
  double reserved_at = 0;
};

// Why a job waits: its quota, each cluster's answer, and when it should start.
struct Explanation {
  bool known = false;
  std::string quota;                                          // empty when its quota admits it
  std::vector<std::pair<std::string, std::string>> clusters;  // cluster, why not (or "fits")
  // For a job that reads datasets, what bringing them to each cluster it may use costs
  // (sched/data.h): "local", or what would be staged from where, how long and at what egress.
  std::vector<std::pair<std::string, std::string>> data;
  double estimated_start = -1;  // -1: cannot tell from the runtime estimates of what runs
  // Of that, the seconds its datasets take to stage where it would run.
  double staging_seconds = 0;
};

// The queueing half of the scheduler: who goes first and who gives way. It owns the estate's
// free capacity (through a Placer) and the quota tree's usage; a cycle takes `now` and returns
// decisions it has already applied to that state. It reads no clock: the caller passes time in,
// and reports back when jobs end (Finish) and when preempted jobs have stopped (Evicted).
// Not thread-safe; not copyable (the placer points into it).
class Scheduler {
 public:
  Scheduler(Snapshot snapshot, Profile profile, QuotaTree quotas, SchedulerOptions options,
            uint64_t seed);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. A job that no node could hold even when idle is refused with
  // kFailedPrecondition and a reason, rather than waiting for ever.
  base::Status Submit(JobSpec job);
  void Finish(int64_t job, double now);
  // Takes in a job that already holds `placements` (one per task), as when the control plane
  // rebuilds its scheduler from stored state. Fails, changing nothing, when they do not fit.
  base::Status Adopt(JobSpec job, const std::vector<Placement>& placements, double start_time);
  // Forgets a job, pending or running (its resources are released); unknown ids are ignored.
  void Cancel(int64_t job, double now);
  void Evicted(int64_t job, double now);
  // Marks a job as stopping (cancelled, drained, or preempted before a rebuild, for job
  // `preempted_for` then): it holds its resources until Evicted, is not chosen as a victim
  // again, and what it will free counts for the job it was preempted for.
  void Evicting(int64_t job, int64_t preempted_for = -1);
  CycleResult Cycle(double now);

  // The estate changed in place, without a new scheduler: a node joined (its cluster and GPU
  // model known already; kFailedPrecondition otherwise), or one became schedulable or not (lost,
  // back, cordoned). Jobs on a node that became unschedulable keep their resources until the
  // caller reports how they ended (Cancel, Evicted).
  base::Result<int32_t> AddNode(const domain::Node& node);
  void SetSchedulable(int32_t node, bool schedulable);
  // Whether the node's runner was heard from lately (NodeState::reachable).
  void SetReachable(int32_t node, bool reachable);
  // A node changed in place (Snapshot::UpdateNode says what may change). Jobs on a GPU that
  // turned unhealthy keep it until the caller reports how they ended.
  base::Status UpdateNode(int32_t node, const domain::Node& n);
  void UpdateCluster(int32_t cluster, const domain::Cluster& c);
  base::Result<int32_t> AddCluster(const domain::Cluster& c);
  // A dataset's size (a Dataset document) or where a staged copy of it is cached changed: what
  // the data-locality score reads. SetDataset returns the dataset's index (added if new).
  int32_t SetDataset(const std::string& name, double size_gib);
  void SetCached(int32_t dataset, int32_t cluster, bool cached);

  // The configuration changed in place (scheduler_change.cc), so that what the cycles learnt
  // (the queue, the reservation, the claims of stopping victims, fair share) stays.
  //
  // Replaces the quota tree. `tenant_of_job` gives every job the scheduler holds its tenant (a
  // leaf) in the new tree; `node_of` maps each node of the old tree to the new one (-1: gone),
  // for fair-share usage. Running jobs are charged to the new tree as they hold now. Fails,
  // changing nothing, when a job has no tenant in the new tree.
  base::Status ReplaceQuotas(QuotaTree quotas, const std::vector<int32_t>& node_of,
                             const std::unordered_map<int64_t, int32_t>& tenant_of_job, double now);
  // New options (a Policy changed); usage decays at the old half-life up to `now`.
  void SetOptions(const SchedulerOptions& options, double now);
  // A new placement profile, as when the workload mix it was built for has changed; what the
  // placer remembered of shapes that fit nowhere is forgotten.
  void ReplaceProfile(Profile profile);
  // Clusters a tenant's jobs may not be newly placed in (a spent budget's block-cloud,
  // docs/adr/0041-budgets.md), by tenant; what runs there already stays. Replaces the last call's.
  void ExcludeClusters(std::map<int32_t, Mask> by_tenant) {
    if (by_tenant == excluded_) return;
    excluded_ = std::move(by_tenant);
    ForgetEstimate();  // an estimate made without the change
  }
  // The tasks of the jobs it holds, pending jobs' first, at most `limit`: the live workload mix.
  std::vector<TaskSpec> LiveTasks(size_t limit) const;
  // A job's priority class changed (its value, or whether it may preempt).
  void SetPriority(int64_t job, int32_t priority, bool preempting);
  // The clusters and models a job's tasks may use changed (a cluster was added, or changed its
  // region or kind): each task's masks are replaced by those of `tasks`, one per task.
  void Retarget(int64_t job, const std::vector<TaskSpec>& tasks);
  // The job's spec as the scheduler holds it; null when it holds no such job.
  const JobSpec* Find(int64_t job) const;

  // Undoing decisions of the last cycle that the caller could not carry out (the job moved
  // underneath before the decisions were written): a start is taken back (what it took is
  // free, the job waits again, and gets back the reservation it used up); a preemption is
  // withdrawn (the victim runs on, claimed by nobody).
  void Unstart(int64_t job, double now);
  void Unevict(int64_t job);

  // The backfill reservation's job (-1: none), and giving it to a job again after a rebuild.
  int64_t reserved_job() const { return reserved_job_; }
  void Reserve(int64_t job);

  // Takes in a job being stopped whose placement no longer fits whole (a rebuild found a GPU of
  // it gone or unhealthy, or one of its nodes gone): it holds, in Stopping, what of its
  // placement still exists and is free, until Evicted. `placements[i].node` -1: that task's
  // node left the estate, so nothing there can be given to anyone else anyway.
  void AdoptStopping(JobSpec job, std::vector<Placement> placements, double start_time,
                     int64_t preempted_for);
  Explanation Explain(int64_t job, double now);

  const Snapshot& snapshot() const { return snapshot_; }
  const Profile& profile() const { return profile_; }
  // When a pending job should start on what the estate has, from the runtime estimates of what
  // runs (kNever: it cannot tell, or the job is not pending).
  double EstimatedStart(int64_t job, double now);
  const QuotaTree& quotas() const { return quotas_; }
  size_t pending() const { return pending_.size(); }
  size_t running() const { return running_.size(); }
  int64_t cache_hits() const { return placer_.cache_hits(); }
  int64_t placements_searched() const { return placer_.searches(); }
  // How many start estimates (backfill reservations, explanations) were worked out afresh.
  int64_t estimates_computed() const { return estimates_computed_; }
  // The weighted dominant share of a node of the tenancy tree (a project, or a team or an
  // organization with everything under it): decayed resource-seconds received over capacity,
  // divided by the node's weight.
  double FairShare(int32_t node) const;
  std::vector<double> FairShares() const { return Shares(); }  // of every node, by index
  // Decayed usage of every project with any, as of `now`; and its restoration after a restart
  // or a rebuild, as saved at `at` (then decayed to `now`, plus what the jobs running now have
  // used since, at their current rates).
  struct TenantUsage {
    int32_t tenant = -1;
    double gpu = 0, cpu = 0, mem = 0;
  };
  std::vector<TenantUsage> ExportUsage(double now);
  void RestoreUsage(const std::vector<TenantUsage>& usage, double at, double now);
  int64_t AllocatedMilli(int32_t tenant) const;

 private:
  enum class Phase { kPending, kRunning, kStopping, kDone };
  struct Job {
    JobSpec spec;
    Phase phase = Phase::kPending;
    std::vector<Placement> placements;
    std::vector<ModelId> charged_models;  // per task, what the quota was charged for
    std::vector<int64_t> charged_milli;
    double start_time = 0;
    double attained = 0;  // GPU-seconds of earlier runs
    bool borrowed = false;
    int64_t on_loan_from = -1;  // the reserved job whose nodes it borrows
    int64_t stopping_for = -1;  // kStopping: the job it was preempted for, which counts on it
    double preempted_at = -1;   // its last preemption; it neither starts nor preempts again then
    uint32_t queued = 0;        // bumped each time it joins the queue (its entry in ordered_)
    int32_t starts = 0;         // starts here, less those taken back (Unstart)
    int64_t milli = 0;          // GPU milli of the whole job
    // Its shape as PlaceIn asks the placer whether it fits nowhere: a job of several tasks,
    // its tasks' shapes together; of one, the task's FeasibilityHash and FeasibilityKey (built
    // when first needed, the key of one task only once the placer holds an answer under the
    // hash; forgotten when its tasks change).
    bool shaped = false;
    uint64_t shape_hash = 0;
    std::string shape_key;
    // Its tasks are alike and take no MIG instance: placed one by one, each takes one of the
    // places that could hold one, wherever it goes, so a commit elsewhere cannot make the job
    // fit (Placer::Remember's while_unchanged is for the others).
    bool alike_tasks = false;
    std::vector<DeviceGrant> layout_changes;  // of the placements PlaceIn made last
  };
  struct Usage {
    double gpu = 0, cpu = 0, mem = 0;  // decayed resource-seconds
    int64_t gpu_now = 0, cpu_now = 0, mem_now = 0;
  };

  void AdvanceUsage(double now);
  // GPUs whose layout has kept long enough may change again.
  void ThawMig(double now);
  // FairShare of every node of the tenancy tree at once (the order's working copy).
  std::vector<double> Shares() const;
  void Pass(double now, CycleResult* out);
  std::vector<int64_t> Order(double now);
  // FIFO, SJF and LAS: a pending job's key does not change while it waits, so the queue is kept
  // sorted as jobs join it rather than sorted again by every pass; entries of jobs that left are
  // dropped when met (a job's `queued` tells an old entry from its current one). The Meridian
  // order reads pending_ by tenant (PendingQueue).
  QueueKey KeyOf(const Job& j) const;
  // What the Meridian order takes a job to run for: its estimate, never above its limit.
  static double FairEstimate(const JobSpec& spec);
  PendingQueue::Entry QueueEntry(const Job& j) const;
  // It has not run, here or (by its spec) before. Not by attained service, which a CPU-only job
  // never gains.
  static bool NeverStarted(const Job& j) { return !j.spec.started_before && j.starts == 0; }
  // A job joins the queue: submitted, requeued, or a start taken back (Unstart, after the cycle).
  // It leaves at the end of the pass that started it, or when cancelled.
  void Enqueue(Job& j);
  std::set<QueueKey> ordered_;
  bool ordered_valid_ = false;  // false: rebuilt from pending_ at the next Order
  std::vector<int64_t> FairOrder(double now);
  // What preemption compares: the priority class (aging orders the queue but never preempts,
  // or two jobs would take turns preempting each other), or the LAS queue level (a running job's
  // attained service counted up to `now`).
  double PreemptionRank(const Job& j, double now) const;
  int32_t LasLevel(double attained) const;
  // The job has waited first_start_within at `now` and never ran (Meridian order only).
  bool FirstStartDue(const Job& j, double now) const;
  // All-or-nothing placement of every task; commits on success.
  bool TryPlace(Job& j, std::string* why);
  // Places every task of j within `clusters` (not committed past TryPlace's trial). On a cluster
  // whose back end runs as many tasks on each node a job uses (ClusterState::even_task_layout),
  // the tasks are laid out so, or the job goes elsewhere (PlaceEvenly).
  bool PlaceIn(Job& j, Mask clusters, std::vector<Placement>* out, std::string* why);
  // PlaceIn's tasks one by one, each where the placer finds best.
  bool PlaceTasks(Job& j, Mask clusters, std::vector<Placement>* out, std::string* why);
  // j's tasks in cluster c as k tasks on each of n/k nodes, for the largest k that fits.
  bool PlaceEvenly(Job& j, int32_t c, std::vector<Placement>* out);
  bool PlaceEvenlyBy(Job& j, int32_t c, size_t k, std::vector<Placement>* out);
  // The clusters among `even` on which `placements` use some node more than another.
  Mask Uneven(const std::vector<Placement>& placements, Mask even) const;
  // The clusters of even_task_layout.
  Mask EvenClusters() const;
  // Builds j's shape (Job::shape_hash, shape_key, alike_tasks) once.
  void Shape(Job& j);
  // Commits `p` for j's task `task` and adds it to `out`; Drop takes back all of `out`.
  void Keep(Job& j, size_t task, Placement p, std::vector<Placement>* out);
  void Drop(Job& j, std::vector<Placement>* out);
  void Rollback(const Job& j, const std::vector<Placement>& done);
  // Rollback of what this TryPlace placed itself (Placer::Undo).
  void Undo(const Job& j, const std::vector<Placement>& done);
  bool TryPreempt(Job& j, double now, CycleResult* out);
  // TryPreempt's search; `stopped_some` says whether it changed anything.
  bool SearchVictims(Job& j, double now, CycleResult* out, bool* stopped_some);
  // The victim search of TryPreempt, with j's earlier victims (`claimed`) released in the
  // placer; it restores them (and empties `claimed`) once it has decided.
  bool PreemptMore(Job& j, double now, std::vector<int64_t>* claimed, CycleResult* out);
  // What the running jobs could offer a victim search, gathered at a pass's first search and
  // kept until the pass ends or a search leaves a job stopping: most searches of a deep queue find
  // no victim, and each would otherwise walk every running job to learn it. It is a bound: a job
  // that starts in the pass is no victim in it, and one stopped in it offers less than it says.
  struct RunningSummary {
    bool valid = false;
    double lowest_rank = kNever;           // of running preemptible jobs (PreemptionRank)
    double lowest_borrowed_rank = kNever;  // of those started on borrowed quota
    std::vector<int64_t> lenders;          // jobs from whose reservation one borrows
    std::vector<int64_t> awaited;          // jobs a stopping job was preempted for
  };
  const RunningSummary& SummariseRunning(double now);
  RunningSummary running_summary_;  // invalid at each pass's start, and after a stop is awaited
  // Starts, on the reserved nodes, preemptible jobs of this pass that fit nowhere else.
  void Lend(const std::vector<int64_t>& borrowers, double now, CycleResult* out);
  void Start(Job& j, double now, CycleResult* out);
  void Stop(Job& j, double now);  // releases its resources and quota
  void Restore(Job& j);           // re-commits a released running job
  // Adopt: the MIG change that makes each MIG grant of `p` on the snapshot as it is now.
  void RedoMigLayout(Placement* p) const;
  // When `j` could start if what runs ends as estimated; the nodes it would use then go to
  // `nodes` when given. Kept while the placer's state stays (Placer::version): a pass behind a
  // reservation that started nothing since asks again for the same answer. What changes the
  // answer without a placement (a job told to stop, or back) forgets it.
  double EstimateStart(const Job& j, double now, std::vector<int32_t>* nodes = nullptr);
  // EstimateStart's answer, before it is brought up to `now`, with its nodes.
  double EstimateStartFromScratch(const Job& j, std::vector<int32_t>* nodes);
  struct LastEstimate {  // always with its nodes
    int64_t job = -1;
    uint64_t version = 0;
    double at = kNever;
    std::vector<int32_t> nodes;
  } last_estimate_;
  // What changes an estimate without a placement (a job told to stop or back, its tasks
  // retargeted, its id freed) calls this.
  void ForgetEstimate() { last_estimate_.job = -1; }
  // Once `placed` is placed to start now (the placer at `version_before` until then): keeps
  // the reserved job's estimate current when the start leaves it standing (scheduler_cycle.cc).
  void KeepEstimateThrough(const Job& placed, uint64_t version_before, double now);
  int64_t estimates_computed_ = 0;
  std::string QuotaBlock(const Job& j) const;
  bool QuotaAllows(const Job& j) const;  // QuotaBlock(j).empty(), without wording why not
  std::string NeverFits(const JobSpec& spec) const;

  Snapshot snapshot_;
  Profile profile_;
  QuotaTree quotas_;
  std::map<int32_t, Mask> excluded_;  // tenant -> clusters it may not be placed in now
  SchedulerOptions options_;
  Placer placer_;
  CycleState cycle_;
  std::unordered_map<int64_t, Job> jobs_;
  PendingQueue pending_;
  std::vector<int64_t> running_;
  std::vector<Usage> usage_;
  double usage_time_ = 0;
  int64_t allocated_milli_ = 0;       // GPU milli held by running jobs
  int64_t reserved_job_ = -1;         // the job holding the backfill reservation, until it starts
  int64_t reservation_used_by_ = -1;  // the job whose start in the last cycle used it up
  std::map<int32_t, double> frozen_until_;  // GPU -> when its MIG layout may change again
  int64_t gpu_capacity_ = 1, cpu_capacity_ = 1, mem_capacity_ = 1;
};

}  // namespace meridian::sched
