#pragma once

// The control plane without processes, for the controller's tests: the scheduler controller
// and the node service over a real SQLite store in a temporary folder, driven with a fake
// clock, agents played by calls to Register and Heartbeat. No sleeps: time moves when a test
// says so.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/job_life.h"
#include "base/testing/temp_dir.h"
#include "server/controller.h"
#include "store/sqlite/sqlite_store.h"

namespace meridian::server::testing {

using base::Status;

inline store::Object Doc(const std::string& kind, const std::string& name, Json spec) {
  store::Object o;
  o.kind = kind;
  o.name = name;
  o.spec = std::move(spec);
  return o;
}

// An organization with two projects in one team; one on-prem cluster; `pool_nodes` declared
// 8-GPU H100 nodes (no agent runs them; more register as agents).
inline std::vector<store::Object> Estate(int pool_nodes) {
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

// The store as the controller sees it, with hooks that run once: before its next write (what
// another writer, the API, does between a cycle and its commit), and after its next read (what
// another writer does between the controller's reading of the state and its use of it).
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
    base::Status s = inner_->Read(fn);
    if (after_next_read) {
      auto hook = std::move(after_next_read);
      after_next_read = nullptr;
      hook();
    }
    return s;
  }
  int32_t SchemaVersion() const override { return inner_->SchemaVersion(); }
  uint64_t CredentialsGeneration() const override { return inner_->CredentialsGeneration(); }

  std::function<void()> before_next_write;
  std::function<void()> after_next_read;

 private:
  store::Store* inner_;
};

// The store as the node service sees it: counts its transactions.
class CountedStore final : public store::Store {
 public:
  explicit CountedStore(store::Store* inner) : inner_(inner) {}
  base::Status Write(const std::function<base::Status(store::Tx&)>& fn) override {
    ++writes;
    return inner_->Write(fn);
  }
  base::Status Read(const std::function<base::Status(store::Tx&)>& fn) override {
    return inner_->Read(fn);
  }
  int32_t SchemaVersion() const override { return inner_->SchemaVersion(); }
  uint64_t CredentialsGeneration() const override { return inner_->CredentialsGeneration(); }

  int writes = 0;

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
    counted_ = std::make_unique<CountedStore>(store_.get());
    nodes_ = std::make_unique<NodeService>(counted_.get(), &clock_, &bus_);
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
  // An object deleted as the API deletes it: with its event.
  void Delete(const std::string& kind, const std::string& name) {
    ASSERT_TRUE(store_
                    ->Write([&](store::Tx& tx) {
                      auto o = tx.GetObject(kind, name);
                      if (!o.ok()) return o.status();
                      if (Status d = tx.DeleteObject(kind, name, o->version); !d.ok()) return d;
                      return tx
                          .AppendEvent(
                              {0, clock_.Now(), kind, name, "", "Normal", "Deleted", "deleted"})
                          .status();
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

  // Two nodes, n1 and n2, and a job of 8 GPUs (restartPolicy on-failure) running on one of them.
  struct JobOnOneOfTwo {
    int64_t job = 0;
    std::string node, other;  // `node` empty: it was not placed
  };
  JobOnOneOfTwo RequeuableJobOnOneOfTwoNodes() {
    Open(Estate(0));
    Register("n1");
    Register("n2");
    Round();
    JobOnOneOfTwo out;
    out.job = Submit("p1", {{"gpus", 8}, {"restartPolicy", "on-failure"}});
    Rounds();
    out.node = NodeOf(out.job);
    if (out.node.empty()) return out;
    out.other = out.node == "n1" ? "n2" : "n1";
    Report(out.node, "Running");
    return out;
  }

  // `seconds` pass while the agents of `nodes` heartbeat every 2 s, as live agents do (a node
  // silent for several heartbeats takes no new work).
  void Pass(double seconds, const std::vector<std::string>& nodes) {
    for (double left = seconds; left > 0; left -= 2) {
      clock_.Advance(std::min(2.0, left));
      for (const std::string& n : nodes) Heartbeat(n);
    }
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
    return EventsOf("Job", std::to_string(id), reason);
  }
  // The messages of the events of one object (a job, a node) with `reason`, oldest first.
  std::vector<std::string> EventsOf(const std::string& kind, const std::string& name,
                                    const std::string& reason) {
    auto events = store::ReadValue(*store_, [&](store::Tx& tx) {
      store::EventFilter f;
      f.object_kind = kind;
      f.object_name = name;
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
  std::unique_ptr<CountedStore> counted_;  // the node service's
  std::unique_ptr<NodeService> nodes_;
  std::unique_ptr<SchedulerController> controller_;
};

}  // namespace meridian::server::testing
