#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "domain/spec.h"

// Alert rules as code (docs/adr/0017-alerting.md): the `AlertRule` and `AlertReceiver` kinds of
// the desired state, their validation, and the built-in rules that an AlertRule of the same name
// overrides or disables. Values only: the server evaluates them (server/alert_eval.h).
namespace meridian::domain {

// What a rule watches. Each condition gives its alert the labels that say where it holds.
enum class AlertCondition {
  kNodeLost,        // a registered node is Lost                      labels: node, cluster
  kGpuUnhealthy,    // a GPU is unhealthy as the scheduler takes it   node, cluster, gpu, UUID
  kGpuXid,          // a GPU had a critical XID within `window`       node, cluster, gpu, UUID
  kPendingJobAge,   // a project's oldest pending job waits > threshold seconds      project
  kQuotaNearLimit,  // a quota's use reaches threshold × its limit   scope, level
  kGpuIdle,         // a held GPU's utilisation is below threshold  node, gpu, UUID, job_id, project
  kJobFailureRate,  // failed / ended jobs over `window` > threshold                project
  kSchedulerErrors,  // scheduler cycles failed at least threshold times in `window`   (none)
  // Node conditions (domain/gpu_warnings.h), whose thresholds are the Policy's gpuWarnings and
  // failingNodes: a rule says only whether, how severely and after how long to alert.
  kGpuEccCorrectedRate,  // EccCorrectedRate on a GPU              node, cluster, gpu, UUID
  kGpuTemperature,       // TemperatureNearSlowdown on a GPU       node, cluster, gpu, UUID
  kGpuPowerCapped,       // PowerCapped on a GPU                   node, cluster, gpu, UUID
  kGpuNvlinkCrcErrors,   // NvlinkCrcErrors on a GPU               node, cluster, gpu, UUID
  kNodeFailingJobs,      // FailingJobs on a node                  node, cluster
  kGpuHeld,  // a GPU faulted too often and stays cordoned for an operator  node, cluster, gpu, UUID
  kJobIdle,  // an IdlePolicy found a job idle past its idleFor   job_id, project, policy, action
  // An elastic pool's provisioning failed (a refusal, a time-out, an instance that never
  // registered, an unknown provisioner) and has not come right since       pool, cluster
  kProvisioningFailed,
  // A Budget's spend reached one of its thresholds this period (docs/adr/0041-budgets.md); one
  // alert per threshold                                  budget, level, scope, threshold
  kBudgetThreshold,
};
// The node condition type an alert condition watches (nullptr: not a node condition).
const char* NodeConditionType(AlertCondition c);

// The name used in documents ("node-lost"), and back (false when unknown).
const char* AlertConditionName(AlertCondition c);
bool ParseAlertCondition(const std::string& name, AlertCondition* out);

struct AlertRule {
  std::string name;  // metadata.name; the alert's `rule` label
  AlertCondition condition = AlertCondition::kNodeLost;
  bool enabled = true;
  std::string severity = "warning";  // critical | warning | info
  double for_seconds = 0;            // how long the condition holds before the alert fires
  double threshold = 0;              // per condition (see AlertCondition); 0 when unused
  double window = 0;                 // seconds; XID, failure rate, scheduler errors
  int64_t min_jobs = 0;              // failure rate: fewer ended jobs in the window say nothing
  std::string project;               // pending age, idle GPUs, failure rate: this project only
  std::map<std::string, std::string> labels;       // added to every alert of the rule
  std::map<std::string, std::string> annotations;  // added to (and over) the generated ones

  // The alertname label: "Meridian" and the name in CamelCase ("node-lost" -> MeridianNodeLost),
  // which is what Prometheus requires of an alert's name and what the shipped rules use.
  std::string AlertName() const;
};

// The rules that hold when no AlertRule document names them, in a fixed order.
const std::vector<AlertRule>& BuiltinAlertRules();

// Reads an AlertRule document's spec (`name` is its metadata.name: a built-in's name takes that
// rule's values as its defaults, so an override writes only what it changes).
void ReadAlertRuleSpec(FieldReader& s, const std::string& name);
// The typed rule of a canonical spec (as ReadAlertRuleSpec wrote it).
AlertRule AlertRuleFromSpec(const std::string& name, const Json& spec);

// The rules in force: the built-ins, each replaced by the document of its name, then the other
// documents by name; disabled rules are left out.
std::vector<AlertRule> EffectiveAlertRules(const std::map<std::string, Json>& documents);

// Where alerts go: Alertmanager's v2 API (POST {url}/api/v2/alerts, every firing alert again
// every resendInterval) or a webhook (a JSON POST to url on every change).
struct AlertReceiver {
  enum class Type { kAlertmanager, kWebhook };
  std::string name;
  Type type = Type::kWebhook;
  std::string url;  // http[s]://host[:port][/path]
  double resend_interval = 60;
};

void ReadAlertReceiverSpec(FieldReader& s);
AlertReceiver AlertReceiverFromSpec(const std::string& name, const Json& spec);

}  // namespace meridian::domain
