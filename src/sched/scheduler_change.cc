// Changes to the scheduler's inputs made in place: a node or cluster that changed, a new quota
// tree, priorities and options, and the undoing of decisions the caller could not carry out.
// The control plane follows its estate through these rather than building a new scheduler,
// which would forget the queue's order, the reservation and the claims of stopping victims
// (docs/adr/0012-job-lifecycle.md).
#include <algorithm>

#include "sched/scheduler.h"

namespace meridian::sched {

base::Status Scheduler::UpdateNode(int32_t node, const domain::Node& n) {
  if (node < 0 || node >= static_cast<int32_t>(snapshot_.nodes.size())) {
    return base::Status::NotFound("node " + n.name + " is not in the snapshot");
  }
  const NodeState& before = snapshot_.nodes[static_cast<size_t>(node)];
  const int64_t cpu = before.cpu_capacity, mem = before.memory_capacity;
  int64_t healthy_before = 0;
  for (int32_t g = before.gpu_begin; g < before.gpu_begin + before.gpu_count; ++g) {
    healthy_before += snapshot_.gpus[static_cast<size_t>(g)].healthy ? 1000 : 0;
  }
  if (base::Status s = snapshot_.UpdateNode(node, n); !s.ok()) return s;
  const NodeState& after = snapshot_.nodes[static_cast<size_t>(node)];
  int64_t healthy_after = 0;
  for (int32_t g = after.gpu_begin; g < after.gpu_begin + after.gpu_count; ++g) {
    healthy_after += snapshot_.gpus[static_cast<size_t>(g)].healthy ? 1000 : 0;
  }
  // Fair shares are fractions of the estate's capacity, which moved with the node.
  gpu_capacity_ = std::max<int64_t>(1, gpu_capacity_ + healthy_after - healthy_before);
  cpu_capacity_ = std::max<int64_t>(1, cpu_capacity_ + after.cpu_capacity - cpu);
  mem_capacity_ = std::max<int64_t>(1, mem_capacity_ + after.memory_capacity - mem);
  placer_.NodeChanged(node);
  return base::Status::Ok();
}

void Scheduler::UpdateCluster(int32_t cluster, const domain::Cluster& c) {
  if (cluster < 0 || cluster >= static_cast<int32_t>(snapshot_.clusters.size())) return;
  snapshot_.UpdateCluster(cluster, c);
  placer_.InvalidateCache();  // scores (cost, data locality) read what changed
}

base::Result<int32_t> Scheduler::AddCluster(const domain::Cluster& c) {
  auto index = snapshot_.AddCluster(c);
  if (index.ok()) placer_.InvalidateCache();
  return index;
}

int32_t Scheduler::SetDataset(const std::string& name, double size_gib) {
  const int32_t index = snapshot_.AddDataset(name);
  snapshot_.SetDatasetSize(index, size_gib);
  ForgetEstimate();
  return index;
}

void Scheduler::SetCached(int32_t dataset, int32_t cluster, bool cached) {
  if (dataset < 0 || dataset >= static_cast<int32_t>(snapshot_.datasets.size())) return;
  if (cluster < 0 || cluster >= static_cast<int32_t>(snapshot_.clusters.size())) return;
  snapshot_.SetCached(dataset, cluster, cached);
  ForgetEstimate();
}

void Scheduler::Retarget(int64_t id, const std::vector<TaskSpec>& tasks) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  std::vector<TaskSpec>& mine = it->second.spec.tasks;
  for (size_t i = 0; i < mine.size() && i < tasks.size(); ++i) {
    mine[i].allowed_clusters = tasks[i].allowed_clusters;
    mine[i].allowed_models = tasks[i].allowed_models;
  }
  it->second.shaped = false;  // PlaceIn builds the shape again from the tasks as they are now
  it->second.shape_key.clear();
  ForgetEstimate();
}

base::Status Scheduler::ReplaceQuotas(QuotaTree quotas, const std::vector<int32_t>& node_of,
                                      const std::unordered_map<int64_t, int32_t>& tenant_of_job,
                                      double now) {
  if (node_of.size() != usage_.size()) {
    return base::Status::Invalid("quota tree: a mapping for " + std::to_string(node_of.size()) +
                                 " nodes, the tree has " + std::to_string(usage_.size()));
  }
  for (const auto& [id, j] : jobs_) {
    if (j.phase == Phase::kDone) continue;
    auto t = tenant_of_job.find(id);
    if (t == tenant_of_job.end() || t->second < 0 || t->second >= quotas.size()) {
      return base::Status::Invalid("job " + std::to_string(id) +
                                   " has no tenant in the new quota tree");
    }
  }
  // Usage up to now is counted under the tenants as they were; from now on under the new ones.
  AdvanceUsage(now);
  std::vector<Usage> usage(static_cast<size_t>(quotas.size()));
  for (size_t i = 0; i < node_of.size(); ++i) {
    if (node_of[i] < 0 || node_of[i] >= quotas.size()) continue;
    Usage& u = usage[static_cast<size_t>(node_of[i])];
    u.gpu += usage_[i].gpu;
    u.cpu += usage_[i].cpu;
    u.mem += usage_[i].mem;
  }
  quotas_ = std::move(quotas);
  usage_ = std::move(usage);
  std::vector<Job*> holding;
  for (auto& [id, j] : jobs_) {
    if (j.phase == Phase::kDone) continue;
    j.spec.tenant = tenant_of_job.at(id);
    pending_.Regroup(QueueEntry(j));  // when it waits
    if (j.phase != Phase::kRunning && j.phase != Phase::kStopping) continue;
    Usage& u = usage_[static_cast<size_t>(j.spec.tenant)];
    for (size_t i = 0; i < j.charged_milli.size(); ++i) {
      quotas_.Charge(j.spec.tenant, j.charged_models[i], j.charged_milli[i]);
      u.gpu_now += j.charged_milli[i];
    }
    for (const TaskSpec& t : j.spec.tasks) {
      u.cpu_now += t.cpu_milli;
      u.mem_now += t.memory_mib;
    }
    holding.push_back(&j);
  }
  // Under the new guarantees, what a tenant holds beyond them is borrowed, and reclaimed first.
  for (Job* j : holding) j->borrowed = quotas_.Borrowing(j->spec.tenant);
  placer_.InvalidateCache();
  return base::Status::Ok();
}

void Scheduler::SetOptions(const SchedulerOptions& options, double now) {
  AdvanceUsage(now);  // decayed at the half-life it had until now
  options_ = options;
  placer_.set_static_mig(options_.mig_static);
  ordered_valid_ = false;  // the order, or LAS's levels, may have changed
  placer_.InvalidateCache();
}

void Scheduler::ReplaceProfile(Profile profile) {
  profile_ = std::move(profile);  // the placer points at profile_, which stays where it is
  placer_.InvalidateCache();
}

std::vector<TaskSpec> Scheduler::LiveTasks(size_t limit) const {
  std::vector<TaskSpec> tasks;
  // One job's tasks, while there is room; false once there is none.
  auto take = [&](int64_t id) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return true;
    for (const TaskSpec& t : it->second.spec.tasks) {
      if (tasks.size() >= limit) return false;
      tasks.push_back(t);
    }
    return true;
  };
  bool room = true;
  pending_.ForEach([&](int64_t id) { return room = take(id); });
  for (size_t i = 0; room && i < running_.size(); ++i) room = take(running_[i]);
  return tasks;
}

void Scheduler::SetPriority(int64_t id, int32_t priority, bool preempting) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.spec.priority = priority;
  it->second.spec.preempting = preempting;
  pending_.Regroup(QueueEntry(it->second));  // when it waits: its class changed
}

const JobSpec* Scheduler::Find(int64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() || it->second.phase == Phase::kDone ? nullptr : &it->second.spec;
}

void Scheduler::Unstart(int64_t id, double now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.phase != Phase::kRunning) return;
  Job& j = it->second;
  AdvanceUsage(now);
  Stop(j, now);
  j.phase = Phase::kPending;
  j.placements.clear();
  j.borrowed = false;
  --j.starts;  // it never ran
  Enqueue(j);
  if (reservation_used_by_ == id) {
    reserved_job_ = id;
    reservation_used_by_ = -1;
  }
}

void Scheduler::Unevict(int64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.phase != Phase::kStopping) return;
  it->second.phase = Phase::kRunning;
  it->second.stopping_for = -1;
  ForgetEstimate();  // running again: given back at its expected end
}

void Scheduler::Reserve(int64_t id) {
  auto it = jobs_.find(id);
  if (it != jobs_.end() && it->second.phase == Phase::kPending) reserved_job_ = id;
}

}  // namespace meridian::sched
