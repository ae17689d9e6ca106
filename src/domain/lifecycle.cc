#include "domain/lifecycle.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace meridian::domain {

using base::Status;

namespace {

constexpr std::array<std::pair<Phase, std::string_view>, 7> kPhases = {{
    {Phase::kPending, "Pending"},
    {Phase::kPlaced, "Placed"},
    {Phase::kRunning, "Running"},
    {Phase::kStopping, "Stopping"},
    {Phase::kSucceeded, "Succeeded"},
    {Phase::kFailed, "Failed"},
    {Phase::kCancelled, "Cancelled"},
}};

Status NotFrom(const JobLife& life, std::string_view what) {
  return Status(base::StatusCode::kFailedPrecondition, std::string("cannot ") + std::string(what) +
                                                           " a job that is " +
                                                           std::string(PhaseName(life.phase)));
}

Transition Into(JobLife life, Phase phase, std::string reason) {
  Transition t;
  t.released = HoldsResources(life.phase) && !HoldsResources(phase);
  life.phase = phase;
  life.reason = std::move(reason);
  if (!HoldsResources(phase)) {
    life.stop = StopIntent::kNone;
    life.stop_deadline = 0;
    life.preempted_for = 0;
  }
  // An ended job keeps what its last run's tasks reported (their exit codes); a requeued one
  // starts its next run with none.
  if (phase == Phase::kPending) {
    life.tasks.clear();
    life.cause = FailureCause::kNone;
  }
  t.life = std::move(life);
  return t;
}

void Say(Transition* t, bool warning, std::string reason, std::string message) {
  t->events.push_back({warning, std::move(reason), std::move(message)});
}

// The end of a run whose tasks have all stopped while the job was Stopping.
Transition StopDone(const JobLife& life, const std::string& why, double now) {
  if (life.stop == StopIntent::kFail) {
    Transition t = Into(life, Phase::kFailed, life.reason);
    t.life.finished_at = now;
    Say(&t, true, "Failed", life.reason);
    return t;
  }
  if (life.stop == StopIntent::kCancel) {
    Transition t = Into(life, Phase::kCancelled, life.reason);
    t.life.finished_at = now;
    Say(&t, false, "Stopped", why + "; cancelled");
    return t;
  }
  Transition t = Into(life, Phase::kPending, "stopped; back in the queue");
  t.life.started_at = 0;
  Say(&t, false, "Stopped", why + "; back in the queue");
  return t;
}

std::string_view StateName(TaskStatus::State s) {
  switch (s) {
    case TaskStatus::State::kPlaced:
      return "Placed";
    case TaskStatus::State::kRunning:
      return "Running";
    case TaskStatus::State::kExited:
      return "Exited";
  }
  return "Placed";
}

bool SameTask(const TaskStatus& a, const TaskStatus& b) {
  return a.state == b.state && a.exit_code == b.exit_code && a.restarts == b.restarts &&
         a.node == b.node && a.message == b.message && a.cause == b.cause;
}

}  // namespace

std::string_view PhaseName(Phase phase) {
  for (const auto& [p, name] : kPhases) {
    if (p == phase) return name;
  }
  return "Pending";
}

std::optional<Phase> ParsePhase(std::string_view name) {
  for (const auto& [p, n] : kPhases) {
    if (n == name) return p;
  }
  return std::nullopt;
}

bool IsTerminal(Phase phase) {
  return phase == Phase::kSucceeded || phase == Phase::kFailed || phase == Phase::kCancelled;
}

bool HoldsResources(Phase phase) {
  return phase == Phase::kPlaced || phase == Phase::kRunning || phase == Phase::kStopping;
}

namespace lifecycle {

DependencyVerdict JudgeDependencies(const std::vector<DependencyState>& dependencies) {
  using State = DependencyVerdict::State;
  DependencyVerdict waiting{State::kMet, ""};
  for (const DependencyState& d : dependencies) {
    const std::string what = std::string(DependencyKindName(d.kind)) + ":" + std::to_string(d.job);
    if (!d.found || d.phases.empty()) {
      return {State::kNever,
              "dependency " + what + " can never be satisfied: " +
                  (d.kind == DependencyKind::kAfterCorr ? "the array has no element of this index"
                                                        : "the job does not exist")};
    }
    size_t ended = 0, succeeded = 0;
    for (Phase p : d.phases) {
      ended += IsTerminal(p);
      succeeded += p == Phase::kSucceeded;
    }
    const size_t n = d.phases.size();
    const bool wants_ok =
        d.kind == DependencyKind::kAfterOk || d.kind == DependencyKind::kAfterCorr;
    if (wants_ok && ended > succeeded) {
      return {State::kNever,
              "dependency " + what + " can never be satisfied: the job failed or was cancelled"};
    }
    if (d.kind == DependencyKind::kAfterNotOk && succeeded > 0) {
      return {State::kNever, "dependency " + what + " can never be satisfied: the job succeeded"};
    }
    const bool met = wants_ok ? succeeded == n : ended == n;
    if (!met && waiting.state == State::kMet) {
      waiting = {State::kWaiting, "waiting for dependency " + what + " (" +
                                      std::to_string(n - ended) + " of " + std::to_string(n) +
                                      (n == 1 ? " job" : " jobs") + " not ended)"};
    }
  }
  return waiting;
}

base::Result<Transition> DependencyNeverMet(const JobLife& life, const std::string& why,
                                            double now) {
  if (life.phase != Phase::kPending) return NotFrom(life, "fail for a dependency");
  Transition t = Into(life, Phase::kFailed, why);
  t.life.finished_at = now;
  t.life.cause = FailureCause::kDependency;
  Say(&t, true, "DependencyNeverSatisfied", why);
  return t;
}

base::Result<Transition> Place(const JobLife& life, int32_t tasks, const std::string& where,
                               double now) {
  (void)now;
  if (life.phase != Phase::kPending) return NotFrom(life, "place");
  if (tasks <= 0) return Status::Invalid("a placement needs at least one task");
  Transition t = Into(life, Phase::kPlaced, "placed on " + where);
  t.life.generation = life.generation + 1;
  t.life.tasks.assign(static_cast<size_t>(tasks), TaskStatus{});
  t.life.started_at = 0;
  t.life.cause = FailureCause::kNone;
  Say(&t, false, "Placed", t.life.reason);
  return t;
}

base::Result<Transition> RequestStop(const JobLife& life, const StopRequest& request, double now) {
  (void)now;
  const StopIntent intent = request.intent;
  const std::string& reason = request.reason;
  const std::string& event_reason = request.event_reason;
  const double deadline = request.deadline;
  if (intent == StopIntent::kNone) return Status::Invalid("a stop needs an intent");
  if (life.phase == Phase::kStopping) {
    // Already on its way out: the earlier deadline holds, and the stronger intent wins (a
    // failure over a cancel over a requeue).
    if (static_cast<int>(intent) <= static_cast<int>(life.stop)) {
      Transition t;
      t.life = life;
      t.life.stop_deadline = std::min(life.stop_deadline, deadline);
      return t;  // nothing new to say
    }
    Transition t;
    t.life = life;
    t.life.stop = intent;
    t.life.reason = reason;
    t.life.stop_deadline = std::min(life.stop_deadline, deadline);
    Say(&t, false, event_reason, reason + " (already stopping)");
    return t;
  }
  if (life.phase != Phase::kPlaced && life.phase != Phase::kRunning) {
    return NotFrom(life, "stop");
  }
  Transition t = Into(life, Phase::kStopping, reason);
  t.life.stop = intent;
  t.life.stop_deadline = deadline;
  t.life.preempted_for = request.preempted_for;
  Say(&t, intent == StopIntent::kRequeue, event_reason, reason);
  return t;
}

base::Result<Transition> Cancel(const JobLife& life, const std::string& by, double grace,
                                double now) {
  const std::string reason = "cancelled by " + by;
  if (IsTerminal(life.phase)) {
    return Status(base::StatusCode::kFailedPrecondition,
                  "the job has already ended (" + std::string(PhaseName(life.phase)) + ")");
  }
  if (life.phase == Phase::kPending) {
    Transition t = Into(life, Phase::kCancelled, reason);
    t.life.finished_at = now;
    Say(&t, false, "Cancelled", reason);
    return t;
  }
  return RequestStop(life, {StopIntent::kCancel, reason, "Cancelled", now + grace, 0}, now);
}

Transition Report(const JobLife& life, const std::string& node,
                  const std::vector<TaskReport>& reports,
                  const std::vector<std::string>& task_nodes, int64_t max_restarts, double now) {
  Transition t;
  t.life = life;
  if (!HoldsResources(life.phase)) return t;  // ended or requeued: what is reported is stale
  const size_t n = task_nodes.size();
  JobLife& l = t.life;
  l.tasks.resize(n);
  bool changed = false;
  std::string refused;  // the first task its runner gave back
  for (const TaskReport& r : reports) {
    if (r.generation != l.generation || r.task < 0 || static_cast<size_t>(r.task) >= n ||
        task_nodes[static_cast<size_t>(r.task)] != node) {
      continue;  // another run's task: it is not listed for the node, so its runner stops it
    }
    TaskStatus& s = l.tasks[static_cast<size_t>(r.task)];
    const TaskStatus before = s;
    s.state = r.state;
    s.node = node;
    s.restarts = r.restarts;
    if (r.state == TaskStatus::State::kExited) {
      s.exit_code = r.exit_code;
      s.cause = r.cause;
    }
    if (!r.message.empty()) s.message = r.message;
    if (r.refused && r.state == TaskStatus::State::kExited && refused.empty()) {
      refused = "task " + std::to_string(r.task) + " refused on " + node +
                (r.message.empty() ? "" : ": " + r.message);
    }
    if (SameTask(s, before)) continue;
    changed = true;
    if (r.restarts > before.restarts) {
      Say(&t, true, "Restarted",
          "task " + std::to_string(r.task) + " restarted (" + std::to_string(r.restarts) + " of " +
              std::to_string(max_restarts) + ")" + (r.message.empty() ? "" : ": " + r.message));
    }
  }
  if (!changed) return t;
  size_t running = 0, exited = 0, succeeded = 0;
  std::string failure;
  FailureCause cause = FailureCause::kNone;
  for (size_t i = 0; i < n; ++i) {
    const TaskStatus& s = l.tasks[i];
    running += s.state == TaskStatus::State::kRunning;
    if (s.state != TaskStatus::State::kExited) continue;
    ++exited;
    if (s.exit_code && *s.exit_code == 0) {
      ++succeeded;
    } else if (failure.empty()) {
      cause = s.cause != FailureCause::kNone ? s.cause
              : s.exit_code                  ? FailureCause::kExitCode
                                             : FailureCause::kNotStarted;
      // With the runner's word on why: its diagnosis (killed for memory, a GPU fault, ...) or
      // why it stopped the task (runtime limit, lost lease).
      failure = "task " + std::to_string(i) +
                (s.exit_code ? " exited with code " + std::to_string(*s.exit_code) +
                                   (s.message.empty() ? "" : " (" + s.message + ")")
                             : ": " + (s.message.empty() ? std::string("ended without an exit code")
                                                         : s.message));
    }
  }
  std::vector<LifeEvent> restarts = std::move(t.events);
  if (!refused.empty() && l.phase == Phase::kPlaced && running == 0) {
    // Nothing of this run started, so nothing failed: back to the queue, as a placement that no
    // longer holds, without a restart counted. (Once a task of it ran, a refusal is an exit
    // like any other, and counts as a failure.)
    t = Into(l, Phase::kPending, "requeued: " + refused);
    t.life.started_at = 0;
    // Given back again and again (a limit of the back end's that placement cannot see): each
    // placement from the second on waits twice as long as the one before.
    t.life.refusals = l.refusals + 1;
    if (t.life.refusals >= 2) {
      const double wait =
          std::min(kRefusalBackoffMax,
                   kRefusalBackoff * std::pow(2.0, static_cast<double>(t.life.refusals - 2)));
      t.life.eligible_at = now + wait;
      t.life.reason += "; given back " + std::to_string(t.life.refusals) +
                       " times in a row: not placed again for " +
                       std::to_string(static_cast<int64_t>(wait)) + " s";
    }
    Say(&t, true, "Requeued", t.life.reason);
    t.events.insert(t.events.begin(), restarts.begin(), restarts.end());
    return t;
  }
  if (l.phase == Phase::kStopping) {
    if (exited == n) {
      t = StopDone(l, "every task stopped", now);
    }
  } else if (!failure.empty() && exited < n) {
    // The others still run: they are stopped now, and the job fails once they have.
    t = Into(l, Phase::kStopping, failure);
    t.life.stop = StopIntent::kFail;
    t.life.stop_deadline = now;
    t.life.cause = cause;
    Say(&t, true, "Stopping", failure + "; stopping the other tasks");
  } else if (!failure.empty()) {
    t = Into(l, Phase::kFailed, failure);
    t.life.finished_at = now;
    t.life.cause = cause;
    Say(&t, true, "Failed", failure);
  } else if (succeeded == n) {
    t = Into(l, Phase::kSucceeded, "every task exited with code 0");
    t.life.finished_at = now;
    Say(&t, false, "Succeeded", t.life.reason);
  } else if (l.phase == Phase::kPlaced && running > 0) {
    t = Into(l, Phase::kRunning, "running on " + node);
    t.life.started_at = now;
    t.life.refusals = 0;
    t.life.eligible_at = 0;
    Say(&t, false, "Started", t.life.reason);
  }
  t.events.insert(t.events.begin(), restarts.begin(), restarts.end());
  if (t.events.empty()) Say(&t, false, "TaskUpdate", "tasks reported by " + node);
  return t;
}

base::Result<Transition> Stopped(const JobLife& life, const std::string& why, double now) {
  if (life.phase != Phase::kStopping) return NotFrom(life, "complete the stop of");
  return StopDone(life, why, now);
}

base::Result<Transition> NodeLost(const JobLife& life, const std::string& node,
                                  const std::vector<bool>& lost, const RestartPolicy& policy,
                                  double now) {
  if (!HoldsResources(life.phase)) return NotFrom(life, "lose the node of");
  const std::string what = "node " + node + " lost";
  // What ran on the lost nodes is dead (fenced): it counts as exited, without a code.
  JobLife l = life;
  bool others_run = false;
  for (size_t i = 0; i < l.tasks.size(); ++i) {
    TaskStatus& t = l.tasks[i];
    if (t.state == TaskStatus::State::kExited) continue;
    if (lost.empty() || (i < lost.size() && lost[i])) {
      t.state = TaskStatus::State::kExited;
      t.exit_code.reset();
      t.message = what;
      t.cause = FailureCause::kNodeLost;
    } else {
      others_run = true;
    }
  }
  if (life.phase == Phase::kStopping) {
    if (!others_run) return StopDone(l, what, now);
    Transition t;
    t.life = std::move(l);
    Say(&t, true, "TaskLost", what + "; the job's other tasks are still stopping");
    return t;
  }
  const bool again = policy.on_failure && life.requeues < policy.max_restarts;
  const std::string reason =
      again ? "requeued: " + what
            : what + (policy.on_failure ? " (no restarts left)" : " (restartPolicy never)");
  if (others_run) {
    Transition t = Into(l, Phase::kStopping, reason);
    t.life.stop = again ? StopIntent::kRequeue : StopIntent::kFail;
    t.life.stop_deadline = now;
    if (again) t.life.requeues = life.requeues + 1;
    if (!again) t.life.cause = FailureCause::kNodeLost;
    Say(&t, true, "TaskLost",
        what + "; stopping the job's other tasks before it is " + (again ? "requeued" : "failed"));
    return t;
  }
  if (again) {
    Transition t = Into(l, Phase::kPending, reason);
    t.life.requeues = life.requeues + 1;
    t.life.started_at = 0;
    Say(&t, true, "Requeued", t.life.reason);
    return t;
  }
  Transition t = Into(l, Phase::kFailed, reason);
  t.life.finished_at = now;
  t.life.cause = FailureCause::kNodeLost;
  Say(&t, true, "Failed", t.life.reason);
  return t;
}

base::Result<Transition> GpuFault(const JobLife& life, const std::string& what,
                                  const RestartPolicy& policy, double deadline, double now) {
  if (!HoldsResources(life.phase)) return NotFrom(life, "stop for a GPU fault");
  const bool again = policy.on_failure && life.requeues < policy.max_restarts;
  const std::string reason =
      again ? "requeued: " + what
            : what + (policy.on_failure ? " (no restarts left)" : " (restartPolicy never)");
  auto t = RequestStop(
      life, {again ? StopIntent::kRequeue : StopIntent::kFail, reason, "GpuFault", deadline, 0},
      now);
  if (!t.ok() || t->events.empty()) return t;  // stopping already, for as strong a reason
  if (again && life.phase != Phase::kStopping) t->life.requeues = life.requeues + 1;
  if (!again) t->life.cause = FailureCause::kGpuFault;
  t->events.back().warning = true;
  return t;
}

base::Result<Transition> Requeue(const JobLife& life, const std::string& why, double now) {
  (void)now;
  if (!HoldsResources(life.phase)) return NotFrom(life, "requeue");
  if (life.phase == Phase::kStopping && life.stop != StopIntent::kRequeue) {
    return StopDone(life, why, now);  // it was ending anyway
  }
  Transition t = Into(life, Phase::kPending, "requeued: " + why);
  t.life.started_at = 0;
  Say(&t, true, "Requeued", t.life.reason);
  return t;
}

}  // namespace lifecycle

base::Result<JobLife> DecodeLife(std::string_view phase, std::string reason, int64_t generation,
                                 const Json& status) {
  auto p = ParsePhase(phase);
  if (!p) return Status::Invalid("phase: \"" + std::string(phase) + "\" is not a job phase");
  JobLife life;
  life.phase = *p;
  life.reason = std::move(reason);
  life.generation = generation;
  if (!status.is_object()) return life;
  auto number = [&](const Json& o, const char* key, double fallback) {
    return o.contains(key) && o.at(key).is_number() ? o.at(key).get<double>() : fallback;
  };
  auto text = [&](const Json& o, const char* key) {
    return o.contains(key) && o.at(key).is_string() ? o.at(key).get<std::string>() : "";
  };
  life.requeues = static_cast<int64_t>(number(status, "restarts", 0));
  life.refusals = static_cast<int64_t>(number(status, "refusals", 0));
  life.eligible_at = number(status, "eligibleAt", 0);
  life.started_at = number(status, "startedAt", 0);
  life.finished_at = number(status, "finishedAt", 0);
  life.cause = ParseCause(text(status, "cause")).value_or(FailureCause::kNone);
  if (status.contains("stop") && status.at("stop").is_object()) {
    const Json& s = status.at("stop");
    const std::string intent = text(s, "intent");
    life.stop = intent == "cancel"    ? StopIntent::kCancel
                : intent == "fail"    ? StopIntent::kFail
                : intent == "requeue" ? StopIntent::kRequeue
                                      : StopIntent::kNone;
    life.stop_deadline = number(s, "deadline", 0);
    life.preempted_for = static_cast<int64_t>(number(s, "for", 0));
  }
  if (life.phase == Phase::kStopping && life.stop == StopIntent::kNone) {
    life.stop = StopIntent::kRequeue;  // stored before intents were: every stop was a preemption
  }
  if (status.contains("tasks") && status.at("tasks").is_array()) {
    for (const Json& t : status.at("tasks")) {
      TaskStatus s;
      if (!t.is_object()) {
        life.tasks.push_back(s);
        continue;
      }
      const std::string state = text(t, "state");
      s.state = state == "Running"  ? TaskStatus::State::kRunning
                : state == "Exited" ? TaskStatus::State::kExited
                                    : TaskStatus::State::kPlaced;
      if (t.contains("exitCode") && t.at("exitCode").is_number_integer()) {
        s.exit_code = t.at("exitCode").get<int64_t>();
      }
      s.restarts = static_cast<int64_t>(number(t, "restarts", 0));
      s.node = text(t, "node");
      s.message = text(t, "message");
      s.cause = ParseCause(text(t, "cause")).value_or(FailureCause::kNone);
      life.tasks.push_back(std::move(s));
    }
  }
  return life;
}

void EncodeLife(const JobLife& life, Json* status) {
  Json& s = *status;
  if (!s.is_object()) s = Json::object();
  s.erase("tasks");
  s.erase("stop");
  s.erase("startedAt");
  s.erase("finishedAt");
  s.erase("refusals");
  s.erase("eligibleAt");
  s.erase("cause");
  if (life.cause != FailureCause::kNone) s["cause"] = CauseName(life.cause);
  if (life.requeues > 0) {
    s["restarts"] = life.requeues;
  } else {
    s.erase("restarts");
  }
  if (life.started_at > 0) s["startedAt"] = life.started_at;
  if (life.finished_at > 0) s["finishedAt"] = life.finished_at;
  if (life.refusals > 0) s["refusals"] = life.refusals;
  if (life.eligible_at > 0) s["eligibleAt"] = life.eligible_at;
  if (life.stop != StopIntent::kNone) {
    const char* intent = life.stop == StopIntent::kCancel ? "cancel"
                         : life.stop == StopIntent::kFail ? "fail"
                                                          : "requeue";
    s["stop"] = {{"intent", intent}, {"deadline", life.stop_deadline}};
    if (life.preempted_for > 0) s["stop"]["for"] = life.preempted_for;
  }
  // Tasks are shown once something was reported of them; a fresh placement has none yet.
  const bool reported = std::any_of(life.tasks.begin(), life.tasks.end(), [](const TaskStatus& t) {
    return t.state != TaskStatus::State::kPlaced || !t.node.empty();
  });
  if (!reported) return;
  Json tasks = Json::array();
  for (const TaskStatus& t : life.tasks) {
    Json j = {{"state", StateName(t.state)}};
    if (!t.node.empty()) j["node"] = t.node;
    if (t.state != TaskStatus::State::kPlaced || t.restarts > 0) j["restarts"] = t.restarts;
    if (t.state == TaskStatus::State::kExited) {
      j["exitCode"] = t.exit_code ? Json(*t.exit_code) : Json();
    }
    if (!t.message.empty()) j["message"] = t.message;
    if (t.cause != FailureCause::kNone) j["cause"] = CauseName(t.cause);
    tasks.push_back(std::move(j));
  }
  s["tasks"] = std::move(tasks);
}

}  // namespace meridian::domain
