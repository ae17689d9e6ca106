// The control plane without processes: the scheduler controller and the node service over a real
// SQLite store in a temporary folder, driven with a fake clock, agents played by calls to
// Register and Heartbeat. No sleeps: time moves when a test says so.
#include "server/controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

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

// The store as the controller sees it, with a hook that runs once before its next write: what
// another writer (the API) does between a cycle and its commit.
class HookedStore final : public store::Store {
 public:
  explicit HookedStore(store::Store* inner) : inner_(inner) {}
  base::Status Write(const std::function<base::Status(store::Tx&)>& fn) override {
    if (before_next_write) {
      auto hook = std::move(before_next_write);
      before_next_write = nullptr;
      hook();
    }
    return inner_->Write(fn);
  }
  base::Status Read(const std::function<base::Status(store::Tx&)>& fn) override {
    return inner_->Read(fn);
  }
  int32_t SchemaVersion() const override { return inner_->SchemaVersion(); }

  std::function<void()> before_next_write;

 private:
  store::Store* inner_;
};

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
    hooked_ = std::make_unique<HookedStore>(store_.get());
    controller_ = std::make_unique<SchedulerController>(hooked_.get(), &clock_, &bus_, &metrics_,
                                                        nodes_.get());
  }
  // A server restart: a new controller over the same store.
  void Restart() {
    controller_ = std::make_unique<SchedulerController>(hooked_.get(), &clock_, &bus_, &metrics_,
                                                        nodes_.get());
  }
  // The counter a platform engineer reads on /metrics.
  double Rebuilds() {
    const std::string text = metrics_.Render();
    const std::string name = "meridian_scheduler_rebuilds_total ";
    const size_t at = text.find("\n" + name);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + 1 + name.size()));
  }
  // Objects applied as `meridian apply` does: each stored, with its event.
  void Apply(const std::vector<store::Object>& docs) {
    ASSERT_TRUE(store_
                    ->Write([&](store::Tx& tx) {
                      for (const store::Object& o : docs) {
                        if (auto v = tx.PutObject(o, store::kAnyVersion); !v.ok()) {
                          return v.status();
                        }
                        auto e = tx.AppendEvent(
                            {0, clock_.Now(), o.kind, o.name, "", "Normal", "Applied", "applied"});
                        if (!e.ok()) return e.status();
                      }
                      return Status::Ok();
                    })
                    .ok());
  }
  // As the API cancels: through the lifecycle, with a 30 s grace.
  void Cancel(int64_t id) {
    auto cancelled = store_->Write([&](store::Tx& tx) {
      auto j = tx.GetJob(id);
      if (!j.ok()) return j.status();
      auto life = api::LifeOf(*j);
      if (!life.ok()) return life.status();
      auto t = domain::lifecycle::Cancel(*life, "alice", 30, clock_.Now());
      if (!t.ok()) return t.status();
      return api::CommitTransition(tx, *t, clock_.Now(), &*j).status();
    });
    ASSERT_TRUE(cancelled.ok()) << cancelled.message();
  }
  // The UUIDs of the GPUs a job holds.
  std::vector<std::string> Uuids(int64_t id) {
    std::vector<std::string> out;
    for (const Json& t : Get(id).allocation) {
      for (const Json& d : t["devices"]) out.push_back(d.value("uuid", ""));
    }
    return out;
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

  // An agent with 8 simulated H100s registers `name`, less the GPUs named in `without`.
  void Register(const std::string& name, const std::vector<std::string>& without = {},
                const std::string& cluster = "onprem") {
    Json gpus = Json::array();
    for (int i = 0; i < 8; ++i) {
      const std::string uuid = "GPU-" + name + "-" + std::to_string(i);
      if (std::find(without.begin(), without.end(), uuid) != without.end()) continue;
      gpus.push_back({{"uuid", uuid}, {"model", "H100-80GB"}});
    }
    auto r = nodes_->Register("agents", {{"node", name},
                                         {"cluster", cluster},
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
  // Reports one job's tasks on `node` (the others listed there are left as they are).
  void ReportJob(const std::string& node, int64_t job, const std::string& state, int code = 0) {
    Json reports = Json::array();
    for (const Json& a : Heartbeat(node)) {
      if (a["job"].get<int64_t>() != job) continue;
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
  std::unique_ptr<HookedStore> hooked_;
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
  clock_.Advance(30);
  const int64_t victim = Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}});
  Rounds();
  Report("n1", "Running");
  Report("n2", "Running");
  clock_.Advance(60);
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
  clock_.Advance(60);
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
  EXPECT_NE(controller_->PendingReason(refused).find("can never run here"), std::string::npos)
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
  EXPECT_NE(controller_->PendingReason(there).find("can never run here"), std::string::npos)
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
  ASSERT_TRUE(store_
                  ->Write([&](store::Tx& tx) {
                    auto c = tx.GetObject("Cluster", "cloud");
                    if (!c.ok()) return c.status();
                    if (Status d = tx.DeleteObject("Cluster", "cloud", c->version); !d.ok()) {
                      return d;
                    }
                    return tx
                        .AppendEvent({0, clock_.Now(), "Cluster", "cloud", "", "Normal", "Deleted",
                                      "deleted"})
                        .status();
                  })
                  .ok());
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

}  // namespace
}  // namespace meridian::server
