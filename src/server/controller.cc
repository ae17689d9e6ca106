#include "server/controller.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "api/job_life.h"
#include "sched/assembly.h"

namespace meridian::server {

using base::Status;

namespace {

constexpr int32_t kPage = 1000;

// Whether a re-registered node offers what it did (a lost node's agent back), so that only its
// schedulability moves.
bool SameCapacity(const domain::Node& a, const domain::Node& b) {
  if (a.cluster != b.cluster || a.pool != b.pool || a.rack != b.rack ||
      a.cpu_milli != b.cpu_milli || a.memory_mib != b.memory_mib || a.labels != b.labels ||
      a.gpus.size() != b.gpus.size()) {
    return false;
  }
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    const domain::GpuDevice& x = a.gpus[i];
    const domain::GpuDevice& y = b.gpus[i];
    if (x.uuid != y.uuid || x.model != y.model || x.nvlink_domain != y.nvlink_domain ||
        x.healthy != y.healthy || x.mig_enabled != y.mig_enabled) {
      return false;
    }
  }
  return true;
}

bool Active(const std::string& phase) {
  return phase == "Pending" || phase == "Placed" || phase == "Running" || phase == "Stopping";
}

}  // namespace

SchedulerController::SchedulerController(store::Store* store, const base::Clock* clock,
                                         api::EventBus* bus, api::Metrics* metrics,
                                         NodeService* nodes)
    : store_(store), clock_(clock), bus_(bus), metrics_(metrics), nodes_(nodes), backend_(nodes) {
  metrics_->Describe("meridian_scheduler_cycle_duration_seconds", "histogram",
                     "Time of one scheduling round: catching up, the cycle, the commit.");
  metrics_->Describe("meridian_queue_depth", "gauge", "Pending jobs by project.");
  metrics_->Describe("meridian_queue_oldest_pending_seconds", "gauge",
                     "How long the oldest pending job of each project has waited.");
  metrics_->Describe("meridian_gpus_allocated", "gauge",
                     "GPUs allocated (fractions and MIG slices counted in parts) by cluster and "
                     "model.");
  metrics_->Describe("meridian_gpus_free", "gauge",
                     "GPUs free to schedule by cluster and model: none on lost or cordoned "
                     "nodes, none unhealthy.");
  metrics_->Describe("meridian_quota_used_gpus", "gauge",
                     "GPUs used by each node of the tenancy tree (organization, team, project).");
  metrics_->Describe("meridian_quota_guaranteed_gpus", "gauge",
                     "GPUs guaranteed to each node of the tenancy tree, for all models.");
  metrics_->Describe("meridian_jobs", "gauge", "Active jobs by phase.");
  metrics_->Describe("meridian_scheduler_rebuilds_total", "counter",
                     "Times the scheduler was built from the store: at start, and after changes "
                     "it cannot follow in place (configuration, a changed node).");
}

SchedulerController::~SchedulerController() { Stop(); }

void SchedulerController::Start() {
  // The history kept before a restart: the charts carry on where they were.
  auto kept = store::ReadValue(
      *store_, [&](store::Tx& tx) { return tx.ListSamples(clock_->Now() - history_retention_); });
  if (kept.ok()) {
    std::lock_guard<std::mutex> lock(history_mu_);
    for (const auto& [at, json] : *kept) history_.push_back(api::HistorySampleFromJson(at, json));
    while (history_.size() > history_capacity_) history_.pop_front();
  } else {
    std::fprintf(stderr, "meridian: history: %s\n", kept.status().message().c_str());
  }
  thread_ = std::thread([this] { Loop(); });
}

void SchedulerController::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SchedulerController::Wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_all();
}

void SchedulerController::Loop() {
  std::string last_error;
  for (;;) {
    Status s = RunOnce();
    if (!s.ok() && s.message() != last_error) {
      std::fprintf(stderr, "meridian: scheduler: %s\n", s.message().c_str());
    }
    const double now = clock_->Now();
    if (now - last_sample_ >= history_interval_) {
      Sample(now);
      last_sample_ = now;
    }
    last_error = s.ok() ? "" : s.message();
    double interval = 1.0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (estate_) interval = estate_->cycle_interval;
    }
    // Wake for the next sample too, when it comes before the next cycle.
    interval = std::max(0.01, std::min(interval, last_sample_ + history_interval_ - now));
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_cv_.wait_for(lock, std::chrono::duration<double>(interval),
                      [&] { return stopping_ || woken_; });
    if (stopping_) return;
    woken_ = false;
  }
}

void SchedulerController::Track(const store::JobRecord& job) {
  known_[job.id] = {job.project, job.version,      job.generation, job.phase,
                    job.reason,  job.submitted_at, job.allocation, job.status};
}

bool SchedulerController::FollowNode(const std::string& reason, const store::Object& node) {
  int32_t index = -1;
  for (size_t i = 0; i < estate_->nodes.size() && index < 0; ++i) {
    if (estate_->nodes[i].name == node.name) index = static_cast<int32_t>(i);
  }
  domain::Node again = NodeOfObject(node);
  ApplyPoolTraits(*estate_, &again);
  const bool back = reason == "Reregistered" && index >= 0 &&
                    SameCapacity(again, estate_->nodes[static_cast<size_t>(index)]);
  const bool operated =
      reason == "NodeCordoned" || reason == "NodeUncordoned" || reason == "NodeDraining";
  if (reason == "NodeLost" || reason == "NodeReady" || back || operated) {
    if (index < 0) return false;
    // Its jobs were requeued, failed or asked to stop in the same write; their events move the
    // scheduler. Ready and not cordoned (NodeOfObject) is schedulable.
    // The scheduler's snapshot is the one owner of it; the estate's copies keep what was built.
    const bool ready = again.schedulable;
    scheduler_->SetSchedulable(index, ready);
    if (ready) RetryRefused();
    return true;
  }
  if (reason != "Registered" || index >= 0) return false;  // a changed node: rebuild
  domain::Node n = NodeOfObject(node);
  ApplyPoolTraits(*estate_, &n);
  auto added = scheduler_->AddNode(n);
  if (!added.ok()) return false;  // a model or cluster the snapshot lacks: rebuild
  // The estate's copy of the snapshot names nodes for allocations; it grows alike.
  auto mirrored = estate_->snapshot.AddNode(n);
  if (!mirrored.ok() || *mirrored != *added) return false;
  estate_->nodes.push_back(n);
  estate_->agent_address[n.name] = node.spec.value("address", "");
  RetryRefused();
  return true;
}

void SchedulerController::Queue(sched::JobSpec spec) {
  const int64_t id = spec.id;
  Status queued = scheduler_->Submit(spec);
  if (queued.ok()) {
    refused_.erase(id);
    reasons_.erase(id);
    return;
  }
  reasons_[id] = queued.message();
  // Nothing in the estate could hold it: asked again when the estate grows or a node returns.
  if (queued.code() == base::StatusCode::kFailedPrecondition) refused_.emplace(id, std::move(spec));
}

void SchedulerController::RetryRefused() {
  std::vector<sched::JobSpec> again;
  for (auto& [id, spec] : refused_) again.push_back(spec);
  for (sched::JobSpec& spec : again) Queue(std::move(spec));
}

void SchedulerController::Follow(const store::JobRecord& job, double now) {
  const int64_t id = job.id;
  auto k = known_.find(id);
  if (!Active(job.phase)) {
    if (k == known_.end()) return;  // handled at an earlier event of this batch
    scheduler_->Cancel(id, now);    // over: what it held is free (it was seen to stop)
    known_.erase(k);
    reasons_.erase(id);
    refused_.erase(id);
    backend_->Track(job);
    return;
  }
  if (k == known_.end()) {
    if (job.phase != "Pending") return;
    Track(job);
    backend_->Track(job);
    auto spec = ToSchedulerJob(job, *estate_);
    if (!spec.ok()) {
      reasons_[id] = spec.status().message();
      return;
    }
    Queue(std::move(spec.value()));
    return;
  }
  if (job.version < k->second.version) return;  // older than what this controller wrote
  const std::string before = k->second.phase;
  // A preempted job whose tasks have stopped goes back to the queue, and so does one whose
  // node was lost (its run is over: the lost timeout outlasts the agent's lease and kill).
  if (before != "Pending" && job.phase == "Pending") {
    scheduler_->Evicting(id);
    scheduler_->Evicted(id, now);
  }
  // Cancelled, or one task failed: it holds its devices until its tasks have stopped, and is
  // nobody's victim meanwhile.
  if ((before == "Running" || before == "Placed") && job.phase == "Stopping") {
    scheduler_->Evicting(id);
  }
  Track(job);
  backend_->Track(job);
}

Status SchedulerController::Rebuild() {
  std::vector<store::Object> objects;
  std::vector<store::JobRecord> jobs;
  int64_t latest = 0;
  Status s = store_->Read([&](store::Tx& tx) {
    auto o = tx.ListObjects("");
    if (!o.ok()) return o.status();
    objects = std::move(o.value());
    store::JobFilter f;
    f.phases = {"Pending", "Placed", "Running", "Stopping"};
    f.limit = kPage;
    for (;;) {
      auto page = tx.ListJobs(f);
      if (!page.ok()) return page.status();
      for (store::JobRecord& j : *page) jobs.push_back(std::move(j));
      if (page->size() < static_cast<size_t>(kPage)) break;
      f.after_id = jobs.back().id;
    }
    auto seq = tx.LatestEventSeq();
    if (!seq.ok()) return seq.status();
    latest = *seq;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  auto estate = BuildEstate(objects);
  if (!estate.ok()) return estate.status();
  // The fragmentation model learns the workload's shapes from the jobs there are now.
  std::vector<sched::TaskSpec> shapes;
  std::vector<std::pair<store::JobRecord, base::Result<sched::JobSpec>>> converted;
  for (store::JobRecord& j : jobs) {
    auto spec = ToSchedulerJob(j, **estate);
    if (spec.ok() && shapes.size() < 100000) {
      shapes.insert(shapes.end(), spec->tasks.begin(), spec->tasks.end());
    }
    converted.emplace_back(std::move(j), std::move(spec));
  }
  auto built =
      sched::BuildScheduler(AssemblyOf(**estate), (*estate)->snapshot, (*estate)->quotas, shapes);
  if (!built.ok()) return built.status();
  std::unique_ptr<sched::Scheduler> scheduler = std::move(built.value());
  const double now = clock_->Now();
  // Fair-share usage by tenancy name, carried from the scheduler this one replaces or, at
  // start, from the store.
  std::vector<store::FairShareUsage> carried;
  if (scheduler_) {
    for (const auto& u : scheduler_->ExportUsage(now)) {
      carried.push_back({scheduler_->quotas().name(u.tenant), u.gpu, u.cpu, u.mem, now});
    }
  } else {
    auto saved = store::ReadValue(*store_, [](store::Tx& tx) { return tx.ListFairShare(); });
    if (!saved.ok()) return saved.status();
    carried = std::move(saved.value());
  }
  known_.clear();
  reasons_.clear();
  refused_.clear();
  std::vector<store::JobRecord> lost;  // placed where the estate no longer has room
  for (auto& [job, spec] : converted) {
    Track(job);
    if (!spec.ok()) {
      reasons_[job.id] = spec.status().message();
      continue;
    }
    if (job.phase == "Pending") {
      Status submitted = scheduler->Submit(spec.value());
      if (!submitted.ok()) reasons_[job.id] = submitted.message();
      if (submitted.code() == base::StatusCode::kFailedPrecondition) {
        refused_.emplace(job.id, std::move(spec.value()));
      }
      continue;
    }
    auto placements = AllocationFromJson(job.allocation, **estate);
    Status adopted = placements.ok()
                         ? scheduler->Adopt(std::move(spec.value()), *placements, job.updated_at)
                         : placements.status();
    if (!adopted.ok()) {
      job.reason = adopted.message();
      lost.push_back(job);
    } else if (job.phase == "Stopping") {
      // Stopping before the rebuild: it still holds its nodes until its tasks have stopped, and
      // what it will free still counts for the job it was preempted for (no second victim).
      const int64_t preempted_for = job.status.contains("stop") && job.status["stop"].is_object()
                                        ? job.status["stop"].value("for", int64_t{-1})
                                        : -1;
      scheduler->Evicting(job.id, preempted_for > 0 ? preempted_for : -1);
    }
  }
  if (!carried.empty()) {
    // Saved at one time (the last sample) when read from the store; now when carried over.
    std::vector<sched::Scheduler::TenantUsage> usage;
    for (const store::FairShareUsage& u : carried) {
      const int32_t n = scheduler->quotas().Find(u.scope);
      if (n >= 0) usage.push_back({n, u.gpu, u.cpu, u.mem});
    }
    scheduler->RestoreUsage(usage, carried.front().at, now);
  }
  // What each agent should run, replaced at once (jobs being requeued below are not assigned).
  std::vector<store::JobRecord> assigned;
  for (const auto& entry : converted) {
    const store::JobRecord& job = entry.first;
    if (std::none_of(lost.begin(), lost.end(), [&](const auto& l) { return l.id == job.id; })) {
      assigned.push_back(job);
    }
  }
  backend_->Reset(**estate, assigned);
  estate_ = std::move(estate.value());
  scheduler_ = std::move(scheduler);
  metrics_->Add("meridian_scheduler_rebuilds_total", {}, 1);
  last_seq_ = latest;
  dirty_ = false;
  if (lost.empty()) return Status::Ok();
  // Jobs whose nodes went away go back to the queue, where the next rebuild picks them up.
  int64_t seq = 0;
  s = store_->Write([&](store::Tx& tx) {
    for (store::JobRecord& j : lost) {
      auto life = api::LifeOf(j);
      if (!life.ok()) return life.status();
      auto t = domain::lifecycle::Requeue(*life, j.reason, now);
      if (!t.ok()) return t.status();
      auto e = api::CommitTransition(tx, *t, now, &j);
      if (!e.ok()) return e.status();
      seq = std::max(seq, *e);
    }
    return Status::Ok();
  });
  dirty_ = true;
  if (s.ok()) bus_->Notify(seq);
  return s;
}

Status SchedulerController::CatchUp() {
  for (;;) {
    std::vector<store::Event> events;
    std::map<int64_t, store::JobRecord> changed;  // as stored now
    std::map<std::string, store::Object> nodes;   // registered nodes, as stored now
    Status s = store_->Read([&](store::Tx& tx) {
      store::EventFilter f;
      f.after_seq = last_seq_;
      f.limit = kPage;
      auto r = tx.ListEvents(f);
      if (!r.ok()) return r.status();
      events = std::move(r.value());
      for (const store::Event& e : events) {
        if (e.object_kind == "Node") {
          auto n = tx.GetObject("Node", e.object_name);
          if (n.ok()) nodes[n->name] = *n;
          continue;
        }
        if (e.object_kind != "Job") continue;
        auto j = tx.GetJob(std::stoll(e.object_name));
        if (j.ok()) changed[j->id] = *j;
      }
      return Status::Ok();
    });
    if (!s.ok()) return s;
    const double now = clock_->Now();
    for (const store::Event& e : events) {
      last_seq_ = e.seq;
      if (e.object_kind == "Node") {
        auto n = nodes.find(e.object_name);
        if (n == nodes.end() || !FollowNode(e.reason, n->second)) dirty_ = true;
        continue;
      }
      if (e.object_kind != "Job") {
        if (e.object_kind != "User") dirty_ = true;  // the estate or tenancy moved: rebuild
        continue;
      }
      const int64_t id = std::stoll(e.object_name);
      auto it = changed.find(id);
      if (it == changed.end()) continue;
      // A job is taken in at its submission only; later events of a job this controller does
      // not know (it ended before) change nothing.
      if (!known_.count(id) && e.reason != "Submitted") continue;
      Follow(it->second, now);
    }
    if (dirty_ || events.size() < static_cast<size_t>(kPage)) return Status::Ok();
  }
}

Status SchedulerController::RunOnce() {
  const auto t0 = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // Lost nodes become unschedulable, and their jobs are requeued or failed, through the events
  // that CatchUp follows.
  auto expired = backend_->ExpireNodes();
  if (!expired.ok()) return expired.status();
  if (!dirty_ && scheduler_) {
    if (Status s = CatchUp(); !s.ok()) return s;
  }
  if (dirty_ || !scheduler_) {
    if (Status s = Rebuild(); !s.ok()) return s;
  }
  const double now = clock_->Now();
  if (Status s = SettleStops(now); !s.ok()) return s;
  sched::CycleResult result = scheduler_->Cycle(now);
  for (const auto& [id, why] : result.pending) reasons_[id] = why;
  for (const sched::StartDecision& d : result.started) reasons_.erase(d.job);
  Status s = Commit(result, now);
  Publish(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return s;
}

Status SchedulerController::Commit(const sched::CycleResult& result, double now) {
  if (result.started.empty() && result.preempted.empty()) return Status::Ok();
  // Each decision is a lifecycle transition of the job as the controller last saw it; the
  // write checks that version, so a job that moved underneath (cancelled meanwhile) drops the
  // whole commit and the controller starts again from the store.
  struct Update {
    store::JobRecord record;
    std::vector<domain::Transition> steps;
  };
  std::vector<Update> updates;
  std::vector<int64_t> evicted_now;  // preempted on nodes no agent runs: nothing to wait for
  auto record_of = [](int64_t id, const Known& k) {
    store::JobRecord r;
    r.id = id;
    r.project = k.project;
    r.version = k.version;
    r.generation = k.generation;
    r.phase = k.phase;
    r.reason = k.reason;
    r.allocation = k.allocation;
    r.status = k.status;
    return r;
  };
  for (const sched::PreemptDecision& p : result.preempted) {
    const Known& k = known_.at(p.job);
    Update u{record_of(p.job, k), {}};
    auto life = api::LifeOf(u.record);
    if (!life.ok()) return life.status();
    const std::string reason =
        "preempted for job " + std::to_string(p.for_job) + " (" + p.reason + ")";
    // The preemptor is kept with the stop, so that a rebuild knows whom the victim frees room for.
    auto stop = domain::lifecycle::RequestStop(
        *life, {domain::StopIntent::kRequeue, reason, "Preempted", p.stop_at, p.for_job}, now);
    if (!stop.ok()) return stop.status();
    u.steps.push_back(*stop);
    if (!RunsOnAgents(k.allocation)) {
      auto done = domain::lifecycle::Stopped(stop->life, "no agent runs its nodes", now);
      if (!done.ok()) return done.status();
      u.steps.push_back(*done);
      evicted_now.push_back(p.job);
    }
    updates.push_back(std::move(u));
  }
  for (const sched::StartDecision& d : result.started) {
    const Known& k = known_.at(d.job);
    Update u{record_of(d.job, k), {}};
    auto life = api::LifeOf(u.record);
    if (!life.ok()) return life.status();
    u.record.allocation = AllocationToJson(d.placements, *estate_);
    std::string where;
    for (const Json& t : u.record.allocation) {
      const std::string node = t.at("node");
      if (where.find(node) == std::string::npos) where += (where.empty() ? "" : ", ") + node;
    }
    where +=
        std::string(d.borrowed ? " (borrowing idle quota)" : "") +
        (d.on_loan_from >= 0 ? " (on nodes reserved for job " + std::to_string(d.on_loan_from) + ")"
                             : "");
    auto placed = domain::lifecycle::Place(*life, static_cast<int32_t>(u.record.allocation.size()),
                                           where, now);
    if (!placed.ok()) return placed.status();
    u.steps.push_back(*placed);
    updates.push_back(std::move(u));
  }
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    for (Update& u : updates) {
      store::JobRecord r = u.record;
      std::vector<store::Event> events;
      for (const domain::Transition& t : u.steps) {
        for (store::Event& e : api::ApplyTransition(t, now, &r)) events.push_back(std::move(e));
      }
      auto v = tx.UpdateJob(r, r.version);
      if (!v.ok()) return v.status();
      r.version = *v;
      for (const store::Event& e : events) {
        auto appended = tx.AppendEvent(e);
        if (!appended.ok()) return appended.status();
        seq = *appended;
      }
      u.record = std::move(r);
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    // A job moved underneath (cancelled meanwhile): nothing was written; start again from
    // what the store says.
    dirty_ = true;
    Wake();
    return s.code() == base::StatusCode::kConflict ? Status::Ok() : s;
  }
  for (const Update& u : updates) Track(u.record);
  for (int64_t id : evicted_now) scheduler_->Evicted(id, now);
  // The next round reads the decisions back from the log and hands them to the agents.
  Wake();
  bus_->Notify(seq);
  return Status::Ok();
}

bool SchedulerController::RunsOnAgents(const Json& allocation) const {
  for (const Json& t : allocation) {
    if (backend_->Runs(*estate_, t.value("node", ""))) return true;
  }
  return false;
}

Status SchedulerController::SettleStops(double now) {
  // A stop on nodes that no agent runs (declared by a pool) has no runner to wait for: that
  // back end observes it at once.
  std::vector<int64_t> settle;
  for (const auto& [id, k] : known_) {
    if (k.phase == "Stopping" && !RunsOnAgents(k.allocation)) settle.push_back(id);
  }
  if (settle.empty()) return Status::Ok();
  int64_t seq = 0;
  std::vector<store::JobRecord> done;
  Status s = store_->Write([&](store::Tx& tx) {
    for (int64_t id : settle) {
      auto job = tx.GetJob(id);
      if (!job.ok()) return job.status();
      auto life = api::LifeOf(*job);
      if (!life.ok()) return life.status();
      auto t = domain::lifecycle::Stopped(*life, "no agent runs its nodes", now);
      if (!t.ok()) continue;  // moved on meanwhile
      auto e = api::CommitTransition(tx, *t, now, &*job);
      if (!e.ok()) return e.status();
      seq = *e;
      done.push_back(*job);
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  for (const store::JobRecord& j : done) Follow(j, now);
  if (seq > 0) bus_->Notify(seq);
  return Status::Ok();
}

}  // namespace meridian::server
