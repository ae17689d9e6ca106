#pragma once

#include <map>
#include <string>
#include <vector>

#include "domain/documents.h"
#include "domain/job.h"
#include "domain/spec.h"

// Idle-GPU reclamation as code (docs/adr/0019-idle-reclamation.md): the `IdlePolicy` kind of the
// desired state says, per project and job type, when a running job's GPUs count as idle and what
// is done about it: a notice and, after a grace, a stop through the lifecycle; an alert; or
// nothing. Values only: the server's reclaimer applies them (server/idle_reclaim.h).
namespace meridian::domain {

enum class IdleAction {
  kReclaim,  // a notice once idle for idleFor, then a stop (the job is cancelled) after grace
  kAlert,    // an alert once idle for idleFor; the job runs on
  kNone,     // never touched (e.g. inference serving, which may idle between requests)
};
const char* IdleActionName(IdleAction a);  // "reclaim", "alert", "none"

struct IdlePolicy {
  std::string name;                // metadata.name
  std::string project;             // empty: every project without a policy of its own
  std::vector<JobKind> job_types;  // the job types it covers; at least one
  IdleAction action = IdleAction::kReclaim;
  double threshold = 0.05;  // a GPU under this utilisation (0..1) is idle
  double idle_for = 1800;   // seconds every GPU of the job must stay idle before the action
  double grace = 600;       // reclaim: seconds from the notice to the stop
  bool dry_run = false;     // reclaim: list what would be reclaimed; notice and stop nothing
  // A job whose spec.labels has this key set to "true" is left alone; empty: no exemption.
  std::string exempt_label;

  bool operator==(const IdlePolicy&) const = default;
};

// Reads an IdlePolicy document's spec (FieldReader's errors name field and line).
void ReadIdlePolicySpec(FieldReader& s);
// The typed policy of a canonical spec (as ReadIdlePolicySpec wrote it).
IdlePolicy IdlePolicyFromSpec(const std::string& name, const Json& spec);

// The desired state's rule between policies: one (project, job type) is covered by at most one
// policy of that project and one for every project. Errors name the later document's jobTypes.
void CheckIdlePolicies(const std::vector<Document>& docs, ErrorList* errors);

// The policy that applies to a job of `project` and `type`: the project's own before one for
// every project; nullptr when none covers it.
const IdlePolicy* IdlePolicyFor(const std::vector<IdlePolicy>& policies, const std::string& project,
                                JobKind type);

// Whether a job with `labels` is exempt from `policy` (its exempt label set to "true").
bool IdleExempt(const IdlePolicy& policy, const std::map<std::string, std::string>& labels);

}  // namespace meridian::domain
