// The controller's tests over the control plane without processes (server/testing/
// control_plane.h): lifecycle guarantees and the golden comparison with the replay. The
// incremental scheduler state has its own file, controller_incremental_test.cc.
#include "server/controller.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "server/testing/control_plane.h"
#include "sim/replay.h"

namespace meridian::server {
namespace {

using base::Status;
using testing::ControlPlane;
using testing::Doc;
using testing::Estate;

// One assembly: the server's path (documents in a store, the controller's rebuild, jobs
// decoded from their stored specs) and the replay's path (sim::ReplayFirstCycle) place the same
// jobs on the same nodes.
TEST_F(ControlPlane, TheServerAndTheReplayMakeTheSameDecisions) {
  const std::vector<store::Object> docs = Estate(3);
  Open(docs);
  struct Want {
    const char* project;
    int gpus, tasks;
  };
  const std::vector<Want> wants = {{"p1", 4, 1}, {"p2", 8, 1}, {"p1", 2, 2}, {"p2", 1, 1},
                                   {"p1", 8, 1}, {"p2", 3, 1}, {"p1", 1, 4}, {"p2", 8, 2}};
  std::vector<sim::ReplayJob> replay_jobs;
  for (const Want& w : wants) {
    clock_.Advance(1);
    const int64_t id = Submit(w.project, {{"gpus", w.gpus}, {"tasks", w.tasks}});
    sim::ReplayJob r;
    r.id = id;
    r.submit_time = clock_.Now();
    r.duration = 3600;
    r.tasks = w.tasks;
    r.gpus_per_task = w.gpus;
    r.project = w.project;
    r.cpu_milli = 1000;  // the job documents' defaults
    r.memory_mib = 4096;
    replay_jobs.push_back(r);
  }
  Round();
  std::map<int64_t, std::vector<std::string>> server;
  for (const sim::ReplayJob& r : replay_jobs) {
    const store::JobRecord j = Get(r.id);
    if (j.phase != "Placed") continue;
    for (const Json& t : j.allocation) server[r.id].push_back(t.value("node", ""));
  }
  auto estate = BuildEstate(docs);
  ASSERT_TRUE(estate.ok());
  sim::ReplayCluster cluster;
  cluster.clusters = (*estate)->clusters;
  cluster.nodes = (*estate)->nodes;
  cluster.projects = {{"p1", "lab", 1, 0, -1}, {"p2", "lab", 2, 0, -1}};
  auto replay = sim::ReplayFirstCycle(cluster, replay_jobs, {});
  ASSERT_TRUE(replay.ok()) << replay.status().message();
  EXPECT_GE(server.size(), 4u) << "a cycle that places little compares little";
  EXPECT_LT(server.size(), wants.size()) << "and some wait, so the order matters";
  EXPECT_EQ(server, *replay);
}

// Cancel goes through Stopping: the GPUs stay taken until the agent reports the task gone, and
// only then does the next job get them.
TEST_F(ControlPlane, CancelFreesTheGpusOnlyWhenTheAgentReportsTheTaskStopped) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t first = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(Phase(first), "Placed");
  Report("n1", "Running");
  ASSERT_EQ(Phase(first), "Running");
  auto cancelled = store_->Write([&](store::Tx& tx) {
    auto j = tx.GetJob(first);
    auto life = api::LifeOf(*j);
    auto t = domain::lifecycle::Cancel(*life, "alice", 30, clock_.Now());
    return api::CommitTransition(tx, *t, clock_.Now(), &*j).status();
  });
  ASSERT_TRUE(cancelled.ok());
  const int64_t next = Submit("p2", {{"gpus", 8}});
  for (int i = 0; i < 5; ++i) {  // cycles while the task takes its grace
    clock_.Advance(5);
    Round();
    Heartbeat("n1");
    EXPECT_EQ(Phase(first), "Stopping");
    EXPECT_EQ(Phase(next), "Pending") << "the cancelled task may still run";
  }
  Json listed = Heartbeat("n1");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0]["stop"].get<bool>()) << "the agent is told to stop it";
  Report("n1", "Exited", 143);
  EXPECT_EQ(Phase(first), "Cancelled");
  Rounds();
  EXPECT_EQ(Phase(next), "Placed");
}

// A node silent past its lost timeout: its job is requeued (restartPolicy on-failure) and runs
// on the other node; the lost node takes nothing; all without a rebuild of the scheduler.
TEST_F(ControlPlane, ALostNodesJobIsRequeuedElsewhereInPlace) {
  const auto [id, first, other] = RequeuableJobOnOneOfTwoNodes();
  ASSERT_FALSE(first.empty());
  // Only the other node heartbeats from now on.
  for (int i = 0; i < 31; ++i) {
    clock_.Advance(10);
    Heartbeat(other);
    Round();
  }
  Round();
  EXPECT_EQ(Events(id, "Requeued").size(), 1u);
  EXPECT_EQ(Phase(id), "Placed");
  EXPECT_EQ(NodeOf(id), other);
  EXPECT_EQ(Get(id).generation, 2);
  const int64_t more = Submit("p2", {{"gpus", 1}});
  Round();
  EXPECT_EQ(Phase(more), "Pending") << "the lost node is unschedulable, the other full";
  // Its report of generation 1 changes nothing, and it is told to run nothing.
  Json stale = {{{"job", id}, {"task", 0}, {"generation", 1}, {"state", "Running"}}};
  EXPECT_TRUE(Heartbeat(first, stale).empty());
  EXPECT_EQ(Get(id).generation, 2);
}

// A new leader (a follower taking over after the leader died) gives every node a full
// nodeLostTimeout from its takeover: no agent could reach a server meanwhile, and their nodes
// must not be found lost, and their jobs requeued, the moment a server leads again.
TEST_F(ControlPlane, ANewLeaderGivesEveryNodeAFullLostTimeoutFromItsTakeover) {
  const auto [id, first, other] = RequeuableJobOnOneOfTwoNodes();
  ASSERT_FALSE(first.empty());
  // A follower's node service, which loaded the nodes to answer a read (GET /nodes). The old
  // leader's controller goes first: it points at the old node service.
  controller_.reset();
  nodes_ = std::make_unique<NodeService>(store_.get(), &clock_, &bus_);
  (void)nodes_->NodeStatus(first);
  clock_.Advance(600);  // the leader is gone, for twice the lost timeout (300 s)
  // The follower takes over: TakeOver, and a controller of its own.
  nodes_->TakeOver();
  Restart();
  Round();
  EXPECT_EQ(Phase(id), "Running");
  // The other node's agent is back at once; the job's node stays silent.
  for (int i = 0; i < 29; ++i) {  // 290 s after the takeover
    clock_.Advance(10);
    Heartbeat(other);
    Round();
  }
  EXPECT_EQ(Phase(id), "Running") << "lost before a full timeout from the takeover";
  EXPECT_TRUE(Events(id, "Requeued").empty());
  for (int i = 0; i < 2; ++i) {  // 310 s after it
    clock_.Advance(10);
    Heartbeat(other);
    Round();
  }
  Round();
  EXPECT_EQ(Events(id, "Requeued").size(), 1u) << "silent a full timeout since the takeover";
  EXPECT_EQ(NodeOf(id), other);
}

// Two nodes fall silent a second apart (a rack losing power, its nodes last heard in turn): when
// the first is declared lost, its job is not placed on the second, silent for as long but not
// lost yet, where it would be requeued again a second later and counted twice.
TEST_F(ControlPlane, ANodeSilentForSeveralHeartbeatsTakesNoNewWorkBeforeItIsLost) {
  const auto [id, first, other] = RequeuableJobOnOneOfTwoNodes();
  ASSERT_FALSE(first.empty());
  clock_.Advance(1);
  Heartbeat(other);
  for (int i = 0; i < 1000 && Events(id, "Requeued").empty(); ++i) {
    clock_.Advance(0.5);
    Round();
  }
  ASSERT_EQ(Events(id, "Requeued").size(), 1u);
  EXPECT_EQ(Phase(id), "Pending") << "placed on " << NodeOf(id) << ", silent as long";
  clock_.Advance(2);
  Rounds();
  EXPECT_EQ(Events(id, "Requeued").size(), 1u);
  // Heard again, the other node takes it.
  Heartbeat(other);
  Rounds();
  EXPECT_EQ(Phase(id), "Placed");
  EXPECT_EQ(NodeOf(id), other);
  EXPECT_EQ(Get(id).generation, 2);
}

// Shortening nodeLostTimeout while an agent is cut off must not declare its node lost before the
// lease that agent was told has run out and its tasks are dead: the job would run twice.
TEST_F(ControlPlane, AShortenedLostTimeoutWaitsForTheLeaseAgentsWereTold) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t id = Submit("p1", {{"gpus", 8}, {"restartPolicy", "on-failure"}});
  Rounds();
  Report("n1", "Running");  // told the default lease (266 s) and fence grace (30 s)
  ASSERT_TRUE(store_
                  ->Write([&](store::Tx& tx) {
                    auto v = tx.PutObject(Doc("Policy", "default", {{"nodeLostTimeout", 60}}),
                                          store::kAnyVersion);
                    if (!v.ok()) return v.status();
                    return tx
                        .AppendEvent({0, clock_.Now(), "Policy", "default", "", "Normal", "Applied",
                                      "lost timeout 60 s"})
                        .status();
                  })
                  .ok());
  Round();  // the new Policy is taken in place, and the agents' timing with it
  for (int i = 0; i < 29; ++i) {  // 290 s of silence: past 60 s, within 266 + 30 + 4
    clock_.Advance(10);
    Round();
  }
  EXPECT_EQ(Phase(id), "Running") << "n1's agent may still run it";
  EXPECT_TRUE(Events(id, "Requeued").empty());
  clock_.Advance(20);
  Round();
  EXPECT_EQ(Events(id, "Requeued").size(), 1u) << "now it is surely dead";
  EXPECT_EQ(Rebuilds(), 1);
}

// A job no node could hold waits, and runs once a node that can joins: in place, without the
// rebuild that used to submit every job again.
TEST_F(ControlPlane, AJobNothingCouldHoldRunsWhenANodeThatCanJoins) {
  Open(Estate(0));
  Round();
  const int64_t id = Submit("p1", {{"gpus", 8}});
  Round();
  EXPECT_EQ(Phase(id), "Pending");
  EXPECT_NE(controller_->PendingReason(id).find("fits no node here"), std::string::npos)
      << controller_->PendingReason(id);
  Register("n1");
  Rounds();
  EXPECT_EQ(Phase(id), "Placed");
  EXPECT_EQ(NodeOf(id), "n1");
}

// With the default 30 s grace, one high-priority job takes exactly one victim, whatever the
// number of cycles while that victim stops; it starts once the victim's task has stopped.
TEST_F(ControlPlane, PreemptionWithTheDefaultGraceTakesOneVictim) {
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  const int64_t a = Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}});
  const int64_t b = Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}});
  Rounds();
  Report("n1", "Running");
  Report("n2", "Running");
  clock_.Advance(60);
  const int64_t high = Submit("p2", {{"gpus", 8}, {"priorityClass", "high"}});
  for (int i = 0; i < 10; ++i) {
    Round();
    clock_.Advance(2);
    Heartbeat("n1");
    Heartbeat("n2");
  }
  const size_t victims = Events(a, "Preempted").size() + Events(b, "Preempted").size();
  EXPECT_EQ(victims, 1u);
  EXPECT_EQ(Phase(high), "Pending");
  const int64_t victim = Phase(a) == "Stopping" ? a : b;
  ASSERT_EQ(Phase(victim), "Stopping");
  Report(NodeOf(victim), "Exited", 143);
  EXPECT_EQ(Phase(victim), "Pending");
  Rounds();
  EXPECT_EQ(Phase(high), "Placed");
}

// The first-start guarantee through the control plane, with the default Policy: a job that has
// waited 30 minutes and never ran stops its project's job that has run 10, which is told why; and
// that job, requeued, is not taken for one that never ran, not even by a restarted server.
TEST_F(ControlPlane, AJobWaitingThirtyMinutesForItsFirstStartStopsItsProjectsLongRunner) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t runner = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(NodeOf(runner), "n1");
  Report("n1", "Running");
  const int64_t waiter = Submit("p1", {{"gpus", 8}});
  Pass(1790, {"n1"});
  Round();
  EXPECT_TRUE(Events(runner, "Preempted").empty()) << "the waiter has waited under 30 minutes";
  Pass(10, {"n1"});
  Round();
  const std::vector<std::string> preempted = Events(runner, "Preempted");
  ASSERT_EQ(preempted.size(), 1u);
  EXPECT_NE(preempted[0].find("for job " + std::to_string(waiter) + " (first start due)"),
            std::string::npos)
      << preempted[0];
  Report("n1", "Exited", 143);
  EXPECT_EQ(Phase(runner), "Pending");
  Rounds();
  ASSERT_EQ(Phase(waiter), "Placed");
  Report("n1", "Running");
  Restart();
  Round();
  Pass(3600, {"n1"});
  Rounds();
  EXPECT_TRUE(Events(waiter, "Preempted").empty())
      << "the runner ran before: its wait is no first start";
  EXPECT_EQ(Phase(runner), "Pending");
}

// Admission reads the estate as the last cycle took it in, without waiting for the cycle that
// runs: a refusal by a view older than the submission (`apply && submit`) waits for a cycle to
// take in what the store held, and is decided on that.
TEST_F(ControlPlane, ASubmissionRightAfterAnApplyIsCheckedAgainstWhatTheApplyMade) {
  Open(Estate(1));
  Round();
  domain::JobSpec spec;
  spec.clusters = {"cloud"};
  std::optional<domain::FieldError> before = controller_->NeverHeld(spec);
  ASSERT_TRUE(before.has_value()) << "no cluster cloud yet";
  EXPECT_EQ(before->field, "spec.clusters[0]");
  Apply({Doc("Cluster", "cloud", {{"type", "cloud"}, {"region", "eu"}}),
         Doc("NodePool", "burst",
             {{"cluster", "cloud"}, {"nodes", 1}, {"gpusPerNode", 8}, {"gpuModel", "H100-80GB"}})});
  auto asked = std::async(std::launch::async, [&] { return controller_->NeverHeld(spec); });
  // Not refused by what the last cycle knew: it waits for the next.
  EXPECT_EQ(asked.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  Round();
  EXPECT_FALSE(asked.get().has_value()) << "the apply made cluster cloud";
  // What nothing holds is refused at once once the view is current.
  spec.clusters = {"nowhere"};
  EXPECT_EQ(controller_->NeverHeld(spec)->field, "spec.clusters[0]");
}

}  // namespace
}  // namespace meridian::server
