#include "api/job_life.h"

#include "api/usage.h"

namespace meridian::api {

base::Result<domain::JobLife> LifeOf(const store::JobRecord& job) {
  auto life = domain::DecodeLife(job.phase, job.reason, job.generation, job.status);
  if (!life.ok()) {
    return base::Status::Invalid("job " + std::to_string(job.id) + ": " + life.status().message());
  }
  // Tasks of the current placement that nothing has reported yet.
  if (domain::HoldsResources(life->phase) && job.allocation.is_array() &&
      life->tasks.size() < job.allocation.size()) {
    life->tasks.resize(job.allocation.size());
  }
  return life;
}

base::Result<domain::JobSpec> SpecOf(const store::JobRecord& job) {
  auto spec = domain::DecodeJobSpec(job.spec);
  if (!spec.ok()) {
    return base::Status::Invalid("job " + std::to_string(job.id) + ": " + spec.status().message());
  }
  return spec;
}

std::vector<store::Event> ApplyTransition(const domain::Transition& t, double now,
                                          store::JobRecord* job) {
  job->phase = std::string(domain::PhaseName(t.life.phase));
  job->reason = t.life.reason;
  job->generation = t.life.generation;
  domain::EncodeLife(t.life, &job->status);
  // A requeued job's next run gets a new placement; an ended one shows where it ran.
  if (t.life.phase == domain::Phase::kPending) job->allocation = store::Json::array();
  job->updated_at = now;
  std::vector<store::Event> events;
  for (const domain::LifeEvent& e : t.events) {
    events.push_back({0, now, "Job", std::to_string(job->id), job->project,
                      e.warning ? "Warning" : "Normal", e.reason, e.message});
  }
  return events;
}

base::Status AccountForRun(store::Tx& tx, const domain::Transition& t, double now,
                           const store::JobRecord& job) {
  if (!t.released) return base::Status::Ok();
  const std::string outcome = t.life.phase == domain::Phase::kPending
                                  ? "Requeued"
                                  : std::string(domain::PhaseName(t.life.phase));
  for (const store::UsageRecord& u : UsageOfRun(job, now, outcome)) {
    auto appended = tx.AppendUsage(u);
    if (!appended.ok()) return appended.status();
  }
  return base::Status::Ok();
}

base::Result<int64_t> CommitTransition(store::Tx& tx, const domain::Transition& t, double now,
                                       store::JobRecord* job) {
  if (base::Status s = AccountForRun(tx, t, now, *job); !s.ok()) return s;
  const std::vector<store::Event> events = ApplyTransition(t, now, job);
  auto v = tx.UpdateJob(*job, job->version);
  if (!v.ok()) return v.status();
  job->version = *v;
  int64_t seq = 0;
  for (const store::Event& e : events) {
    auto s = tx.AppendEvent(e);
    if (!s.ok()) return s.status();
    seq = *s;
  }
  return seq;
}

}  // namespace meridian::api
