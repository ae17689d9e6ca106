// What keeps a pending job out of the scheduler until it may run: its dependencies
// (spec.dependencies) and its array's limit on elements at once (spec.array's %N). ADR 0023.
#include <optional>

#include "api/job_life.h"
#include "domain/lifecycle.h"
#include "server/controller.h"

namespace meridian::server {

using base::Status;

namespace {

// The phases of what dependencies name, read once per round: a job, or an array's elements by
// index.
class DependencyReader {
 public:
  explicit DependencyReader(store::Tx& tx) : tx_(tx) {}

  // One (kind, job) of a dependency of the job at `index` of its array (-1: not an element).
  base::Result<domain::DependencyState> State(domain::DependencyKind kind, int64_t job,
                                              int64_t index) {
    domain::DependencyState d{kind, job, {}, true};
    auto target = Target(job);
    if (!target.ok()) return target.status();
    const Target_& t = **target;
    if (!t.found) {
      d.found = false;
      return d;
    }
    if (kind == domain::DependencyKind::kAfterCorr) {
      auto e = t.elements.find(index);
      if (e == t.elements.end()) {
        d.found = false;
      } else {
        d.phases.push_back(e->second);
      }
      return d;
    }
    if (t.elements.empty()) {
      d.phases.push_back(t.phase);
    } else {
      for (const auto& [i, p] : t.elements) d.phases.push_back(p);
    }
    return d;
  }

 private:
  struct Target_ {
    bool found = false;
    domain::Phase phase = domain::Phase::kPending;
    std::map<int64_t, domain::Phase> elements;  // an array's, by index
  };

  base::Result<const Target_*> Target(int64_t id) {
    auto it = targets_.find(id);
    if (it != targets_.end()) return &it->second;
    Target_& t = targets_[id];
    auto job = tx_.GetJob(id);
    if (!job.ok() && job.status().code() != base::StatusCode::kNotFound) return job.status();
    if (!job.ok()) return &t;
    t.found = true;
    t.phase = domain::ParsePhase(job->phase).value_or(domain::Phase::kPending);
    if (job->array_id == id) {
      store::JobFilter f;
      f.array_id = id;
      f.limit = static_cast<int32_t>(domain::kMaxArrayElements);
      auto elements = tx_.ListJobs(f);
      if (!elements.ok()) return elements.status();
      for (const store::JobRecord& e : *elements) {
        t.elements[e.array_index] = domain::ParsePhase(e.phase).value_or(domain::Phase::kPending);
      }
    }
    return &t;
  }

  store::Tx& tx_;
  std::map<int64_t, Target_> targets_;
};

}  // namespace

void SchedulerController::TrackGates(const store::JobRecord& job, Known* k) {
  k->array_id = job.array_id;
  k->array_index = job.array_index;
  if (!job.spec.is_object()) return;
  // The spec was validated at submission; what does not parse now gates nothing (ToSchedulerJob
  // keeps such a job out with the decoding's reason).
  if (job.array_id > 0 && job.spec.contains("array") && job.spec["array"].is_string()) {
    auto a = domain::ParseArray(job.spec["array"].get<std::string>());
    if (a.ok()) k->max_running = a->max_running;
  }
  if (job.spec.contains("dependencies") && job.spec["dependencies"].is_array()) {
    for (const Json& text : job.spec["dependencies"]) {
      if (!text.is_string()) continue;
      auto d = domain::ParseDependency(text.get<std::string>());
      if (d.ok()) k->dependencies.push_back(std::move(d.value()));
    }
  }
}

bool SchedulerController::Gated(int64_t id) const {
  if (released_.count(id)) return false;
  auto k = known_.find(id);
  if (k == known_.end()) return false;
  return k->second.max_running > 0 || !k->second.dependencies.empty();
}

Status SchedulerController::ReleaseHeld(double now) {
  if (held_.empty()) return Status::Ok();
  // What each limited array holds or has queued: its elements known and not held.
  std::map<int64_t, int64_t> active;
  for (const auto& [id, k] : known_) {
    if (k.max_running > 0 && !held_.count(id)) ++active[k.array_id];
  }
  std::vector<int64_t> held_ids;
  for (const auto& [id, spec] : held_) {
    if (known_.count(id)) held_ids.push_back(id);
  }
  // Dependencies first, judged on the store as it is now.
  std::map<int64_t, domain::DependencyVerdict> verdicts;
  Status read = store_->Read([&](store::Tx& tx) {
    DependencyReader reader(tx);
    for (int64_t id : held_ids) {
      const Known& k = known_.at(id);
      if (k.dependencies.empty()) continue;
      std::vector<domain::DependencyState> states;
      for (const domain::Dependency& d : k.dependencies) {
        for (int64_t job : d.jobs) {
          auto st = reader.State(d.kind, job, k.array_index);
          if (!st.ok()) return st.status();
          states.push_back(std::move(st.value()));
        }
      }
      verdicts[id] = domain::lifecycle::JudgeDependencies(states);
    }
    return Status::Ok();
  });
  if (!read.ok()) return read;
  std::vector<std::pair<int64_t, std::string>> never;
  // Elements in id order are in index order: the lowest indices go first, as in Slurm.
  for (int64_t id : held_ids) {
    const Known& k = known_.at(id);
    auto v = verdicts.find(id);
    if (v != verdicts.end() && v->second.state == domain::DependencyVerdict::State::kNever) {
      never.emplace_back(id, v->second.reason);
      continue;
    }
    if (v != verdicts.end() && v->second.state == domain::DependencyVerdict::State::kWaiting) {
      reasons_.Set(id, v->second.reason);
      continue;
    }
    if (k.max_running > 0 && active[k.array_id] >= k.max_running) {
      reasons_.Set(
          id, "array " + std::to_string(k.array_id) + " has " + std::to_string(k.max_running) +
                  " elements running or queued (its limit %" + std::to_string(k.max_running) + ")");
      continue;
    }
    if (k.max_running > 0) ++active[k.array_id];
    released_.insert(id);
    sched::JobSpec spec = std::move(held_.at(id));
    held_.erase(id);
    reasons_.Erase(id);
    Queue(std::move(spec));
  }
  if (never.empty()) return Status::Ok();
  // Those whose dependencies can never be met fail, through the lifecycle, in one transaction.
  int64_t seq = 0;
  std::vector<store::JobRecord> failed;
  Status s = store_->Write([&](store::Tx& tx) {
    for (const auto& [id, why] : never) {
      auto job = tx.GetJob(id);
      if (!job.ok()) return job.status();
      auto life = api::LifeOf(*job);
      if (!life.ok()) return life.status();
      auto t = domain::lifecycle::DependencyNeverMet(*life, why, now);
      if (!t.ok()) continue;  // moved on meanwhile (cancelled)
      auto e = api::CommitTransition(tx, *t, now, &*job);
      if (!e.ok()) return e.status();
      seq = *e;
      failed.push_back(*job);
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  for (const store::JobRecord& j : failed) Follow(j, now);
  if (seq > 0) bus_->Notify(seq);
  return Status::Ok();
}

}  // namespace meridian::server
