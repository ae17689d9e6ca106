#pragma once

// Not part of the module's interface: used by the API's handlers for jobs and events.

#include <map>
#include <string>

#include "api/auth.h"
#include "store/store.h"

namespace meridian::api {

// What a caller is shown of the jobs that reasons and messages name ("preempted for job 12",
// "waits behind the reservation of job 7"): a job of a project the caller may not read is
// named "a job in another project" (one that preempted by priority, "a higher-priority job in
// another project"), so that reasons tell no one the ids, and so the existence, of other
// tenants' work. Admins see everything as it is. Used per answer, from one thread.
class JobMentions {
 public:
  JobMentions(const Access& access, store::Store* store) : access_(access), store_(store) {}

  // Rewrites, in place, every string under a "reason", "message" or "quota" key of `json` (an
  // answer about jobs or events, or a list of them), and drops status.stop.for, the id of the job a
  // preempted job stops for, when that job is hidden. One store read for the ids not seen yet.
  void Hide(Json* json);
  // The same for one text.
  std::string Hide(const std::string& text);

 private:
  void Collect(const Json& json);
  void CollectText(const std::string& text);
  void Resolve();
  void Rewrite(Json* json);
  bool Hidden(int64_t id) const;

  const Access& access_;
  store::Store* store_;
  std::map<int64_t, bool> hidden_;  // id -> hidden; unresolved ids map to false until Resolve
  std::map<int64_t, bool> pending_;
};

}  // namespace meridian::api
