// Incremental scheduler state (docs/adr/0012-job-lifecycle.md): configuration changes, commit
// conflicts and changed nodes update the live scheduler in place, and
// meridian_scheduler_rebuilds_total stays at 1 (the start); the rebuilds that remain keep what
// the cycles knew.
#include <gtest/gtest.h>

#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using base::Status;
using testing::ControlPlane;
using testing::Doc;
using testing::Estate;

// A Quota applied while jobs run and a gang waits with the backfill reservation is taken in
// place: no rebuild, the reservation and fair share stay, and the new limit holds at once.
TEST_F(ControlPlane, AQuotaChangeIsTakenInPlaceKeepingTheReservationAndFairShare) {
  std::vector<store::Object> docs = Estate(0);
  docs.push_back(Doc("Policy", "default", {{"reserveAfter", 0}}));
  Open(docs);
  Register("n1");
  Register("n2");
  Round();
  Submit("p1", {{"gpus", 8}, {"runtimeEstimate", 7200}});
  Submit("p1", {{"gpus", 8}, {"runtimeEstimate", 7200}});
  Rounds();
  Report("n1", "Running");
  Report("n2", "Running");
  const int64_t gang = Submit("p2", {{"gpus", 8}, {"tasks", 2}, {"gang", true}});
  const int64_t small = Submit("p2", {{"gpus", 1}});
  for (int i = 0; i < 12; ++i) {  // two minutes of use for p1's fair share
    clock_.Advance(10);
    Heartbeat("n1");
    Heartbeat("n2");
    Round();
  }
  const std::string behind = "waits behind the reservation of job " + std::to_string(gang);
  ASSERT_EQ(controller_->PendingReason(small), behind);
  auto row = [&](const std::string& scope) {
    for (const Json& r : controller_->Usage()) {
      if (r["name"] == scope) return r;
    }
    return Json();
  };
  const double share = row("p1")["fairShare"].get<double>();
  ASSERT_GT(share, 0);
  Apply({Doc("Quota", "p1-cap", {{"project", "p1"}, {"limitGpus", 16}})});
  Round();
  const int64_t more = Submit("p1", {{"gpus", 1}});
  Round();
  EXPECT_NE(controller_->PendingReason(more).find("quota of p1: limit 16"), std::string::npos)
      << controller_->PendingReason(more);
  EXPECT_EQ(row("p1")["limitGpus"], 16.0);
  EXPECT_EQ(row("p1")["usedGpus"], 16.0) << "the running jobs are charged to the new tree";
  EXPECT_NEAR(row("p1")["fairShare"].get<double>(), share, share * 1e-9);
  EXPECT_EQ(controller_->PendingReason(small), behind);
  EXPECT_EQ(Rebuilds(), 1);
}

// A priority class's new value and a pool's new taint are taken in place: the bumped job goes
// first, and only work that tolerates the taint lands on the pool's node.
TEST_F(ControlPlane, PriorityClassAndPoolChangesAreTakenInPlace) {
  std::vector<store::Object> docs = Estate(1);  // one declared node: no agent runs it
  docs.push_back(Doc("PriorityClass", "bump", {{"value", 0}}));
  Open(docs);
  Round();
  const int64_t filler = Submit("p1", {{"gpus", 8}, {"preemptible", false}});
  Round();
  ASSERT_EQ(Phase(filler), "Placed");
  clock_.Advance(1);
  const int64_t first = Submit("p1", {{"gpus", 8}});
  clock_.Advance(1);
  const int64_t bumped = Submit("p1", {{"gpus", 8}, {"priorityClass", "bump"}});
  Round();
  Apply({Doc("PriorityClass", "bump", {{"value", 200}, {"preempting", false}})});
  Round();
  Cancel(filler);
  Rounds();
  EXPECT_EQ(Phase(filler), "Cancelled");
  EXPECT_EQ(Phase(bumped), "Placed") << "its class outranks the older job's now";
  EXPECT_EQ(Phase(first), "Pending");
  store::Object pool = Estate(1).back();
  ASSERT_EQ(pool.kind, "NodePool");
  pool.spec["taints"] = {{{"key", "dedicated"}, {"value", "infra"}}};
  Apply({pool});
  Cancel(bumped);
  const int64_t tolerant =
      Submit("p2", {{"gpus", 8}, {"tolerations", {{{"key", "dedicated"}, {"value", "infra"}}}}});
  Rounds();
  EXPECT_EQ(Phase(tolerant), "Placed");
  EXPECT_EQ(Phase(first), "Pending") << "it does not tolerate the pool's new taint";
  // The pool declares a second node: it joins in place, with the pool's taint.
  pool.spec["nodes"] = 2;
  Apply({pool});
  const int64_t second =
      Submit("p2", {{"gpus", 8}, {"tolerations", {{{"key", "dedicated"}, {"value", "infra"}}}}});
  Rounds();
  EXPECT_EQ(Phase(second), "Placed");
  EXPECT_EQ(NodeOf(second), "h100-1");
  EXPECT_EQ(Phase(first), "Pending");
  EXPECT_EQ(Rebuilds(), 1);
}

// A job cancelled between the cycle that placed it and the commit: the other decisions of the
// cycle are written, its start is undone in the scheduler (its GPUs go to the next job), and
// the scheduler is not rebuilt.
TEST_F(ControlPlane, AJobCancelledBeforeItsStartIsWrittenLeavesTheRestOfTheCommit) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t cancelled = Submit("p1", {{"gpus", 4}});
  const int64_t placed = Submit("p2", {{"gpus", 4}});
  hooked_->before_next_write = [&] { Cancel(cancelled); };
  Round();
  EXPECT_EQ(Phase(cancelled), "Cancelled");
  EXPECT_EQ(Phase(placed), "Placed");
  const int64_t next = Submit("p1", {{"gpus", 4}});
  Rounds();
  EXPECT_EQ(Phase(next), "Placed") << "the undone start's GPUs are free";
  EXPECT_EQ(Rebuilds(), 1);
}

// After a restart, a running job's time run counts from its run's start, not from its record's
// last change: a task restarted in place (a write to the job, no new run) does not make the job
// look new, and a preemption still stops the job that started last, which lost least.
TEST_F(ControlPlane, AnAdoptedJobsTimeRunCountsFromItsStartNotItsLastChange) {
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  const int64_t older =
      Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}, {"restartPolicy", "on-failure"}});
  Rounds();
  ReportJob(NodeOf(older), older, "Running");
  Pass(30, {"n1", "n2"});
  const int64_t newer = Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}});
  Rounds();
  ReportJob(NodeOf(newer), newer, "Running");
  Pass(30, {"n1", "n2"});
  ASSERT_EQ(Phase(older), "Running");
  ASSERT_EQ(Phase(newer), "Running");
  // The older job's task restarts in place.
  Heartbeat(NodeOf(older), Json::array({{{"job", older},
                                         {"task", 0},
                                         {"generation", Get(older).generation},
                                         {"state", "Running"},
                                         {"restarts", 1}}}));
  ASSERT_EQ(Phase(older), "Running");
  ASSERT_GT(Get(older).updated_at, Get(newer).updated_at) << "the restart wrote the job";
  Pass(10, {"n1", "n2"});
  Restart();
  Submit("p2", {{"gpus", 8}, {"priorityClass", "high"}});
  Rounds();
  EXPECT_EQ(Phase(newer), "Stopping");
  EXPECT_EQ(Phase(older), "Running");
}

// A victim cancelled by its user between the cycle that preempted it and the commit: the start
// decided in the same cycle is written; the victim stops as cancelled, still counts as freeing
// room for its preemptor (no second victim), and its GPUs go to the preemptor only once its
// task has stopped.
TEST_F(ControlPlane, AVictimCancelledBeforeItsPreemptionIsWrittenHoldsItsGpusUntilItStops) {
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  // Two jobs a preemption could take; the one that lost the least work goes first.
  const int64_t other = Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}});
  Rounds();
  Pass(30, {"n1", "n2"});
  const int64_t victim = Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}});
  Rounds();
  Report("n1", "Running");
  Report("n2", "Running");
  Pass(60, {"n1", "n2"});
  const int64_t high = Submit("p2", {{"gpus", 8}, {"priorityClass", "high"}});
  const int64_t cpu = Submit("p2", {{"cpuMilli", 2000}});
  hooked_->before_next_write = [&] { Cancel(victim); };
  Round();
  EXPECT_EQ(Phase(cpu), "Placed") << "the rest of the cycle's decisions are written";
  EXPECT_EQ(Phase(victim), "Stopping");
  EXPECT_TRUE(Events(victim, "Preempted").empty());
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(2);
    Round();
    Heartbeat("n1");
    Heartbeat("n2");
    EXPECT_EQ(Phase(high), "Pending") << "the cancelled victim's task may still run";
  }
  EXPECT_TRUE(Events(other, "Preempted").empty()) << "the stopping victim frees enough";
  EXPECT_EQ(Phase(other), "Running");
  const std::string node = NodeOf(victim);
  ReportJob(node, victim, "Exited", 143);
  EXPECT_EQ(Phase(victim), "Cancelled");
  Rounds();
  EXPECT_EQ(Phase(high), "Placed");
  EXPECT_EQ(NodeOf(high), node);
  EXPECT_EQ(Rebuilds(), 1);
}

// An agent registers again with one GPU fewer: the node is changed in place, the job on the
// missing GPU is stopped through Stopping (its other GPUs stay taken until its task stops), the
// job beside it runs on, and nothing is placed on the missing GPU.
TEST_F(ControlPlane, ANodeBackWithAGpuFewerStopsOnlyTheJobOnItInPlace) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t hit = Submit("p1", {{"gpus", 4}});
  const int64_t spared = Submit("p2", {{"gpus", 4}});
  Rounds();
  Report("n1", "Running");
  ASSERT_EQ(Uuids(hit).size(), 4u);
  const std::string missing = Uuids(hit)[0];
  Register("n1", {missing});
  Round();
  EXPECT_EQ(Phase(hit), "Stopping");
  EXPECT_EQ(Events(hit, "DeviceLost").size(), 1u);
  EXPECT_EQ(Phase(spared), "Running");
  const int64_t next = Submit("p1", {{"gpus", 3}});
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(2);
    Rounds();
    Heartbeat("n1");
    EXPECT_EQ(Phase(next), "Pending") << "the stopping job's task may still run on its GPUs";
  }
  ReportJob("n1", hit, "Exited", 143);
  EXPECT_EQ(Phase(hit), "Pending") << "requeued";
  Rounds();
  EXPECT_EQ(Phase(next), "Placed");
  for (const std::string& uuid : Uuids(next)) EXPECT_NE(uuid, missing);
  EXPECT_EQ(Phase(hit), "Pending") << "four healthy GPUs are not free any more";
  EXPECT_EQ(Phase(spared), "Running");
  for (const Json& n : controller_->Nodes()) {
    for (const Json& g : n["gpus"]) {
      EXPECT_EQ(g["healthy"].get<bool>(), g["uuid"] != missing) << g.dump();
    }
  }
  EXPECT_EQ(Rebuilds(), 1);
}

// A restart whose rebuild cannot adopt a running job whole (its node came back with a GPU
// fewer meanwhile) stops the job through Stopping; it does not requeue it at once, which would
// free its GPUs while its task still runs.
TEST_F(ControlPlane, ARebuildThatCannotAdoptAJobStopsItBeforeFreeingItsGpus) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t id = Submit("p1", {{"gpus", 8}});
  Rounds();
  Report("n1", "Running");
  Restart();
  Register("n1", {"GPU-n1-7"});
  const int64_t next = Submit("p2", {{"gpus", 4}});
  Rounds();
  EXPECT_EQ(Phase(id), "Stopping");
  EXPECT_TRUE(Events(id, "Requeued").empty());
  EXPECT_EQ(Events(id, "PlacementLost").size(), 1u);
  EXPECT_EQ(Phase(next), "Pending") << "its task may still run on the seven GPUs left";
  Json listed = Heartbeat("n1");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0]["stop"].get<bool>()) << "the agent is told to stop it";
  ReportJob("n1", id, "Exited", 143);
  EXPECT_EQ(Phase(id), "Pending");
  Rounds();
  EXPECT_EQ(Phase(next), "Placed");
}

// A change the scheduler cannot absorb (a new placement policy) rebuilds it, and the rebuild
// keeps what the cycles knew: the victim's claim (no second victim), the refused job, the
// reservation and fair share.
TEST_F(ControlPlane, AStructuralChangeRebuildsKeepingClaimsRefusalsTheReservationAndFairShare) {
  std::vector<store::Object> docs = Estate(0);
  docs.push_back(Doc("Policy", "default", {{"reserveAfter", 0}}));
  Open(docs);
  Register("n1");
  Register("n2");
  Round();
  const int64_t a =
      Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}, {"runtimeEstimate", 7200}});
  const int64_t b =
      Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}, {"runtimeEstimate", 7200}});
  Rounds();
  Report("n1", "Running");
  Report("n2", "Running");
  Pass(60, {"n1", "n2"});
  const int64_t high = Submit("p2", {{"gpus", 8}, {"priorityClass", "high"}});
  const int64_t gang = Submit("p2", {{"gpus", 8}, {"tasks", 2}, {"gang", true}});
  const int64_t refused = Submit("p1", {{"gpus", 16}});
  const int64_t small = Submit("p2", {{"gpus", 1}});
  Rounds();
  ASSERT_EQ(Events(a, "Preempted").size() + Events(b, "Preempted").size(), 1u);
  const int64_t victim = Events(a, "Preempted").empty() ? b : a;
  const int64_t other = victim == a ? b : a;
  const std::string behind = "waits behind the reservation of job " + std::to_string(gang);
  ASSERT_EQ(controller_->PendingReason(small), behind);
  auto share = [&] {
    for (const Json& r : controller_->Usage()) {
      if (r["name"] == "p1") return r["fairShare"].get<double>();
    }
    return -1.0;
  };
  const double before = share();
  ASSERT_GT(before, 0);
  Apply({Doc("Policy", "default", {{"reserveAfter", 0}, {"placement", "best-fit"}})});
  Round();
  EXPECT_EQ(Rebuilds(), 2) << "a new placement policy is a new scheduler";
  EXPECT_NEAR(share(), before, before * 1e-9);
  EXPECT_EQ(controller_->PendingReason(small), behind);
  EXPECT_NE(controller_->PendingReason(refused).find("fits no node here"), std::string::npos)
      << controller_->PendingReason(refused);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(2);
    Round();
    Heartbeat("n1");
    Heartbeat("n2");
  }
  EXPECT_TRUE(Events(other, "Preempted").empty()) << "the stopping victim still counts for it";
  EXPECT_EQ(Phase(victim), "Stopping");
  EXPECT_EQ(Phase(high), "Pending");
  ReportJob(NodeOf(victim), victim, "Exited", 143);
  Rounds();
  EXPECT_EQ(Phase(high), "Placed");
  EXPECT_EQ(Rebuilds(), 2);
}

// A deleted node leaves the estate in place (an unschedulable slot, not listed), and comes back
// when its agent registers again.
TEST_F(ControlPlane, ADeletedNodeLeavesAndComesBackInPlace) {
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  ASSERT_TRUE(nodes_->Delete("n2", "ops", false).ok());
  Round();
  for (const Json& n : controller_->Nodes()) EXPECT_NE(n["name"], "n2");
  const int64_t first = Submit("p1", {{"gpus", 8}});
  const int64_t second = Submit("p2", {{"gpus", 8}});
  Rounds();
  EXPECT_EQ(NodeOf(first) == "n1" ? Phase(second) : Phase(first), "Pending");
  Register("n2");
  Rounds();
  EXPECT_EQ(Phase(first), "Placed");
  EXPECT_EQ(Phase(second), "Placed");
  EXPECT_NE(NodeOf(first), NodeOf(second));
  EXPECT_EQ(Rebuilds(), 1);
}

// A node that registers while the controller builds its state (after it read the store, before
// it told the agents' side what to run) is followed in place, and its agent is given what is
// placed there: the build's older list of nodes must not make the node one no agent runs (the
// dev estate's job that stayed Placed for ever).
TEST_F(ControlPlane, ANodeRegisteredDuringARebuildIsGivenItsTasks) {
  Open(Estate(0));
  Register("n1");
  ASSERT_TRUE(nodes_->Cordon("n1", "ops", true).ok());
  hooked_->after_next_read = [&] { Register("n2"); };
  Round();
  ASSERT_EQ(hooked_->after_next_read, nullptr);
  const int64_t id = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(NodeOf(id), "n2");
  const Json listed = Heartbeat("n2");
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  EXPECT_EQ(listed[0]["job"], id);
  Report("n2", "Running");
  EXPECT_EQ(Phase(id), "Running");
}

// A project made by an apply takes its jobs at once, in place: one submitted in the same batch
// of events, and one that waited because its project did not exist yet.
TEST_F(ControlPlane, ANewProjectTakesItsJobsInPlace) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t early = Submit("p3", {{"gpus", 2}});
  Round();
  EXPECT_NE(controller_->PendingReason(early).find("no longer exists"), std::string::npos)
      << controller_->PendingReason(early);
  Apply({Doc("Project", "p3", {{"team", "lab"}})});
  const int64_t same_batch = Submit("p3", {{"gpus", 2}});
  Rounds();
  EXPECT_EQ(Phase(early), "Placed");
  EXPECT_EQ(Phase(same_batch), "Placed");
  EXPECT_EQ(Rebuilds(), 1);
}

// A cluster added by an apply joins in place: its nodes register, a job that asked for it (and
// could run nowhere until then) runs there, and so does a job that may run anywhere.
TEST_F(ControlPlane, ANewClusterJoinsInPlace) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t filler = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(Phase(filler), "Placed");
  const int64_t there = Submit("p1", {{"gpus", 4}, {"clusters", {"cloud"}}});
  const int64_t anywhere = Submit("p2", {{"gpus", 4}});
  Round();
  EXPECT_NE(controller_->PendingReason(there).find("fits no node here"), std::string::npos)
      << controller_->PendingReason(there);
  Apply({Doc("Cluster", "cloud", {{"type", "cloud"}, {"region", "us"}})});
  Round();
  Register("c1", {}, "cloud");
  Rounds();
  EXPECT_EQ(Phase(there), "Placed");
  EXPECT_EQ(NodeOf(there), "c1");
  EXPECT_EQ(Phase(anywhere), "Placed");
  EXPECT_EQ(NodeOf(anywhere), "c1");
  EXPECT_EQ(Rebuilds(), 1);
}

// A cluster deleted while a node of it is registered rebuilds the scheduler once (clusters are
// bits of masks); from then on that node is outside the estate, and its events (lost, back)
// rebuild nothing.
TEST_F(ControlPlane, ANodeOutsideTheEstateRebuildsNothing) {
  std::vector<store::Object> docs = Estate(0);
  docs.push_back(Doc("Cluster", "cloud", {{"type", "cloud"}, {"region", "us"}}));
  Open(docs);
  Register("n1");
  Register("c1", {}, "cloud");
  Round();
  Delete("Cluster", "cloud");
  Round();
  ASSERT_EQ(Rebuilds(), 2) << "a cluster removed is a new scheduler";
  for (int i = 0; i < 40; ++i) {  // c1 is silent past its lost timeout
    clock_.Advance(10);
    Heartbeat("n1");
    Round();
  }
  Heartbeat("c1");  // and back
  Round();
  const int64_t id = Submit("p1", {{"gpus", 8}});
  Rounds();
  EXPECT_EQ(NodeOf(id), "n1");
  EXPECT_EQ(Rebuilds(), 2);
}

// A project deleted under its jobs (through the API; a plan would refuse it) is taken in place:
// its running job's GPUs stay counted until it ends, so nothing else starts on them, and its
// waiting job leaves the queue saying why. A rebuild forgot the running job's GPUs; it counts
// them too now.
TEST_F(ControlPlane, AProjectDeletedUnderItsJobsKeepsWhatTheyHoldCounted) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t running = Submit("p1", {{"gpus", 8}});
  Rounds();
  Report("n1", "Running");
  const int64_t waiting = Submit("p1", {{"gpus", 8}});
  Round();
  Delete("Project", "p1");
  Round();
  EXPECT_NE(controller_->PendingReason(waiting).find("no longer exists"), std::string::npos)
      << controller_->PendingReason(waiting);
  const int64_t other = Submit("p2", {{"gpus", 8}});
  Rounds();
  EXPECT_EQ(Phase(running), "Running");
  EXPECT_EQ(Phase(other), "Pending") << "p1's running job still holds n1's GPUs";
  EXPECT_EQ(Rebuilds(), 1);
  Restart();  // and a rebuild from the store counts them too
  Rounds();
  EXPECT_EQ(Phase(running), "Running");
  EXPECT_EQ(Phase(other), "Pending") << "p1's running job still holds n1's GPUs";
  // Drained, it stops and goes back to the queue, where nothing of a deleted project runs.
  ASSERT_TRUE(nodes_->Drain("n1", "ops", {}).ok());
  ReportJob("n1", running, "Exited", 143);
  EXPECT_EQ(Phase(running), "Pending");
  ASSERT_TRUE(nodes_->Cordon("n1", "ops", false).ok());
  Rounds();
  EXPECT_EQ(Phase(other), "Placed");
  EXPECT_EQ(Phase(waiting), "Pending");
  EXPECT_EQ(Phase(running), "Pending");
  EXPECT_NE(controller_->PendingReason(running).find("no longer exists"), std::string::npos)
      << controller_->PendingReason(running);
}

}  // namespace
}  // namespace meridian::server

namespace meridian::server {
namespace {

double MixChanges(api::Metrics& metrics) {
  const std::string text = metrics.Render();
  const std::string name = "meridian_scheduler_mix_changes_total ";
  const size_t at = text.find("\n" + name);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + 1 + name.size()));
}

// What placement keeps room for is learnt from the live queue: started on an empty queue, the
// scheduler takes the mix of the work that arrives within the next check, in place (no rebuild),
// and keeps it while the queue holds that mix.
TEST_F(ControlPlane, PlacementFollowsTheLiveWorkloadMixInPlace) {
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  ASSERT_EQ(MixChanges(metrics_), 0);
  std::vector<int64_t> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back(Submit("p1", {{"gpus", 4}}));
  for (int i = 0; i < 6; ++i) jobs.push_back(Submit("p2", {{"gpus", 1}}));
  Round();
  EXPECT_EQ(MixChanges(metrics_), 0) << "the mix is checked every 30 s, not every cycle";
  clock_.Advance(31);
  Round();
  EXPECT_EQ(MixChanges(metrics_), 1);
  EXPECT_EQ(Rebuilds(), 1);
  clock_.Advance(31);
  Round();
  EXPECT_EQ(MixChanges(metrics_), 1) << "the same queue is the same mix";
  int placed = 0;
  for (int64_t id : jobs) placed += Phase(id) == "Placed" ? 1 : 0;
  EXPECT_GT(placed, 0);
}

}  // namespace
}  // namespace meridian::server
