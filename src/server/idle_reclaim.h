#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "api/metrics.h"
#include "base/clock.h"
#include "domain/idle_policy.h"
#include "server/alert_eval.h"
#include "server/nodes.h"
#include "store/store.h"

// Idle-GPU reclamation (docs/adr/0019-idle-reclamation.md): the IdlePolicy documents applied to
// the running jobs, on the GPU utilisation their agents report. A job is idle while every GPU it
// holds reports under its policy's threshold; once it has been idle for idleFor, the policy's
// action is taken: a notice (an event in the job's log, and the job-idle alert) and, after the
// grace, a stop through the lifecycle (intent cancel, the job's own grace period, as a cancel
// has); or the alert only. A dry run lists what would be reclaimed and touches nothing.
namespace meridian::server {

// What the tracker sees of one running job at one evaluation.
struct IdleObservation {
  int64_t job = 0;
  std::string name;
  std::string project;
  domain::JobKind type = domain::JobKind::kBatch;
  std::map<std::string, std::string> labels;  // spec.labels
  double gpus = 0;                            // GPUs it holds, fractions in parts
  // The busiest of its GPUs, 0..1; absent when one of them reports nothing (a lost node, an
  // agent that sent no sample): a job is judged only on what is known of every GPU it holds.
  std::optional<double> utilization;
};

// One job a policy finds idle, and where its reclamation stands.
struct IdleFinding {
  enum class State {
    kIdle,       // idle for less than idleFor
    kNoticed,    // reclaim: told; stopped at stop_at unless its GPUs are used again
    kDryRun,     // reclaim in dry run: would have been told at noticed_at, stopped at stop_at
    kAlerting,   // alert: idle past idleFor, the job-idle alert fires
    kReclaimed,  // its stop was asked for
  };
  IdleObservation job;
  domain::IdlePolicy policy;
  State state = State::kIdle;
  double idle_since = 0;  // when it was first seen idle
  double noticed_at = 0;  // kNoticed, kDryRun, kReclaimed
  double stop_at = 0;     // kNoticed, kDryRun, kReclaimed

  // {job, name, project, type, policy, action, state, dryRun, idleSince, noticedAt, stopAt,
  // gpus, utilization}
  Json ToJson() const;
};
const char* IdleStateName(IdleFinding::State s);  // idle, noticed, dry-run, alerting, reclaimed

// The pure half: which jobs are idle, for how long, and what is due now. Tests drive it with a
// fake clock. Not thread-safe (IdleReclaimer guards it).
class IdleTracker {
 public:
  struct Step {
    std::vector<IdleFinding> notices;    // to be told now (kNoticed from this evaluation)
    std::vector<IdleFinding> stops;      // noticed, still idle, their grace over: stop them
    std::vector<IdleFinding> withdrawn;  // noticed, but busy again (or exempted): notice off
  };
  // Every running job at `now` (a job not among them has ended or stopped, and is forgotten).
  // Call with a `now` that does not go back.
  Step Evaluate(const std::vector<domain::IdlePolicy>& policies,
                const std::vector<IdleObservation>& jobs, double now);
  // The jobs found idle, by job id.
  std::vector<IdleFinding> Findings() const;
  // A stop that could not be written is tried again at the next evaluation.
  void StopFailed(int64_t job);

 private:
  std::map<int64_t, IdleFinding> tracked_;
};

// The job-idle alert's jobs: those noticed, alerted on or found by a dry run.
std::vector<AlertInputs::IdleJob> IdleAlertJobs(const std::vector<IdleFinding>& findings);

struct IdleReclaimerOptions {
  double interval = 2;  // seconds between evaluations (an agent heartbeats every 2 s by default)
};

// The loop: reads the IdlePolicy documents and the running jobs from the store and the GPUs'
// last samples from the node service, evaluates, and writes notices and stops with their events
// in the jobs' logs. Counts what it reclaimed for /metrics. Thread-safe: Idle, Render and
// AlertJobs are called from other threads.
class IdleReclaimer final : public api::IdleHooks {
 public:
  IdleReclaimer(store::Store* store, const base::Clock* clock, api::EventBus* bus,
                NodeService* nodes, IdleReclaimerOptions options = {});
  ~IdleReclaimer() override;

  void Start();
  void Stop();
  // One evaluation and what it writes; Start's thread calls it, tests may instead.
  base::Status RunOnce();

  Json Idle() override;
  std::vector<AlertInputs::IdleJob> AlertJobs();
  // meridian_idle_* families into `out` (a fresh registry, as TelemetryMetrics does).
  void Render(api::Metrics* out);

  // Called after a write with the last event's sequence, so that watchers and the scheduler
  // see it (the controller follows the jobs' events).
  void OnChange(std::function<void()> wake) { wake_ = std::move(wake); }

 private:
  base::Status Gather(std::vector<domain::IdlePolicy>* policies,
                      std::vector<IdleObservation>* jobs);
  base::Status Notice(const IdleFinding& f, bool withdraw, double now, int64_t* seq);
  base::Status Reclaim(const IdleFinding& f, double now, int64_t* seq);
  void Loop();

  store::Store* store_;
  const base::Clock* clock_;
  api::EventBus* bus_;
  NodeService* nodes_;
  IdleReclaimerOptions options_;
  std::function<void()> wake_;

  std::mutex mu_;  // guards tracker_ and the counters
  IdleTracker tracker_;
  // (project, job type) -> jobs reclaimed, their GPU-hours idle, notices given.
  std::map<std::pair<std::string, std::string>, double> reclaimed_jobs_, reclaimed_gpu_hours_,
      notices_;

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace meridian::server
