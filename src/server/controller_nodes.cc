// How the controller follows registered nodes in place: joined, lost, back, cordoned, draining,
// deleted, and registered again with other capacity or GPU health. The loop that calls it is in
// controller.cc.
#include <algorithm>
#include <cstdio>

#include "api/job_life.h"
#include "base/log.h"
#include "server/controller.h"

namespace meridian::server {

using base::Status;

namespace {

// Whether a re-registered node offers what it did (a lost node's agent back), so that only its
// schedulability moves.
bool SameCapacity(const domain::Node& a, const domain::Node& b) {
  return SameHardware(a, b) && a.labels == b.labels;
}

bool HoldsDevices(const std::string& phase) { return phase == "Placed" || phase == "Running"; }

}  // namespace

bool SchedulerController::FollowNode(const std::string& reason, const store::Object& node) {
  int32_t index = -1;
  for (size_t i = 0; i < estate_->nodes.size() && index < 0; ++i) {
    if (estate_->nodes[i].name == node.name) index = static_cast<int32_t>(i);
  }
  if (reason == "NodeDeleted") {
    // Its jobs were stopped first (or it was lost, and they with it): nothing is placed there
    // again until it registers afresh. The snapshot keeps its index, unschedulable.
    if (index < 0) return true;
    scheduler_->SetSchedulable(index, false);
    estate_->agent_address.erase(node.name);
    deleted_nodes_.insert(node.name);
    return true;
  }
  if (reason == "GpuCordoned" || reason == "GpuUncordoned") {
    // A GPU cordoned for a fault is an unhealthy slot (NodeOfObject), changed in place; the
    // jobs on it were asked to stop in the same write as the cordon.
    if (index < 0) return true;
    return ChangeNode(index, node);
  }
  if (reason == "GpuFault" || reason == "GpuHeld" || reason == "GpuRemediationFailed" ||
      reason == "FaultInjected") {
    return true;  // nothing the scheduler sees: the jobs' own events move them
  }
  domain::Node again = NodeOfObject(node);
  ApplyPoolTraits(*estate_, &again);
  // A deleted node that registers afresh ("Registered") is known to the snapshot still.
  const bool registered_again = (reason == "Reregistered" || reason == "Registered") && index >= 0;
  if (registered_again && !SameCapacity(again, estate_->nodes[static_cast<size_t>(index)])) {
    return ChangeNode(index, node);
  }
  const bool operated =
      reason == "NodeCordoned" || reason == "NodeUncordoned" || reason == "NodeDraining";
  if (reason == "NodeLost" || reason == "NodeReady" || registered_again || operated) {
    // A node the estate left out (its cluster does not exist, its GPUs are refused: a problem
    // of the estate) has nothing to follow; a rebuild would leave it out again.
    if (index < 0) return true;
    if (registered_again) {
      estate_->agent_address[node.name] = node.spec.value("address", "");
      estate_->nodes[static_cast<size_t>(index)].unavailable = again.unavailable;
      deleted_nodes_.erase(node.name);
    }
    // Its jobs were requeued, failed or asked to stop in the same write; their events move the
    // scheduler. Ready and not cordoned (NodeOfObject) is schedulable.
    // The scheduler's snapshot is the one owner of it; the estate's copies keep what was built.
    const bool ready = again.schedulable;
    scheduler_->SetSchedulable(index, ready);
    if (ready) RetryRefused();
    return true;
  }
  if (reason != "Registered" && reason != "Reregistered") return false;
  // In a cluster the estate does not have, it is left out, as the estate's build leaves it out.
  if (estate_->snapshot.FindCluster(again.cluster) < 0) return true;
  auto added = scheduler_->AddNode(again);
  if (!added.ok()) return false;  // a GPU model the snapshot lacks: rebuild
  // The estate's copy of the snapshot names nodes for allocations; it grows alike.
  auto mirrored = estate_->snapshot.AddNode(again);
  if (!mirrored.ok() || *mirrored != *added) return false;
  estate_->nodes.push_back(again);
  estate_->agent_address[again.name] = node.spec.value("address", "");
  RetryRefused();
  return true;
}

void SchedulerController::FollowReachability() {
  const std::set<std::string> silent = backend_->Unreachable();
  const sched::Snapshot& live = scheduler_->snapshot();
  bool back = false;
  for (size_t i = 0; i < estate_->nodes.size() && i < live.nodes.size(); ++i) {
    const bool reachable = silent.count(estate_->nodes[i].name) == 0;
    if (live.nodes[i].reachable == reachable) continue;
    base::log::Log(reachable ? base::log::Level::kInfo : base::log::Level::kWarn,
                   {{"node", estate_->nodes[i].name}}, "node {} {}", estate_->nodes[i].name,
                   reachable ? "heard from again: takes new work"
                             : "silent for several heartbeats: no new work until it is heard");
    scheduler_->SetReachable(static_cast<int32_t>(i), reachable);
    back = back || reachable;
  }
  if (back) RetryRefused();
}

bool SchedulerController::ChangeNode(int32_t index, const store::Object& node) {
  const domain::Node& live = estate_->nodes[static_cast<size_t>(index)];
  domain::Node again = NodeOfObject(node);
  ApplyPoolTraits(*estate_, &again);
  if (again.cluster != live.cluster || again.pool != live.pool) return false;
  // GPUs are matched by UUID: the snapshot's slots stay where they are (they are indexed
  // estate-wide), a GPU that left the registration is an unhealthy slot until it is back.
  domain::Node changed = again;
  changed.gpus = live.gpus;
  for (domain::GpuDevice& slot : changed.gpus) {
    auto now = std::find_if(again.gpus.begin(), again.gpus.end(),
                            [&](const domain::GpuDevice& g) { return g.uuid == slot.uuid; });
    if (now == again.gpus.end()) {
      slot.healthy = slot.working = false;
      slot.unmanaged.clear();  // gone, not held by anyone
      continue;
    }
    if (now->model != slot.model) return false;
    slot.healthy = now->healthy;
    slot.working = now->working;
    slot.unmanaged = now->unmanaged;
    slot.nvlink_domain = now->nvlink_domain;
  }
  for (const domain::GpuDevice& g : again.gpus) {
    if (std::none_of(live.gpus.begin(), live.gpus.end(),
                     [&](const domain::GpuDevice& slot) { return slot.uuid == g.uuid; })) {
      return false;  // a GPU the node never had: the snapshot has no slot for it
    }
  }
  if (!scheduler_->UpdateNode(index, changed).ok()) return false;
  if (!estate_->snapshot.UpdateNode(index, changed).ok()) return false;
  // Jobs on a GPU that is gone or unhealthy now: their tasks may still run there (or what is
  // left of them), so they hold their devices through Stopping until they are seen to stop.
  std::vector<std::pair<int64_t, std::string>> stop;
  std::vector<std::string> lost_uuids;
  for (size_t k = 0; k < changed.gpus.size(); ++k) {
    if (!changed.gpus[k].healthy && live.gpus[k].healthy) lost_uuids.push_back(live.gpus[k].uuid);
  }
  for (const auto& [id, k] : known_) {
    if (!HoldsDevices(k.phase)) continue;
    bool affected = false;
    for (const Json& t : k.allocation) {
      if (t.value("node", "") != node.name) continue;
      for (const Json& d : t.value("devices", Json::array())) {
        const int64_t gpu = d.value("gpu", int64_t{-1});
        affected = affected || (gpu >= 0 && gpu < static_cast<int64_t>(changed.gpus.size()) &&
                                !changed.gpus[static_cast<size_t>(gpu)].healthy);
      }
    }
    if (affected) stop.emplace_back(id, "");
  }
  estate_->nodes[static_cast<size_t>(index)] = changed;
  estate_->agent_address[node.name] = node.spec.value("address", "");
  deleted_nodes_.erase(node.name);
  scheduler_->SetSchedulable(index, again.schedulable);
  std::string gone;
  for (const std::string& u : lost_uuids) gone += (gone.empty() ? "" : ", ") + u;
  for (auto& [id, why] : stop) {
    why =
        "GPU " + gone + " of node " + node.name + " is gone or unhealthy: stopped, to be requeued";
  }
  if (!stop.empty()) {
    Status s = StopJobs(stop, "DeviceLost", clock_->Now());
    if (!s.ok()) {
      base::log::Error("scheduler: node {}: {}", node.name, s.message());
    }
  }
  if (again.schedulable) RetryRefused();
  return true;
}

Status SchedulerController::StopJobs(const std::vector<std::pair<int64_t, std::string>>& jobs,
                                     const std::string& event_reason, double now) {
  int64_t seq = 0;
  std::vector<store::JobRecord> stopped;
  Status s = store_->Write([&](store::Tx& tx) {
    for (const auto& [id, reason] : jobs) {
      auto job = tx.GetJob(id);
      if (!job.ok()) return job.status();
      auto life = api::LifeOf(*job);
      if (!life.ok()) return life.status();
      // Each gets its own grace, as the scheduler knows it from the job's spec.
      const sched::JobSpec* spec = scheduler_->Find(id);
      const double deadline = now + (spec ? spec->grace_period : 0.0);
      auto t = domain::lifecycle::RequestStop(
          *life, {domain::StopIntent::kRequeue, reason, event_reason, deadline, 0}, now);
      if (!t.ok() || t->events.empty()) continue;  // ended meanwhile, or stopping already
      auto e = api::CommitTransition(tx, *t, now, &*job);
      if (!e.ok()) return e.status();
      seq = std::max(seq, *e);
      stopped.push_back(*job);
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  // Stopping: the scheduler keeps their devices taken, and the agents are told to stop them.
  for (const store::JobRecord& j : stopped) Follow(j, now);
  if (seq > 0) bus_->Notify(seq);
  return Status::Ok();
}

}  // namespace meridian::server
