#include "server/controller.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "api/job_life.h"
#include "base/duration.h"
#include "base/log.h"
#include "sched/assembly.h"

namespace meridian::server {

using base::Status;

namespace {

constexpr int32_t kPage = 1000;

// What of a stored allocation the estate still has: per task, its placement on the GPUs its
// node still has; a task whose node is gone has no placement (node -1).
std::vector<sched::Placement> PlacementsLeft(const Json& allocation, const Estate& estate) {
  std::vector<sched::Placement> out;
  if (!allocation.is_array()) return out;
  for (const Json& task : allocation) {
    const std::string name = task.value("node", "");
    auto node = std::find_if(estate.snapshot.nodes.begin(), estate.snapshot.nodes.end(),
                             [&](const sched::NodeState& n) { return n.name == name; });
    Json one = task;
    one["devices"] = Json::array();
    for (const Json& d : task.value("devices", Json::array())) {
      const int64_t gpu = d.value("gpu", int64_t{-1});
      if (node != estate.snapshot.nodes.end() && gpu >= 0 && gpu < node->gpu_count) {
        one["devices"].push_back(d);
      }
    }
    auto p = AllocationFromJson(Json::array({one}), estate);
    out.push_back(p.ok() && p->size() == 1 ? (*p)[0] : sched::Placement{});
  }
  return out;
}

// A project deleted under its placed jobs: they are charged to a root of the tenancy tree named
// after it, with no quota, until they end (as ApplyConfig does in place), so that what they hold
// stays counted. Returns the projects given such a root.
std::vector<std::string> AddOrphans(const std::vector<store::JobRecord>& jobs, Estate* estate) {
  std::vector<std::string> orphans;
  for (const store::JobRecord& j : jobs) {
    if (j.phase == "Pending" || estate->tenant_of_project.count(j.project)) continue;
    estate->tenant_of_project[j.project] = estate->quotas.AddNode(j.project, -1);
    orphans.push_back(j.project);
  }
  return orphans;
}

bool Active(const std::string& phase) {
  return phase == "Pending" || phase == "Placed" || phase == "Running" || phase == "Stopping";
}

// A line for each job transition and node or GPU health action, as the events log them: every
// one passes here once, whoever wrote it. Warning events (faults, drains, failures) at warn.
void LogEvent(const store::Event& e) {
  if (e.object_kind != "Job" && e.object_kind != "Node") return;
  base::log::Log(e.type == "Warning" ? base::log::Level::kWarn : base::log::Level::kInfo,
                 {{"kind", "event"},
                  {"object", e.object_kind + "/" + e.object_name},
                  {"reason", e.reason},
                  {"project", e.project}},
                 "event {}/{} {}: {}", e.object_kind, e.object_name, e.reason, e.message);
}

// The events after `after` up to `upto` that a rebuild takes in at once, rather than following
// them one by one: each gets its line all the same.
void LogEventsUpTo(store::Store& store, int64_t after, int64_t upto) {
  while (after < upto) {
    std::vector<store::Event> events;
    Status s = store.Read([&](store::Tx& tx) {
      store::EventFilter f;
      f.after_seq = after;
      f.limit = kPage;
      auto r = tx.ListEvents(f);
      if (!r.ok()) return r.status();
      events = std::move(r.value());
      return Status::Ok();
    });
    if (!s.ok() || events.empty()) return;
    for (const store::Event& e : events) {
      if (e.seq > upto) return;
      LogEvent(e);
      after = e.seq;
    }
  }
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
  metrics_->Describe("meridian_scheduler_errors_total", "counter",
                     "Scheduler rounds that failed (the server's log says why, once per "
                     "message).");
  metrics_->Add("meridian_scheduler_errors_total", {}, 0);
  metrics_->Describe("meridian_quota_limit_gpus", "gauge",
                     "GPU limit of each node of the tenancy tree that has one, for all models.");
  metrics_->Describe("meridian_scheduler_mix_changes_total", "counter",
                     "Times the placement profile was rebuilt in place for a workload mix that "
                     "moved (the shapes of the jobs the scheduler holds, checked every 30 s).");
  metrics_->Describe("meridian_scheduler_rebuilds_total", "counter",
                     "Times the scheduler was built from the store: at start, and after changes "
                     "it cannot follow in place (a new placement policy, a cluster removed, a "
                     "pool's declared nodes changed).");
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
    base::log::Error("history: {}", kept.status().message());
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
    if (!s.ok()) {
      cycle_errors_.fetch_add(1);
      metrics_->Add("meridian_scheduler_errors_total", {}, 1);
    }
    if (!s.ok() && s.message() != last_error) {
      base::log::Error("scheduler: {}", s.message());
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

void SchedulerController::Tally::Add(int64_t id, const Known& k) {
  phases[k.phase] += 1;
  Project& p = projects[k.project];
  if (k.phase == "Pending") {
    p.pending.emplace(k.submitted_at, id);
  } else {
    ++p.others;
  }
  if (k.phase == "Stopping") stopping.insert(id);
}

void SchedulerController::Tally::Remove(int64_t id, const Known& k) {
  if (auto ph = phases.find(k.phase); ph != phases.end() && --ph->second <= 0) phases.erase(ph);
  auto p = projects.find(k.project);
  if (p != projects.end()) {
    if (k.phase == "Pending") {
      p->second.pending.erase({k.submitted_at, id});
    } else {
      --p->second.others;
    }
    if (p->second.pending.empty() && p->second.others <= 0) projects.erase(p);
  }
  stopping.erase(id);
}

void SchedulerController::Track(const store::JobRecord& job) {
  auto [at, added] = known_.try_emplace(job.id);
  Known& k = at->second;
  const bool first = k.version == 0;
  if (!added) tally_.Remove(job.id, k);
  k.project = job.project;
  k.version = job.version;
  k.generation = job.generation;
  k.phase = job.phase;
  k.reason = job.reason;
  k.submitted_at = job.submitted_at;
  k.allocation = job.allocation;
  k.status = job.status;
  tally_.Add(job.id, k);
  if (first) TrackGates(job, &k);
}

bool SchedulerController::BackingOff(int64_t id, double now) const {
  auto k = known_.find(id);
  return k != known_.end() && k->second.phase == "Pending" && k->second.status.is_object() &&
         k->second.status.value("eligibleAt", 0.0) > now;
}

void SchedulerController::HoldForBackoff(int64_t id, sched::JobSpec spec) {
  const Known& k = known_.at(id);
  // Its reason says how often it was given back and for how long it waits: when that ends.
  reasons_.Set(id,
               k.reason + " (until " + base::FormatUtc(k.status.value("eligibleAt", 0.0)) + ")");
  backing_off_[id] = std::move(spec);
}

void SchedulerController::ReleaseBackoff(double now) {
  std::vector<int64_t> due;
  for (const auto& [id, spec] : backing_off_) {
    if (!BackingOff(id, now)) due.push_back(id);
  }
  for (int64_t id : due) {
    sched::JobSpec spec = std::move(backing_off_.at(id));
    backing_off_.erase(id);
    if (!known_.count(id)) continue;  // ended meanwhile
    reasons_.Erase(id);
    Queue(std::move(spec));
  }
}

void SchedulerController::Queue(sched::JobSpec spec) {
  const int64_t id = spec.id;
  if (BackingOff(id, clock_->Now())) {
    HoldForBackoff(id, std::move(spec));
    return;
  }
  backing_off_.erase(id);  // its back-off is over, whoever queues it
  if (Gated(id)) {
    refused_.erase(id);
    held_[id] = std::move(spec);
    return;
  }
  Status queued = scheduler_->Submit(spec);
  if (queued.ok()) {
    refused_.erase(id);
    reasons_.Erase(id);
    return;
  }
  reasons_.Set(id, queued.message());
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
    tally_.Remove(id, k->second);
    known_.erase(k);
    reasons_.Erase(id);
    refused_.erase(id);
    held_.erase(id);
    released_.erase(id);
    backing_off_.erase(id);
    backend_->Track(job);
    return;
  }
  if (k == known_.end()) {
    if (job.phase != "Pending") return;
    Track(job);
    backend_->Track(job);
    auto spec = ToSchedulerJob(job, *estate_);
    if (!spec.ok()) {
      reasons_.Set(id, spec.status().message());
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
    // Its project was deleted while it ran: it waits, out of the queue, until the project
    // exists again (ApplyConfig queues it then).
    if (!estate_->tenant_of_project.count(job.project)) {
      scheduler_->Cancel(id, now);
      reasons_.Set(id, "project \"" + job.project + "\" no longer exists");
    }
  }
  // Cancelled, or one task failed: it holds its devices until its tasks have stopped, and is
  // nobody's victim meanwhile.
  if ((before == "Running" || before == "Placed") && job.phase == "Stopping") {
    auto claim = claims_.find(id);
    scheduler_->Evicting(id, claim == claims_.end() ? -1 : claim->second);
  }
  Track(job);
  backend_->Track(job);
  // Given back again by its runner: it waits out its back-off out of the queue.
  if (before != "Pending" && job.phase == "Pending" && BackingOff(id, now)) {
    if (const sched::JobSpec* spec = scheduler_->Find(id)) {
      sched::JobSpec held = *spec;
      held.started_before = true;  // it ran: no first start is due when it comes back
      scheduler_->Cancel(id, now);
      HoldForBackoff(id, std::move(held));
    }
  }
}

Status SchedulerController::ReadState(std::vector<store::Object>* objects,
                                      std::vector<store::JobRecord>* jobs, int64_t* latest) {
  return store_->Read([&](store::Tx& tx) {
    auto o = tx.ListObjects("");
    if (!o.ok()) return o.status();
    *objects = std::move(o.value());
    store::JobFilter f;
    f.phases = {"Pending", "Placed", "Running", "Stopping"};
    f.limit = kPage;
    for (;;) {
      auto page = tx.ListJobs(f);
      if (!page.ok()) return page.status();
      for (store::JobRecord& j : *page) jobs->push_back(std::move(j));
      if (page->size() < static_cast<size_t>(kPage)) break;
      f.after_id = jobs->back().id;
    }
    auto seq = tx.LatestEventSeq();
    if (!seq.ok()) return seq.status();
    *latest = *seq;
    return Status::Ok();
  });
}

// Builds the scheduler from the store. It runs at start, and for what cannot be followed in
// place (StructuralChange); it keeps what the scheduler it replaces knew that the store does not
// say: the backfill reservation and fair share (and the victims' claims, which the store keeps).
Status SchedulerController::Rebuild() {
  std::vector<store::Object> objects;
  std::vector<store::JobRecord> jobs;
  int64_t latest = 0;
  if (Status s = ReadState(&objects, &jobs, &latest); !s.ok()) return s;
  auto estate = BuildEstate(objects);
  if (!estate.ok()) return estate.status();
  const std::vector<std::string> orphans = AddOrphans(jobs, estate->get());
  // The fragmentation model learns the workload's shapes from the jobs there are now.
  std::vector<sched::TaskSpec> shapes;
  std::vector<std::pair<store::JobRecord, base::Result<sched::JobSpec>>> converted;
  for (store::JobRecord& j : jobs) {
    // New jobs of a deleted project are not taken.
    const bool orphan = j.phase == "Pending" &&
                        std::find(orphans.begin(), orphans.end(), j.project) != orphans.end();
    auto spec = orphan ? base::Result<sched::JobSpec>(
                             Status::NotFound("project \"" + j.project + "\" no longer exists"))
                       : ToSchedulerJob(j, **estate);
    if (spec.ok() && shapes.size() < 100000) {
      shapes.insert(shapes.end(), spec->tasks.begin(), spec->tasks.end());
    }
    converted.emplace_back(std::move(j), std::move(spec));
  }
  for (const std::string& p : orphans) (*estate)->tenant_of_project.erase(p);
  const sched::Assembly assembly = AssemblyOf(**estate);
  std::shared_ptr<const sched::FragmentationModel> mix = sched::LearnMix(assembly, shapes);
  auto built = sched::BuildScheduler(assembly, (*estate)->snapshot, (*estate)->quotas, mix);
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
  tally_ = {};
  reasons_.Clear();
  refused_.clear();
  held_.clear();
  released_.clear();
  backing_off_.clear();
  claims_.clear();
  deleted_nodes_.clear();
  const std::vector<std::pair<int64_t, std::string>> unplaced =
      TakeIn(converted, **estate, scheduler.get());
  if (!carried.empty()) {
    // Saved at one time (the last sample) when read from the store; now when carried over.
    std::vector<sched::Scheduler::TenantUsage> usage;
    for (const store::FairShareUsage& u : carried) {
      const int32_t n = scheduler->quotas().Find(u.scope);
      if (n >= 0) usage.push_back({n, u.gpu, u.cpu, u.mem});
    }
    scheduler->RestoreUsage(usage, carried.front().at, now);
  }
  // The job the reservation was for keeps it: a new one would hold other nodes idle.
  if (scheduler_) scheduler->Reserve(scheduler_->reserved_job());
  // What each agent should run, replaced at once.
  std::vector<store::JobRecord> assigned;
  for (const auto& entry : converted) assigned.push_back(entry.first);
  backend_->Reset(**estate, assigned);
  estate_ = std::move(estate.value());
  mix_ = std::move(mix);
  mix_checked_at_ = now;
  scheduler_ = std::move(scheduler);
  admission_stale_ = true;
  metrics_->Add("meridian_scheduler_rebuilds_total", {}, 1);
  // At the first build the events before are the last run's, which logged them.
  if (last_seq_ > 0) LogEventsUpTo(*store_, last_seq_, latest);
  last_seq_ = latest;
  dirty_ = false;
  // Jobs whose placement no longer fits: their tasks may still run, so they stop through the
  // lifecycle, holding what is left of their devices until they are seen to stop.
  if (unplaced.empty()) return Status::Ok();
  Status stopped = StopJobs(unplaced, "PlacementLost", now);
  if (!stopped.ok()) dirty_ = true;  // asked again by the next rebuild
  return stopped;
}

std::vector<std::pair<int64_t, std::string>> SchedulerController::TakeIn(
    std::vector<std::pair<store::JobRecord, base::Result<sched::JobSpec>>>& converted,
    const Estate& estate, sched::Scheduler* scheduler) {
  std::vector<std::pair<int64_t, std::string>> unplaced;
  for (auto& [job, spec] : converted) {
    Track(job);
    if (!spec.ok()) {
      reasons_.Set(job.id, spec.status().message());
      continue;
    }
    if (job.phase == "Pending" && BackingOff(job.id, clock_->Now())) {
      HoldForBackoff(job.id, std::move(spec.value()));
      continue;
    }
    if (job.phase == "Pending" && Gated(job.id)) {
      held_[job.id] = std::move(spec.value());
      continue;
    }
    if (job.phase == "Pending") {
      Status submitted = scheduler->Submit(spec.value());
      if (!submitted.ok()) reasons_.Set(job.id, submitted.message());
      if (submitted.code() == base::StatusCode::kFailedPrecondition) {
        refused_.emplace(job.id, std::move(spec.value()));
      }
      continue;
    }
    // A stopping job's preemptor keeps its claim on what the job will free (no second victim).
    // Its run started when its tasks said so: the scheduler counts the time it has run (and
    // what a preemption would lose) from then, not from its record's last change (a task
    // restarted in place, say). A job placed and not yet started: from its last change.
    auto life = api::LifeOf(job);
    const int64_t preempted_for = life.ok() && life->preempted_for > 0 ? life->preempted_for : -1;
    const double started_at = life.ok() && life->started_at > 0 ? life->started_at : job.updated_at;
    auto placements = AllocationFromJson(job.allocation, estate);
    Status adopted = placements.ok() ? scheduler->Adopt(spec.value(), *placements, started_at)
                                     : placements.status();
    if (!adopted.ok()) {
      // Its node re-registered smaller, a GPU of it is unhealthy, or a node of it left.
      scheduler->AdoptStopping(std::move(spec.value()), PlacementsLeft(job.allocation, estate),
                               started_at, preempted_for);
      if (job.phase != "Stopping") {
        unplaced.emplace_back(job.id, adopted.message() + ": stopped, to be requeued");
      }
    } else if (job.phase == "Stopping") {
      scheduler->Evicting(job.id, preempted_for);
    }
  }
  return unplaced;
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
    // Configuration events come in runs (one apply writes many objects): the run is taken in
    // once, from the objects as stored now, before the next job or node event is followed (a
    // job may name a project that the run made).
    bool config = false;
    auto apply_config = [&]() -> Status {
      if (!config || dirty_) return Status::Ok();
      config = false;
      admission_stale_ = true;
      Status c = ApplyConfig();
      if (!c.ok()) dirty_ = true;  // a rebuild reads it all again, and says what fails
      return c;
    };
    for (const store::Event& e : events) {
      if (e.object_kind != "Job" && e.object_kind != "Node") {
        last_seq_ = e.seq;
        config = config || e.object_kind != "User";
        continue;
      }
      if (Status c = apply_config(); !c.ok()) return c;
      last_seq_ = e.seq;
      LogEvent(e);  // once: a rebuild logs only the events after last_seq_
      if (e.object_kind == "Node") {
        auto n = nodes.find(e.object_name);
        store::Object gone;  // a deleted node's object is no longer stored
        gone.kind = "Node";
        gone.name = e.object_name;
        const store::Object* o = n != nodes.end()            ? &n->second
                                 : e.reason == "NodeDeleted" ? &gone
                                                             : nullptr;
        if (!o || !FollowNode(e.reason, *o)) dirty_ = true;
        admission_stale_ = true;
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
    if (Status c = apply_config(); !c.ok()) return c;
    if (dirty_ || events.size() < static_cast<size_t>(kPage)) return Status::Ok();
  }
}

void SchedulerController::FollowMix(double now) {
  if (now - mix_checked_at_ < kMixCheckSeconds) return;
  mix_checked_at_ = now;
  const sched::Assembly assembly = AssemblyOf(*estate_);
  std::shared_ptr<const sched::FragmentationModel> next =
      sched::MovedMix(assembly, *scheduler_, mix_.get());
  if (!next) return;
  auto profile = sched::BuildProfile(assembly, scheduler_->snapshot().nodes.size(), next);
  if (!profile.ok()) {
    base::log::Log(base::log::Level::kWarn, {{"kind", "scheduler"}},
                   "the workload mix moved, but its profile could not be built: {}",
                   profile.status().message());
    return;
  }
  const double moved = mix_ ? mix_->Distance(*next) : 1.0;
  scheduler_->ReplaceProfile(std::move(*profile));
  mix_ = std::move(next);
  base::log::Log(base::log::Level::kInfo, {{"kind", "scheduler"}},
                 "placement follows the live workload mix: {} typical shapes, {} multi-GPU, moved "
                 "{:.2f}",
                 mix_->shapes().size(), mix_->multi_gpu_shapes().size(), moved);
  metrics_->Add("meridian_scheduler_mix_changes_total", {}, 1);
}

std::map<int32_t, const BudgetBlock*> SchedulerController::KeptOffCloud(
    const std::map<std::string, BudgetBlock>& blocks) const {
  std::map<int32_t, const BudgetBlock*> kept;
  for (const auto& [project, block] : blocks) {
    auto tenant = estate_->tenant_of_project.find(project);
    if (block.cloud && tenant != estate_->tenant_of_project.end()) kept[tenant->second] = &block;
  }
  return kept;
}

void SchedulerController::ExcludeCloud(const std::map<int32_t, const BudgetBlock*>& kept) {
  sched::Mask cloud = 0;
  const std::vector<sched::ClusterState>& clusters = scheduler_->snapshot().clusters;
  for (size_t c = 0; c < clusters.size(); ++c) {
    if (clusters[c].kind == domain::SiteKind::kCloud) cloud |= sched::Bit(static_cast<int>(c));
  }
  std::map<int32_t, sched::Mask> excluded;
  if (cloud) {
    for (const auto& [tenant, block] : kept) excluded[tenant] = cloud;
  }
  scheduler_->ExcludeClusters(std::move(excluded));
}

void SchedulerController::SayBudgetKeptOut(const std::map<int32_t, const BudgetBlock*>& kept,
                                           const sched::CycleResult& result) {
  if (kept.empty()) return;
  for (const auto& [id, why] : result.pending) {
    const sched::JobSpec* job = scheduler_->Find(id);
    auto b = job ? kept.find(job->tenant) : kept.end();
    if (b != kept.end()) {
      reasons_.Set(id, why + "; " + b->second->why + ": no new placement on a cloud cluster");
    }
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
  PublishAdmission();
  FollowReachability();
  const double now = clock_->Now();
  if (Status s = SettleStops(now); !s.ok()) return s;
  if (Status s = ReleaseHeld(now); !s.ok()) return s;
  ReleaseBackoff(now);
  FollowMix(now);
  const std::map<std::string, BudgetBlock> blocks =
      budget_blocks_ ? budget_blocks_() : std::map<std::string, BudgetBlock>{};
  const std::map<int32_t, const BudgetBlock*> kept = KeptOffCloud(blocks);
  ExcludeCloud(kept);
  sched::CycleResult result = scheduler_->Cycle(now);
  std::vector<int64_t> started;
  for (const sched::StartDecision& d : result.started) started.push_back(d.job);
  reasons_.Update(result.pending, started);
  SayBudgetKeptOut(kept, result);
  Status s = Commit(result, now);
  if (s.ok() && elastic_)
    elastic_->Step(now, *estate_, *scheduler_, result, refused_, blocks,
                   budget_room_ ? budget_room_() : std::map<std::string, BudgetRoom>{}, &reasons_);
  Publish(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return s;
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
  for (int64_t id : tally_.stopping) {
    if (!RunsOnAgents(known_.at(id).allocation)) settle.push_back(id);
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
