// How the controller takes in a change of configuration (Organization, Team, Project, Quota,
// PriorityClass, Cluster, NodePool, Policy) without a new scheduler: the estate is built again
// from the objects, and the live scheduler is given what changed, so that the queue, the
// reservation, the victims' claims and fair share stay as the cycles left them. Only what the
// scheduler cannot absorb (StructuralChange) rebuilds it. The loop is in controller.cc.
#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>

#include "base/log.h"
#include "server/controller.h"

namespace meridian::server {

using base::Status;

namespace {

bool SameTraits(const domain::Node& a, const domain::Node& b) {
  if (a.purpose != b.purpose || a.gpu_sharing != b.gpu_sharing || a.labels != b.labels ||
      a.taints.size() != b.taints.size()) {
    return false;
  }
  for (size_t i = 0; i < a.taints.size(); ++i) {
    if (a.taints[i].key != b.taints[i].key || a.taints[i].value != b.taints[i].value) return false;
  }
  return true;
}

bool SameCluster(const domain::Cluster& a, const domain::Cluster& b) {
  return a.name == b.name && a.kind == b.kind && a.region == b.region && a.backend == b.backend &&
         a.price_per_gpu_hour == b.price_per_gpu_hour && a.datasets == b.datasets &&
         a.egress_per_gib == b.egress_per_gib && a.bandwidth_gbps == b.bandwidth_gbps &&
         a.storage == b.storage;
}

// What the back end reads of datasets and sites: where each lives, each site's storage and links
// (which source a staging copies from).
bool SameData(const Estate& a, const Estate& b) {
  if (a.datasets != b.datasets || a.clusters.size() != b.clusters.size()) return false;
  for (size_t i = 0; i < a.clusters.size(); ++i) {
    if (a.clusters[i].name != b.clusters[i].name ||
        !(a.clusters[i].storage == b.clusters[i].storage) ||
        a.clusters[i].bandwidth_gbps != b.clusters[i].bandwidth_gbps ||
        a.clusters[i].egress_per_gib != b.clusters[i].egress_per_gib) {
      return false;
    }
  }
  return true;
}

bool SameTargets(const std::vector<sched::TaskSpec>& a, const std::vector<sched::TaskSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].allowed_clusters != b[i].allowed_clusters ||
        a[i].allowed_models != b[i].allowed_models) {
      return false;
    }
  }
  return true;
}

bool SameTiming(const Estate& a, const Estate& b) {
  return a.heartbeat_interval == b.heartbeat_interval &&
         a.node_lost_timeout == b.node_lost_timeout && a.agent_lease == b.agent_lease &&
         a.fence_grace == b.fence_grace && a.gpu_health == b.gpu_health &&
         a.gpu_warnings == b.gpu_warnings && a.failing_nodes == b.failing_nodes;
}

}  // namespace

Status SchedulerController::ApplyConfig() {
  std::vector<store::Object> objects;
  std::vector<store::JobRecord> jobs;
  int64_t latest = 0;
  if (Status s = ReadState(&objects, &jobs, &latest); !s.ok()) return s;
  auto built = BuildEstate(objects);
  if (!built.ok()) return built.status();
  std::unique_ptr<Estate> next = std::move(built.value());
  if (std::string why = StructuralChange(*next); !why.empty()) {
    base::log::Warn("scheduler: rebuilding it, as {}", why);
    dirty_ = true;
    return Status::Ok();
  }
  if (!MergeEstate(next.get())) {
    base::log::Info(
        "scheduler: rebuilding it, as the estate gained a node, cluster or GPU model it cannot "
        "take in place (a GPU model it never had, or past 64 clusters)");
    dirty_ = true;
    return Status::Ok();
  }
  const double now = clock_->Now();
  if (Status s = RetenantJobs(next.get(), jobs, now); !s.ok()) return s;
  scheduler_->SetOptions(AssemblyOf(*next).options, now);
  const bool timing = !SameTiming(*estate_, *next) || !SameData(*estate_, *next);
  estate_ = std::move(next);
  // The agents' timing (lease, fence grace, lost timeout), the GPU health policy, and the
  // datasets and sites' storage that tasks' mounts come from live in the back end, which is told
  // again only when they moved: telling it replaces what it was told, level-triggered.
  if (timing) backend_->Reset(*estate_, jobs);
  RetryRefused();
  return Status::Ok();
}

std::string SchedulerController::StructuralChange(const Estate& next) const {
  // The placement policy is the profile's plugins and weights, which the placer and its
  // indexes are built around: a new one is a new scheduler.
  if (next.placement != estate_->placement) {
    return "the placement policy changed from " + estate_->placement + " to " + next.placement;
  }
  // Clusters are bits in every task's masks: one may be added (a new bit), none removed.
  for (const domain::Cluster& c : estate_->clusters) {
    if (std::none_of(next.clusters.begin(), next.clusters.end(),
                     [&](const domain::Cluster& n) { return n.name == c.name; })) {
      return "cluster " + c.name + " was removed";
    }
  }
  std::map<std::string, const domain::Node*> now;
  for (const domain::Node& n : next.nodes) now[n.name] = &n;
  for (const domain::Node& n : estate_->nodes) {
    if (deleted_nodes_.count(n.name)) continue;
    auto it = now.find(n.name);
    if (it == now.end()) return "node " + n.name + " left the estate";
    // A registered node's own changes come with its events (FollowNode); a declared node's
    // hardware changes only with its pool, and GPUs are indexed estate-wide.
    if (!estate_->Registered(n.name) && !SameHardware(n, *it->second)) {
      return "node " + n.name + " of pool " + n.pool + " changed its hardware";
    }
  }
  return "";
}

bool SchedulerController::MergeEstate(Estate* next) {
  // Checked before anything changes: every node the estate gains can join in place (its
  // cluster is known or joins now, its GPUs' model is known).
  // A model known before any node has it (an elastic pool's) is one the live snapshot lacks.
  for (int m = 0; m < next->snapshot.model_count(); ++m) {
    const std::string& name = next->snapshot.model(static_cast<sched::ModelId>(m)).name;
    if (estate_->snapshot.FindModel(name) == sched::kNoModel) return false;
  }
  std::map<std::string, size_t> live;
  for (size_t i = 0; i < estate_->nodes.size(); ++i) live[estate_->nodes[i].name] = i;
  for (const domain::Node& n : next->nodes) {
    if (live.count(n.name)) continue;
    for (const domain::GpuDevice& g : n.gpus) {
      if (estate_->snapshot.FindModel(g.model) == sched::kNoModel) return false;
    }
  }
  // Quotas per GPU model were resolved against the new build's model numbers.
  std::vector<sched::ModelId> model_of(static_cast<size_t>(next->snapshot.model_count()));
  for (size_t m = 0; m < model_of.size(); ++m) {
    model_of[m] =
        estate_->snapshot.FindModel(next->snapshot.model(static_cast<sched::ModelId>(m)).name);
  }
  next->quotas.RemapModels(model_of);
  // Clusters keep their indexes, new ones come last; their attributes change in place.
  sched::Snapshot snapshot = estate_->snapshot;
  std::vector<domain::Cluster> clusters = estate_->clusters;
  for (const domain::Cluster& c : next->clusters) {
    const int32_t index = snapshot.FindCluster(c.name);
    if (index < 0) {
      auto added = scheduler_->AddCluster(c);
      auto mirrored = snapshot.AddCluster(c);
      if (!added.ok() || !mirrored.ok() || *added != *mirrored) return false;
      clusters.push_back(c);
    } else if (!SameCluster(c, clusters[static_cast<size_t>(index)])) {
      scheduler_->UpdateCluster(index, c);
      snapshot.UpdateCluster(index, c);
      clusters[static_cast<size_t>(index)] = c;
    }
  }
  // The live nodes keep their hardware (a registered node's own events change it) and take
  // their pools' traits as they are now.
  std::vector<domain::Node> nodes = estate_->nodes;
  std::map<std::string, std::string> address = estate_->agent_address;
  for (const domain::Node& n : next->nodes) {
    auto at = live.find(n.name);
    if (at == live.end()) {
      auto added = scheduler_->AddNode(n);
      auto mirrored = snapshot.AddNode(n);
      if (!added.ok() || !mirrored.ok() || *added != *mirrored) return false;
      nodes.push_back(n);
      if (next->Registered(n.name)) address[n.name] = next->agent_address.at(n.name);
      continue;
    }
    domain::Node& merged = nodes[at->second];
    if (SameTraits(merged, n)) continue;
    merged.purpose = n.purpose;
    merged.gpu_sharing = n.gpu_sharing;
    merged.labels = n.labels;
    merged.taints = n.taints;
    const int32_t index = static_cast<int32_t>(at->second);
    if (!scheduler_->UpdateNode(index, merged).ok() || !snapshot.UpdateNode(index, merged).ok()) {
      return false;
    }
  }
  // Datasets keep their indexes too (tasks name them by index): the scheduler's snapshot and
  // the estate's add them in the same order.
  for (const auto& [name, d] : next->datasets) {
    const int32_t index = snapshot.AddDataset(name);
    snapshot.SetDatasetSize(index, d.size_gib);
    if (scheduler_->SetDataset(name, d.size_gib) != index) return false;
  }
  // Copies staged into caches, or evicted from them, since.
  std::set<std::pair<int32_t, int32_t>> cached;
  for (const domain::DatasetCopy& c : next->copies) {
    const int32_t dataset = snapshot.FindDataset(c.dataset);
    const int32_t cluster = snapshot.FindCluster(c.cluster);
    if (dataset >= 0 && cluster >= 0) cached.emplace(dataset, cluster);
  }
  for (int32_t d = 0; d < static_cast<int32_t>(snapshot.datasets.size()); ++d) {
    for (int32_t c = 0; c < static_cast<int32_t>(snapshot.clusters.size()); ++c) {
      const bool now = cached.count({d, c}) > 0;
      if (((snapshot.datasets[static_cast<size_t>(d)].cached & sched::Bit(c)) != 0) == now) {
        continue;
      }
      snapshot.SetCached(d, c, now);
      scheduler_->SetCached(d, c, now);
    }
  }
  next->clusters = std::move(clusters);
  next->nodes = std::move(nodes);
  next->snapshot = std::move(snapshot);
  next->agent_address = std::move(address);
  return true;
}

Status SchedulerController::RetenantJobs(Estate* next, const std::vector<store::JobRecord>& jobs,
                                         double now) {
  std::map<int64_t, const store::JobRecord*> stored;
  for (const store::JobRecord& j : jobs) stored[j.id] = &j;
  // A project deleted while its jobs hold devices: they are charged to a root of its own name
  // (with no quota) until they end, so that what they hold stays counted.
  std::map<std::string, int32_t> orphans;
  auto tenant_of_project = [&](const std::string& project) {
    auto t = next->tenant_of_project.find(project);
    if (t != next->tenant_of_project.end()) return t->second;
    auto [orphan, added] = orphans.emplace(project, -1);
    if (added) orphan->second = next->quotas.AddNode(project, -1);
    return orphan->second;
  };
  std::unordered_map<int64_t, int32_t> tenant_of_job;
  std::vector<sched::JobSpec> queue;  // pending jobs the old estate could not convert
  for (auto& [id, k] : known_) {
    const sched::JobSpec* held = scheduler_->Find(id);
    auto record = stored.find(id);
    if (record == stored.end()) {  // ended meanwhile: its event follows
      if (held) tenant_of_job[id] = tenant_of_project(k.project);
      continue;
    }
    auto spec = ToSchedulerJob(*record->second, *next);
    if (!spec.ok()) {
      reasons_.Set(id, spec.status().message());
      refused_.erase(id);
      held_.erase(id);  // queued again, through its gates, once its project exists again
      backing_off_.erase(id);
      if (held && k.phase == "Pending") {
        scheduler_->Cancel(id, now);  // it cannot run until its project exists again
      } else if (held) {
        tenant_of_job[id] = tenant_of_project(k.project);
      }
      continue;
    }
    if (held) {
      tenant_of_job[id] = spec->tenant;
      // Its priority class's value, or whether it may preempt, changed.
      if (held->priority != spec->priority || held->preempting != spec->preempting) {
        scheduler_->SetPriority(id, spec->priority, spec->preempting);
      }
      // A cluster was added, or changed its region or kind.
      if (!SameTargets(held->tasks, spec->tasks)) scheduler_->Retarget(id, spec->tasks);
    } else if (auto r = refused_.find(id); r != refused_.end()) {
      r->second = std::move(spec.value());
    } else if (k.phase == "Pending") {
      queue.push_back(std::move(spec.value()));
    }
  }
  // Fair-share usage follows each node of the tenancy tree by name.
  const sched::QuotaTree& old = scheduler_->quotas();
  std::vector<int32_t> node_of(static_cast<size_t>(old.size()));
  for (int32_t n = 0; n < old.size(); ++n)
    node_of[static_cast<size_t>(n)] = next->quotas.Find(old.name(n));
  if (Status s = scheduler_->ReplaceQuotas(next->quotas, node_of, tenant_of_job, now); !s.ok()) {
    return s;
  }
  for (sched::JobSpec& spec : queue) Queue(std::move(spec));
  return Status::Ok();
}

}  // namespace meridian::server
