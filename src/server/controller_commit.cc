// How the controller commits a cycle's decisions: in part, as Nomad's plan applier accepts a
// plan in part. A decision whose job moved underneath (cancelled meanwhile, or its agent
// reported) is left out and undone in the scheduler, and the next CatchUp follows the job's new
// record; the other decisions of the cycle are written. The loop is in controller.cc.
#include <cstdio>
#include <optional>

#include "api/job_life.h"
#include "base/log.h"
#include "server/controller.h"

namespace meridian::server {

using base::Status;

namespace {

// Where a start went, for its event: its nodes, and whether it borrows.
std::string Where(const Json& allocation, const sched::StartDecision& d) {
  std::string where;
  for (const Json& t : allocation) {
    const std::string node = t.at("node");
    if (where.find(node) == std::string::npos) where += (where.empty() ? "" : ", ") + node;
  }
  return where + (d.borrowed ? " (borrowing idle quota)" : "") +
         (d.on_loan_from >= 0
              ? " (on nodes reserved for job " + std::to_string(d.on_loan_from) + ")"
              : "");
}

}  // namespace

Status SchedulerController::Commit(const sched::CycleResult& result, double now) {
  claims_.clear();  // the last commit's: CatchUp has followed those victims since
  if (result.started.empty() && result.preempted.empty()) return Status::Ok();
  std::vector<Decision> decisions = Decide(result, now);
  auto seq = WriteDecisions(&decisions, now);
  for (const Decision& d : decisions) {
    if (d.written) {
      Track(d.record);
      if (d.settled) scheduler_->Evicted(d.record.id, now);
    } else if (d.start) {
      scheduler_->Unstart(d.record.id, now);  // what it took is free; it waits again
    } else {
      scheduler_->Unevict(d.record.id);  // it runs on, until it is seen to stop
      claims_[d.record.id] = d.for_job;
    }
  }
  if (!seq.ok()) return seq.status();
  // The next round reads the decisions back from the log and hands them to the agents.
  Wake();
  bus_->Notify(*seq);
  return Status::Ok();
}

std::vector<SchedulerController::Decision> SchedulerController::Decide(
    const sched::CycleResult& result, double now) {
  std::vector<Decision> out;
  auto known = [&](int64_t id) {
    // The job as Track keeps it (a preempted job back in the queue still waits since its
    // submission).
    const Known& k = known_.at(id);
    store::JobRecord r;
    r.id = id;
    r.project = k.project;
    r.version = k.version;
    r.generation = k.generation;
    r.phase = k.phase;
    r.reason = k.reason;
    r.submitted_at = k.submitted_at;
    r.allocation = k.allocation;
    r.status = k.status;
    return r;
  };
  // A decision the lifecycle refuses (the record is not what the scheduler thought) is not
  // written, and so is undone like one whose job moved; the rest of the cycle stands.
  auto refused = [&](Decision* d, const Status& why) {
    base::log::Error(base::log::Fields{{"job", std::to_string(d->record.id)}},
                     "scheduler: job {}: {}", d->record.id, why.message());
    d->steps.clear();
  };
  for (const sched::PreemptDecision& p : result.preempted) {
    Decision d{known(p.job), {}};
    d.for_job = p.for_job;
    if (Status s = PreemptSteps(p, now, &d); !s.ok()) refused(&d, s);
    out.push_back(std::move(d));
  }
  for (const sched::StartDecision& start : result.started) {
    Decision d{known(start.job), {}};
    d.start = true;
    auto life = api::LifeOf(d.record);
    d.record.allocation = AllocationToJson(start.placements, *estate_, now);
    const std::string layout =
        MarkLayoutChanges(start.layout_changes, *estate_, &d.record.allocation);
    auto placed =
        life.ok()
            ? domain::lifecycle::Place(
                  *life, static_cast<int32_t>(d.record.allocation.size()),
                  Where(d.record.allocation, start) + (layout.empty() ? "" : " (" + layout + ")"),
                  now)
            : base::Result<domain::Transition>(life.status());
    if (placed.ok()) {
      d.steps.push_back(*placed);
    } else {
      refused(&d, placed.status());
    }
    out.push_back(std::move(d));
  }
  return out;
}

Status SchedulerController::PreemptSteps(const sched::PreemptDecision& p, double now, Decision* d) {
  auto life = api::LifeOf(d->record);
  if (!life.ok()) return life.status();
  const std::string reason =
      "preempted for job " + std::to_string(p.for_job) + " (" + p.reason + ")";
  // The preemptor is kept with the stop, so that a rebuild knows whom the victim frees room for.
  auto stop = domain::lifecycle::RequestStop(
      *life, {domain::StopIntent::kRequeue, reason, "Preempted", p.stop_at, p.for_job}, now);
  if (!stop.ok()) return stop.status();
  d->steps.push_back(*stop);
  if (!RunsOnAgents(d->record.allocation)) {  // nothing to wait for
    auto done = domain::lifecycle::Stopped(stop->life, "no agent runs its nodes", now);
    if (!done.ok()) return done.status();
    d->steps.push_back(*done);
    d->settled = true;
  }
  return Status::Ok();
}

base::Result<int64_t> SchedulerController::WriteDecisions(std::vector<Decision>* decisions,
                                                          double now) {
  int64_t seq = 0;
  std::vector<std::optional<store::JobRecord>> written(decisions->size());
  Status s = store_->Write([&](store::Tx& tx) {
    written.assign(decisions->size(), std::nullopt);  // a transaction run again starts again
    for (size_t i = 0; i < decisions->size(); ++i) {
      const Decision& d = (*decisions)[i];
      if (d.steps.empty()) continue;  // refused by the lifecycle: undone
      auto stored = tx.GetJob(d.record.id);
      if (!stored.ok() && stored.status().code() != base::StatusCode::kNotFound) {
        return stored.status();
      }
      if (!stored.ok() || stored->version != d.record.version) continue;  // moved: left out
      store::JobRecord r = d.record;
      std::vector<store::Event> events;
      for (const domain::Transition& t : d.steps) {
        if (t.released) {
          // The decision's record is the controller's copy, without the user and the spec that
          // accounting reads: the stored ones stand in.
          store::JobRecord whole = r;
          whole.user = stored->user;
          whole.spec = stored->spec;
          if (Status a = api::AccountForRun(tx, t, now, whole); !a.ok()) return a;
        }
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
      written[i] = std::move(r);
    }
    return Status::Ok();
  });
  // When the transaction failed, nothing of it was kept: every decision is undone.
  for (size_t i = 0; i < decisions->size(); ++i) {
    Decision& d = (*decisions)[i];
    d.written = s.ok() && written[i].has_value();
    if (d.written) d.record = std::move(*written[i]);
  }
  if (!s.ok()) return s;
  return seq;
}

}  // namespace meridian::server
