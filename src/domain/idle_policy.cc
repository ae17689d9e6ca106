#include "domain/idle_policy.h"

#include <set>

#include "domain/workload.h"

namespace meridian::domain {

namespace {

constexpr double kMaxIdleDuration = 30.0 * 24 * 3600;

}  // namespace

const char* IdleActionName(IdleAction a) {
  switch (a) {
    case IdleAction::kReclaim:
      return "reclaim";
    case IdleAction::kAlert:
      return "alert";
    case IdleAction::kNone:
      return "none";
  }
  return "reclaim";
}

void ReadIdlePolicySpec(FieldReader& s) {
  const IdlePolicy d;
  s.Name("project", false);
  if (!s.Has("jobTypes")) {
    s.Error("jobTypes",
            "is required: the job types the policy covers (training, inference, interactive, "
            "batch)");
  }
  std::set<std::string> seen;
  const std::vector<std::string> types = s.StringList("jobTypes");
  for (const std::string& t : types) {
    if (!ParseJobKind(t)) {
      s.Error("jobTypes",
              "\"" + t + "\" is not a job type (training, inference, interactive, batch)");
    } else if (!seen.insert(t).second) {
      s.Error("jobTypes", "names " + t + " twice");
    }
  }
  if (s.Has("jobTypes") && types.empty()) {
    s.Error("jobTypes", "must name at least one job type");
  }
  const std::string action =
      s.Enum("action", {"reclaim", "alert", "none"}, IdleActionName(d.action));
  // What an action does not read is refused, as an AlertRule's unused parameters are: a policy
  // that says `action: none` with a threshold was meant to do something.
  auto used = [&](const char* field, bool is_used, const char* by) {
    if (!is_used && s.Has(field)) {
      s.Error(field, std::string("is not used by action ") + action + " (only by " + by + ")");
      s.Skip(field);
    }
    return is_used;
  };
  const bool acts = action != "none";
  if (used("threshold", acts, "reclaim and alert")) s.Number("threshold", 0.001, 1, d.threshold);
  if (used("idleFor", acts, "reclaim and alert"))
    s.Duration("idleFor", 1, kMaxIdleDuration, d.idle_for);
  if (used("grace", action == "reclaim", "reclaim"))
    s.Duration("grace", 0, kMaxIdleDuration, d.grace);
  if (used("dryRun", action == "reclaim", "reclaim")) s.Bool("dryRun", d.dry_run);
  if (used("exemptLabel", acts, "reclaim and alert")) {
    const std::string label = s.String("exemptLabel", false);
    if (s.Has("exemptLabel") && (label.empty() || label.size() > 63)) {
      s.Error("exemptLabel", "must be a label key of 1 to 63 characters");
    }
  }
  s.String("description", false);
}

IdlePolicy IdlePolicyFromSpec(const std::string& name, const Json& spec) {
  IdlePolicy p;
  p.name = name;
  p.project = spec.value("project", "");
  for (const Json& t : spec.value("jobTypes", Json::array())) {
    if (!t.is_string()) continue;
    if (auto kind = ParseJobKind(t.get<std::string>())) p.job_types.push_back(*kind);
  }
  const std::string action = spec.value("action", "reclaim");
  p.action = action == "alert"  ? IdleAction::kAlert
             : action == "none" ? IdleAction::kNone
                                : IdleAction::kReclaim;
  p.threshold = spec.value("threshold", p.threshold);
  p.idle_for = spec.value("idleFor", p.idle_for);
  p.grace = spec.value("grace", p.grace);
  p.dry_run = spec.value("dryRun", p.dry_run);
  p.exempt_label = spec.value("exemptLabel", "");
  return p;
}

void CheckIdlePolicies(const std::vector<Document>& docs, ErrorList* errors) {
  // (project or "", job type) -> the policy that covers it first.
  std::map<std::pair<std::string, std::string>, const Document*> covered;
  for (const Document& d : docs) {
    if (d.kind != "IdlePolicy") continue;
    const std::string project = d.spec.value("project", "");
    for (const Json& t : d.spec.value("jobTypes", Json::array())) {
      if (!t.is_string()) continue;
      auto [it, added] = covered.try_emplace({project, t.get<std::string>()}, &d);
      if (added) continue;
      // Said of the document being applied (it has a file) rather than of the live one.
      const Document& said = d.file.empty() && !it->second->file.empty() ? *it->second : d;
      const Document& other = &said == &d ? *it->second : d;
      errors->Add({said.file, said.line, 0, "spec.jobTypes",
                   t.get<std::string>() + " jobs of " +
                       (project.empty() ? std::string("every project") : "project " + project) +
                       " are covered by IdlePolicy \"" + other.name +
                       "\" already: one policy per project and job type"});
    }
  }
}

const IdlePolicy* IdlePolicyFor(const std::vector<IdlePolicy>& policies, const std::string& project,
                                JobKind type) {
  const IdlePolicy* everyone = nullptr;
  for (const IdlePolicy& p : policies) {
    bool covers = false;
    for (JobKind k : p.job_types) covers = covers || k == type;
    if (!covers) continue;
    if (p.project == project) return &p;
    if (p.project.empty() && !everyone) everyone = &p;
  }
  return everyone;
}

bool IdleExempt(const IdlePolicy& policy, const std::map<std::string, std::string>& labels) {
  if (policy.exempt_label.empty()) return false;
  auto it = labels.find(policy.exempt_label);
  return it != labels.end() && it->second == "true";
}

}  // namespace meridian::domain
