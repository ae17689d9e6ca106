#include "server/nodes.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "api/job_life.h"
#include "base/log.h"
#include "domain/gpu_model.h"
#include "domain/spec.h"
#include "protocol/agent_protocol.h"
#include "server/data_mounts.h"

namespace meridian::server {

using base::Status;

namespace {

bool HasAllocation(const std::string& phase) {
  return phase == "Placed" || phase == "Running" || phase == "Stopping";
}

}  // namespace

domain::RestartPolicy RestartOf(const store::JobRecord& job) {
  auto spec = api::SpecOf(job);
  return spec.ok() ? spec->restart : domain::RestartPolicy{};
}

base::Result<int64_t> DrainJob(store::Tx& tx, store::JobRecord* job, const std::string& reason,
                               double deadline, double now) {
  auto life = api::LifeOf(*job);
  if (!life.ok()) return life.status();
  auto t = domain::lifecycle::RequestStop(
      *life, {domain::StopIntent::kRequeue, reason, "Drained", deadline, 0}, now);
  if (!t.ok()) return t.status();
  if (t->events.empty()) return int64_t{0};  // already stopping, for as strong a reason
  return api::CommitTransition(tx, *t, now, job);
}

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
  auto reg = protocol::DecodeRegistration(body);
  if (!reg.ok()) return reg.status();
  std::string model;
  for (size_t i = 0; i < reg->gpus.size(); ++i) {
    const std::string at = "gpus[" + std::to_string(i) + "].";
    const std::string& m = reg->gpus[i].model;
    if (!domain::GpuCatalog::Builtin().Find(m)) {
      return Status::Invalid(at + "model: \"" + m + "\" is not a GPU model Meridian knows");
    }
    if (!model.empty() && m != model) {
      return Status::Invalid(at + "model: the GPUs of one node must be of one model (" + model +
                             " and " + m + ")");
    }
    model = m;
  }
  if (!domain::IsValidName(reg->node)) {
    return Status::Invalid("node: \"" + reg->node + "\" is not a valid name");
  }
  store::Object o;
  o.kind = "Node";
  o.name = reg->node;
  o.spec = protocol::ToJson(*reg);
  o.spec.erase("node");
  o.spec["state"] = "Ready";
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
    e.cluster = o.spec.value("cluster", "");
    e.simulated = o.spec.value("simulated", false);
    e.ops = domain::DecodeNodeOps(o.spec);
    e.last_seen = now;
    address_[o.name] = o.spec.value("address", "");
  }
  loaded_ = true;
  return Status::Ok();
}

void NodeService::TakeOver() {
  std::lock_guard<std::mutex> lock(mu_);
  // Nodes registered since a follower's read loaded them are in the store, not here: load anew.
  nodes_.clear();
  address_.clear();
  loaded_ = false;
  (void)Load();
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
  e.cluster = node->spec.value("cluster", "");
  e.last_seen = now;
  e.simulated = node->spec.at("simulated");
  e.ops = domain::DecodeNodeOps(node->spec);
  // Its tasks are assigned from now on, before the controller follows the registration.
  address_[node->name] = node->spec.value("address", "");
  e.fenced_within = agent_lease_ + fence_grace_ + 2 * heartbeat_interval_;
  // A registering agent counts XIDs from zero (it started, or its GPUs were found again).
  e.xids_seen.clear();
  e.xids_from_zero = true;
  return protocol::ToJson(protocol::RegistrationAnswer{node->name, TermsLocked(), ""});
}

base::Result<Json> NodeService::Heartbeat(const std::string& node, const Json& body) {
  auto beat = protocol::DecodeHeartbeat(body);
  if (!beat.ok()) return beat.status();
  const double now = clock_->Now();
  bool back = false;
  std::vector<XidSeen> xids;
  MigModes mig_modes;
  std::vector<domain::NodeCondition> warnings_began;
  std::vector<domain::NodeFailure> failed;
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
    if (body.contains("telemetry")) {
      xids = NewXidsLocked(it->second, beat->telemetry);
      mig_modes = MigModesLocked(it->second, beat->telemetry);
      // A reset the remediation made is said by its result, below.
      std::erase_if(mig_modes.settled, [&](int32_t g) {
        return std::any_of(beat->remediations.begin(), beat->remediations.end(),
                           [&](const protocol::RemediationResult& r) { return r.gpu == g; });
      });
      warnings_began = ObserveWarningsLocked(it->second, beat->telemetry, now);
      it->second.telemetry = std::move(beat->telemetry);
    }
    if (!beat->telemetry_errors.empty()) {
      // Said once per node, then counted (meridian_node_telemetry_rejected_samples_total): an
      // agent that sends a bad figure sends it with every heartbeat.
      if (it->second.rejected_samples == 0) {
        base::log::Warn(base::log::Fields{{"node", node}}, "node {}: GPU sample dropped: {}", node,
                        beat->telemetry_errors[0]);
      }
      it->second.rejected_samples += static_cast<int64_t>(beat->telemetry_errors.size());
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
  if (!mig_modes.empty()) {
    // Before the reports: the task that failed to start for it requeues with its GPU cordoned.
    auto cordoned = ApplyMigModes(node, mig_modes);
    if (!cordoned.ok()) return cordoned.status();
    seq = std::max(seq, *cordoned);
  }
  if (!beat->tasks.empty()) {
    // Staging first, while the runs it is about are still assigned (a report may end them).
    auto staged = ApplyStaging(node, beat->tasks);
    if (!staged.ok()) return staged.status();
    seq = std::max(seq, *staged);
    auto shared = ApplySharing(node, beat->tasks);
    if (!shared.ok()) return shared.status();
    seq = std::max(seq, *shared);
    auto applied = ApplyReports(node, beat->tasks, &failed);
    if (!applied.ok()) return applied.status();
    seq = std::max(seq, *applied);
  }
  if (!xids.empty()) {
    auto acted = ApplyXids(node, xids, &failed);
    if (!acted.ok()) return acted.status();
    seq = std::max(seq, *acted);
  }
  if (!warnings_began.empty()) {
    auto warned = RecordWarnings(node, warnings_began);
    if (!warned.ok()) return warned.status();
    seq = std::max(seq, *warned);
  }
  if (!failed.empty()) {
    auto flagged = RecordFailures(node, failed);
    if (!flagged.ok()) return flagged.status();
    seq = std::max(seq, *flagged);
  }
  if (!beat->remediations.empty()) {
    auto healed = ApplyRemediations(node, beat->remediations);
    if (!healed.ok()) return healed.status();
    seq = std::max(seq, *healed);
  }
  if (!beat->notices.empty()) {
    auto said = RecordNotices(node, beat->notices);
    if (!said.ok()) return said.status();
    seq = std::max(seq, *said);
  }
  if (seq > 0) {
    bus_->Notify(seq);
    if (wake_) wake_();
  }
  std::lock_guard<std::mutex> lock(mu_);
  protocol::HeartbeatAnswer answer;
  answer.terms = TermsLocked();
  if (auto it = nodes_.find(node); it != nodes_.end()) {
    it->second.fenced_within = agent_lease_ + fence_grace_ + 2 * heartbeat_interval_;
    HealthOrdersLocked(node, it->second, &answer);
  }
  if (auto a = assigned_.find(node); a != assigned_.end()) {
    answer.tasks.reserve(a->second.size());
    for (const auto& [key, task] : a->second) {
      answer.tasks.push_back(task.assignment);
      if (task.assignment.stop && task.stop_deadline > 0) {
        answer.tasks.back().stop_within = std::max(0.0, task.stop_deadline - now);
      }
    }
  }
  return protocol::ToJson(answer);
}

base::Result<int64_t> NodeService::RecordNotices(const std::string& node,
                                                 const std::vector<protocol::NodeNotice>& notices) {
  constexpr size_t kMaxNotices = 32;
  constexpr size_t kMaxMessage = 1024;
  std::vector<store::Event> events;
  const double now = clock_->Now();
  size_t dropped = 0;
  for (const protocol::NodeNotice& n : notices) {
    const bool named = !n.reason.empty() && n.reason.size() <= 64 &&
                       std::all_of(n.reason.begin(), n.reason.end(),
                                   [](unsigned char c) { return std::isalpha(c) != 0; });
    if (!named || events.size() == kMaxNotices) {
      ++dropped;
      continue;
    }
    // Cut on a character's first byte: the message is UTF-8, and stays so.
    size_t cut = std::min(n.message.size(), kMaxMessage);
    while (cut < n.message.size() && cut > 0 &&
           (static_cast<unsigned char>(n.message[cut]) & 0xC0) == 0x80) {
      --cut;
    }
    events.push_back({0, now, "Node", node, "", "Warning", n.reason, n.message.substr(0, cut)});
  }
  if (dropped > 0) {
    base::log::Warn(base::log::Fields{{"node", node}},
                    "node {}: {} notice(s) dropped (a reason that is not a word, or more than {} "
                    "in one heartbeat)",
                    node, dropped, kMaxNotices);
  }
  int64_t seq = 0;
  if (events.empty()) return seq;
  Status s = store_->Write([&](store::Tx& tx) {
    seq = 0;
    for (const store::Event& e : events) {
      auto appended = tx.AppendEvent(e);
      if (!appended.ok()) return appended.status();
      seq = *appended;
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return seq;
}

Status NodeService::MayUpload(const std::string& node, int64_t job, int32_t task,
                              int64_t generation) {
  auto j = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetJob(job); });
  if (!j.ok()) return j.status();
  {
    // An earlier run given to this node (the job was preempted or requeued since).
    std::lock_guard<std::mutex> lock(mu_);
    auto ran = ran_on_.find({job, task, generation});
    if (ran != ran_on_.end() && ran->second == node && generation <= j->generation) {
      return Status::Ok();
    }
  }
  const bool ran_here = task >= 0 && j->allocation.is_array() &&
                        static_cast<size_t>(task) < j->allocation.size() &&
                        j->allocation[static_cast<size_t>(task)].value("node", "") == node;
  if (j->generation != generation || !ran_here) {
    return Status(base::StatusCode::kPermissionDenied,
                  "job " + std::to_string(job) + " task " + std::to_string(task) + " generation " +
                      std::to_string(generation) + " is not node " + node +
                      "'s (the job is at generation " + std::to_string(j->generation) + ")");
  }
  return Status::Ok();
}

protocol::AgentTerms NodeService::TermsLocked() const {
  return {heartbeat_interval_, agent_lease_, fence_grace_};
}

base::Result<int64_t> NodeService::ApplyReports(const std::string& node,
                                                const std::vector<protocol::TaskReport>& tasks,
                                                std::vector<domain::NodeFailure>* failed) {
  std::map<int64_t, std::vector<domain::TaskReport>> by_job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const protocol::TaskReport& t : tasks) {
      // Skipping it changes no decision below: a report that matches what the job's record
      // says of its task is passed over by the lifecycle (lifecycle::Report).
      if (!QuietLocked(node, t)) by_job[t.job].push_back(t.report);
    }
  }
  if (by_job.empty()) return 0;
  const double now = clock_->Now();
  int64_t seq = 0;
  // (job, its version, report) of what changed nothing, kept once the transaction has ended.
  std::vector<std::tuple<int64_t, int64_t, domain::TaskReport>> quiet;
  Status s = store_->Write([&](store::Tx& tx) {
    quiet.clear();
    for (const auto& [id, reports] : by_job) {
      auto job = tx.GetJob(id);
      if (!job.ok()) continue;  // reports of a job that does not exist change nothing
      auto life = api::LifeOf(*job);
      if (!life.ok()) return life.status();
      std::vector<std::string> task_nodes;
      for (const Json& a : job->allocation) task_nodes.push_back(a.value("node", ""));
      // maxRestarts is only said in a restart's event: most heartbeats report none, and need
      // not decode the spec.
      const bool restarted =
          std::any_of(reports.begin(), reports.end(),
                      [](const domain::TaskReport& r) { return r.restarts > 0; });
      const int64_t max_restarts = restarted ? RestartOf(*job).max_restarts : 0;
      // A run of this generation that failed for a cause that points at the node.
      for (const domain::TaskReport& r : reports) {
        if (r.generation == job->generation && r.state == domain::TaskStatus::State::kExited &&
            domain::PointsAtNode(r.cause)) {
          failed->push_back({now, id, r.generation, job->project, r.cause});
        }
      }
      const domain::Transition t =
          domain::lifecycle::Report(*life, node, reports, task_nodes, max_restarts, now);
      if (t.events.empty()) {  // stale or unchanged
        for (const domain::TaskReport& r : reports) {
          if (r.state != domain::TaskStatus::State::kExited)
            quiet.emplace_back(id, job->version, r);
        }
        continue;
      }
      auto e = api::CommitTransition(tx, t, now, &*job);
      if (!e.ok()) return e.status();
      seq = *e;
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto here = assigned_.find(node);
  if (here == assigned_.end()) return seq;
  for (auto& [job, version, report] : quiet) {
    auto a = here->second.find({job, report.task});
    // Only where what the server tracks is the version read: an older Assigned is replaced
    // when the job's change reaches it (Track), a newer one was not what was read.
    if (a == here->second.end() || a->second.version != version ||
        a->second.assignment.generation != report.generation) {
      continue;
    }
    a->second.quiet = std::move(report);
  }
  return seq;
}

bool NodeService::QuietLocked(const std::string& node, const protocol::TaskReport& t) const {
  auto here = assigned_.find(node);
  if (here == assigned_.end()) return false;
  auto a = here->second.find({t.job, t.report.task});
  return a != here->second.end() && a->second.quiet && *a->second.quiet == t.report;
}

namespace {

// What an agent is told of a task that changes what it does: which run, and whether and by when
// to stop it. (A job's phase moving from Placed to Running changes none of it.)
bool SameOrders(const protocol::Assignment& a, double a_deadline, const protocol::Assignment& b,
                double b_deadline) {
  return a.generation == b.generation && a.stop == b.stop && a_deadline == b_deadline;
}

}  // namespace

void NodeService::Ring(const std::set<std::string>& nodes) const {
  if (!ring_ || nodes.empty()) return;
  // Node, and its cluster the first time the cluster comes up: a cluster's bell rings once.
  std::vector<std::pair<std::string, std::string>> rings;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<std::string> clusters;
    for (const std::string& node : nodes) {
      auto it = nodes_.find(node);
      const std::string cluster = it == nodes_.end() ? "" : it->second.cluster;
      rings.emplace_back(node, clusters.insert(cluster).second ? cluster : "");
    }
  }
  for (const auto& [node, cluster] : rings) ring_(node, cluster);
}

void NodeService::Reset(const Estate& estate, const std::vector<store::JobRecord>& jobs) {
  std::set<std::string> changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto before = std::move(assigned_);
    ResetLocked(estate, jobs);
    // Only the nodes whose orders the rebuild changed are rung: a rebuild of 10,000 nodes must
    // not make every agent heartbeat at once.
    for (const auto& [node, tasks] : before) {
      auto now = assigned_.find(node);
      if (now == assigned_.end() || now->second.size() != tasks.size()) {
        changed.insert(node);
        continue;
      }
      for (const auto& [key, was] : tasks) {
        auto is = now->second.find(key);
        if (is == now->second.end() ||
            !SameOrders(was.assignment, was.stop_deadline, is->second.assignment,
                        is->second.stop_deadline)) {
          changed.insert(node);
          break;
        }
      }
    }
    for (const auto& [node, tasks] : assigned_) {
      if (!before.count(node)) changed.insert(node);
    }
  }
  Ring(changed);
}

void NodeService::ResetLocked(const Estate& estate, const std::vector<store::JobRecord>& jobs) {
  assigned_.clear();
  nodes_of_job_.clear();
  // Which nodes an agent runs is this service's to know (registrations and deletions come
  // through it). The estate was built from a read that may be older than a registration since:
  // its addresses are added, never taken as the whole list.
  for (const auto& [node, address] : estate.agent_address) address_[node] = address;
  heartbeat_interval_ = estate.heartbeat_interval;
  lost_timeout_ = estate.node_lost_timeout;
  agent_lease_ = estate.agent_lease;
  fence_grace_ = estate.fence_grace;
  gpu_health_ = estate.gpu_health;
  gpu_warnings_ = estate.gpu_warnings;
  failing_nodes_ = estate.failing_nodes;
  datasets_ = estate.datasets;
  sites_.clear();
  for (const domain::Cluster& c : estate.clusters) sites_[c.name] = c;
  copies_.clear();
  for (const domain::DatasetCopy& c : estate.copies) copies_[c.cluster][c.dataset] = c;
  for (const store::JobRecord& j : jobs) TrackLocked(j, nullptr);
  indexed_ = true;
}

void NodeService::Track(const store::JobRecord& j) {
  std::set<std::string> changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TrackLocked(j, &changed);
  }
  Ring(changed);
}

void NodeService::TrackLocked(const store::JobRecord& j, std::set<std::string>* changed) {
  // The job's tasks as they were, to tell which nodes' orders change.
  std::map<std::pair<std::string, int32_t>, Assigned> before;
  for (const std::string& n : nodes_of_job_[j.id]) {
    auto it = assigned_.find(n);
    if (it == assigned_.end()) continue;
    for (auto a = it->second.begin(); a != it->second.end();) {
      if (a->first.first != j.id) {
        ++a;
        continue;
      }
      if (changed) before.emplace(std::make_pair(n, a->first.second), std::move(a->second));
      a = it->second.erase(a);
    }
  }
  nodes_of_job_.erase(j.id);
  AssignLocked(j);
  if (!changed) return;
  // A node is told when one of the job's tasks came, went, or changed its orders there.
  auto now_on = [&](const std::string& node, int32_t task) -> const Assigned* {
    auto on = assigned_.find(node);
    if (on == assigned_.end()) return nullptr;
    auto is = on->second.find({j.id, task});
    return is == on->second.end() ? nullptr : &is->second;
  };
  for (const auto& [key, was] : before) {
    const Assigned* is = now_on(key.first, key.second);
    if (!is || !SameOrders(was.assignment, was.stop_deadline, is->assignment, is->stop_deadline)) {
      changed->insert(key.first);
    }
  }
  if (auto nodes = nodes_of_job_.find(j.id); nodes != nodes_of_job_.end()) {
    for (const std::string& node : nodes->second) {
      for (const auto& [key, task] : assigned_[node]) {
        if (key.first == j.id && !before.count({node, key.second})) changed->insert(node);
      }
    }
  }
}

void NodeService::AssignLocked(const store::JobRecord& j) {
  if (!HasAllocation(j.phase) || !j.allocation.is_array() || j.allocation.empty()) return;
  auto spec = api::SpecOf(j);
  if (!spec.ok()) {
    // Listed nowhere, so its agents stop what runs of it; the controller keeps it out of the
    // scheduler with this reason (ToSchedulerJob).
    base::log::Error("{}", spec.status().message());
    return;
  }
  const protocol::TaskRun run = protocol::TaskRun::Of(*spec);
  auto life = api::LifeOf(j);
  const double stop_deadline =
      life.ok() && life->stop != domain::StopIntent::kNone ? life->stop_deadline : 0;
  const std::string first = j.allocation[0].value("node", "");
  const std::string master = address_.count(first) ? address_.at(first) : "";
  for (size_t t = 0; t < j.allocation.size(); ++t) {
    const Json& alloc = j.allocation[t];
    const std::string node = alloc.value("node", "");
    if (!address_.count(node)) continue;  // declared by a pool: no agent runs it
    auto devices = protocol::DecodeDevices(alloc.value("devices", Json::array()));
    if (!devices.ok()) {
      base::log::Error(base::log::Fields{{"job", std::to_string(j.id)}}, "job {} task {}: {}", j.id,
                       t, devices.status().message());
      continue;
    }
    protocol::Assignment a;
    a.job = j.id;
    a.task = static_cast<int32_t>(t);
    a.generation = j.generation;
    a.name = j.name;
    a.project = j.project;
    a.user = j.user;
    a.stop = j.phase == "Stopping";
    a.stop_reason = a.stop ? j.reason : "";
    a.devices = std::move(devices.value());
    a.world_size = static_cast<int32_t>(j.allocation.size());
    a.master_addr = master;
    a.array_id = j.array_id;
    a.array_index = j.array_index;
    a.run = run;
    const std::string cluster = alloc.value("cluster", "");
    a.data = DataMounts(datasets_, sites_, spec->datasets, cluster);
    for (protocol::DataMount& m : a.data) {
      if (!m.stage_from.empty()) m.evict = EvictionsLocked(cluster, m);
    }
    if (spec->checkpoint) a.checkpoint_dir = CheckpointDir(sites_, cluster, j.project, j.id);
    const int32_t task = a.task;
    const auto run = std::make_tuple(j.id, task, j.generation);
    if (ran_on_.emplace(run, node).second) {
      ran_order_.push_back(run);
      constexpr size_t kRunsKept = 200000;
      if (ran_order_.size() > kRunsKept) {
        ran_on_.erase(ran_order_.front());
        ran_order_.pop_front();
      }
    }
    assigned_[node][{j.id, task}] = Assigned{std::move(a), stop_deadline, cluster, j.version, {}};
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
  // The runs each lost node took down, which point at it (failing nodes, gpu_warnings.cc).
  std::map<std::string, std::vector<domain::NodeFailure>> failed;
  Status s = store_->Write([&](store::Tx& tx) {
    failed.clear();
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
        if (gone)
          failed[n].push_back(
              {now, j.id, j.generation, j.project, domain::FailureCause::kNodeLost});
      }
      auto life = api::LifeOf(j);
      if (!life.ok()) return life.status();
      auto t = domain::lifecycle::NodeLost(*life, where, lost_tasks, RestartOf(j), now);
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
  for (const auto& [name, runs] : failed) {
    auto flagged = RecordFailures(name, runs);
    if (!flagged.ok()) return flagged.status();
    seq = std::max(seq, *flagged);
  }
  base::log::Warn("{} node(s) lost (first: {})", lost.size(), lost[0]);
  bus_->Notify(seq);
  return true;
}

std::set<std::string> NodeService::Unreachable() const {
  const double now = clock_->Now();
  std::lock_guard<std::mutex> lock(mu_);
  const double after = std::min(std::max(3 * heartbeat_interval_, 1.0), lost_timeout_ / 2);
  std::set<std::string> out;
  for (const auto& [name, e] : nodes_) {
    if (e.state == "Ready" && now - e.last_seen > after) out.insert(name);
  }
  return out;
}

Json NodeService::NodeStatus(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)Load();
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return nullptr;
  Json telemetry = Json::array();
  for (const protocol::GpuSample& g : it->second.telemetry)
    telemetry.push_back(protocol::ToJson(g));
  return {{"state", it->second.state},
          {"lastHeartbeat", it->second.last_seen},
          {"simulated", it->second.simulated},
          {"telemetry", std::move(telemetry)},
          {"conditions", domain::ToJson(ConditionsLocked(it->second, clock_->Now()))}};
}

std::map<std::string, NodeService::NodeReport> NodeService::Reports() {
  std::lock_guard<std::mutex> lock(mu_);
  (void)Load();
  std::map<std::string, NodeReport> out;
  for (const auto& [name, e] : nodes_) {
    NodeReport& r = out[name];
    r.state = e.state;
    r.ops = e.ops;
    r.gpus = e.telemetry;
    r.rejected_samples = e.rejected_samples;
    // A lost node's warnings are old news, as its telemetry is (ADR 0014); its flag stands.
    r.conditions = ConditionsLocked(e, clock_->Now());
    if (e.state == "Lost") {
      std::erase_if(r.conditions,
                    [](const domain::NodeCondition& c) { return c.type != domain::kFailingJobs; });
    }
    auto a = assigned_.find(name);
    // As OperationsLocked: before the scheduler's first account nothing says it is drained.
    r.held = !indexed_ || (a != assigned_.end() && !a->second.empty());
    if (a == assigned_.end()) continue;
    for (const auto& [key, task] : a->second) {
      for (const protocol::DeviceGrant& d : task.assignment.devices) {
        std::vector<GpuHolder>& holders = r.holders[d.gpu];
        if (holders.empty() || holders.back().job != key.first) {
          holders.push_back({key.first, task.assignment.project});
        }
      }
    }
  }
  return out;
}

}  // namespace meridian::server
