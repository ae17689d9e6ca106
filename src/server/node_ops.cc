// NodeService's side of the operators' node operations (api::NodeOperations): cordon,
// uncordon, drain and delete of a registered node.
#include <algorithm>

#include "api/job_life.h"
#include "server/nodes.h"

namespace meridian::server {

using base::Status;

namespace {

std::string Ids(const std::vector<store::JobRecord>& jobs) {
  std::string out;
  for (size_t i = 0; i < jobs.size() && i < 10; ++i) {
    out += (i ? ", " : "") + std::to_string(jobs[i].id);
  }
  if (jobs.size() > 10) out += " and " + std::to_string(jobs.size() - 10) + " more";
  return out;
}

Status NodeNotRegistered(const std::string& node) {
  return Status::NotFound("node \"" + node +
                          "\" is not registered (nodes a pool declares are changed in the pool)");
}

}  // namespace

void NodeService::Operated(const std::string& node, const domain::NodeOps& ops, int64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = nodes_.find(node); it != nodes_.end()) it->second.ops = ops;
  }
  if (seq > 0) {
    bus_->Notify(seq);
    if (wake_) wake_();
  }
}

base::Result<Json> NodeService::Cordon(const std::string& node, const std::string& by,
                                       bool cordoned) {
  const double now = clock_->Now();
  domain::NodeOps ops;
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto o = tx.GetObject("Node", node);
    if (!o.ok())
      return o.status().code() == base::StatusCode::kNotFound ? NodeNotRegistered(node)
                                                              : o.status();
    ops = domain::DecodeNodeOps(o->spec);
    // Uncordoning ends a drain too; the jobs it stopped stay requeued.
    if (ops.cordoned == cordoned && (cordoned || !ops.drain)) return Status::Ok();
    ops.cordoned = cordoned;
    if (!cordoned) ops.drain.reset();
    // Uncordoning a node drained for a GPU fallen off the bus says it was rebooted: those GPUs
    // are back too. GPUs pending a reset stay cordoned until their remediation.
    if (!cordoned) {
      std::erase_if(ops.gpus, [](const domain::GpuHealth& g) {
        return g.cordoned && domain::ClassifyXid(g.xid).scope == domain::XidScope::kNode;
      });
    }
    domain::EncodeNodeOps(ops, &o->spec);
    o->updated_at = now;
    o->updated_by = by;
    if (auto v = tx.PutObject(*o, o->version); !v.ok()) return v.status();
    auto e = tx.AppendEvent(
        {0, now, "Node", node, "", "Normal", cordoned ? "NodeCordoned" : "NodeUncordoned",
         cordoned ? "cordoned by " + by + ": it takes no new job; what runs there goes on"
                  : "uncordoned by " + by + ": schedulable again"});
    if (!e.ok()) return e.status();
    seq = *e;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  Operated(node, ops, seq);
  std::lock_guard<std::mutex> lock(mu_);
  return OperationsLocked(node);
}

base::Result<Json> NodeService::Drain(const std::string& node, const std::string& by,
                                      const domain::DrainRequest& request) {
  const double now = clock_->Now();
  domain::NodeOps ops;
  Json stopping = Json::array();
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    stopping = Json::array();
    auto o = tx.GetObject("Node", node);
    if (!o.ok())
      return o.status().code() == base::StatusCode::kNotFound ? NodeNotRegistered(node)
                                                              : o.status();
    auto jobs = JobsHolding(tx, {node});
    if (!jobs.ok()) return jobs.status();
    // Without a deadline, the longest grace period of its jobs: each gets at least its own.
    double seconds = 0;
    for (const store::JobRecord& j : *jobs) {
      // A spec that no longer decodes (a damaged row) gets the default: the drain goes on.
      auto spec = api::SpecOf(j);
      seconds = std::max(seconds, spec.ok() ? spec->grace_period : domain::JobSpec{}.grace_period);
    }
    if (request.deadline) seconds = *request.deadline;
    const double deadline = now + seconds;
    ops = domain::DecodeNodeOps(o->spec);
    ops.cordoned = true;
    ops.drain = domain::NodeDrain{deadline, request.reason, by, now};
    domain::EncodeNodeOps(ops, &o->spec);
    o->updated_at = now;
    o->updated_by = by;
    if (auto v = tx.PutObject(*o, o->version); !v.ok()) return v.status();
    // The node first, so that the scheduler follows it as unschedulable before its jobs requeue.
    auto e = tx.AppendEvent({0, now, "Node", node, "", "Normal", "NodeDraining",
                             "drained by " + by +
                                 (request.reason.empty() ? "" : " (" + request.reason + ")") +
                                 ": " + std::to_string(jobs->size()) + " job(s) to stop within " +
                                 std::to_string(static_cast<int64_t>(seconds)) + " s"});
    if (!e.ok()) return e.status();
    seq = *e;
    const std::string reason = "node " + node + " drained by " + by +
                               (request.reason.empty() ? "" : " (" + request.reason + ")");
    for (store::JobRecord& j : *jobs) {
      auto c = DrainJob(tx, &j, reason, deadline, now);
      if (!c.ok()) return c.status();
      stopping.push_back(j.id);
      seq = std::max(seq, *c);
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  Operated(node, ops, seq);
  std::lock_guard<std::mutex> lock(mu_);
  Json out = OperationsLocked(node);
  out["stopping"] = stopping;
  return out;
}

base::Result<Json> NodeService::Delete(const std::string& node, const std::string& by, bool force) {
  const double now = clock_->Now();
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto o = tx.GetObject("Node", node);
    if (!o.ok())
      return o.status().code() == base::StatusCode::kNotFound ? NodeNotRegistered(node)
                                                              : o.status();
    auto jobs = JobsHolding(tx, {node});
    if (!jobs.ok()) return jobs.status();
    const bool lost = o->spec.value("state", "Ready") == "Lost";
    if (!jobs->empty() && !(force && lost)) {
      // Only a lost node's tasks are known to be fenced off (killed by its agent before the
      // lost timeout ended); elsewhere they may still run, and their devices are not free.
      return Status::Conflict("node " + node + ": job" + (jobs->size() == 1 ? " " : "s ") +
                              Ids(*jobs) + (jobs->size() == 1 ? " still holds" : " still hold") +
                              " resources on it; drain it first" +
                              (lost ? " (or, as it is Lost, delete it with force=true)" : ""));
    }
    if (Status d = tx.DeleteObject("Node", node, o->version); !d.ok()) return d;
    auto e = tx.AppendEvent(
        {0, now, "Node", node, "", "Normal", "NodeDeleted",
         "deleted by " + by + (jobs->empty() ? "" : " (forced; its jobs are requeued)")});
    if (!e.ok()) return e.status();
    seq = *e;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  {
    // Its agent's next heartbeat is answered 404, and it registers afresh.
    std::lock_guard<std::mutex> lock(mu_);
    nodes_.erase(node);
    address_.erase(node);
  }
  bus_->Notify(seq);
  if (wake_) wake_();
  return Json{{"deleted", {{"kind", "Node"}, {"name", node}}}};
}

Json NodeService::Operations(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)Load();
  return OperationsLocked(node);
}

Json NodeService::OperationsLocked(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return nullptr;
  const domain::NodeOps& ops = it->second.ops;
  // Jobs hold it while the scheduler lists any of their tasks for it (until each has stopped);
  // before the scheduler's first account (a server starting) nothing says it is drained.
  auto a = assigned_.find(node);
  const bool held = !indexed_ || (a != assigned_.end() && !a->second.empty());
  Json drain = nullptr;
  if (ops.drain) {
    drain = {{"deadline", ops.drain->deadline},
             {"reason", ops.drain->reason},
             {"by", ops.drain->by},
             {"at", ops.drain->at}};
  }
  return {{"node", node},
          {"cordoned", ops.cordoned},
          {"drain", drain},
          {"scheduling", std::string(domain::NodeScheduling(ops, held))},
          {"gpuHealth", domain::GpuHealthToJson(ops.gpus)}};
}

}  // namespace meridian::server
