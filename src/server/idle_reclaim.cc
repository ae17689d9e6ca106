#include "server/idle_reclaim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "api/job_life.h"
#include "base/log.h"
#include "domain/workload.h"

namespace meridian::server {

using base::Status;
using State = IdleFinding::State;

namespace {

std::string Percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", std::round(ratio * 1000) / 10);
  return buf;
}

std::string Duration(double seconds) {
  char buf[48];
  if (seconds < 120) {
    std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  } else if (seconds < 7200) {
    std::snprintf(buf, sizeof buf, "%.0f min", seconds / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  }
  return buf;
}

std::string Figure(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// "GPUs under 5% use for 30 min (IdlePolicy interactive-idle)": what every line says of why.
std::string Why(const IdleFinding& f, double now) {
  return std::string("its GPUs have been under ") + Percent(f.policy.threshold) + " use for " +
         Duration(now - f.idle_since) + " (IdlePolicy " + f.policy.name + ")";
}

std::string TypeName(domain::JobKind k) { return domain::JobKindName(k); }

}  // namespace

const char* IdleStateName(State s) {
  switch (s) {
    case State::kIdle:
      return "idle";
    case State::kNoticed:
      return "noticed";
    case State::kDryRun:
      return "dry-run";
    case State::kAlerting:
      return "alerting";
    case State::kReclaimed:
      return "reclaimed";
  }
  return "idle";
}

Json IdleFinding::ToJson() const {
  Json j = {{"job", job.job},
            {"name", job.name},
            {"project", job.project},
            {"type", TypeName(job.type)},
            {"policy", policy.name},
            {"action", domain::IdleActionName(policy.action)},
            {"state", IdleStateName(state)},
            {"dryRun", policy.dry_run},
            {"idleSince", idle_since},
            {"gpus", job.gpus}};
  j["utilization"] = job.utilization ? Json(*job.utilization) : Json();
  j["noticedAt"] = noticed_at > 0 ? Json(noticed_at) : Json();
  j["stopAt"] = stop_at > 0 ? Json(stop_at) : Json();
  return j;
}

IdleTracker::Step IdleTracker::Evaluate(const std::vector<domain::IdlePolicy>& policies,
                                        const std::vector<IdleObservation>& jobs, double now) {
  Step step;
  std::map<int64_t, IdleFinding> next;
  for (const IdleObservation& o : jobs) {
    auto before = tracked_.find(o.job);
    const bool was_noticed = before != tracked_.end() && before->second.state == State::kNoticed;
    const domain::IdlePolicy* p = domain::IdlePolicyFor(policies, o.project, o.type);
    const bool watched =
        p && p->action != domain::IdleAction::kNone && !domain::IdleExempt(*p, o.labels);
    // Unknown utilisation is not idleness: the job is judged again from scratch once every GPU
    // it holds reports.
    const bool idle = watched && o.utilization && *o.utilization < p->threshold;
    if (!idle) {
      if (was_noticed) step.withdrawn.push_back(before->second);
      continue;
    }
    IdleFinding f;
    if (before != tracked_.end()) {
      f = before->second;
    } else {
      f.idle_since = now;
    }
    f.job = o;
    f.policy = *p;
    const bool due = now - f.idle_since >= p->idle_for;
    if (f.state == State::kReclaimed) {
      // Its stop is on its way; it leaves the running jobs with it.
    } else if (!due) {
      // A policy whose idleFor grew since: back to watching.
      if (was_noticed) step.withdrawn.push_back(f);
      f.state = State::kIdle;
      f.noticed_at = f.stop_at = 0;
    } else if (p->action == domain::IdleAction::kAlert) {
      if (was_noticed) step.withdrawn.push_back(f);
      f.state = State::kAlerting;
      f.noticed_at = f.stop_at = 0;
    } else if (p->dry_run) {
      // What would have happened: the notice once idleFor was reached, the stop a grace later.
      if (was_noticed) step.withdrawn.push_back(f);
      f.state = State::kDryRun;
      f.noticed_at = f.idle_since + p->idle_for;
      f.stop_at = f.noticed_at + p->grace;
    } else if (f.state != State::kNoticed) {
      // A dry run turned off, or a job just due: it gets its whole grace from now.
      f.state = State::kNoticed;
      f.noticed_at = now;
      f.stop_at = now + p->grace;
      step.notices.push_back(f);
    } else if (now >= f.stop_at) {
      f.state = State::kReclaimed;
      step.stops.push_back(f);
    }
    next.emplace(o.job, std::move(f));
  }
  tracked_ = std::move(next);
  return step;
}

void IdleTracker::StopFailed(int64_t job) {
  auto it = tracked_.find(job);
  if (it != tracked_.end() && it->second.state == State::kReclaimed) {
    it->second.state = State::kNoticed;
  }
}

std::vector<IdleFinding> IdleTracker::Findings() const {
  std::vector<IdleFinding> out;
  for (const auto& [id, f] : tracked_) out.push_back(f);
  return out;
}

std::vector<AlertInputs::IdleJob> IdleAlertJobs(const std::vector<IdleFinding>& findings) {
  std::vector<AlertInputs::IdleJob> out;
  for (const IdleFinding& f : findings) {
    std::string action;
    std::string summary = "Job " + std::to_string(f.job.job) + " (" + f.job.name + ") of project " +
                          f.job.project + " holds " + Figure(f.job.gpus, 2) + " GPU(s) under " +
                          Percent(f.policy.threshold) + " use (IdlePolicy " + f.policy.name + ")";
    switch (f.state) {
      case State::kNoticed:
      case State::kReclaimed:
        action = "reclaim";
        summary += ": it is stopped when its grace ends";
        break;
      case State::kDryRun:
        action = "dry-run";
        summary += ": a dry run; the policy would reclaim it";
        break;
      case State::kAlerting:
        action = "alert";
        break;
      case State::kIdle:
        continue;  // not idle for long enough yet
    }
    out.push_back({f.job.job, f.job.project, f.policy.name, action, f.job.utilization.value_or(0),
                   std::move(summary)});
  }
  return out;
}

IdleReclaimer::IdleReclaimer(store::Store* store, const base::Clock* clock, api::EventBus* bus,
                             NodeService* nodes, IdleReclaimerOptions options)
    : store_(store), clock_(clock), bus_(bus), nodes_(nodes), options_(options) {}

IdleReclaimer::~IdleReclaimer() { Stop(); }

void IdleReclaimer::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void IdleReclaimer::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void IdleReclaimer::Loop() {
  std::string last;
  for (;;) {
    Status s = RunOnce();
    if (!s.ok() && s.message() != last) {
      base::log::Error("idle reclamation: {}", s.message());
    }
    last = s.ok() ? "" : s.message();
    std::unique_lock<std::mutex> lock(wake_mu_);
    if (wake_cv_.wait_for(lock, std::chrono::duration<double>(options_.interval),
                          [this] { return stopping_; })) {
      return;
    }
  }
}

Status IdleReclaimer::Gather(std::vector<domain::IdlePolicy>* policies,
                             std::vector<IdleObservation>* jobs) {
  std::vector<store::Object> docs;
  std::vector<store::JobRecord> running;
  Status read = store_->Read([&](store::Tx& tx) {
    auto p = tx.ListObjects("IdlePolicy");
    if (!p.ok()) return p.status();
    docs = std::move(p.value());
    // Without a policy nothing is watched: the running jobs need not be read.
    if (docs.empty()) return Status::Ok();
    store::JobFilter f;
    f.phases = {"Running"};
    f.limit = 1000;
    for (;;) {
      auto page = tx.ListJobs(f);
      if (!page.ok()) return page.status();
      for (store::JobRecord& j : *page) running.push_back(std::move(j));
      if (page->size() < static_cast<size_t>(f.limit)) return Status::Ok();
      f.after_id = running.back().id;
    }
  });
  if (!read.ok()) return read;
  for (const store::Object& o : docs)
    policies->push_back(domain::IdlePolicyFromSpec(o.name, o.spec));
  if (policies->empty()) return Status::Ok();  // nothing to watch: no need for the samples

  const std::map<std::string, NodeService::NodeReport> reports = nodes_->Reports();
  for (const store::JobRecord& r : running) {
    auto spec = api::SpecOf(r);
    if (!spec.ok()) continue;  // a damaged row: left alone
    IdleObservation o;
    o.job = r.id;
    o.name = r.name;
    o.project = r.project;
    o.type = spec->type;
    o.labels = spec->labels;
    double busiest = 0;
    bool known = true;
    int64_t devices = 0;
    for (const Json& task : r.allocation) {
      if (!task.is_object()) continue;
      auto report = reports.find(task.value("node", ""));
      for (const Json& d : task.value("devices", Json::array())) {
        if (!d.is_object()) continue;
        ++devices;
        o.gpus += static_cast<double>(d.value("milli", 1000)) / 1000.0;
        const int64_t gpu = d.value("gpu", int64_t{-1});
        std::optional<double> u;
        if (report != reports.end() && report->second.state != "Lost") {
          for (const protocol::GpuSample& s : report->second.gpus) {
            if (s.index == gpu) u = s.utilization;
          }
        }
        if (!u) known = false;
        busiest = std::max(busiest, u.value_or(0));
      }
    }
    if (devices == 0) continue;  // CPU only: no GPU to reclaim
    // Its GPUs wait while its datasets are copied to the site (docs/adr/0044): not idle, and
    // judged afresh once its task runs.
    if (known && !nodes_->Staging(r.id, r.generation)) o.utilization = busiest;
    jobs->push_back(std::move(o));
  }
  return Status::Ok();
}

Status IdleReclaimer::Notice(const IdleFinding& f, bool withdraw, double now, int64_t* seq) {
  const std::string id = std::to_string(f.job.job);
  std::string message;
  if (withdraw) {
    message =
        "idle notice withdrawn: its GPUs are in use again (or the job is exempt, or the "
        "IdlePolicy " +
        f.policy.name + " changed)";
  } else {
    message = "idle: " + Why(f, now) + "; it will be stopped in " + Duration(f.policy.grace) +
              " unless its GPUs are used" +
              (f.policy.exempt_label.empty()
                   ? std::string()
                   : " (spec.labels " + f.policy.exempt_label + ": \"true\" exempts a job)");
  }
  return store_->Write([&](store::Tx& tx) {
    auto e = tx.AppendEvent({0, now, "Job", id, f.job.project, withdraw ? "Normal" : "Warning",
                             withdraw ? "IdleNoticeWithdrawn" : "IdleNotice", message});
    if (!e.ok()) return e.status();
    *seq = std::max(*seq, *e);
    return Status::Ok();
  });
}

Status IdleReclaimer::Reclaim(const IdleFinding& f, double now, int64_t* seq) {
  // The idle GPU-time the job held up to its stop: what the stop ends.
  const double gpu_hours = f.job.gpus * (now - f.idle_since) / 3600.0;
  const std::string reason = "reclaimed: " + Why(f, now) + "; " + Figure(f.job.gpus, 2) +
                             " GPU(s) given back after " +
                             Figure(gpu_hours, gpu_hours < 0.1 ? 4 : 2) + " idle GPU-hours";
  bool stopped = false;
  Status s = store_->Write([&](store::Tx& tx) {
    stopped = false;
    auto job = tx.GetJob(f.job.job);
    if (!job.ok()) return job.status();
    auto life = api::LifeOf(*job);
    if (!life.ok()) return life.status();
    if (life->phase != domain::Phase::kRunning) return Status::Ok();  // moved on meanwhile
    auto spec = api::SpecOf(*job);
    const double grace = spec.ok() ? spec->grace_period : domain::JobSpec{}.grace_period;
    // The path a cancel takes: Stopping with intent cancel and the job's grace period (its
    // tasks get their notice, then SIGTERM and SIGKILL), its GPUs taken until its tasks stop.
    auto t = domain::lifecycle::RequestStop(
        *life, {domain::StopIntent::kCancel, reason, "Reclaimed", now + grace, 0}, now);
    if (!t.ok()) return t.status();
    if (t->events.empty()) return Status::Ok();
    auto e = api::CommitTransition(tx, *t, now, &*job);
    if (!e.ok()) return e.status();
    *seq = std::max(*seq, *e);
    stopped = true;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (stopped) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::pair<std::string, std::string> key{f.job.project, TypeName(f.job.type)};
    reclaimed_jobs_[key] += 1;
    reclaimed_gpu_hours_[key] += gpu_hours;
    base::log::Info(
        base::log::Fields{{"job", std::to_string(f.job.job)}, {"project", f.job.project}},
        "idle reclamation: job {} of {} stopped ({})", f.job.job, f.job.project, reason);
  }
  return Status::Ok();
}

Status IdleReclaimer::RunOnce() {
  std::vector<domain::IdlePolicy> policies;
  std::vector<IdleObservation> jobs;
  if (Status s = Gather(&policies, &jobs); !s.ok()) return s;
  const double now = clock_->Now();
  IdleTracker::Step step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step = tracker_.Evaluate(policies, jobs, now);
  }
  int64_t seq = 0;
  Status result = Status::Ok();
  for (const IdleFinding& f : step.withdrawn) {
    if (Status s = Notice(f, true, now, &seq); !s.ok()) result = s;
  }
  for (const IdleFinding& f : step.notices) {
    if (Status s = Notice(f, false, now, &seq); !s.ok()) {
      result = s;
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    notices_[{f.job.project, TypeName(f.job.type)}] += 1;
  }
  for (const IdleFinding& f : step.stops) {
    if (Status s = Reclaim(f, now, &seq); !s.ok()) {
      result = s;
      std::lock_guard<std::mutex> lock(mu_);
      tracker_.StopFailed(f.job.job);
    }
  }
  if (seq > 0) {
    bus_->Notify(seq);
    if (wake_) wake_();
  }
  return result;
}

Json IdleReclaimer::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  for (const IdleFinding& f : tracker_.Findings()) out.push_back(f.ToJson());
  return out;
}

std::vector<AlertInputs::IdleJob> IdleReclaimer::AlertJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  return IdleAlertJobs(tracker_.Findings());
}

void IdleReclaimer::Render(api::Metrics* out) {
  out->Describe("meridian_idle_reclaimed_jobs_total", "counter",
                "Jobs an IdlePolicy stopped for holding idle GPUs, by project and job type.");
  out->Describe("meridian_idle_reclaimed_gpu_hours_total", "counter",
                "Idle GPU-hours the reclaimed jobs held, from when each was first seen idle to "
                "its stop: the idle holding that reclamation ended, by project and job type.");
  out->Describe("meridian_idle_notices_total", "counter",
                "Idle notices given (a stop follows after the grace unless the GPUs are used "
                "again), by project and job type.");
  out->Describe("meridian_idle_jobs", "gauge",
                "Running jobs an IdlePolicy finds idle now, by project, job type and state "
                "(idle, noticed, dry-run, alerting, reclaimed).");
  std::lock_guard<std::mutex> lock(mu_);
  auto counters = [&](const char* name, const auto& m) {
    for (const auto& [key, v] : m)
      out->Set(name, {{"project", key.first}, {"type", key.second}}, v);
  };
  counters("meridian_idle_reclaimed_jobs_total", reclaimed_jobs_);
  counters("meridian_idle_reclaimed_gpu_hours_total", reclaimed_gpu_hours_);
  counters("meridian_idle_notices_total", notices_);
  std::map<std::tuple<std::string, std::string, std::string>, double> now;
  for (const IdleFinding& f : tracker_.Findings()) {
    now[{f.job.project, TypeName(f.job.type), IdleStateName(f.state)}] += 1;
  }
  for (const auto& [key, v] : now) {
    out->Set(
        "meridian_idle_jobs",
        {{"project", std::get<0>(key)}, {"type", std::get<1>(key)}, {"state", std::get<2>(key)}},
        v);
  }
}

}  // namespace meridian::server
