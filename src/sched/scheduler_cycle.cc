// The scheduling cycle: queue order, quota admission, placement, preemption and backfill.
#include <algorithm>
#include <cmath>
#include <limits>

#include "sched/data.h"
#include "sched/plugins/cluster_constraint/cluster_constraint.h"
#include "sched/scheduler.h"

namespace meridian::sched {

namespace {

double ExpectedEnd(const JobSpec& j, double start) {
  if (j.runtime_estimate > 0) return start + j.runtime_estimate;
  if (j.runtime_limit > 0) return start + j.runtime_limit;
  return kNever;
}

}  // namespace

CycleResult Scheduler::Cycle(double now) {
  // A pass looks at the first queue_depth jobs; when it started some and more wait beyond the
  // depth, another pass follows at once, so the depth bounds work per pass, not throughput.
  CycleResult out;
  ThawMig(now);
  reservation_used_by_ = -1;
  size_t started = 0;
  do {
    started = out.started.size();
    out.pending.clear();
    out.short_of_capacity.clear();
    Pass(now, &out);
  } while (out.started.size() > started &&
           pending_.size() > static_cast<size_t>(options_.queue_depth));
  return out;
}

void Scheduler::ThawMig(double now) {
  bool thawed = false;
  for (auto it = frozen_until_.begin(); it != frozen_until_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    if (it->first < static_cast<int32_t>(snapshot_.gpus.size())) {
      snapshot_.gpus[static_cast<size_t>(it->first)].mig_frozen = false;
    }
    it = frozen_until_.erase(it);
    thawed = true;
  }
  // What waited for a layout to thaw may fit now.
  if (thawed) placer_.ForgetAnswers();
}

void Scheduler::Pass(double now, CycleResult* result) {
  AdvanceUsage(now);
  running_summary_.valid = false;
  CycleResult& out = *result;
  const size_t started_before = out.started.size();
  const bool head_of_line = options_.order == QueueOrder::kFifo && !options_.backfill;
  int32_t preemptors = options_.preemptors_per_cycle;
  // A reservation sticks to its job until that job starts: moving it from job to job would
  // drain nodes for nobody.
  if (reserved_job_ >= 0 && (!options_.backfill || !jobs_.count(reserved_job_) ||
                             jobs_.at(reserved_job_).phase != Phase::kPending)) {
    reserved_job_ = -1;
  }
  double reservation = kNever;
  auto reserve = [&](const Job& j) {
    std::vector<int32_t> nodes;
    const double at = EstimateStart(j, now, &nodes);
    if (at == kNever) return false;
    reservation = at;
    reserved_job_ = j.spec.id;
    out.reserved_job = j.spec.id;
    out.reserved_at = at;
    cycle_.reserved_nodes.assign(snapshot_.nodes.size(), 0);
    for (int32_t n : nodes) cycle_.reserved_nodes[n] = 1;
    placer_.ReservationChanged();
    return true;
  };
  if (reserved_job_ >= 0 && !reserve(jobs_.at(reserved_job_))) reserved_job_ = -1;
  std::vector<int64_t> borrowers;  // kept off the reserved nodes, and fit nowhere else
  std::string behind;              // why those wait, said once per reserved job in a pass
  int64_t behind_of = -1;
  for (int64_t id : Order(now)) {
    Job& j = jobs_.at(id);
    if (j.phase != Phase::kPending) continue;
    // A job preempted in this cycle waits for the next: placed again at once it could take back
    // what it was stopped for, or stop others in turn (a cascade within one cycle), and a
    // cycle's decisions start or stop each job once.
    if (j.preempted_at == now) {
      out.pending.emplace_back(id, "preempted in this cycle; it is placed again in the next");
      continue;
    }
    if (std::string q = QuotaBlock(j); !q.empty()) {
      out.pending.emplace_back(id, q);
      continue;
    }
    // Behind a reservation, a job that would still run when it starts keeps off its nodes; the
    // job holding the reservation may use them.
    const bool avoid = reservation < kNever && id != reserved_job_ &&
                       !(j.spec.runtime_limit > 0 && now + j.spec.runtime_limit <= reservation);
    cycle_.avoid_reserved = avoid;  // part of what the placer remembers of a shape
    std::string why;
    const uint64_t version_before = placer_.version();
    if (TryPlace(j, &why)) {
      KeepEstimateThrough(j, version_before, now);  // before Start settles its layout changes
      Start(j, now, &out);
      if (id == reserved_job_) {    // the reservation is used up
        reservation_used_by_ = id;  // unless the start is taken back (Unstart)
        reserved_job_ = -1;
        reservation = kNever;
        out.reserved_job = -1;
        out.reserved_at = 0;
      }
      continue;
    }
    // The job holding the reservation may always take back what it lent.
    if (options_.preemption && (preemptors > 0 || id == reserved_job_)) {
      if (id != reserved_job_) --preemptors;
      if (TryPreempt(j, now, &out)) continue;
    }
    if (avoid) {
      if (behind_of != reserved_job_) {
        behind = "waits behind the reservation of job " + std::to_string(reserved_job_);
        behind_of = reserved_job_;
      }
      why = behind;
      if (options_.lend_reserved && options_.preemption && j.spec.preemptible) {
        borrowers.push_back(id);
      }
    }
    out.pending.emplace_back(id, why);
    out.short_of_capacity.push_back(id);
    if (head_of_line) break;
    if (options_.backfill && reserved_job_ < 0 &&
        now - j.spec.submit_time >= options_.reserve_after) {
      reserve(j);
    }
  }
  if (!borrowers.empty() && reservation < kNever) Lend(borrowers, now, &out);
  if (cycle_.avoid_reserved || !cycle_.reserved_nodes.empty()) {
    cycle_.avoid_reserved = false;
    cycle_.reserved_nodes.clear();
    placer_.ReservationChanged();
  }
  // Only a start takes a job out of the queue in a pass: without one, a deep queue is not
  // walked again.
  if (out.started.size() > started_before) {
    for (size_t k = started_before; k < out.started.size(); ++k) {
      const int64_t id = out.started[k].job;
      if (jobs_.at(id).phase != Phase::kPending) pending_.Remove(id);
    }
  }
}

void Scheduler::Lend(const std::vector<int64_t>& borrowers, double now, CycleResult* out) {
  cycle_.avoid_reserved = false;
  std::vector<int64_t> lent;
  for (int64_t id : borrowers) {
    Job& j = jobs_.at(id);
    // Jobs started later in the pass may have used up the quota this one passed.
    if (j.phase != Phase::kPending || !QuotaAllows(j) || !TryPlace(j, nullptr)) continue;
    for (const Placement& p : j.placements) {
      if (cycle_.reserved_nodes[static_cast<size_t>(p.node)]) j.on_loan_from = reserved_job_;
    }
    Start(j, now, out);
    lent.push_back(id);
  }
  if (lent.empty()) return;
  std::sort(lent.begin(), lent.end());
  std::erase_if(out->pending, [&](const std::pair<int64_t, std::string>& p) {
    return std::binary_search(lent.begin(), lent.end(), p.first);
  });
}

bool Scheduler::TryPreempt(Job& j, double now, CycleResult* out) {
  // A search that stops nobody gives back all it took: the placer keeps what it knew.
  const Placer::Mark mark = placer_.MarkState();
  bool stopped_some = false;
  const bool answered = SearchVictims(j, now, out, &stopped_some);
  if (!stopped_some) placer_.Rewind(mark);
  return answered;
}

bool Scheduler::SearchVictims(Job& j, double now, CycleResult* out, bool* stopped_some) {
  // Trial placements here are undone by Release, which cannot undo taking a MIG GPU back whole.
  struct NoMigReclaim {
    Placer& p;
    explicit NoMigReclaim(Placer& placer) : p(placer) { p.set_reclaim_mig(false); }
    ~NoMigReclaim() { p.set_reclaim_mig(true); }
  } no_mig_reclaim(placer_);
  // What j's earlier victims will free once they have stopped is j's already: counted as free
  // here, so that a job waiting for its victims takes no more (the preemption cascade), and
  // given back to them before returning, since they hold it until Evicted.
  std::vector<int64_t> claimed;
  const std::vector<int64_t>& awaited = SummariseRunning(now).awaited;
  if (std::find(awaited.begin(), awaited.end(), j.spec.id) != awaited.end()) {
    for (int64_t id : running_) {
      Job& v = jobs_.at(id);
      if (v.phase == Phase::kStopping && v.stopping_for == j.spec.id) {
        Rollback(v, v.placements);
        claimed.push_back(id);
      }
    }
  }
  auto give_back = [&] {
    for (int64_t id : claimed) Restore(jobs_.at(id));
    claimed.clear();
  };
  if (!claimed.empty() && TryPlace(j, nullptr)) {
    Rollback(j, j.placements);
    j.placements.clear();
    const size_t waiting_for = claimed.size();
    give_back();
    out->pending.emplace_back(
        j.spec.id, "waits for " + std::to_string(waiting_for) + " preempted job(s) to stop");
    return true;
  }
  const bool found = PreemptMore(j, now, &claimed, out);
  give_back();
  *stopped_some = found;
  return found;
}

bool Scheduler::PreemptMore(Job& j, double now, std::vector<int64_t>* claimed, CycleResult* out) {
  int64_t claimed_milli = 0;
  for (int64_t id : *claimed) claimed_milli += jobs_.at(id).milli;
  const double mine = PreemptionRank(j, now);
  const bool reclaim = quotas_.WithinGuarantee(j.spec.tenant, kNoModel, j.milli);
  // A job whose first start is due may stop jobs of its own class too.
  const bool due = j.spec.preempting && FirstStartDue(j, now);
  // No running job could be a victim below (the same four reasons): nothing to walk.
  const RunningSummary& running = SummariseRunning(now);
  if (!(j.spec.preempting && running.lowest_rank < mine) && !(due && running.lowest_rank <= mine) &&
      !(reclaim && running.lowest_borrowed_rank <= mine) &&
      std::find(running.lenders.begin(), running.lenders.end(), j.spec.id) ==
          running.lenders.end()) {
    return false;
  }
  struct Victim {
    int64_t id;
    bool loaned;  // on nodes reserved for j
    bool borrowed;
    double priority;
    double lost;   // GPU-seconds of work lost if stopped now and it does not resume
    bool resumes;  // it keeps its work through the stop
    // Of a job that resumes: seconds its GPUs would be freed for (what its estimate says it has
    // left) less the seconds of this run (what a stop could cost it), per GPU it holds.
    double gain;
  };
  // Under LAS the order reads no estimate, and neither does the choice of victims.
  const bool by_estimate = options_.order != QueueOrder::kLeastAttainedService;
  std::vector<Victim> victims;
  for (int64_t id : running_) {
    const Job& v = jobs_.at(id);
    if (v.phase != Phase::kRunning || !v.spec.preemptible) continue;
    // Jobs placed in this very cycle are not taken back, and none before its minimum runtime.
    if (now - v.start_time < v.spec.min_runtime || v.start_time >= now) continue;
    const double theirs = PreemptionRank(v, now);
    const bool by_priority = j.spec.preempting && theirs < mine;
    const bool by_reclaim = reclaim && v.spec.tenant != j.spec.tenant && v.borrowed &&
                            quotas_.Borrowing(v.spec.tenant) && theirs <= mine;
    const bool by_loan = v.on_loan_from == j.spec.id && theirs <= mine;
    // Work on borrowed quota goes first for any reason: the owner's reclaim would stop it next,
    // and stopping another job instead would cost two preemptions for one.
    const bool borrowing = v.borrowed && quotas_.Borrowing(v.spec.tenant);
    // For a first start: a job of its class that has run long enough in this run, and either
    // borrows or is its own tenant's (another tenant's guarantee holds against equal priority).
    const bool by_first_start = due && theirs == mine &&
                                now - v.start_time >= options_.first_start_preempts_after &&
                                (borrowing || v.spec.tenant == j.spec.tenant);
    if (!by_priority && !by_reclaim && !by_loan && !by_first_start) continue;
    const double ran = now - v.start_time;
    double gain = 0;
    if (v.spec.resumes && by_estimate) {
      // A job without an estimate or a limit is taken to have as long left as it has run so
      // far (its gain is 0); a small job goes before a large one, either way of 0.
      const double gpus = v.milli > 0 ? static_cast<double>(v.milli) / 1000.0 : 1.0;
      const bool known = v.spec.runtime_estimate > 0 || v.spec.runtime_limit > 0;
      const double done = v.attained / gpus + ran;  // its earlier runs kept their work too
      gain = known ? FairEstimate(v.spec) - done - ran : 0;
      gain = gain >= 0 ? gain / gpus : gain * gpus;
    }
    victims.push_back(
        {id, by_loan, borrowing, theirs, static_cast<double>(v.milli) * ran, v.spec.resumes, gain});
  }
  // Not even every candidate together frees enough GPU: no search.
  int64_t freeable = gpu_capacity_ - allocated_milli_ + claimed_milli;
  for (const Victim& v : victims) freeable += jobs_.at(v.id).milli;
  if (victims.empty() || freeable < j.milli) return false;
  // What was lent from j's reservation first, then borrowed work, then the lowest priority.
  // Then jobs that resume (they lose little), and of those the one whose estimate (capped at
  // its limit) says it has the most time left, less this run's time, per GPU: stopping the job
  // that would run longest frees its GPUs for longest and lets the jobs about to end finish, as
  // shortest-remaining-time-first would; the run's time keeps a long run from being stopped
  // for a new one; a small job loses less and finds room again sooner than a large one. Then
  // the least work lost: for a job that does not resume, all it has run. Measured in
  // docs/adr/0034-deep-queues.md.
  std::sort(victims.begin(), victims.end(), [](const Victim& a, const Victim& b) {
    if (a.loaned != b.loaned) return a.loaned;
    if (a.borrowed != b.borrowed) return a.borrowed;
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.resumes != b.resumes) return a.resumes;
    if (a.gain != b.gain) return a.gain > b.gain;
    if (a.lost != b.lost) return a.lost < b.lost;
    return a.id < b.id;
  });
  // Most searches fail: a job waits behind work it may not stop, and looks again each cycle.
  // With every candidate released, one placement that scores nothing says whether the job could
  // fit at all. Only for a job of like whole-GPU tasks, where the first node that holds a task
  // is as good as the best for whether the rest fit (they need the same, each on one node).
  const TaskSpec& first = j.spec.tasks.front();
  const bool like_whole =
      std::all_of(j.spec.tasks.begin(), j.spec.tasks.end(), [&](const TaskSpec& t) {
        return t.gpu_kind == GpuKind::kWhole && t.gpu_count == first.gpu_count && t.gpu_count > 0 &&
               t.cpu_milli == first.cpu_milli && t.memory_mib == first.memory_mib &&
               t.allowed_models == first.allowed_models;
      });
  // A per-model limit is checked after placing, on the node first fit found: the probe could
  // refuse where another node would do, so it is made only where no limit of a model bites.
  bool no_model_limit = true;
  for (int m = 0; m < snapshot_.model_count() && no_model_limit; ++m) {
    if (!(first.allowed_models & Bit(m))) continue;
    no_model_limit = quotas_.WithinLimits(j.spec.tenant, static_cast<ModelId>(m), j.milli);
  }
  if (like_whole && no_model_limit && victims.size() > 1) {
    for (const Victim& v : victims) Rollback(jobs_.at(v.id), jobs_.at(v.id).placements);
    placer_.set_first_fit(true);
    const bool could = TryPlace(j, nullptr);
    placer_.set_first_fit(false);
    if (could) {
      Rollback(j, j.placements);
      j.placements.clear();
    }
    for (const Victim& v : victims) Restore(jobs_.at(v.id));
    if (!could) return false;
  }
  // Release victims one at a time until the job fits.
  std::vector<int64_t> taken;
  bool fits = false;
  int64_t free_milli = gpu_capacity_ - allocated_milli_ + claimed_milli;
  for (const Victim& v : victims) {
    Job& victim = jobs_.at(v.id);
    Rollback(victim, victim.placements);
    taken.push_back(v.id);
    free_milli += victim.milli;
    // Placement is tried only once enough GPU is free anywhere for the job to have a chance.
    if (free_milli >= j.milli && (fits = TryPlace(j, nullptr))) break;
  }
  if (!fits) {
    for (int64_t id : taken) Restore(jobs_.at(id));
    return false;
  }
  // Spare every victim the job does not need after all (the last taken is always needed).
  std::vector<int64_t> needed;
  for (size_t k = taken.size(); k-- > 0;) {
    Job& victim = jobs_.at(taken[k]);
    bool spare = k + 1 < taken.size();
    for (size_t t = 0; spare && t < victim.placements.size(); ++t) {
      spare = placer_.Fits(victim.spec.tasks[t], victim.placements[t]);
    }
    if (spare) {
      Restore(victim);
    } else {
      needed.push_back(taken[k]);
    }
  }
  const bool immediate =
      !options_.await_stop_reports && std::all_of(needed.begin(), needed.end(), [&](int64_t id) {
        return jobs_.at(id).spec.grace_period <= 0;
      });
  // Hand the victims their resources back for the bookkeeping of Stop, which releases them,
  // and the earlier victims theirs: they hold them until they have stopped.
  Rollback(j, j.placements);
  for (int64_t id : needed) Restore(jobs_.at(id));
  for (int64_t id : *claimed) Restore(jobs_.at(id));
  claimed->clear();
  for (int64_t id : needed) {
    Job& victim = jobs_.at(id);
    const std::string reason = victim.on_loan_from == j.spec.id     ? "reservation"
                               : victim.borrowed && reclaim         ? "quota reclaim"
                               : PreemptionRank(victim, now) < mine ? "priority"
                                                                    : "first start due";
    out->preempted.push_back({id, j.spec.id, reason, now + victim.spec.grace_period});
    victim.preempted_at = now;
    if (immediate) {
      Stop(victim, now);
      victim.phase = Phase::kPending;
      victim.placements.clear();
      Enqueue(victim);
    } else {
      victim.phase = Phase::kStopping;
      victim.stopping_for = j.spec.id;
      running_summary_.valid = false;  // it now awaits a stop: gathered again when asked
    }
  }
  if (!immediate) {
    out->pending.emplace_back(
        j.spec.id, "waits for " + std::to_string(needed.size()) + " preempted job(s) to stop");
    return true;
  }
  if (TryPlace(j, nullptr)) {
    Start(j, now, out);
  } else {
    out->pending.emplace_back(j.spec.id, "preempted jobs freed too little after all");
  }
  return true;
}

const Scheduler::RunningSummary& Scheduler::SummariseRunning(double now) {
  RunningSummary& s = running_summary_;
  if (s.valid) return s;
  s = RunningSummary{};
  s.valid = true;
  for (int64_t id : running_) {
    const Job& v = jobs_.at(id);
    if (v.phase == Phase::kStopping && v.stopping_for >= 0) s.awaited.push_back(v.stopping_for);
    if (v.phase != Phase::kRunning || !v.spec.preemptible) continue;
    const double rank = PreemptionRank(v, now);
    s.lowest_rank = std::min(s.lowest_rank, rank);
    if (v.borrowed) s.lowest_borrowed_rank = std::min(s.lowest_borrowed_rank, rank);
    if (v.on_loan_from >= 0) s.lenders.push_back(v.on_loan_from);
  }
  return s;
}

double Scheduler::EstimatedStart(int64_t job, double now) {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.phase != Phase::kPending) return kNever;
  return EstimateStart(it->second, now);
}

double Scheduler::EstimateStart(const Job& j, double now, std::vector<int32_t>* nodes) {
  LastEstimate& last = last_estimate_;
  if (last.job != j.spec.id || last.version != placer_.version()) {
    last.at = EstimateStartFromScratch(j, &last.nodes);
    ++estimates_computed_;
    last.job = j.spec.id;
    last.version = placer_.version();
  }
  if (nodes) *nodes = last.nodes;
  return std::max(last.at, now);  // what ended as estimated and still runs ends now at the earliest
}

void Scheduler::KeepEstimateThrough(const Job& placed, uint64_t version_before, double now) {
  LastEstimate& last = last_estimate_;
  // Only an estimate of the reserved job that was current until this start, and a start that
  // changed no MIG layout (a layout frozen by it could stand in the reserved job's way).
  if (reserved_job_ < 0 || last.job != reserved_job_ || last.version != version_before ||
      placed.spec.id == reserved_job_ || last.at >= kNever || !placed.layout_changes.empty()) {
    return;
  }
  // The estimate's nodes hold the reserved job from last.at on. A start keeps that true when
  // each of its tasks is off those nodes, or all of it ends by then (the what-if gives back at
  // their expected end the resources of what runs): the estimate then stands as it was, and
  // the next pass need not work it out again. Anything else that changed the snapshot since
  // (an end, a preemption, a node) changed the version before this start.
  const bool ends_before = ExpectedEnd(placed.spec, now) <= last.at;
  if (!ends_before) {
    for (const Placement& p : placed.placements) {
      if (std::find(last.nodes.begin(), last.nodes.end(), p.node) != last.nodes.end()) return;
    }
  }
  last.version = placer_.version();
}

double Scheduler::EstimateStartFromScratch(const Job& j, std::vector<int32_t>* nodes) {
  // What-if on a copy: give back what runs, in order of expected end, until the job fits. A
  // trial asks only whether the job fits (the first node that fits, no scores), and is made only
  // once enough GPU is free anywhere for it to have a chance; where the job would go is scored
  // once, at the moment found. Behind a large gang, a cycle costs a few placements rather than
  // a scored placement per running job.
  Snapshot what_if = snapshot_;
  Placer p(&what_if, &profile_, 1);
  p.set_static_mig(options_.mig_static);
  std::vector<std::pair<double, int64_t>> ends;
  for (int64_t id : running_) {
    const Job& r = jobs_.at(id);
    // What j lent out of its reservation comes back whenever j asks.
    const bool back_now = r.phase == Phase::kStopping || r.on_loan_from == j.spec.id;
    ends.emplace_back(back_now ? -kNever : ExpectedEnd(r.spec, r.start_time), id);
  }
  std::sort(ends.begin(), ends.end());
  // At most what is free: an idle MIG GPU counts whole, and an unhealthy one too.
  int64_t free_milli = 0;
  for (const GpuState& g : what_if.gpus) free_milli += g.mig_enabled ? 1000 : g.free_milli;
  p.set_first_fit(true);
  // Clusters the tenant is kept out of are no place to reserve for it.
  std::vector<TaskSpec> narrowed;
  auto excluded = excluded_.find(j.spec.tenant);
  if (excluded != excluded_.end()) {
    narrowed = j.spec.tasks;
    for (TaskSpec& t : narrowed) t.allowed_clusters &= ~excluded->second;
  }
  const std::vector<TaskSpec>& tasks = narrowed.empty() ? j.spec.tasks : narrowed;
  auto fits = [&](Placer& placer) {
    CycleState scratch;  // each trial places the job's tasks as one group, afresh
    std::vector<std::pair<const TaskSpec*, Placement>> done;
    bool ok = true;
    if (nodes) nodes->clear();
    for (const TaskSpec& t : tasks) {
      PlaceOutcome o = placer.Place(t, scratch);
      if (!o.placed) {
        ok = false;
        break;
      }
      placer.Commit(t, o.placement, &scratch);
      if (nodes) nodes->push_back(o.placement.node);
      done.emplace_back(&t, std::move(o.placement));
    }
    for (auto it = done.rbegin(); it != done.rend(); ++it) placer.Release(*it->first, it->second);
    return ok;
  };
  // A job of like whole-GPU tasks fits only where idle GPUs hold each task on one node: how many
  // tasks they could hold (CPU, memory and filters may allow fewer) is read off the index.
  const TaskSpec& first = j.spec.tasks.front();
  const bool like_whole =
      std::all_of(j.spec.tasks.begin(), j.spec.tasks.end(), [&](const TaskSpec& t) {
        return t.gpu_kind == GpuKind::kWhole && t.gpu_count == first.gpu_count && t.gpu_count > 0 &&
               t.allowed_models == first.allowed_models;
      });
  auto room_for_tasks = [&] {
    if (!like_whole) return true;
    int64_t slots = 0;
    for (int m = 0; m < what_if.model_count(); ++m) {
      if (!(first.allowed_models & Bit(m))) continue;
      const auto model = static_cast<ModelId>(m);
      for (int k = first.gpu_count; const int64_t nodes = p.index().NodesWithIdleGpus(model, k);
           k += first.gpu_count) {
        slots += nodes;
      }
    }
    return slots >= static_cast<int64_t>(j.spec.tasks.size());
  };
  // The reserved nodes are where the first fit found room. A scored placement of the job on
  // them (a placer of its own, its node index built afresh) cost a fifth of a deep-queue
  // replay and changed none of its figures beyond the spread of seeds (docs/benchmarks.md):
  // where the job goes is scored when it starts; the reservation only keeps backfill off.
  auto fits_now = [&] { return free_milli >= j.milli && room_for_tasks() && fits(p); };
  if (fits_now()) return -kNever;
  for (const auto& [end, id] : ends) {
    if (end == kNever) break;
    const Job& r = jobs_.at(id);
    for (size_t i = 0; i < r.placements.size(); ++i) p.Release(r.spec.tasks[i], r.placements[i]);
    free_milli += r.milli;
    if (fits_now()) return end;
  }
  return kNever;
}

Explanation Scheduler::Explain(int64_t id, double now) {
  Explanation e;
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.phase != Phase::kPending) return e;
  Job& j = it->second;
  e.known = true;
  // The same-shape cache would answer "failed before"; an explanation wants the reasons.
  placer_.ForgetAnswers();
  e.quota = QuotaBlock(j);
  auto excluded = excluded_.find(j.spec.tenant);
  for (size_t c = 0; c < snapshot_.clusters.size(); ++c) {
    if (excluded != excluded_.end() && (excluded->second & Bit(static_cast<int>(c)))) {
      e.clusters.emplace_back(snapshot_.clusters[c].name,
                              "kept out: a spent budget allows this project no new placement here");
      continue;
    }
    const TaskSpec& first = j.spec.tasks.front();
    const ClusterState& cluster = snapshot_.clusters[c];
    if (!(first.allowed_clusters & Bit(static_cast<int>(c)))) {
      std::string why = plugins::WhyNot(snapshot_, first, static_cast<int32_t>(c));
      e.clusters.emplace_back(cluster.name, why.empty() ? "not one the job may use (its "
                                                          "clusters, regions or on-prem "
                                                          "constraint)"
                                                        : "every node " + why);
      continue;
    }
    if (!first.datasets.empty()) {
      e.data.emplace_back(cluster.name,
                          DescribeDataCost(snapshot_, DataCostAt(snapshot_, first.datasets,
                                                                 static_cast<int32_t>(c))));
    }
    std::vector<Placement> placements;
    std::string why;
    Placer::Trial trial(placer_);  // what fits is taken back: nothing changes
    if (PlaceIn(j, Bit(static_cast<int>(c)), &placements, &why)) {
      Undo(j, placements);
      why = "fits now";
    }
    e.clusters.emplace_back(cluster.name, why);
  }
  std::vector<int32_t> nodes;
  double at = EstimateStart(j, now, &nodes);
  if (at < kNever && !nodes.empty() && !j.spec.tasks.front().datasets.empty()) {
    const DataCost cost = DataCostAt(snapshot_, j.spec.tasks.front().datasets,
                                     snapshot_.nodes[static_cast<size_t>(nodes.front())].cluster);
    if (!cost.unknown) e.staging_seconds = cost.seconds;
    at += e.staging_seconds;
  }
  e.estimated_start = at < kNever ? at : -1;
  return e;
}

}  // namespace meridian::sched
