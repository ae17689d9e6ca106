#include "domain/alert_rules.h"

#include <array>
#include <cctype>

#include "domain/gpu_warnings.h"

namespace meridian::domain {

namespace {

constexpr double kMaxDuration = 30.0 * 24 * 3600;

struct ConditionInfo {
  AlertCondition condition;
  const char* name;
  // Which of the parameters the condition reads; a document that sets another is refused.
  bool threshold, window, min_jobs, project;
  double threshold_min, threshold_max;
  const char* threshold_unit;  // for the error message
};

constexpr std::array<ConditionInfo, 17> kConditions = {{
    {AlertCondition::kNodeLost, "node-lost", false, false, false, false, 0, 0, ""},
    {AlertCondition::kGpuUnhealthy, "gpu-unhealthy", false, false, false, false, 0, 0, ""},
    {AlertCondition::kGpuXid, "gpu-xid", false, true, false, false, 0, 0, ""},
    {AlertCondition::kPendingJobAge, "pending-job-age", true, false, false, true, 1, kMaxDuration,
     "seconds"},
    {AlertCondition::kQuotaNearLimit, "quota-near-limit", true, false, false, false, 0.01, 1,
     "a fraction of the limit"},
    {AlertCondition::kGpuIdle, "gpu-idle", true, false, false, true, 0.001, 1,
     "a utilisation ratio"},
    {AlertCondition::kJobFailureRate, "job-failure-rate", true, true, true, true, 0.001, 1,
     "a ratio of failed to ended jobs"},
    {AlertCondition::kSchedulerErrors, "scheduler-errors", true, true, false, false, 1, 1e6,
     "failed cycles"},
    {AlertCondition::kGpuEccCorrectedRate, "gpu-ecc-corrected-rate", false, false, false, false, 0,
     0, ""},
    {AlertCondition::kGpuTemperature, "gpu-temperature-near-slowdown", false, false, false, false,
     0, 0, ""},
    {AlertCondition::kGpuPowerCapped, "gpu-power-capped", false, false, false, false, 0, 0, ""},
    {AlertCondition::kGpuNvlinkCrcErrors, "gpu-nvlink-crc-errors", false, false, false, false, 0, 0,
     ""},
    {AlertCondition::kNodeFailingJobs, "node-failing-jobs", false, false, false, false, 0, 0, ""},
    {AlertCondition::kGpuHeld, "gpu-held", false, false, false, false, 0, 0, ""},
    {AlertCondition::kJobIdle, "job-idle", false, false, false, true, 0, 0, ""},
    {AlertCondition::kProvisioningFailed, "provisioning-failed", false, false, false, false, 0, 0,
     ""},
    {AlertCondition::kBudgetThreshold, "budget-threshold", false, false, false, false, 0, 0, ""},
}};

const ConditionInfo& Info(AlertCondition c) {
  for (const ConditionInfo& i : kConditions) {
    if (i.condition == c) return i;
  }
  return kConditions[0];
}

AlertRule Rule(const char* name, AlertCondition c, const char* severity, double for_seconds,
               double threshold = 0, double window = 0, int64_t min_jobs = 0) {
  AlertRule r;
  r.name = name;
  r.condition = c;
  r.severity = severity;
  r.for_seconds = for_seconds;
  r.threshold = threshold;
  r.window = window;
  r.min_jobs = min_jobs;
  return r;
}

const AlertRule* Builtin(const std::string& name) {
  for (const AlertRule& r : BuiltinAlertRules()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

}  // namespace

const char* AlertConditionName(AlertCondition c) { return Info(c).name; }

const char* NodeConditionType(AlertCondition c) {
  switch (c) {
    case AlertCondition::kGpuEccCorrectedRate:
      return kEccCorrectedRate;
    case AlertCondition::kGpuTemperature:
      return kTemperatureNearSlowdown;
    case AlertCondition::kGpuPowerCapped:
      return kPowerCapped;
    case AlertCondition::kGpuNvlinkCrcErrors:
      return kNvlinkCrcErrors;
    case AlertCondition::kNodeFailingJobs:
      return kFailingJobs;
    default:
      return nullptr;
  }
}

bool ParseAlertCondition(const std::string& name, AlertCondition* out) {
  for (const ConditionInfo& i : kConditions) {
    if (name == i.name) {
      *out = i.condition;
      return true;
    }
  }
  return false;
}

std::string AlertRule::AlertName() const {
  std::string out = "Meridian";
  bool upper = true;
  for (char c : name) {
    if (c == '-') {
      upper = true;
      continue;
    }
    out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    upper = false;
  }
  return out;
}

const std::vector<AlertRule>& BuiltinAlertRules() {
  // Thresholds a site is expected to tune; each is the value the user guide explains.
  static const std::vector<AlertRule> kRules = {
      // The node was silent for the policy's nodeLostTimeout already: no further wait.
      Rule("node-lost", AlertCondition::kNodeLost, "critical", 0),
      Rule("gpu-unhealthy", AlertCondition::kGpuUnhealthy, "critical", 0),
      Rule("gpu-xid", AlertCondition::kGpuXid, "warning", 0, 0, 600),
      Rule("pending-job-too-old", AlertCondition::kPendingJobAge, "warning", 0, 3600),
      Rule("quota-near-limit", AlertCondition::kQuotaNearLimit, "warning", 300, 0.9),
      Rule("gpu-held-idle", AlertCondition::kGpuIdle, "warning", 1800, 0.05),
      Rule("job-failure-rate", AlertCondition::kJobFailureRate, "warning", 0, 0.5, 3600, 5),
      Rule("scheduler-errors", AlertCondition::kSchedulerErrors, "critical", 0, 1, 300),
      // Warnings before failures: the thresholds are the Policy's (gpuWarnings); a temperature
      // or a power cap must last before it says more than a busy GPU's ordinary peak.
      Rule("gpu-ecc-corrected-rate", AlertCondition::kGpuEccCorrectedRate, "warning", 0),
      Rule("gpu-temperature-near-slowdown", AlertCondition::kGpuTemperature, "warning", 120),
      Rule("gpu-power-capped", AlertCondition::kGpuPowerCapped, "warning", 600),
      Rule("gpu-nvlink-crc-errors", AlertCondition::kGpuNvlinkCrcErrors, "warning", 0),
      Rule("node-failing-jobs", AlertCondition::kNodeFailingJobs, "warning", 0),
      // A GPU that faulted maxFaults times in the Policy's faultWindow waits for an operator:
      // gpu-unhealthy fires for every cordon, which remediation usually ends by itself; this
      // one says that nothing will (docs/adr/0015-gpu-health.md).
      Rule("gpu-held", AlertCondition::kGpuHeld, "critical", 0),
      // The IdlePolicy's own idleFor is the wait: the alert fires as the reclaimer acts.
      Rule("job-idle", AlertCondition::kJobIdle, "warning", 0),
      // Jobs that wait for cloud capacity wait on: the pool is backed off, and the next pool
      // serves if there is one (docs/adr/0039-elastic-pools.md).
      Rule("provisioning-failed", AlertCondition::kProvisioningFailed, "warning", 0),
      // The Budget's own thresholds say when: each fires once it is reached, and holds until
      // the period ends (docs/adr/0041-budgets.md).
      Rule("budget-threshold", AlertCondition::kBudgetThreshold, "warning", 0),
  };
  return kRules;
}

void ReadAlertRuleSpec(FieldReader& s, const std::string& name) {
  const AlertRule* builtin = Builtin(name);
  AlertRule base = builtin ? *builtin : AlertRule{};
  AlertCondition condition = base.condition;
  if (!builtin && !s.Has("condition")) {
    s.Error("condition",
            "is required (node-lost, gpu-unhealthy, gpu-xid, pending-job-age, quota-near-limit, "
            "gpu-idle, job-failure-rate, scheduler-errors, gpu-ecc-corrected-rate, "
            "gpu-temperature-near-slowdown, gpu-power-capped, gpu-nvlink-crc-errors, "
            "node-failing-jobs, gpu-held, job-idle, provisioning-failed, budget-threshold); only a "
            "built-in rule's "
            "name may leave it out");
  }
  const std::string given = s.String("condition", false, AlertConditionName(base.condition));
  if (s.Has("condition") && !ParseAlertCondition(given, &condition)) {
    s.Error("condition", "unknown condition \"" + given + "\"");
  }
  if (builtin && condition != builtin->condition) {
    s.Error("condition", "the built-in rule " + name + " watches " +
                             AlertConditionName(builtin->condition) +
                             "; give a rule of another condition a name of its own");
  }
  const ConditionInfo& info = Info(condition);
  s.Bool("enabled", true);
  s.Enum("severity", {"critical", "warning", "info"}, base.severity);
  s.Duration("for", 0, kMaxDuration, base.for_seconds);
  auto unused = [&](const char* field, bool used) {
    if (!used && s.Has(field)) {
      s.Error(field, std::string("is not used by condition ") + info.name);
      s.Skip(field);
    }
    return used;
  };
  if (unused("threshold", info.threshold)) {
    const double fallback = builtin ? base.threshold : info.threshold_min;
    if (!builtin && !s.Has("threshold")) {
      s.Error("threshold", std::string("is required by condition ") + info.name + " (" +
                               info.threshold_unit + ")");
    }
    s.Number("threshold", info.threshold_min, info.threshold_max, fallback);
  }
  if (unused("window", info.window)) {
    s.Duration("window", 1, kMaxDuration, builtin ? base.window : 600);
  }
  if (unused("minJobs", info.min_jobs)) {
    s.Int("minJobs", 1, 1000000, builtin ? base.min_jobs : 5);
  }
  if (unused("project", info.project)) s.Name("project", false);
  // Labels that the alert's identity is made of may not be overwritten.
  const auto labels = s.StringMap("labels");
  for (const char* reserved : {"alertname", "rule", "severity"}) {
    if (labels.count(reserved)) {
      s.Error("labels", std::string("\"") + reserved + "\" is set by the rule itself");
    }
  }
  s.StringMap("annotations");
  s.String("description", false);
}

AlertRule AlertRuleFromSpec(const std::string& name, const Json& spec) {
  const AlertRule* builtin = Builtin(name);
  AlertRule r = builtin ? *builtin : AlertRule{};
  r.name = name;
  ParseAlertCondition(spec.value("condition", ""), &r.condition);
  r.enabled = spec.value("enabled", true);
  r.severity = spec.value("severity", r.severity);
  r.for_seconds = spec.value("for", r.for_seconds);
  r.threshold = spec.value("threshold", r.threshold);
  r.window = spec.value("window", r.window);
  r.min_jobs = spec.value("minJobs", r.min_jobs);
  r.project = spec.value("project", "");
  auto map = [&](const char* key, std::map<std::string, std::string>* out) {
    if (!spec.contains(key) || !spec.at(key).is_object()) return;
    for (const auto& [k, v] : spec.at(key).items()) {
      if (v.is_string()) (*out)[k] = v.get<std::string>();
    }
  };
  map("labels", &r.labels);
  map("annotations", &r.annotations);
  return r;
}

std::vector<AlertRule> EffectiveAlertRules(const std::map<std::string, Json>& documents) {
  std::vector<AlertRule> out;
  for (const AlertRule& b : BuiltinAlertRules()) {
    auto doc = documents.find(b.name);
    AlertRule r = doc == documents.end() ? b : AlertRuleFromSpec(b.name, doc->second);
    if (r.enabled) out.push_back(std::move(r));
  }
  for (const auto& [name, spec] : documents) {
    if (Builtin(name)) continue;
    AlertRule r = AlertRuleFromSpec(name, spec);
    if (r.enabled) out.push_back(std::move(r));
  }
  return out;
}

void ReadAlertReceiverSpec(FieldReader& s) {
  const std::string type = s.Enum("type", {"alertmanager", "webhook"}, "webhook");
  if (!s.Has("type")) s.Error("type", "is required (alertmanager or webhook)");
  const std::string url = s.String("url", true);
  if (s.Has("url") && url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
    s.Error("url", "must start with http:// or https://");
  }
  if (s.Has("resendInterval") && type != "alertmanager") {
    s.Error("resendInterval", "is used by alertmanager receivers only");
    s.Skip("resendInterval");
  }
  if (type == "alertmanager") s.Duration("resendInterval", 1, 3600, 60);
  s.String("description", false);
}

AlertReceiver AlertReceiverFromSpec(const std::string& name, const Json& spec) {
  AlertReceiver r;
  r.name = name;
  r.type = spec.value("type", "") == "alertmanager" ? AlertReceiver::Type::kAlertmanager
                                                    : AlertReceiver::Type::kWebhook;
  r.url = spec.value("url", "");
  r.resend_interval = spec.value("resendInterval", 60.0);
  return r;
}

}  // namespace meridian::domain
