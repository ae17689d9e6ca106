#include "domain/lifecycle.h"

#include <gtest/gtest.h>

#include <functional>

namespace meridian::domain {
namespace {

using State = TaskStatus::State;

JobLife Life(Phase phase, int32_t tasks = 0, int64_t generation = 1) {
  JobLife l;
  l.phase = phase;
  l.generation = generation;
  l.tasks.assign(static_cast<size_t>(tasks), TaskStatus{});
  if (phase == Phase::kStopping) {
    l.stop = StopIntent::kRequeue;
    l.stop_deadline = 130;
  }
  return l;
}

TaskReport Rep(int32_t task, State state, std::optional<int64_t> code = std::nullopt,
               int64_t generation = 1) {
  TaskReport r;
  r.task = task;
  r.generation = generation;
  r.state = state;
  r.exit_code = code;
  return r;
}

// Every phase against every caller's transition: which are allowed, where they go, and
// whether the job's resources become free.
struct Case {
  const char* name;
  Phase from;
  StopIntent intent;  // for a Stopping job
  std::function<base::Result<Transition>(const JobLife&)> apply;
  bool allowed;
  Phase to;
  bool released;
  const char* event;  // the first event's reason; "" for none
};

TEST(Lifecycle, TransitionTable) {
  auto place = [](const JobLife& l) { return lifecycle::Place(l, 2, "n1, n2", 100); };
  auto cancel = [](const JobLife& l) { return lifecycle::Cancel(l, "alice", 30, 100); };
  auto preempt = [](const JobLife& l) {
    return lifecycle::RequestStop(
        l, {StopIntent::kRequeue, "preempted for job 9", "Preempted", 130, 9}, 100);
  };
  auto lost = [](const JobLife& l) {
    return lifecycle::NodeLost(l, "n1", {}, RestartPolicy{true, 3}, 100);
  };
  auto lost_never = [](const JobLife& l) {
    return lifecycle::NodeLost(l, "n1", {}, RestartPolicy{false, 3}, 100);
  };
  auto stopped = [](const JobLife& l) { return lifecycle::Stopped(l, "no runner", 100); };
  auto requeue = [](const JobLife& l) { return lifecycle::Requeue(l, "node gone", 100); };
  const std::vector<Case> cases = {
      {"place pending", Phase::kPending, StopIntent::kNone, place, true, Phase::kPlaced, false,
       "Placed"},
      {"place running", Phase::kRunning, StopIntent::kNone, place, false, {}, false, ""},
      {"place cancelled", Phase::kCancelled, StopIntent::kNone, place, false, {}, false, ""},
      {"cancel pending", Phase::kPending, StopIntent::kNone, cancel, true, Phase::kCancelled, false,
       "Cancelled"},
      // Cancel never frees devices while tasks may run: it stops them first.
      {"cancel placed", Phase::kPlaced, StopIntent::kNone, cancel, true, Phase::kStopping, false,
       "Cancelled"},
      {"cancel running", Phase::kRunning, StopIntent::kNone, cancel, true, Phase::kStopping, false,
       "Cancelled"},
      {"cancel preempted", Phase::kStopping, StopIntent::kRequeue, cancel, true, Phase::kStopping,
       false, "Cancelled"},
      {"cancel cancelling", Phase::kStopping, StopIntent::kCancel, cancel, true, Phase::kStopping,
       false, ""},
      {"cancel succeeded", Phase::kSucceeded, StopIntent::kNone, cancel, false, {}, false, ""},
      {"cancel failed", Phase::kFailed, StopIntent::kNone, cancel, false, {}, false, ""},
      {"preempt running", Phase::kRunning, StopIntent::kNone, preempt, true, Phase::kStopping,
       false, "Preempted"},
      {"preempt pending", Phase::kPending, StopIntent::kNone, preempt, false, {}, false, ""},
      {"preempt cancelling", Phase::kStopping, StopIntent::kCancel, preempt, true, Phase::kStopping,
       false, ""},
      {"lost running, on-failure", Phase::kRunning, StopIntent::kNone, lost, true, Phase::kPending,
       true, "Requeued"},
      {"lost running, never", Phase::kRunning, StopIntent::kNone, lost_never, true, Phase::kFailed,
       true, "Failed"},
      {"lost preempted", Phase::kStopping, StopIntent::kRequeue, lost_never, true, Phase::kPending,
       true, "Stopped"},
      {"lost cancelling", Phase::kStopping, StopIntent::kCancel, lost, true, Phase::kCancelled,
       true, "Stopped"},
      {"lost pending", Phase::kPending, StopIntent::kNone, lost, false, {}, false, ""},
      {"stopped preempted", Phase::kStopping, StopIntent::kRequeue, stopped, true, Phase::kPending,
       true, "Stopped"},
      {"stopped cancelling", Phase::kStopping, StopIntent::kCancel, stopped, true,
       Phase::kCancelled, true, "Stopped"},
      {"stopped failing", Phase::kStopping, StopIntent::kFail, stopped, true, Phase::kFailed, true,
       "Failed"},
      {"stopped running", Phase::kRunning, StopIntent::kNone, stopped, false, {}, false, ""},
      {"requeue placed", Phase::kPlaced, StopIntent::kNone, requeue, true, Phase::kPending, true,
       "Requeued"},
      {"requeue cancelling", Phase::kStopping, StopIntent::kCancel, requeue, true,
       Phase::kCancelled, true, "Stopped"},
      {"requeue pending", Phase::kPending, StopIntent::kNone, requeue, false, {}, false, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    JobLife l = Life(c.from, HoldsResources(c.from) ? 2 : 0);
    if (c.from == Phase::kStopping) l.stop = c.intent;
    auto t = c.apply(l);
    ASSERT_EQ(t.ok(), c.allowed) << (t.ok() ? "" : t.status().message());
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), base::StatusCode::kFailedPrecondition);
      continue;
    }
    EXPECT_EQ(PhaseName(t->life.phase), PhaseName(c.to));
    EXPECT_EQ(t->released, c.released);
    if (std::string(c.event).empty()) {
      EXPECT_TRUE(t->events.empty());
    } else {
      ASSERT_FALSE(t->events.empty());
      EXPECT_EQ(t->events[0].reason, c.event);
    }
    if (!HoldsResources(t->life.phase)) {
      EXPECT_EQ(t->life.stop, StopIntent::kNone);
    }
    if (t->life.phase == Phase::kPending) {
      EXPECT_TRUE(t->life.tasks.empty());
    }
  }
}

TEST(Lifecycle, PlacingStartsANewGeneration) {
  auto t = lifecycle::Place(Life(Phase::kPending, 0, 4), 3, "n1", 10);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->life.generation, 5);
  EXPECT_EQ(t->life.tasks.size(), 3u);
  EXPECT_EQ(t->life.reason, "placed on n1");
}

TEST(Lifecycle, CancelKeepsTheEarlierDeadlineAndWinsOverRequeue) {
  JobLife l = Life(Phase::kStopping, 1);  // preempted, deadline 130
  auto t = lifecycle::Cancel(l, "bob", 60, 100);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->life.stop, StopIntent::kCancel);
  EXPECT_DOUBLE_EQ(t->life.stop_deadline, 130);
  EXPECT_EQ(t->life.reason, "cancelled by bob");
  // A later preemption of the cancelling job leaves it cancelling.
  auto p = lifecycle::RequestStop(t->life, {StopIntent::kRequeue, "preempted", "Preempted", 110, 0},
                                  105);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->life.stop, StopIntent::kCancel);
  EXPECT_DOUBLE_EQ(p->life.stop_deadline, 110);
}

TEST(Lifecycle, ReportsMoveTheRunAndIgnoreStaleOnes) {
  const std::vector<std::string> nodes = {"n1", "n2"};
  JobLife l = Life(Phase::kPlaced, 2, 3);
  // Another generation, another node's task, a task out of range: all ignored.
  auto t = lifecycle::Report(l, "n1",
                             {Rep(0, State::kRunning, {}, 2), Rep(1, State::kRunning, {}, 3),
                              Rep(5, State::kRunning, {}, 3)},
                             nodes, 3, 50);
  EXPECT_TRUE(t.events.empty());
  EXPECT_EQ(t.life.phase, Phase::kPlaced);
  t = lifecycle::Report(l, "n1", {Rep(0, State::kRunning, {}, 3)}, nodes, 3, 50);
  EXPECT_EQ(t.life.phase, Phase::kRunning);
  EXPECT_DOUBLE_EQ(t.life.started_at, 50);
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].reason, "Started");
  // The same report again changes nothing.
  auto again = lifecycle::Report(t.life, "n1", {Rep(0, State::kRunning, {}, 3)}, nodes, 3, 51);
  EXPECT_TRUE(again.events.empty());
  // One task succeeds: still running; both: succeeded, resources free.
  auto one = lifecycle::Report(t.life, "n1", {Rep(0, State::kExited, 0, 3)}, nodes, 3, 60);
  EXPECT_EQ(one.life.phase, Phase::kRunning);
  EXPECT_FALSE(one.released);
  auto both = lifecycle::Report(one.life, "n2", {Rep(1, State::kExited, 0, 3)}, nodes, 3, 61);
  EXPECT_EQ(both.life.phase, Phase::kSucceeded);
  EXPECT_TRUE(both.released);
  EXPECT_DOUBLE_EQ(both.life.finished_at, 61);
}

TEST(Lifecycle, AFailedTaskStopsTheOthersBeforeTheJobFails) {
  const std::vector<std::string> nodes = {"n1", "n2"};
  JobLife l = Life(Phase::kRunning, 2);
  l = lifecycle::Report(l, "n1", {Rep(0, State::kRunning)}, nodes, 3, 1).life;
  l = lifecycle::Report(l, "n2", {Rep(1, State::kRunning)}, nodes, 3, 1).life;
  auto t = lifecycle::Report(l, "n1", {Rep(0, State::kExited, 3)}, nodes, 3, 10);
  EXPECT_EQ(t.life.phase, Phase::kStopping);  // task 1 still runs on n2: its GPUs stay taken
  EXPECT_EQ(t.life.stop, StopIntent::kFail);
  EXPECT_FALSE(t.released);
  EXPECT_EQ(t.life.reason, "task 0 exited with code 3");
  auto done = lifecycle::Report(t.life, "n2", {Rep(1, State::kExited, 143)}, nodes, 3, 12);
  EXPECT_EQ(done.life.phase, Phase::kFailed);
  EXPECT_TRUE(done.released);
  EXPECT_EQ(done.life.reason, "task 0 exited with code 3");
}

// A runner that gives a placement back (Slurm kept the job waiting: foreign work took its
// nodes) sends the job back to the queue: nothing failed, no restart is counted.
TEST(Lifecycle, ARefusedTaskSendsTheJobBackToTheQueue) {
  const std::vector<std::string> nodes = {"n1", "n2"};
  TaskReport no = Rep(0, State::kExited);
  no.refused = true;
  no.message = "Slurm kept job 9 pending (Resources)";
  auto t = lifecycle::Report(Life(Phase::kPlaced, 2), "n1", {no}, nodes, 3, 10);
  EXPECT_EQ(t.life.phase, Phase::kPending);
  EXPECT_TRUE(t.released);
  EXPECT_EQ(t.life.reason, "requeued: task 0 refused on n1: Slurm kept job 9 pending (Resources)");
  EXPECT_EQ(t.life.requeues, 0);
  EXPECT_TRUE(t.life.tasks.empty());
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].reason, "Requeued");
  // Once another task of the run has run, a refusal is an exit like any other: the job fails
  // (through Stopping, the other task still running), so that a refusal cannot requeue a job
  // past its restart limit.
  JobLife l =
      lifecycle::Report(Life(Phase::kPlaced, 2), "n2", {Rep(1, State::kRunning)}, nodes, 3, 10)
          .life;
  auto failing = lifecycle::Report(l, "n1", {no}, nodes, 3, 11);
  EXPECT_EQ(failing.life.phase, Phase::kStopping);
  EXPECT_EQ(failing.life.stop, StopIntent::kFail);
  // Stale: a refusal of another generation changes nothing.
  TaskReport old = no;
  old.generation = 7;
  EXPECT_TRUE(lifecycle::Report(Life(Phase::kPlaced, 2), "n1", {old}, nodes, 3, 10).events.empty());
}

// A placement given back again and again (a limit of Slurm's that Meridian cannot see: a QOS)
// is not placed again at once: from the second refusal in a row on, the job waits 30 s, then
// twice as long each time, at most 30 minutes; a run that starts forgets it all.
TEST(Lifecycle, RefusalsInARowBackOffUntilARunStarts) {
  const std::vector<std::string> nodes = {"n1"};
  TaskReport no = Rep(0, State::kExited);
  no.refused = true;
  no.message = "Slurm kept job 9 pending (QOSMaxGRESPerUser)";
  JobLife l = Life(Phase::kPlaced, 1);
  auto first = lifecycle::Report(l, "n1", {no}, nodes, 3, 100);
  EXPECT_EQ(first.life.refusals, 1);
  EXPECT_EQ(first.life.eligible_at, 0) << "the first is placed again at once";
  std::vector<double> waits;
  JobLife life = first.life;
  for (int i = 0; i < 8; ++i) {
    life.phase = Phase::kPlaced;  // placed again
    auto again = lifecycle::Report(life, "n1", {no}, nodes, 3, 1000);
    life = again.life;
    waits.push_back(life.eligible_at - 1000);
  }
  EXPECT_EQ(waits, (std::vector<double>{30, 60, 120, 240, 480, 960, 1800, 1800}));
  EXPECT_EQ(life.refusals, 9);
  EXPECT_NE(life.reason.find("given back 9 times in a row: not placed again for 1800 s"),
            std::string::npos)
      << life.reason;
  // Kept in the stored form.
  Json status = Json::object();
  EncodeLife(life, &status);
  auto back = DecodeLife("Pending", life.reason, 1, status);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->refusals, 9);
  EXPECT_EQ(back->eligible_at, life.eligible_at);
  // It starts at last: all forgotten.
  life.phase = Phase::kPlaced;
  auto runs = lifecycle::Report(life, "n1", {Rep(0, State::kRunning)}, nodes, 3, 3000);
  EXPECT_EQ(runs.life.phase, Phase::kRunning);
  EXPECT_EQ(runs.life.refusals, 0);
  EXPECT_EQ(runs.life.eligible_at, 0);
  EncodeLife(runs.life, &status);
  EXPECT_FALSE(status.contains("refusals"));
  EXPECT_FALSE(status.contains("eligibleAt"));
}

TEST(Lifecycle, AStoppingJobEndsOnlyWhenEveryTaskHasStopped) {
  const std::vector<std::string> nodes = {"n1", "n1"};
  auto c = lifecycle::Cancel(Life(Phase::kRunning, 2), "alice", 30, 100);
  ASSERT_TRUE(c.ok());
  auto one = lifecycle::Report(c->life, "n1", {Rep(0, State::kExited, 143)}, nodes, 3, 110);
  EXPECT_EQ(one.life.phase, Phase::kStopping);
  EXPECT_FALSE(one.released);
  auto both = lifecycle::Report(one.life, "n1", {Rep(1, State::kExited, 137)}, nodes, 3, 112);
  EXPECT_EQ(both.life.phase, Phase::kCancelled);
  EXPECT_TRUE(both.released);
  EXPECT_EQ(both.life.reason, "cancelled by alice");
}

TEST(Lifecycle, RestartsAreSaidAndLostNodesCountAgainstMaxRestarts) {
  const std::vector<std::string> nodes = {"n1"};
  JobLife l = Life(Phase::kRunning, 1);
  TaskReport r = Rep(0, State::kRunning);
  r.restarts = 1;
  r.message = "exited with code 1";
  auto t = lifecycle::Report(l, "n1", {r}, nodes, 3, 5);
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].reason, "Restarted");
  EXPECT_EQ(t.events[0].message, "task 0 restarted (1 of 3): exited with code 1");
  JobLife lost = Life(Phase::kRunning, 1);
  lost.requeues = 2;
  auto last = lifecycle::NodeLost(lost, "n1", {}, RestartPolicy{true, 3}, 9);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->life.phase, Phase::kPending);
  EXPECT_EQ(last->life.requeues, 3);
  JobLife rerun = last->life;  // placed again, and lost again: the fourth run is one too many
  rerun.phase = Phase::kRunning;
  auto over = lifecycle::NodeLost(rerun, "n1", {}, RestartPolicy{true, 3}, 10);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->life.phase, Phase::kFailed);
  EXPECT_EQ(over->life.reason, "node n1 lost (no restarts left)");
}

// A gang on two nodes loses one: the task on the live node may still run, so the job's devices
// stay taken (Stopping) until that task is seen to stop; only then is it requeued.
TEST(Lifecycle, ALostNodeOfAGangStopsTheOthersBeforeReleasing) {
  const std::vector<std::string> nodes = {"a", "b"};
  JobLife l = Life(Phase::kRunning, 2);
  l = lifecycle::Report(l, "a", {Rep(0, State::kRunning)}, nodes, 3, 1).life;
  l = lifecycle::Report(l, "b", {Rep(1, State::kRunning)}, nodes, 3, 1).life;
  auto t = lifecycle::NodeLost(l, "a", {true, false}, RestartPolicy{true, 3}, 50);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->life.phase, Phase::kStopping);
  EXPECT_EQ(t->life.stop, StopIntent::kRequeue);
  EXPECT_FALSE(t->released) << "task 1 still runs on b";
  EXPECT_EQ(t->life.requeues, 1);
  EXPECT_EQ(t->life.tasks[0].state, State::kExited);
  auto done = lifecycle::Report(t->life, "b", {Rep(1, State::kExited, 143)}, nodes, 3, 60);
  EXPECT_EQ(done.life.phase, Phase::kPending);
  EXPECT_TRUE(done.released);
  // Losing b too, instead, ends the stop the same way.
  auto both = lifecycle::NodeLost(t->life, "b", {false, true}, RestartPolicy{true, 3}, 70);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->life.phase, Phase::kPending);
  EXPECT_TRUE(both->released);
  // Without restarts, the job fails once the other task has stopped.
  auto never = lifecycle::NodeLost(l, "a", {true, false}, RestartPolicy{false, 3}, 50);
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->life.stop, StopIntent::kFail);
  auto failed = lifecycle::Report(never->life, "b", {Rep(1, State::kExited, 143)}, nodes, 3, 60);
  EXPECT_EQ(failed.life.phase, Phase::kFailed);
  EXPECT_EQ(failed.life.reason, "node a lost (restartPolicy never)");
}

// The runner's diagnosis of a failed task becomes the job's cause, in its status and its
// reason; a lost node is a cause of its own; a new run starts without one.
TEST(Lifecycle, AFailedJobKeepsTheCauseOfItsFirstFailedTask) {
  const std::vector<std::string> nodes = {"n1"};
  JobLife l = Life(Phase::kRunning, 1);
  TaskReport oom = Rep(0, State::kExited, 137);
  oom.cause = FailureCause::kOomKilled;
  oom.message = "killed for memory: its cgroup's OOM killer ran (limit 64 MiB; raise memoryMib)";
  auto t = lifecycle::Report(l, "n1", {oom}, nodes, 3, 10);
  EXPECT_EQ(t.life.phase, Phase::kFailed);
  EXPECT_EQ(t.life.cause, FailureCause::kOomKilled);
  EXPECT_EQ(t.life.tasks[0].cause, FailureCause::kOomKilled);
  EXPECT_NE(t.life.reason.find("killed for memory"), std::string::npos) << t.life.reason;
  Json status;
  EncodeLife(t.life, &status);
  EXPECT_EQ(status["cause"], "oom-killed");
  EXPECT_EQ(status["tasks"][0]["cause"], "oom-killed");
  auto back = DecodeLife("Failed", t.life.reason, 1, status);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->cause, FailureCause::kOomKilled);
  EXPECT_EQ(back->tasks[0].cause, FailureCause::kOomKilled);
  // A failure the runner could not diagnose is still a cause: its exit code.
  auto plain = lifecycle::Report(l, "n1", {Rep(0, State::kExited, 2)}, nodes, 3, 10);
  EXPECT_EQ(plain.life.cause, FailureCause::kExitCode);
  // A lost node that fails the job (restartPolicy never).
  auto lost = lifecycle::NodeLost(l, "n1", {}, RestartPolicy{false, 3}, 20);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->life.phase, Phase::kFailed);
  EXPECT_EQ(lost->life.cause, FailureCause::kNodeLost);
  EXPECT_EQ(lost->life.tasks[0].cause, FailureCause::kNodeLost);
  // Requeued and placed again: the new run has no cause.
  auto again = lifecycle::NodeLost(l, "n1", {}, RestartPolicy{true, 3}, 20);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->life.cause, FailureCause::kNone);
  auto placed = lifecycle::Place(again->life, 1, "n2", 21);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->life.cause, FailureCause::kNone);
  // Succeeded: no cause.
  auto ok = lifecycle::Report(l, "n1", {Rep(0, State::kExited, 0)}, nodes, 3, 10);
  EXPECT_EQ(ok.life.cause, FailureCause::kNone);
  Json ok_status;
  EncodeLife(ok.life, &ok_status);
  EXPECT_FALSE(ok_status.contains("cause"));
}

TEST(Lifecycle, StoredFormRoundTrips) {
  JobLife l = Life(Phase::kStopping, 2, 7);
  l.stop = StopIntent::kCancel;
  l.stop_deadline = 42.5;
  l.requeues = 1;
  l.started_at = 12;
  l.tasks[0] = {State::kExited, 0, 2, "n1", "done", FailureCause::kNone};
  l.tasks[1] = {State::kRunning, std::nullopt, 0, "n2", "", FailureCause::kNone};
  Json status = {{"other", 1}};
  EncodeLife(l, &status);
  EXPECT_EQ(status["other"], 1);
  EXPECT_EQ(status["stop"]["intent"], "cancel");
  EXPECT_EQ(status["tasks"][0]["state"], "Exited");
  auto back = DecodeLife("Stopping", "why", 7, status);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->stop, StopIntent::kCancel);
  EXPECT_DOUBLE_EQ(back->stop_deadline, 42.5);
  EXPECT_EQ(back->requeues, 1);
  EXPECT_DOUBLE_EQ(back->started_at, 12);
  ASSERT_EQ(back->tasks.size(), 2u);
  EXPECT_EQ(back->tasks[0].exit_code, 0);
  EXPECT_EQ(back->tasks[0].restarts, 2);
  EXPECT_EQ(back->tasks[1].state, State::kRunning);
  EXPECT_EQ(back->tasks[1].node, "n2");
  EXPECT_FALSE(DecodeLife("Runing", "", 0, status).ok());
  // A Stopping job stored before intents existed was preempted.
  auto old = DecodeLife("Stopping", "", 1, Json::object());
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->stop, StopIntent::kRequeue);
}

// A GPU fault stops the whole job through Stopping; its restart policy decides requeue or
// failure (gpu-fault), counted with the requeues of lost nodes; a stronger stop already under
// way is not weakened.
TEST(Lifecycle, AGpuFaultStopsTheJobAndItsRestartPolicyDecides) {
  const std::string what = "GPU 2 of node n1: XID 48 (double-bit ECC error)";
  JobLife running = Life(Phase::kRunning, 2);
  auto again = lifecycle::GpuFault(running, what, RestartPolicy{true, 3}, 130, 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->life.phase, Phase::kStopping);
  EXPECT_EQ(again->life.stop, StopIntent::kRequeue);
  EXPECT_EQ(again->life.stop_deadline, 130);
  EXPECT_EQ(again->life.requeues, 1);
  EXPECT_FALSE(again->released) << "its tasks may still run";
  ASSERT_EQ(again->events.size(), 1u);
  EXPECT_EQ(again->events[0].reason, "GpuFault");
  EXPECT_EQ(again->events[0].message, "requeued: " + what);
  EXPECT_TRUE(again->events[0].warning);
  auto done = lifecycle::Report(again->life, "n1",
                                {Rep(0, State::kExited, 143), Rep(1, State::kExited, 143)},
                                {"n1", "n1"}, 3, 110);
  EXPECT_EQ(done.life.phase, Phase::kPending);
  EXPECT_TRUE(done.released);

  auto never = lifecycle::GpuFault(running, what, RestartPolicy{false, 3}, 130, 100);
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->life.stop, StopIntent::kFail);
  EXPECT_EQ(never->life.cause, FailureCause::kGpuFault);
  EXPECT_EQ(never->life.reason, what + " (restartPolicy never)");
  JobLife spent = running;
  spent.requeues = 3;
  auto none_left = lifecycle::GpuFault(spent, what, RestartPolicy{true, 3}, 130, 100);
  EXPECT_EQ(none_left->life.reason, what + " (no restarts left)");

  // Already being cancelled: a requeue would be weaker, nothing changes.
  JobLife cancelling = Life(Phase::kStopping, 1);
  cancelling.stop = StopIntent::kCancel;
  auto kept = lifecycle::GpuFault(cancelling, what, RestartPolicy{true, 3}, 130, 100);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->events.empty());
  EXPECT_EQ(kept->life.stop, StopIntent::kCancel);
  EXPECT_FALSE(lifecycle::GpuFault(Life(Phase::kPending), what, {}, 130, 100).ok());
}

}  // namespace
// Each kind of dependency against the phases of what it names: met, waiting, or never.
TEST(Lifecycle, DependenciesAreJudgedByTheirKind) {
  using V = DependencyVerdict::State;
  using K = DependencyKind;
  const Phase ok = Phase::kSucceeded, bad = Phase::kFailed, gone = Phase::kCancelled,
              run = Phase::kRunning;
  struct Case {
    K kind;
    std::vector<Phase> phases;
    V want;
  };
  const std::vector<Case> cases = {
      {K::kAfterOk, {ok}, V::kMet},
      {K::kAfterOk, {run}, V::kWaiting},
      {K::kAfterOk, {bad}, V::kNever},
      {K::kAfterOk, {gone, run}, V::kNever},
      {K::kAfterOk, {ok, run}, V::kWaiting},
      {K::kAfterAny, {ok, bad, gone}, V::kMet},
      {K::kAfterAny, {ok, run}, V::kWaiting},
      {K::kAfterNotOk, {bad, gone}, V::kMet},
      {K::kAfterNotOk, {ok}, V::kNever},
      {K::kAfterNotOk, {run}, V::kWaiting},
      {K::kAfterCorr, {ok}, V::kMet},
      {K::kAfterCorr, {bad}, V::kNever},
      {K::kAfterCorr, {Phase::kPending}, V::kWaiting},
  };
  for (const Case& c : cases) {
    const DependencyVerdict v = lifecycle::JudgeDependencies({{c.kind, 7, c.phases, true}});
    EXPECT_EQ(v.state, c.want) << DependencyKindName(c.kind) << " " << c.phases.size();
    if (v.state != V::kMet) {
      EXPECT_NE(v.reason.find(std::string(DependencyKindName(c.kind)) + ":7"), std::string::npos)
          << v.reason;
    }
  }
  EXPECT_EQ(lifecycle::JudgeDependencies({}).state, V::kMet);
  EXPECT_EQ(lifecycle::JudgeDependencies({{K::kAfterAny, 9, {}, false}}).state, V::kNever);
  // All must hold: one that never can wins over one still waiting.
  const DependencyVerdict both =
      lifecycle::JudgeDependencies({{K::kAfterAny, 3, {run}, true}, {K::kAfterOk, 4, {bad}, true}});
  EXPECT_EQ(both.state, V::kNever);
  EXPECT_NE(both.reason.find("afterok:4"), std::string::npos) << both.reason;
  const DependencyVerdict first =
      lifecycle::JudgeDependencies({{K::kAfterOk, 3, {ok}, true}, {K::kAfterOk, 4, {run}, true}});
  EXPECT_EQ(first.state, V::kWaiting);
  EXPECT_NE(first.reason.find("waiting for dependency afterok:4"), std::string::npos)
      << first.reason;
}

TEST(Lifecycle, ADependencyThatCanNeverBeMetFailsAPendingJob) {
  auto t = lifecycle::DependencyNeverMet(Life(Phase::kPending), "dependency afterok:4 ...", 50);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->life.phase, Phase::kFailed);
  EXPECT_EQ(t->life.cause, FailureCause::kDependency);
  EXPECT_EQ(t->life.finished_at, 50);
  EXPECT_FALSE(t->released);
  ASSERT_EQ(t->events.size(), 1u);
  EXPECT_EQ(t->events[0].reason, "DependencyNeverSatisfied");
  EXPECT_TRUE(t->events[0].warning);
  for (Phase p : {Phase::kPlaced, Phase::kRunning, Phase::kSucceeded, Phase::kCancelled}) {
    EXPECT_FALSE(lifecycle::DependencyNeverMet(Life(p, 1), "x", 50).ok()) << PhaseName(p);
  }
}

}  // namespace meridian::domain
