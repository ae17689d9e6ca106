// What the controller shows of the scheduler's state: metrics, explanations, usage, the node
// list and the history the dashboard charts. The loop that changes that state is in
// controller.cc.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "base/log.h"
#include "domain/admission.h"
#include "server/controller.h"

namespace meridian::server {

using base::Status;

void SchedulerController::Publish(double cycle_seconds) {
  metrics_->Observe("meridian_scheduler_cycle_duration_seconds", {}, cycle_seconds);
  if (!scheduler_) return;
  const double now = clock_->Now();
  std::vector<std::pair<api::Metrics::Labels, double>> depth, oldest, jobs;
  for (const auto& [p, t] : tally_.projects) {
    if (t.pending.empty()) continue;
    depth.push_back({{{"project", p}}, static_cast<double>(t.pending.size())});
    oldest.push_back({{{"project", p}}, std::max(0.0, now - t.pending.begin()->first)});
  }
  for (const auto& [phase, n] : tally_.phases) {
    jobs.push_back({{{"phase", phase}}, static_cast<double>(n)});
  }
  metrics_->SetAll("meridian_queue_depth", depth);
  metrics_->SetAll("meridian_queue_oldest_pending_seconds", oldest);
  metrics_->SetAll("meridian_jobs", jobs);
  const sched::Snapshot& snap = scheduler_->snapshot();
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> gpus;
  for (size_t i = 0; i < snap.nodes.size(); ++i) {
    const sched::NodeState& n = snap.nodes[i];
    if (n.model == sched::kNoModel) continue;
    auto& [allocated, free] = gpus[{snap.clusters[n.cluster].name, snap.model(n.model).name}];
    for (int32_t g = n.gpu_begin; g < n.gpu_begin + n.gpu_count; ++g) {
      allocated += snap.GpuAllocatedMilli(g) / 1000.0;
      free += snap.GpuFreeMilli(static_cast<int32_t>(i), g) / 1000.0;
    }
  }
  std::vector<std::pair<api::Metrics::Labels, double>> allocated, free;
  for (const auto& [key, v] : gpus) {
    api::Metrics::Labels l = {{"cluster", key.first}, {"model", key.second}};
    allocated.push_back({l, v.first});
    free.push_back({l, v.second});
  }
  metrics_->SetAll("meridian_gpus_allocated", allocated);
  metrics_->SetAll("meridian_gpus_free", free);
  const sched::QuotaTree& q = scheduler_->quotas();
  std::vector<std::pair<api::Metrics::Labels, double>> used, guaranteed, limits;
  for (int32_t n = 0; n < q.size(); ++n) {
    // The level (organization > team > project) lets a query sum one level without knowing
    // the names. Projects are the leaves the estate knows; a team whose organization does not
    // exist is a root, and reads as one.
    const char* level = estate_ && estate_->tenant_of_project.count(q.name(n)) ? "project"
                        : q.parent(n) < 0                                      ? "organization"
                                                                               : "team";
    const api::Metrics::Labels l = {{"level", level}, {"scope", q.name(n)}};
    used.push_back({l, q.Used(n, sched::kNoModel) / 1000.0});
    guaranteed.push_back({l, q.Guaranteed(n, sched::kNoModel) / 1000.0});
    const int64_t limit = q.Limit(n, sched::kNoModel);
    if (limit != sched::kUnlimited) limits.push_back({l, limit / 1000.0});
  }
  metrics_->SetAll("meridian_quota_limit_gpus", limits);
  metrics_->SetAll("meridian_quota_used_gpus", used);
  metrics_->SetAll("meridian_quota_guaranteed_gpus", guaranteed);
}

base::Result<Json> SchedulerController::Explain(int64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<std::string> reason = reasons_.Get(job);
  if (!scheduler_) return Status::NotFound("the scheduler has not run yet");
  sched::Explanation e = scheduler_->Explain(job, clock_->Now());
  if (!e.known) {
    if (!reason) return Status::NotFound("not pending in the scheduler");
    return Json{{"reason", *reason}, {"clusters", Json::array()}, {"estimatedStart", nullptr}};
  }
  std::map<std::string, std::string> data(e.data.begin(), e.data.end());
  Json clusters = Json::array();
  for (const auto& [name, why] : e.clusters) {
    Json c = {{"name", name}, {"reason", why}};
    if (auto d = data.find(name); d != data.end()) c["data"] = d->second;
    clusters.push_back(std::move(c));
  }
  Json out = {{"reason", reason.value_or("")},
              {"quota", e.quota.empty() ? Json() : Json(e.quota)},
              {"clusters", clusters},
              {"estimatedStart", e.estimated_start < 0 ? Json() : Json(e.estimated_start)}};
  if (e.staging_seconds > 0) out["stagingSeconds"] = e.staging_seconds;
  return out;
}

std::map<std::string, double> SchedulerController::OldestPending() {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->Now();
  std::map<std::string, double> out;
  for (const auto& [p, t] : tally_.projects) {
    if (!t.pending.empty()) out[p] = std::max(0.0, now - t.pending.begin()->first);
  }
  return out;
}

std::vector<ElasticPools::Failure> SchedulerController::ProvisioningFailures() {
  std::lock_guard<std::mutex> lock(mu_);
  return elastic_ ? elastic_->Failures() : std::vector<ElasticPools::Failure>{};
}

Json SchedulerController::Usage() {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  if (!scheduler_) return out;
  const sched::QuotaTree& q = scheduler_->quotas();
  // Fair-share position: 1 is the node its siblings' queue serves first (the least decayed use
  // for its weight).
  const std::vector<double> shares = scheduler_->FairShares();
  std::map<int32_t, std::vector<std::pair<double, int32_t>>> by_parent;
  for (int32_t n = 0; n < q.size(); ++n) by_parent[q.parent(n)].emplace_back(shares[n], n);
  std::vector<int32_t> rank(q.size(), 1), siblings(q.size(), 1);
  for (auto& [parent, children] : by_parent) {
    std::sort(children.begin(), children.end());
    for (size_t i = 0; i < children.size(); ++i) {
      rank[children[i].second] = static_cast<int32_t>(i) + 1;
      siblings[children[i].second] = static_cast<int32_t>(children.size());
    }
  }
  for (int32_t n = 0; n < q.size(); ++n) {
    const int64_t limit = q.Limit(n, sched::kNoModel);
    const char* level = estate_ && estate_->tenant_of_project.count(q.name(n)) ? "project"
                        : q.parent(n) < 0                                      ? "organization"
                                                                               : "team";
    Json row = {{"name", q.name(n)},
                {"level", level},
                {"parent", q.parent(n) < 0 ? Json() : Json(q.name(q.parent(n)))},
                {"weight", q.weight(n)},
                {"guaranteedGpus", q.Guaranteed(n, sched::kNoModel) / 1000.0},
                {"limitGpus", limit == sched::kUnlimited ? Json() : Json(limit / 1000.0)},
                {"usedGpus", q.Used(n, sched::kNoModel) / 1000.0},
                {"borrowing", q.Used(n, sched::kNoModel) > 0 && q.Borrowing(n)},
                {"fairShare", shares[n]},
                {"fairShareRank", rank[n]},
                {"siblings", siblings[n]}};
    if (auto p = tally_.projects.find(q.name(n)); p != tally_.projects.end()) {
      row["pending"] = p->second.pending.size();
    }
    out.push_back(row);
  }
  return out;
}

void SchedulerController::KeepHistory(double interval, double retention) {
  std::lock_guard<std::mutex> lock(history_mu_);
  history_interval_ = interval;
  history_retention_ = retention;
  history_capacity_ = static_cast<size_t>(std::max(1.0, retention / interval));
  node_history_capacity_ =
      static_cast<size_t>(std::max(1.0, std::min(retention, api::kNodeHistorySeconds) / interval));
}

std::vector<api::HistorySample> SchedulerController::History(double since, double* interval) {
  std::lock_guard<std::mutex> lock(history_mu_);
  *interval = history_interval_;
  auto first = std::lower_bound(history_.begin(), history_.end(), since,
                                [](const api::HistorySample& s, double t) { return s.at < t; });
  return {first, history_.end()};
}

std::vector<api::NodeSample> SchedulerController::NodeHistory(const std::string& node, double since,
                                                              double* interval) {
  std::lock_guard<std::mutex> lock(history_mu_);
  *interval = history_interval_;
  auto it = node_history_.find(node);
  if (it == node_history_.end()) return {};
  auto first = std::lower_bound(it->second.begin(), it->second.end(), since,
                                [](const api::NodeSample& s, double t) { return s.at < t; });
  return {first, it->second.end()};
}

namespace {

// Calls `fn(i, n, d)` for each node of the snapshot (its state `n`, its declaration `d`) but the
// deleted ones, whose slots the snapshot cannot give back.
template <typename Fn>
void ForEachLiveNode(const sched::Snapshot& snap, const Estate& estate,
                     const std::set<std::string>& deleted, Fn&& fn) {
  for (size_t i = 0; i < snap.nodes.size() && i < estate.nodes.size(); ++i) {
    if (deleted.count(estate.nodes[i].name)) continue;
    fn(i, snap.nodes[i], estate.nodes[i]);
  }
}

// What one node's agent last reported of each of its GPUs.
api::NodeSample SampleOfNode(const Json& node, double now) {
  api::NodeSample out;
  out.at = now;
  for (const Json& gpu : node["gpus"]) {
    api::NodeGpuSample g;
    g.index = gpu.value("index", int32_t{0});
    if (gpu.contains("utilization") && gpu["utilization"].is_number()) {
      g.utilization = gpu["utilization"].get<float>();
    }
    if (gpu.contains("memoryUsedMib") && gpu["memoryUsedMib"].is_number()) {
      g.memory_used_mib = gpu["memoryUsedMib"].get<float>();
    }
    out.gpus.push_back(g);
  }
  return out;
}

// What views (the API, alert rules) say of a GPU's health. One that work outside Meridian holds
// is an unhealthy slot to the scheduler (nothing is placed on it); to everyone else it is
// occupied, and healthy unless the GPU itself is broken.
bool ShownHealthy(const sched::GpuState& scheduled, const domain::GpuDevice& device) {
  return scheduled.healthy || (!device.unmanaged.empty() && device.working);
}

}  // namespace

void SchedulerController::Sample(double now) {
  api::HistorySample sample;
  sample.at = now;
  std::map<std::pair<std::string, std::string>, size_t> index;
  std::vector<int32_t> reporting;
  std::map<std::string, api::NodeSample> per_node;
  for (const Json& node : Nodes()) {
    const std::string model = node.value("model", "");
    if (model.empty() || node["gpus"].empty()) continue;
    per_node[node.value("name", "")] = SampleOfNode(node, now);
    auto [it, added] = index.emplace(std::pair(node.value("cluster", ""), model), 0);
    if (added) {
      it->second = sample.groups.size();
      sample.groups.push_back({it->first.first, model, 0, 0, 0});
      reporting.push_back(0);
    }
    api::HistorySample::Group& g = sample.groups[it->second];
    for (const Json& gpu : node["gpus"]) {
      g.gpus += 1;
      g.allocated += gpu.value("allocatedMilli", int64_t{0}) / 1000.0;
      if (gpu.contains("utilization") && gpu["utilization"].is_number()) {
        g.utilization += gpu["utilization"].get<double>();
        ++reporting[it->second];
      }
    }
  }
  for (size_t i = 0; i < sample.groups.size(); ++i) {
    api::HistorySample::Group& g = sample.groups[i];
    g.utilization = reporting[i] > 0 ? g.utilization / reporting[i] : -1;
  }
  for (const Json& row : Usage()) {
    sample.quota_used[row.value("name", "")] = row.value("usedGpus", 0.0);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [p, t] : tally_.projects) {
      api::HistorySample::Queue& q = sample.projects[p];
      q.pending += static_cast<int32_t>(t.pending.size());
      q.running += static_cast<int32_t>(t.others);  // placed, running or stopping
    }
  }
  // Fair share as of now, kept so that a restart does not forget it.
  std::vector<store::FairShareUsage> usage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (scheduler_) {
      for (const auto& u : scheduler_->ExportUsage(now)) {
        usage.push_back({scheduler_->quotas().name(u.tenant), u.gpu, u.cpu, u.mem, now});
      }
    }
  }
  // Durable, but the charts' loss at worst: a failed write is said and the sample kept in memory.
  const Json stored = api::HistorySampleToJson(sample);
  Status s = store_->Write([&](store::Tx& tx) {
    if (Status put = tx.PutSample(now, stored); !put.ok()) return put;
    if (!usage.empty()) {
      if (Status put = tx.PutFairShare(usage); !put.ok()) return put;
    }
    return tx.PruneSamples(now - history_retention_);
  });
  if (!s.ok()) base::log::Error("history: {}", s.message());
  std::lock_guard<std::mutex> lock(history_mu_);
  history_.push_back(std::move(sample));
  while (history_.size() > history_capacity_) history_.pop_front();
  for (auto& [name, s] : per_node) {
    std::deque<api::NodeSample>& kept = node_history_[name];
    kept.push_back(std::move(s));
    while (kept.size() > node_history_capacity_) kept.pop_front();
  }
  // A node not sampled for as long as its history reaches back is forgotten (deleted, or gone).
  const double window = static_cast<double>(node_history_capacity_) * history_interval_;
  for (auto it = node_history_.begin(); it != node_history_.end();) {
    it = it->second.empty() || it->second.back().at < now - window ? node_history_.erase(it)
                                                                   : std::next(it);
  }
}

std::string SchedulerController::PendingReason(int64_t job) {
  return reasons_.Get(job).value_or("");  // without mu_: never waits for a cycle
}

std::vector<api::ConfigProblem> SchedulerController::ConfigProblems() {
  std::lock_guard<std::mutex> lock(mu_);
  return estate_ ? estate_->problems : std::vector<api::ConfigProblem>{};
}

void SchedulerController::PublishAdmission() {
  if (!estate_) return;
  std::shared_ptr<const AdmissionView> view;
  if (admission_stale_) {
    view = std::make_shared<const AdmissionView>(
        AdmissionView{estate_->clusters, estate_->nodes, estate_->pool_shapes});
    admission_stale_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(admission_mu_);
    if (view) admission_ = std::move(view);
    admission_seq_ = last_seq_;
  }
  admission_cv_.notify_all();
}

// Checked against the estate as the last cycle took it in, without waiting for the cycle that
// runs now. A refusal by a view older than the submission (an apply or a node's registration
// may have come since: `apply && submit`) is checked again once a cycle has taken in what the
// store held at the submission; if none has within a while, the job is accepted and the
// scheduler says why it waits.
std::optional<domain::FieldError> SchedulerController::NeverHeld(const domain::JobSpec& spec) {
  constexpr auto kWaitForACycle = std::chrono::seconds(10);
  auto check =
      [&](const std::shared_ptr<const AdmissionView>& view) -> std::optional<domain::FieldError> {
    if (!view) return std::nullopt;  // not built yet: the scheduler says so when it is
    return domain::NeverHeld(spec, view->clusters, view->nodes, view->pool_shapes);
  };
  std::shared_ptr<const AdmissionView> view;
  int64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(admission_mu_);
    view = admission_;
    seq = admission_seq_;
  }
  std::optional<domain::FieldError> refused = check(view);
  if (!refused) return refused;
  auto latest = store::ReadValue(*store_, [](store::Tx& tx) { return tx.LatestEventSeq(); });
  if (!latest.ok() || *latest <= seq) return refused;
  Wake();
  std::unique_lock<std::mutex> lock(admission_mu_);
  if (!admission_cv_.wait_for(lock, kWaitForACycle, [&] { return admission_seq_ >= *latest; })) {
    return std::nullopt;
  }
  view = admission_;
  lock.unlock();
  return check(view);
}

std::vector<SchedulerController::ScheduledNode> SchedulerController::ScheduledNodes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ScheduledNode> out;
  if (!scheduler_ || !estate_) return out;
  const sched::Snapshot& snap = scheduler_->snapshot();
  out.reserve(snap.nodes.size());
  ForEachLiveNode(
      snap, *estate_, deleted_nodes_,
      [&](size_t, const sched::NodeState& n, const domain::Node& d) {
        ScheduledNode& node = out.emplace_back();
        node.name = n.name;
        node.cluster = snap.clusters[n.cluster].name;
        node.gpus.reserve(static_cast<size_t>(n.gpu_count));
        for (int32_t g = n.gpu_begin; g < n.gpu_begin + n.gpu_count; ++g) {
          const domain::GpuDevice& device = d.gpus[g - n.gpu_begin];
          node.gpus.push_back({g - n.gpu_begin, device.uuid, ShownHealthy(snap.gpus[g], device)});
        }
      });
  return out;
}

Json SchedulerController::Nodes() {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  if (!scheduler_ || !estate_) return out;
  const sched::Snapshot& snap = scheduler_->snapshot();
  ForEachLiveNode(
      snap, *estate_, deleted_nodes_,
      [&](size_t i, const sched::NodeState& n, const domain::Node& d) {
        Json gpus = Json::array();
        for (int32_t g = n.gpu_begin; g < n.gpu_begin + n.gpu_count; ++g) {
          const sched::GpuState& gpu = snap.gpus[g];
          const domain::GpuDevice& device = d.gpus[g - n.gpu_begin];
          gpus.push_back({{"index", g - n.gpu_begin},
                          {"uuid", device.uuid},
                          {"allocatedMilli", snap.GpuAllocatedMilli(g)},
                          {"freeMilli", snap.GpuFreeMilli(static_cast<int32_t>(i), g)},
                          {"mig", gpu.mig_enabled},
                          {"healthy", ShownHealthy(gpu, device)}});
          if (!device.unmanaged.empty()) gpus.back()["unmanaged"] = device.unmanaged;
        }
        out.push_back({{"name", n.name},
                       {"cluster", snap.clusters[n.cluster].name},
                       {"pool", d.pool},
                       {"rack", d.rack},
                       {"model", n.model == sched::kNoModel ? "" : snap.model(n.model).name},
                       {"cpuMilli", n.cpu_capacity + d.unmanaged_cpu_milli},
                       {"cpuFreeMilli", n.cpu_free},
                       {"memoryMib", n.memory_capacity + d.unmanaged_memory_mib},
                       {"memoryFreeMib", n.memory_free},
                       {"schedulable", n.schedulable},
                       {"unavailable", d.unavailable},
                       {"labels", d.labels},
                       {"gpus", std::move(gpus)}});
        Json& row = out.back();
        if (d.unmanaged_cpu_milli > 0) row["unmanagedCpuMilli"] = d.unmanaged_cpu_milli;
        if (d.unmanaged_memory_mib > 0) row["unmanagedMemoryMib"] = d.unmanaged_memory_mib;
        // Registered by an agent (with liveness and telemetry), or declared by a node pool.
        Json status = estate_->Registered(d.name) ? nodes_->NodeStatus(d.name) : Json();
        row["source"] = status.is_null() ? "declared" : "registered";
        if (status.is_null()) return;
        row["state"] = status["state"];
        row["lastHeartbeat"] = status["lastHeartbeat"];
        row["simulated"] = status["simulated"];
        row["conditions"] = status["conditions"];
        row["address"] = estate_->agent_address.at(d.name);
        for (const Json& t : status["telemetry"]) {
          const bool indexed =
              t.is_object() && t.contains("index") && t["index"].is_number_integer();
          const int64_t index = indexed ? t["index"].get<int64_t>() : -1;
          if (index < 0 || index >= static_cast<int64_t>(row["gpus"].size())) continue;
          // Only telemetry: an agent's report cannot overwrite what the scheduler says.
          for (const auto& [k, v] : t.items()) {
            if (k != "index") row["gpus"][index][k] = v;
          }
        }
      });
  return out;
}

}  // namespace meridian::server
