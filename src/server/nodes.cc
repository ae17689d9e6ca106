#include "server/nodes.h"

#include <algorithm>

#include "api/job_life.h"
#include "domain/gpu_model.h"
#include "domain/spec.h"

namespace meridian::server {

using base::Status;

namespace {

bool HasAllocation(const std::string& phase) {
  return phase == "Placed" || phase == "Running" || phase == "Stopping";
}

// Typed reads of an agent's JSON that fail with the field's name instead of throwing.
class Fields {
 public:
  Fields(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}
  const Status& status() const { return status_; }

  std::string String(const char* key, bool required, const std::string& fallback = "") {
    if (!j_.contains(key)) {
      if (required) Error(key, "is required");
      return fallback;
    }
    if (!j_.at(key).is_string()) return Error(key, "must be a string"), fallback;
    return j_.at(key).get<std::string>();
  }
  int64_t Int(const char* key, int64_t min, int64_t max, int64_t fallback) {
    if (!j_.contains(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max) {
      Error(key,
            "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
      return fallback;
    }
    return v.get<int64_t>();
  }
  double Number(const char* key, double fallback) {
    if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
    if (!j_.at(key).is_number()) return Error(key, "must be a number"), fallback;
    return j_.at(key).get<double>();
  }
  bool Bool(const char* key, bool fallback) {
    if (!j_.contains(key)) return fallback;
    if (!j_.at(key).is_boolean()) return Error(key, "must be true or false"), fallback;
    return j_.at(key).get<bool>();
  }
  const Json& Array(const char* key) {
    static const Json kEmpty = Json::array();
    if (!j_.contains(key)) return kEmpty;
    if (!j_.at(key).is_array()) return Error(key, "must be a list"), kEmpty;
    return j_.at(key);
  }
  Json StringMap(const char* key) {
    Json out = Json::object();
    if (!j_.contains(key)) return out;
    if (!j_.at(key).is_object()) return Error(key, "must be a mapping"), out;
    for (const auto& [k, v] : j_.at(key).items()) {
      if (!v.is_string()) return Error(key, "values must be strings"), out;
      out[k] = v;
    }
    return out;
  }
  void Error(const std::string& key, const std::string& message) {
    if (status_.ok()) status_ = Status::Invalid(where_ + key + ": " + message);
  }

 private:
  const Json& j_;
  std::string where_;
  Status status_;
};

}  // namespace

base::Result<std::vector<store::JobRecord>> JobsHolding(store::Tx& tx,
                                                        const std::set<std::string>& nodes) {
  std::vector<store::JobRecord> out;
  store::JobFilter f;
  f.phases = {"Placed", "Running", "Stopping"};
  f.limit = 1000;
  for (;;) {
    auto page = tx.ListJobs(f);
    if (!page.ok()) return page.status();
    for (store::JobRecord& j : *page) {
      const bool here = std::any_of(j.allocation.begin(), j.allocation.end(), [&](const Json& a) {
        return a.is_object() && nodes.count(a.value("node", "")) > 0;
      });
      if (here) out.push_back(std::move(j));
    }
    if (page->size() < static_cast<size_t>(f.limit)) break;
    f.after_id = page->back().id;
  }
  return out;
}

base::Result<store::Object> NodeFromRegistration(const Json& body) {
  if (!body.is_object()) return Status::Invalid("registration: must be a JSON object");
  Fields f(body, "");
  store::Object o;
  o.kind = "Node";
  o.name = f.String("node", true);
  Json& s = o.spec;
  s["cluster"] = f.String("cluster", true);
  s["pool"] = f.String("pool", false);
  s["rack"] = f.String("rack", false);
  s["address"] = f.String("address", false);
  s["labels"] = f.StringMap("labels");
  s["cpuMilli"] = f.Int("cpuMilli", 1, int64_t{1} << 40, 1000);
  s["memoryMib"] = f.Int("memoryMib", 1, int64_t{1} << 40, 1024);
  s["simulated"] = f.Bool("simulated", false);
  s["agentVersion"] = f.String("agentVersion", false);
  s["gpus"] = Json::array();
  const Json& gpus = f.Array("gpus");
  std::string model;
  for (size_t i = 0; i < gpus.size() && f.status().ok(); ++i) {
    const std::string at = "gpus[" + std::to_string(i) + "].";
    if (!gpus[i].is_object()) {
      f.Error("gpus[" + std::to_string(i) + "]", "must be a mapping");
      break;
    }
    Fields g(gpus[i], at);
    Json gpu = {{"index", g.Int("index", 0, 1023, static_cast<int64_t>(i))},
                {"uuid", g.String("uuid", true)},
                {"model", g.String("model", true)},
                {"memoryMib", g.Int("memoryMib", 0, int64_t{1} << 30, 0)},
                {"nvlinkDomain", g.Int("nvlinkDomain", 0, 1023, 0)},
                {"migCapable", g.Bool("migCapable", false)},
                {"migEnabled", g.Bool("migEnabled", false)},
                {"healthy", g.Bool("healthy", true)}};
    if (!g.status().ok()) return g.status();
    const std::string m = gpu["model"];
    if (!domain::GpuCatalog::Builtin().Find(m)) {
      return Status::Invalid(at + "model: \"" + m + "\" is not a GPU model Meridian knows");
    }
    if (!model.empty() && m != model) {
      return Status::Invalid(at + "model: the GPUs of one node must be of one model (" + model +
                             " and " + m + ")");
    }
    model = m;
    s["gpus"].push_back(gpu);
  }
  if (!f.status().ok()) return f.status();
  if (!domain::IsValidName(o.name)) {
    return Status::Invalid("node: \"" + o.name + "\" is not a valid name");
  }
  s["state"] = "Ready";
  return o;
}

NodeService::NodeService(store::Store* store, const base::Clock* clock, api::EventBus* bus)
    : store_(store), clock_(clock), bus_(bus) {}

Status NodeService::Load() {
  if (loaded_) return Status::Ok();
  auto nodes = store::ReadValue(*store_, [](store::Tx& tx) { return tx.ListObjects("Node"); });
  if (!nodes.ok()) return nodes.status();
  const double now = clock_->Now();
  for (const store::Object& o : *nodes) {
    NodeEntry& e = nodes_[o.name];
    e.state = o.spec.value("state", "Ready");
    e.simulated = o.spec.value("simulated", false);
    e.ops = domain::DecodeNodeOps(o.spec);
    e.last_seen = now;
  }
  loaded_ = true;
  return Status::Ok();
}

base::Result<Json> NodeService::Register(const std::string& user, const Json& body) {
  auto node = NodeFromRegistration(body);
  if (!node.ok()) return node.status();
  const double now = clock_->Now();
  node->updated_at = now;
  node->updated_by = user;
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto cluster = tx.GetObject("Cluster", node->spec.at("cluster"));
    if (!cluster.ok()) {
      return Status::NotFound("cluster: \"" + node->spec.at("cluster").get<std::string>() +
                              "\" does not exist");
    }
    const std::string pool = node->spec.at("pool");
    if (!pool.empty()) {
      auto p = tx.GetObject("NodePool", pool);
      if (!p.ok()) return Status::NotFound("pool: \"" + pool + "\" does not exist");
      if (p->spec.value("cluster", "") != node->spec.at("cluster")) {
        return Status::Invalid("pool: \"" + pool + "\" belongs to cluster " +
                               p->spec.value("cluster", ""));
      }
    }
    auto existing = tx.GetObject("Node", node->name);
    // What operators asked of the node (cordoned, draining) is theirs, not the agent's.
    if (existing.ok()) domain::EncodeNodeOps(domain::DecodeNodeOps(existing->spec), &node->spec);
    if (existing.ok() && existing->spec == node->spec) return Status::Ok();  // nothing new
    if (auto v = tx.PutObject(*node, store::kAnyVersion); !v.ok()) return v.status();
    const bool again = existing.ok();
    auto e = tx.AppendEvent(
        {0, now, "Node", node->name, "", "Normal", again ? "Reregistered" : "Registered",
         std::to_string(node->spec.at("gpus").size()) + " GPUs" +
             (node->spec.at("simulated").get<bool>() ? " (simulated)" : "") + " in cluster " +
             node->spec.at("cluster").get<std::string>() + ", by " + user});
    if (!e.ok()) return e.status();
    seq = *e;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (seq > 0) {
    bus_->Notify(seq);
    if (wake_) wake_();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (Status l = Load(); !l.ok()) return l;
  NodeEntry& e = nodes_[node->name];
  e.state = "Ready";
  e.last_seen = now;
  e.simulated = node->spec.at("simulated");
  e.ops = domain::DecodeNodeOps(node->spec);
  // Its tasks are assigned from now on, before the controller follows the registration.
  address_[node->name] = node->spec.value("address", "");
  e.fenced_within = agent_lease_ + fence_grace_ + 2 * heartbeat_interval_;
  return Json{{"node", node->name},
              {"heartbeatInterval", heartbeat_interval_},
              {"lease", agent_lease_},
              {"fenceGrace", fence_grace_}};
}

base::Result<Json> NodeService::Heartbeat(const std::string& node, const Json& body) {
  if (!body.is_object()) return Status::Invalid("heartbeat: must be a JSON object");
  const double now = clock_->Now();
  bool back = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status l = Load(); !l.ok()) return l;
    if (!indexed_) {
      return base::Status(base::StatusCode::kUnavailable,
                          "the server is starting (its scheduler has not caught up); retry");
    }
    auto it = nodes_.find(node);
    if (it == nodes_.end()) {
      return Status::NotFound("node \"" + node + "\" is not registered (register first)");
    }
    it->second.last_seen = now;
    if (body.contains("telemetry") && body.at("telemetry").is_array()) {
      it->second.telemetry = body.at("telemetry");
    }
    back = it->second.state == "Lost";
  }
  int64_t seq = 0;
  if (back) {
    // The node was given up on and its jobs went elsewhere; it may take work again.
    Status s = store_->Write([&](store::Tx& tx) {
      auto o = tx.GetObject("Node", node);
      if (!o.ok()) return o.status();
      o->spec["state"] = "Ready";
      o->updated_at = now;
      if (auto v = tx.PutObject(*o, o->version); !v.ok()) return v.status();
      auto e = tx.AppendEvent(
          {0, now, "Node", node, "", "Normal", "NodeReady", "heartbeats again; schedulable"});
      if (!e.ok()) return e.status();
      seq = *e;
      return Status::Ok();
    });
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    nodes_[node].state = "Ready";
  }
  if (body.contains("tasks")) {
    auto applied = ApplyReports(node, body.at("tasks"));
    if (!applied.ok()) return applied.status();
    seq = std::max(seq, *applied);
  }
  if (seq > 0) {
    bus_->Notify(seq);
    if (wake_) wake_();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = nodes_.find(node); it != nodes_.end()) {
    it->second.fenced_within = agent_lease_ + fence_grace_ + 2 * heartbeat_interval_;
  }
  return Json{{"tasks", Assignments(node)},
              {"heartbeatInterval", heartbeat_interval_},
              {"lease", agent_lease_},
              {"fenceGrace", fence_grace_}};
}

base::Result<std::map<int64_t, std::vector<domain::TaskReport>>> ParseTaskReports(
    const Json& tasks) {
  if (!tasks.is_array()) return Status::Invalid("tasks: must be a list");
  std::map<int64_t, std::vector<domain::TaskReport>> by_job;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const std::string at = "tasks[" + std::to_string(i) + "]";
    if (!tasks[i].is_object()) return Status::Invalid(at + ": must be a mapping");
    Fields f(tasks[i], at + ".");
    if (!tasks[i].contains("job")) f.Error("job", "is required");
    const int64_t job = f.Int("job", 1, INT64_MAX, 0);
    domain::TaskReport r;
    r.task = static_cast<int32_t>(f.Int("task", 0, 100000, 0));
    r.generation = f.Int("generation", 0, INT64_MAX, 0);
    const std::string state = f.String("state", true);
    r.restarts = f.Int("restarts", 0, 1000000, 0);
    r.message = f.String("message", false);
    if (tasks[i].contains("exitCode") && tasks[i].at("exitCode").is_number_integer()) {
      r.exit_code = tasks[i].at("exitCode").get<int64_t>();
    }
    if (state == "Running") {
      r.state = domain::TaskStatus::State::kRunning;
    } else if (state == "Exited") {
      r.state = domain::TaskStatus::State::kExited;
    } else {
      f.Error("state", "must be Running or Exited");
    }
    if (!f.status().ok()) return f.status();
    by_job[job].push_back(r);
  }
  return by_job;
}

base::Result<int64_t> NodeService::ApplyReports(const std::string& node, const Json& tasks) {
  auto parsed = ParseTaskReports(tasks);
  if (!parsed.ok()) return parsed.status();
  if (parsed->empty()) return int64_t{0};
  const double now = clock_->Now();
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    for (const auto& [id, reports] : *parsed) {
      auto job = tx.GetJob(id);
      if (!job.ok()) continue;  // reports of a job that does not exist change nothing
      auto life = api::LifeOf(*job);
      if (!life.ok()) return life.status();
      std::vector<std::string> task_nodes;
      for (const Json& a : job->allocation) task_nodes.push_back(a.value("node", ""));
      const domain::Transition t = domain::lifecycle::Report(
          *life, node, reports, task_nodes, job->spec.value("maxRestarts", 3), now);
      if (t.events.empty()) continue;  // stale or unchanged
      auto e = api::CommitTransition(tx, t, now, &*job);
      if (!e.ok()) return e.status();
      seq = *e;
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return seq;
}

Json NodeService::Assignments(const std::string& node) {
  Json out = Json::array();
  auto it = assigned_.find(node);
  if (it == assigned_.end()) return out;
  for (const auto& [key, a] : it->second) out.push_back(a);
  return out;
}

void NodeService::Reset(const Estate& estate, const std::vector<store::JobRecord>& jobs) {
  std::lock_guard<std::mutex> lock(mu_);
  assigned_.clear();
  nodes_of_job_.clear();
  address_ = estate.agent_address;
  heartbeat_interval_ = estate.heartbeat_interval;
  lost_timeout_ = estate.node_lost_timeout;
  agent_lease_ = estate.agent_lease;
  fence_grace_ = estate.fence_grace;
  for (const store::JobRecord& j : jobs) TrackLocked(j);
  indexed_ = true;
}

void NodeService::Track(const store::JobRecord& j) {
  std::lock_guard<std::mutex> lock(mu_);
  TrackLocked(j);
}

void NodeService::TrackLocked(const store::JobRecord& j) {
  for (const std::string& n : nodes_of_job_[j.id]) {
    auto it = assigned_.find(n);
    if (it == assigned_.end()) continue;
    for (auto a = it->second.begin(); a != it->second.end();) {
      a = a->first.first == j.id ? it->second.erase(a) : std::next(a);
    }
  }
  nodes_of_job_.erase(j.id);
  if (!HasAllocation(j.phase) || !j.allocation.is_array() || j.allocation.empty()) return;
  const Json& s = j.spec;
  const std::string master =
      address_.count(j.allocation[0].value("node", "")) ? address_.at(j.allocation[0]["node"]) : "";
  for (size_t t = 0; t < j.allocation.size(); ++t) {
    const Json& alloc = j.allocation[t];
    const std::string node = alloc.value("node", "");
    if (!address_.count(node)) continue;  // declared by a pool: no agent runs it
    Json a = {{"job", j.id},
              {"task", t},
              {"generation", j.generation},
              {"name", j.name},
              {"project", j.project},
              {"user", j.user},
              {"stop", j.phase == "Stopping"},
              {"stopReason", j.phase == "Stopping" ? j.reason : ""},
              {"devices", alloc.value("devices", Json::array())},
              {"worldSize", j.allocation.size()},
              {"masterAddr", master}};
    for (const char* k :
         {"command", "env", "image", "workingDir", "gracePeriod", "noticeSignal", "restartPolicy",
          "maxRestarts", "cpuMilli", "memoryMib", "simulateUtilization", "runtimeLimit"}) {
      if (s.contains(k)) a[k] = s.at(k);
    }
    assigned_[node][{j.id, static_cast<int32_t>(t)}] = std::move(a);
    nodes_of_job_[j.id].insert(node);
  }
}

base::Result<bool> NodeService::ExpireNodes() {
  const double now = clock_->Now();
  std::vector<std::string> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status l = Load(); !l.ok()) return l;
    for (const auto& [name, e] : nodes_) {
      const double timeout = std::max(lost_timeout_, e.fenced_within);
      if (e.state == "Ready" && now - e.last_seen > timeout) lost.push_back(name);
    }
  }
  if (lost.empty()) return false;
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    for (const std::string& name : lost) {
      auto o = tx.GetObject("Node", name);
      if (!o.ok()) continue;
      o->spec["state"] = "Lost";
      o->updated_at = now;
      if (auto v = tx.PutObject(*o, o->version); !v.ok()) return v.status();
      auto e =
          tx.AppendEvent({0, now, "Node", name, "", "Warning", "NodeLost",
                          "no heartbeat for " + std::to_string(static_cast<int>(lost_timeout_)) +
                              " s; its jobs are requeued or failed"});
      if (!e.ok()) return e.status();
      seq = *e;
    }
    // Every job with a task on a lost node: its other tasks are stopped too (the job is no
    // longer listed for their nodes). The lost timeout is longer than the agent's lease and its
    // fencing grace together (the Policy's rule), so what ran there has been killed by now.
    auto holding = JobsHolding(tx, {lost.begin(), lost.end()});
    if (!holding.ok()) return holding.status();
    for (store::JobRecord& j : *holding) {
      std::string where;
      std::vector<bool> lost_tasks;
      for (const Json& a : j.allocation) {
        const std::string n = a.value("node", "");
        const bool gone = std::find(lost.begin(), lost.end(), n) != lost.end();
        if (gone) where = n;
        lost_tasks.push_back(gone);
      }
      auto life = api::LifeOf(j);
      if (!life.ok()) return life.status();
      const domain::RestartPolicy policy{j.spec.value("restartPolicy", "never") == "on-failure",
                                         j.spec.value("maxRestarts", 3)};
      auto t = domain::lifecycle::NodeLost(*life, where, lost_tasks, policy, now);
      if (!t.ok()) return t.status();
      auto e = api::CommitTransition(tx, *t, now, &j);
      if (!e.ok()) return e.status();
      seq = std::max(seq, *e);
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : lost) nodes_[name].state = "Lost";
  }
  std::fprintf(stderr, "meridian: %zu node(s) lost (first: %s)\n", lost.size(), lost[0].c_str());
  bus_->Notify(seq);
  return true;
}

Json NodeService::NodeStatus(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)Load();
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return nullptr;
  return {{"state", it->second.state},
          {"lastHeartbeat", it->second.last_seen},
          {"simulated", it->second.simulated},
          {"telemetry", it->second.telemetry}};
}

}  // namespace meridian::server
