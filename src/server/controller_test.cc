// The control plane without processes: the scheduler controller and the node service over a real
// SQLite store in a temporary folder, driven with a fake clock, agents played by calls to
// Register and Heartbeat. No sleeps: time moves when a test says so.
#include "server/controller.h"

#include <gtest/gtest.h>

#include "api/job_life.h"
#include "base/testing/temp_dir.h"
#include "sim/replay.h"
#include "store/sqlite/sqlite_store.h"

namespace meridian::server {
namespace {

using base::Status;

store::Object Doc(const std::string& kind, const std::string& name, Json spec) {
  store::Object o;
  o.kind = kind;
  o.name = name;
  o.spec = std::move(spec);
  return o;
}

// An organization with two projects in one team; one on-prem cluster; `pool_nodes` declared
// 8-GPU H100 nodes (no agent runs them; more register as agents).
std::vector<store::Object> Estate(int pool_nodes) {
  std::vector<store::Object> docs = {
      Doc("Organization", "acme", Json::object()),
      Doc("Team", "lab", {{"organization", "acme"}}),
      Doc("Project", "p1", {{"team", "lab"}}),
      Doc("Project", "p2", {{"team", "lab"}, {"weight", 2.0}}),
      Doc("PriorityClass", "high", {{"value", 100}}),
      Doc("PriorityClass", "low", {{"value", 0}}),
      Doc("Cluster", "onprem", {{"type", "on-prem"}, {"region", "eu"}})};
  if (pool_nodes > 0) {
    docs.push_back(Doc("NodePool", "h100",
                       {{"cluster", "onprem"},
                        {"nodes", pool_nodes},
                        {"gpusPerNode", 8},
                        {"gpuModel", "H100-80GB"},
                        {"cpuMilli", 128000},
                        {"memoryMib", 1024 * 1024},
                        {"rackSize", 2}}));
  }
  return docs;
}

class ControlPlane : public ::testing::Test {
 protected:
  void Open(const std::vector<store::Object>& docs) {
    auto s = store::SqliteStore::Open(dir_.File("meridian.db"));
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(s.value());
    ASSERT_TRUE(store_
                    ->Write([&](store::Tx& tx) {
                      for (const store::Object& o : docs) {
                        if (auto v = tx.PutObject(o, store::kAnyVersion); !v.ok()) {
                          return v.status();
                        }
                      }
                      return Status::Ok();
                    })
                    .ok());
    nodes_ = std::make_unique<NodeService>(store_.get(), &clock_, &bus_);
    controller_ = std::make_unique<SchedulerController>(store_.get(), &clock_, &bus_, &metrics_,
                                                        nodes_.get());
  }
  void TearDown() override {
    controller_.reset();  // never started: nothing to join
  }

  // As the API does: the record and its Submitted event, in one transaction.
  int64_t Submit(const std::string& project, Json spec) {
    store::JobRecord j;
    j.name = "job";
    j.project = project;
    j.user = "alice";
    j.spec = std::move(spec);
    j.submitted_at = j.updated_at = clock_.Now();
    j.version = 1;
    int64_t id = 0;
    EXPECT_TRUE(store_
                    ->Write([&](store::Tx& tx) {
                      auto inserted = tx.InsertJob(j);
                      if (!inserted.ok()) return inserted.status();
                      id = *inserted;
                      return tx
                          .AppendEvent({0, clock_.Now(), "Job", std::to_string(id), project,
                                        "Normal", "Submitted", "submitted"})
                          .status();
                    })
                    .ok());
    return id;
  }
  store::JobRecord Get(int64_t id) {
    auto j = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetJob(id); });
    EXPECT_TRUE(j.ok());
    return j.ok() ? *j : store::JobRecord{};
  }
  std::string Phase(int64_t id) { return Get(id).phase; }
  std::string NodeOf(int64_t id) {
    const store::JobRecord j = Get(id);
    return j.allocation.empty() ? "" : j.allocation[0].value("node", "");
  }
  void Round() { ASSERT_TRUE(controller_->RunOnce().ok()); }
  // A round that decides, and the next, which follows the decisions to the agents' lists (the
  // controller wakes itself for it at once).
  void Rounds() {
    Round();
    Round();
  }

  // An agent with 8 simulated H100s registers `name`.
  void Register(const std::string& name) {
    Json gpus = Json::array();
    for (int i = 0; i < 8; ++i) {
      gpus.push_back({{"uuid", "GPU-" + name + "-" + std::to_string(i)}, {"model", "H100-80GB"}});
    }
    auto r = nodes_->Register("agents", {{"node", name},
                                         {"cluster", "onprem"},
                                         {"address", "10.0.0.1"},
                                         {"cpuMilli", 128000},
                                         {"memoryMib", 1024 * 1024},
                                         {"gpus", gpus}});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  // A heartbeat from `node` saying how its tasks are; returns what it should run.
  Json Heartbeat(const std::string& node, Json tasks = Json::array()) {
    auto r = nodes_->Heartbeat(node, {{"tasks", std::move(tasks)}});
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? (*r)["tasks"] : Json::array();
  }
  // Reports every task listed for `node` as running (or exited with `code`).
  void Report(const std::string& node, const std::string& state, int code = 0) {
    Json reports = Json::array();
    for (const Json& a : Heartbeat(node)) {
      Json r = {{"job", a["job"]},
                {"task", a["task"]},
                {"generation", a["generation"]},
                {"state", state}};
      if (state == "Exited") r["exitCode"] = code;
      reports.push_back(r);
    }
    Heartbeat(node, reports);
  }
  std::vector<std::string> Events(int64_t id, const std::string& reason) {
    auto events = store::ReadValue(*store_, [&](store::Tx& tx) {
      store::EventFilter f;
      f.object_kind = "Job";
      f.object_name = std::to_string(id);
      f.limit = 1000;
      return tx.ListEvents(f);
    });
    std::vector<std::string> out;
    for (const store::Event& e : *events) {
      if (e.reason == reason) out.push_back(e.message);
    }
    return out;
  }

  base::testing::TempDir dir_;
  base::FakeClock clock_;
  api::EventBus bus_;
  api::Metrics metrics_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<NodeService> nodes_;
  std::unique_ptr<SchedulerController> controller_;
};

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
  sim::ReplayCluster cluster{
      (*estate)->clusters, (*estate)->nodes, {{"p1", "lab", 1, 0, -1}, {"p2", "lab", 2, 0, -1}}};
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
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  const int64_t id = Submit("p1", {{"gpus", 8}, {"restartPolicy", "on-failure"}});
  Rounds();
  const std::string first = NodeOf(id);
  ASSERT_FALSE(first.empty());
  const std::string other = first == "n1" ? "n2" : "n1";
  Report(first, "Running");
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
  Round();                        // the rebuild takes the new Policy
  for (int i = 0; i < 29; ++i) {  // 290 s of silence: past 60 s, within 266 + 30 + 4
    clock_.Advance(10);
    Round();
  }
  EXPECT_EQ(Phase(id), "Running") << "n1's agent may still run it";
  EXPECT_TRUE(Events(id, "Requeued").empty());
  clock_.Advance(20);
  Round();
  EXPECT_EQ(Events(id, "Requeued").size(), 1u) << "now it is surely dead";
}

// A job no node could hold waits, and runs once a node that can joins: in place, without the
// rebuild that used to submit every job again.
TEST_F(ControlPlane, AJobNothingCouldHoldRunsWhenANodeThatCanJoins) {
  Open(Estate(0));
  Round();
  const int64_t id = Submit("p1", {{"gpus", 8}});
  Round();
  EXPECT_EQ(Phase(id), "Pending");
  EXPECT_NE(controller_->PendingReason(id).find("can never run here"), std::string::npos)
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

}  // namespace
}  // namespace meridian::server
