#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/api.h"
#include "api/metrics.h"
#include "base/clock.h"
#include "sched/scheduler.h"
#include "server/estate.h"
#include "server/nodes.h"
#include "store/store.h"

namespace meridian::server {

// The scheduler loop: runs the pure scheduler on the live state and commits its decisions.
//
// It follows the store's event log, which every change to jobs and configuration appends to:
// a submitted job is queued, a cancelled one forgotten, and a configuration change rebuilds the
// scheduler from the store (the estate, the quota tree, every pending and placed job). A cycle
// runs when woken by the API and at least every `cycleInterval` seconds. Decisions are committed
// in one transaction with optimistic concurrency on each job's resource version; when a job
// moved underneath (cancelled meanwhile), the decision is dropped and the scheduler rebuilt.
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
  std::vector<api::ConfigProblem> ConfigProblems() override;

  // A sample of the estate every `interval` seconds, kept for `retention` seconds in the store
  // (and in memory, for reading); Start loads what the store kept. Call before Start.
  void KeepHistory(double interval, double retention);

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
  };
  base::Status Rebuild();
  base::Status CatchUp();
  void Track(const store::JobRecord& job);
  // Brings the scheduler, known_ and the agents' assignments in line with a job as stored now.
  void Follow(const store::JobRecord& job, double now);
  // Applies a node's event in place (lost, ready, newly registered); false when only a
  // rebuild can (a changed node, a model the snapshot lacks).
  bool FollowNode(const std::string& reason, const store::Object& node);
  // Submits a job to the scheduler; one that nothing in the estate could hold is kept in
  // refused_ and asked again (RetryRefused) when a node joins or comes back.
  void Queue(sched::JobSpec spec);
  void RetryRefused();
  // Completes the stops that no runner will report (jobs on nodes no agent runs).
  base::Status SettleStops(double now);
  bool RunsOnAgents(const Json& allocation) const;
  base::Status Commit(const sched::CycleResult& result, double now);
  void Publish(double cycle_seconds);
  void Sample(double now);
  void Loop();

  store::Store* store_;
  const base::Clock* clock_;
  api::EventBus* bus_;
  api::Metrics* metrics_;
  NodeService* nodes_;  // liveness and telemetry of registered nodes, for Nodes()
  Backend* backend_;    // what runs tasks: the agents (later also Slurm, cloud pools)

  std::mutex mu_;  // guards everything below except the thread's wake-up state
  std::unique_ptr<Estate> estate_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::map<int64_t, Known> known_;             // pending and placed jobs
  std::map<int64_t, std::string> reasons_;     // why each pending job waits, from the last cycle
  std::map<int64_t, sched::JobSpec> refused_;  // pending jobs no node could ever hold, so far
  int64_t last_seq_ = 0;
  bool dirty_ = true;  // rebuild before the next cycle

  std::mutex history_mu_;  // guards the history
  std::deque<api::HistorySample> history_;
  double history_interval_ = 10;
  double history_retention_ = 6 * 3600;
  size_t history_capacity_ = 2160;
  double last_sample_ = 0;  // the loop's thread only

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace meridian::server
