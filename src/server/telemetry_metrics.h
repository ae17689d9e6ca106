#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "api/api.h"
#include "api/metrics.h"
#include "server/nodes.h"
#include "store/store.h"

// What /metrics says of the estate at the moment it is scraped: every GPU with its agent's last
// sample and who holds it, every node's state and allocation, and the outcomes of jobs. Names and
// labels are in docs/adr/0014-telemetry-metrics.md and docs/user-guide.md ("Monitoring").
namespace meridian::server {

// Renders the GPU and node families from the scheduler's node list (`nodes`: the items of
// /api/v1/nodes, SchedulerHooks::Nodes()) and the node service's reports of registered nodes
// into `out`, a fresh scrape's text (each family is described and filled here).
// Every GPU of `nodes` gets its inventory series (health, allocation); GPUs of registered
// nodes that are not Lost get their telemetry too. Pure: no clock, no store.
void RenderEstateMetrics(const Json& nodes,
                         const std::map<std::string, NodeService::NodeReport>& reports,
                         api::MetricsText* out);

// Counts job outcomes from the committed event log, which is the one record of every lifecycle
// transition (api::CommitTransition appends them): an outcome counted here happened, whatever
// transaction or retry wrote it. Counters start at this server's start (the event log's latest
// sequence number then); Prometheus takes a restart as a counter reset.
//
// Outcomes: succeeded, failed by cause, cancelled, preempted, and requeued by why. Every
// project of the configuration has every series, at zero until something happens.
// Thread-safe; Follow is called from the scraping thread.
class JobOutcomes {
 public:
  // domain::FailureCause's names, with '_' for '-' (Prometheus label values, as the rest).
  static constexpr const char* kFailureCauses[] = {"exit_code",
                                                   "oom_killed",
                                                   "signal",
                                                   "command_not_found",
                                                   "permission_denied",
                                                   "image_missing",
                                                   "runtime_limit",
                                                   "lease_lost",
                                                   "node_lost",
                                                   "gpu_fault",
                                                   "cuda_out_of_memory",
                                                   "nccl_error",
                                                   "not_started",
                                                   "other"};
  static constexpr const char* kRequeueReasons[] = {"preempted", "drained", "node_lost",
                                                    "gpu_fault", "other"};

  // Counts one event (events of other kinds than Job are ignored). In order of sequence.
  // `cause`: a failed job's status.cause (domain::CauseName), when known; else the event's
  // message says.
  void Count(const store::Event& e, const std::string& cause = "");
  // Reads the events after the last one counted (after `start` the first time) and counts them.
  base::Status Follow(store::Store& store);
  void Start(int64_t after_seq);
  // Every outcome family, with a zero series for each of `projects` not yet seen.
  void Render(const std::set<std::string>& projects, api::MetricsText* out) const;

  // Jobs ended per project since the start: (succeeded, failed), for the alert rules.
  std::map<std::string, std::pair<double, double>> EndedTotals() const;

  // The cause of a failure, from its event's message (what the lifecycle and the runners say).
  static std::string FailureCause(const std::string& message);

 private:
  mutable std::mutex mu_;
  int64_t after_ = 0;
  std::map<std::string, double> succeeded_, cancelled_, preempted_;  // project -> count
  std::map<std::pair<std::string, std::string>, double> failed_;     // (project, cause)
  std::map<std::pair<std::string, std::string>, double> requeued_;   // (project, reason)
  std::map<std::string, std::string> stopping_for_;  // job -> why its stop was asked (a requeue)
};

// The scrape-time collector that server.cc hands to api::Metrics::AddCollector: the estate's
// families, the job outcomes, and nothing kept between scrapes but the outcome counters.
class TelemetryMetrics {
 public:
  TelemetryMetrics(store::Store* store, api::SchedulerHooks* scheduler, NodeService* nodes);
  std::string Render();

 private:
  store::Store* store_;
  api::SchedulerHooks* scheduler_;
  NodeService* nodes_;
  JobOutcomes outcomes_;
};

}  // namespace meridian::server
