#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "api/api.h"
#include "api/metrics.h"
#include "base/clock.h"
#include "sched/scheduler.h"
#include "server/elastic_pools.h"
#include "server/estate.h"
#include "server/nodes.h"
#include "server/pending_reasons.h"
#include "store/store.h"

namespace meridian::server {

// The scheduler loop: runs the pure scheduler on the live state and commits its decisions.
//
// It follows the store's event log, which every change to jobs and configuration appends to:
// a submitted job is queued, a cancelled one forgotten, and nodes and configuration changes
// update the scheduler in place (a new quota tree, priorities, options, node traits and health);
// only what it cannot absorb (the placement policy, the estate's shape) rebuilds it from the
// store, and a rebuild keeps the reservation, the victims' claims and fair share. A cycle runs
// when woken by the API and at least every `cycleInterval` seconds. Decisions are committed in
// one transaction, each checked against its job's resource version: a decision whose job moved
// underneath (cancelled meanwhile) is left out and undone in the scheduler, the rest written.
// What agents report moves placed jobs on (NodeService); the controller follows those changes
// through the same log and keeps NodeService's assignments current. A preempted job on agents'
// nodes is Stopping until its tasks have stopped; on nodes no agent runs (declared by a pool)
// it returns to Pending at once. Thread-safe: the API calls Explain, PendingReason and Nodes
// from its threads.
class SchedulerController final : public api::SchedulerHooks {
 public:
  SchedulerController(store::Store* store, const base::Clock* clock, api::EventBus* bus,
                      api::Metrics* metrics, NodeService* nodes);
  ~SchedulerController() override;

  void Start();
  void Stop();

  void Wake() override;
  base::Result<Json> Explain(int64_t job) override;
  std::string PendingReason(int64_t job) override;
  Json Nodes() override;
  Json Usage() override;
  std::vector<api::HistorySample> History(double since, double* interval) override;
  std::vector<api::NodeSample> NodeHistory(const std::string& node, double since,
                                           double* interval) override;
  std::vector<api::ConfigProblem> ConfigProblems() override;
  std::optional<domain::FieldError> NeverHeld(const domain::JobSpec& spec) override;

  // Each node's GPUs as the scheduler holds them, typed and without telemetry: what the alert
  // rules read every evaluation, cheap at 10,000 nodes where Nodes() builds the API's JSON.
  struct ScheduledNode {
    struct Gpu {
      int32_t index = 0;
      std::string uuid;
      bool healthy = true;  // a GPU held by work outside Meridian is healthy (and occupied)
    };
    std::string name;
    std::string cluster;
    std::vector<Gpu> gpus;
  };
  std::vector<ScheduledNode> ScheduledNodes();

  // For the alert rules (server/alerting.h): each project's longest wait of a pending job, in
  // seconds; and how many of the loop's rounds failed since the start.
  std::map<std::string, double> OldestPending();
  int64_t CycleErrors() const { return cycle_errors_.load(); }
  // Elastic pools whose provisioning failed and has not come right since.
  std::vector<ElasticPools::Failure> ProvisioningFailures();

  // A sample of the estate every `interval` seconds, kept for `retention` seconds in the store
  // (and in memory, for reading); Start loads what the store kept. Call before Start.
  void KeepHistory(double interval, double retention);
  // Elastic node pools grow and shrink after each round (server/elastic_pools.h). Call before
  // Start.
  void SetElasticPools(std::unique_ptr<ElasticPools> pools) { elastic_ = std::move(pools); }
  // The projects whose spent budget holds back new cloud capacity (server/budgets.h), read at
  // each round: burst planning passes over their jobs, and a block-cloud budget keeps them off
  // cloud clusters. Call before Start.
  void SetBudgetBlocks(std::function<std::map<std::string, BudgetBlock>()> blocks,
                       std::function<std::map<std::string, BudgetRoom>()> room = {}) {
    budget_blocks_ = std::move(blocks);
    budget_room_ = std::move(room);
  }

  // One round: follow the event log, run a cycle, commit its decisions. Start() calls it from
  // its thread; tests may call it directly instead.
  base::Status RunOnce();

 private:
  struct Known {
    std::string project;
    int64_t version = 0;
    int64_t generation = 0;
    std::string phase;
    std::string reason;
    double submitted_at = 0;
    Json allocation;
    Json status;
    // What gates its queueing (controller_gate.cc): its array's `%N` and its dependencies.
    int64_t array_id = 0;
    int64_t array_index = -1;
    int64_t max_running = 0;  // 0: no limit
    std::vector<domain::Dependency> dependencies;
  };
  // What the views count of known_ at every cycle and scrape (phases, each project's queue,
  // the stopping jobs), kept as known_ changes: at a million pending jobs a walk of known_ for
  // each was most of a cycle.
  struct Tally {
    struct Project {
      std::set<std::pair<double, int64_t>> pending;  // (submitted_at, id), oldest first
      int64_t others = 0;                            // placed, running or stopping
    };
    std::map<std::string, int64_t> phases;
    std::map<std::string, Project> projects;
    std::set<int64_t> stopping;
    void Add(int64_t id, const Known& k);
    void Remove(int64_t id, const Known& k);
  };
  // Reads every object and every active job, and the latest event's sequence number.
  base::Status ReadState(std::vector<store::Object>* objects, std::vector<store::JobRecord>* jobs,
                         int64_t* latest);
  base::Status Rebuild();
  // Rebuild's part: takes every active job into `scheduler` (pending ones queued, placed ones
  // adopted, or held as stopping where their placement no longer fits) and returns those of the
  // last that must now be asked to stop, each with why.
  std::vector<std::pair<int64_t, std::string>> TakeIn(
      std::vector<std::pair<store::JobRecord, base::Result<sched::JobSpec>>>& converted,
      const Estate& estate, sched::Scheduler* scheduler);
  // Takes in what the configuration objects say now, in place (controller_config.cc); sets
  // dirty_ only for what the scheduler cannot absorb, named by StructuralChange.
  base::Status ApplyConfig();
  std::string StructuralChange(const Estate& next) const;
  // ApplyConfig's parts: the estate's nodes and clusters as the live scheduler has them, with
  // what changed in place (traits, prices, nodes the estate gained); false: only a rebuild can.
  bool MergeEstate(Estate* next);
  // Gives every job the scheduler holds its tenant in `next`'s quota tree and its priority,
  // queues pending jobs that `next` can convert and the old estate could not, and replaces the
  // scheduler's quota tree.
  base::Status RetenantJobs(Estate* next, const std::vector<store::JobRecord>& jobs, double now);
  base::Status CatchUp();
  void Track(const store::JobRecord& job);
  // Track's part, once per job: its array's limit and its dependencies, from its spec.
  static void TrackGates(const store::JobRecord& job, Known* known);
  // Brings the scheduler, known_ and the agents' assignments in line with a job as stored now.
  void Follow(const store::JobRecord& job, double now);
  // Applies a node's event in place (registered, lost, ready, cordoned, draining, deleted,
  // registered again: ChangeNode); false when only a rebuild can (a model or cluster the
  // snapshot lacks, a node that moved cluster or pool).
  bool FollowNode(const std::string& reason, const store::Object& node);
  // Nodes whose runners went silent are passed over until heard again (Backend::Unreachable).
  void FollowReachability();
  // A node registered again with other capacity or GPU health (controller_nodes.cc): updated in
  // place, and the jobs on GPUs it no longer has or that turned unhealthy are stopped through
  // the lifecycle. False: only a rebuild can follow (its cluster, pool or GPUs' models moved, or
  // it has a GPU it never had).
  bool ChangeNode(int32_t index, const store::Object& node);
  // Asks the lifecycle to stop these jobs (each with its reason), to be requeued, and follows
  // what it wrote: they hold their devices until they are seen to stop.
  base::Status StopJobs(const std::vector<std::pair<int64_t, std::string>>& jobs,
                        const std::string& event_reason, double now);
  // Submits a job to the scheduler; one that nothing in the estate could hold is kept in
  // refused_ and asked again (RetryRefused) when a node joins or comes back.
  void Queue(sched::JobSpec spec);
  void RetryRefused();
  // A pending job that may not be queued yet (controller_gate.cc): its dependencies are not met,
  // or its array has `%N` elements holding or queued for resources. Such a job is kept in held_
  // out of the scheduler, so the scheduler (quota, fair share, preemption, backfill) sees only
  // what may run. Whether `id` is to be held.
  bool Gated(int64_t id) const;
  // A pending job its runners gave back again and again waits out its back-off
  // (domain::JobLife::eligible_at) in backing_off_, out of the scheduler, with a pending reason
  // that says until when; each round queues those whose time has come.
  bool BackingOff(int64_t id, double now) const;
  void HoldForBackoff(int64_t id, sched::JobSpec spec);
  void ReleaseBackoff(double now);
  // Each round, before the cycle: reads the state of what held jobs depend on, fails those whose
  // dependencies can never be met (through the lifecycle), and queues those whose dependencies
  // are met while their array has room, lowest index first.
  base::Status ReleaseHeld(double now);
  // Completes the stops that no runner will report (jobs on nodes no agent runs).
  base::Status SettleStops(double now);
  bool RunsOnAgents(const Json& allocation) const;
  // A cycle's decisions (controller_commit.cc): each a lifecycle transition of its job as the
  // controller last saw it, written only where the job has not moved since; the others are
  // undone in the scheduler.
  struct Decision {
    store::JobRecord record;  // as known; as written once `written`
    std::vector<domain::Transition> steps;
    bool start = false;    // a start; otherwise a preemption
    int64_t for_job = -1;  // a preemption's preemptor
    bool settled = false;  // a preemption on nodes no agent runs: stopped at once
    bool written = false;
  };
  base::Status Commit(const sched::CycleResult& result, double now);
  std::vector<Decision> Decide(const sched::CycleResult& result, double now);
  base::Status PreemptSteps(const sched::PreemptDecision& p, double now, Decision* d);
  // Writes the decisions whose jobs have not moved, in one transaction; returns the last
  // event's sequence number.
  base::Result<int64_t> WriteDecisions(std::vector<Decision>* decisions, double now);
  void Publish(double cycle_seconds);
  // Copies what admission checks submissions against (NeverHeld) from the estate, once it has
  // changed, and says up to which event it is current. Called by the cycle, under mu_.
  void PublishAdmission();
  void Sample(double now);
  void Loop();
  // Every kMixCheckSeconds, learns the workload mix from the jobs the scheduler holds and, when
  // it has moved from the one its placement profile was built for (sched::MovedMix), rebuilds
  // the profile for it: what placement keeps room for follows the queue, not one trace.
  void FollowMix(double now);
  // Keeps the jobs of projects under a spent block-cloud budget off cloud clusters.
  // The tenants a block-cloud budget keeps off cloud clusters, each with its block.
  std::map<int32_t, const BudgetBlock*> KeptOffCloud(
      const std::map<std::string, BudgetBlock>& blocks) const;
  void ExcludeCloud(const std::map<int32_t, const BudgetBlock*>& kept);
  // The pending reason of a job a block-cloud budget keeps off cloud clusters names the budget.
  void SayBudgetKeptOut(const std::map<int32_t, const BudgetBlock*>& kept,
                        const sched::CycleResult& result);
  static constexpr double kMixCheckSeconds = 30;

  store::Store* store_;
  const base::Clock* clock_;
  api::EventBus* bus_;
  api::Metrics* metrics_;
  NodeService* nodes_;  // liveness and telemetry of registered nodes, for Nodes()
  Backend* backend_;    // what runs tasks: the agents (later also Slurm, cloud pools)

  PendingReasons reasons_;  // its own lock: read without waiting for a cycle

  std::mutex mu_;  // guards everything below except the thread's wake-up state
  std::unique_ptr<Estate> estate_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::map<int64_t, Known> known_;                 // pending and placed jobs
  Tally tally_;                                    // of known_, changed with it
  std::map<int64_t, sched::JobSpec> refused_;      // pending jobs no node could ever hold, so far
  std::map<int64_t, sched::JobSpec> held_;         // pending jobs not to be queued yet (Gated)
  std::set<int64_t> released_;                     // gated jobs let through: not held again
  std::map<int64_t, sched::JobSpec> backing_off_;  // pending jobs waiting out a back-off
  // Victims whose preemption was left out of the last commit (they moved underneath), with the
  // job it was for: one that is being stopped anyway (its user cancelled it) still frees room
  // for that job, which then takes no other victim.
  std::map<int64_t, int64_t> claims_;
  // Registered nodes deleted since the last rebuild: unschedulable in the snapshot (whose
  // indexes cannot shrink) until they register again.
  std::set<std::string> deleted_nodes_;
  int64_t last_seq_ = 0;
  bool dirty_ = true;                                     // rebuild before the next cycle
  std::shared_ptr<const sched::FragmentationModel> mix_;  // what the profile was built for
  double mix_checked_at_ = 0;

  bool admission_stale_ = true;  // the estate changed since PublishAdmission

  // What NeverHeld checks a submission against, as of the last cycle: its own lock, so that a
  // submission does not wait for a cycle.
  struct AdmissionView {
    std::vector<domain::Cluster> clusters;
    std::vector<domain::Node> nodes;
    std::vector<domain::Node> pool_shapes;
  };
  std::mutex admission_mu_;
  std::condition_variable admission_cv_;  // a cycle published
  std::shared_ptr<const AdmissionView> admission_;
  int64_t admission_seq_ = 0;  // the last event the view has taken in

  std::mutex history_mu_;  // guards the history
  std::deque<api::HistorySample> history_;
  double history_interval_ = 10;
  double history_retention_ = 6 * 3600;
  size_t history_capacity_ = 2160;
  // Per node, its GPUs' samples of the last api::kNodeHistorySeconds (or the retention, when
  // shorter): in memory only, bounded by node_history_capacity_ samples per node; a node gone
  // for longer than that is forgotten.
  std::map<std::string, std::deque<api::NodeSample>> node_history_;
  size_t node_history_capacity_ = 360;
  double last_sample_ = 0;  // the loop's thread only

  std::atomic<int64_t> cycle_errors_{0};

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::thread thread_;
  // Last: destroyed first, its worker joined while the wake-up it calls still exists.
  std::unique_ptr<ElasticPools> elastic_;
  std::function<std::map<std::string, BudgetBlock>()> budget_blocks_;
  std::function<std::map<std::string, BudgetRoom>()> budget_room_;
};

}  // namespace meridian::server
