#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "domain/alert_rules.h"
#include "domain/gpu_warnings.h"
#include "domain/spec.h"

// Evaluation of alert rules (docs/adr/0017-alerting.md): pure, on a snapshot of the estate and
// `now`, so that tests drive it with a fake clock. An alert is one rule holding for one thing (a
// node, a GPU, a project, a quota). It is pending while its condition has held for less than the
// rule's `for`, firing after, and resolved when the condition no longer holds (or the rule was
// removed or disabled); a pending alert whose condition clears is dropped without a trace, as
// Prometheus does.
namespace meridian::server {

// What the rules look at, gathered by the alert service from the scheduler and the node service.
struct AlertInputs {
  struct Holder {
    int64_t job = 0;
    std::string project;
  };
  struct Gpu {
    int32_t index = 0;
    std::string uuid;
    bool healthy = true;
    std::optional<double> utilization;  // 0..1; absent when the agent sent none (or node lost)
    int64_t xid_errors = 0;             // critical XIDs since the agent started (a counter)
    int32_t last_xid = 0;
    // Held: it faulted maxFaults times within the window (or its remediation failed) and stays
    // cordoned until an operator uncordons it (domain/gpu_health.h); why, in words.
    bool held = false;
    std::string held_reason;
    std::vector<Holder> holders;
  };
  struct Node {
    std::string name;
    std::string cluster;
    bool registered = false;  // an agent's node; declared nodes have no liveness
    bool lost = false;
    std::vector<Gpu> gpus;
    // Warnings before failures and the failing-jobs flag (domain/gpu_warnings.h).
    std::vector<domain::NodeCondition> conditions;
  };
  std::vector<Node> nodes;
  std::map<std::string, double> oldest_pending;  // project -> seconds its oldest job has waited
  struct Quota {
    std::string scope;
    std::string level;  // organization | team | project
    double used = 0;
    double limit = -1;  // GPUs; negative: no limit
  };
  std::vector<Quota> quotas;
  // Counters since the server started: jobs ended per project, and failed scheduler cycles.
  std::map<std::string, std::pair<double, double>> ended;  // project -> (succeeded, failed)
  double scheduler_errors = 0;
  // Jobs an IdlePolicy found idle past its idleFor (server/idle_reclaim.h): noticed before their
  // reclamation, alerted on, or what a dry run would reclaim.
  struct IdleJob {
    int64_t job = 0;
    std::string project;
    std::string policy;
    std::string action;  // reclaim | alert | dry-run
    double utilization = 0;
    std::string summary;
  };
  std::vector<IdleJob> idle_jobs;
  // Elastic pools whose provisioning failed and has not come right since (server/elastic_pools.h).
  struct PoolFailure {
    std::string pool;
    std::string cluster;
    std::string provisioner;
    std::string what;
    int32_t in_a_row = 0;  // failures in a row (0: not a call that failed, a configuration)
  };
  std::vector<PoolFailure> pool_failures;
  // Each threshold a Budget's spend has reached this period (server/budgets.h).
  struct BudgetThreshold {
    std::string budget;
    std::string level;  // organization | team | project
    std::string scope;
    int64_t threshold = 0;  // percent
    double percent = 0;     // spent, of the limit
    std::string summary;
    bool blocking = false;  // the 100% threshold of a budget that now stops new cloud capacity
  };
  std::vector<BudgetThreshold> budget_thresholds;
};

struct Alert {
  enum class State { kPending, kFiring, kResolved };
  std::string rule;
  std::map<std::string, std::string> labels;  // alertname, rule, severity, the condition's own
  std::map<std::string, std::string> annotations;
  State state = State::kPending;
  double active_since = 0;  // when the condition was first seen to hold
  double fired_at = 0;      // when it started firing (0 while pending)
  double resolved_at = 0;   // when it was resolved (0 until then)
  double value = 0;         // the figure the condition compared (seconds, ratio, count)

  // The alert's identity: its labels, in order.
  std::string Key() const;
  // {rule, state, labels, annotations, activeSince, firedAt, resolvedAt, value}
  domain::Json ToJson() const;
};
const char* AlertStateName(Alert::State s);

class AlertEvaluator {
 public:
  // Evaluates every rule on `inputs` at `now`, and returns the alerts that changed state to
  // firing or resolved in this evaluation (what receivers are told). Call with a `now` that does
  // not go back.
  std::vector<Alert> Evaluate(const std::vector<domain::AlertRule>& rules,
                              const AlertInputs& inputs, double now);
  // Pending and firing alerts, ordered by key.
  std::vector<Alert> Active() const;
  // Alerts resolved within `keep` seconds before `now` (Alertmanager is told of each a while, so
  // that a resolution lost on the way still arrives).
  std::vector<Alert> Resolved(double now, double keep) const;

  // What a condition found holding: one future alert, before the rule's labels are added.
  struct Candidate {
    std::map<std::string, std::string> labels;  // the condition's own
    std::map<std::string, std::string> annotations;
    double value = 0;
  };

 private:
  std::vector<Candidate> Check(const domain::AlertRule& rule, const AlertInputs& inputs,
                               double now);
  // The conditions that keep state between evaluations (the others are pure functions).
  void GpuXid(const domain::AlertRule& rule, const AlertInputs& in, double now,
              std::vector<Candidate>* out);
  void JobFailureRate(const domain::AlertRule& rule, const AlertInputs& in, double now,
                      std::vector<Candidate>* out);
  void SchedulerErrors(const domain::AlertRule& rule, const AlertInputs& in, double now,
                       std::vector<Candidate>* out);
  // The increase of a counter over the last `window` seconds, from the samples kept of it (the
  // first sample of a key counts from zero: it came since the server started).
  double Increase(const std::string& key, double value, double now, double window);

  std::map<std::string, Alert> active_;  // key -> pending or firing alert
  std::deque<Alert> resolved_;           // oldest first
  // Per GPU (UUID): the XID count last seen and when it last went up.
  std::map<std::string, std::pair<int64_t, double>> xid_seen_;
  std::map<std::string, std::deque<std::pair<double, double>>> samples_;  // counter -> (t, v)
};

}  // namespace meridian::server
