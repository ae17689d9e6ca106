// NodeService's side of GPU health: new XIDs in a heartbeat's samples, acted on by their class
// (domain/gpu_health.h); remediation of cordoned GPUs by their agents and the uncordon that
// follows a passed probe; fault injection into simulated GPUs; an operator's GPU uncordon.
#include <algorithm>
#include <cstdio>

#include "api/job_life.h"
#include "base/log.h"
#include "server/nodes.h"

namespace meridian::server {

using base::Status;

namespace {

// Who the health loop's writes are by, in events and in a drain's record.
constexpr const char* kHealth = "gpu-health";
// The XID that announces a row remap (or page retirement) waiting for a reset.
constexpr int32_t kRowRemapXid = 63;

struct GpuSlot {
  int32_t index = 0;
  std::string uuid;
  int32_t nvlink_domain = 0;
};

std::vector<GpuSlot> SlotsOf(const store::Object& node) {
  std::vector<GpuSlot> out;
  for (const Json& g : node.spec.value("gpus", Json::array())) {
    out.push_back({g.value("index", static_cast<int32_t>(out.size())), g.value("uuid", ""),
                   g.value("nvlinkDomain", 0)});
  }
  return out;
}

// The GPUs a fault of `scope` on `gpu` takes out of service (none for an application's XID).
std::vector<int32_t> CordonScope(domain::XidScope scope, int32_t gpu,
                                 const std::vector<GpuSlot>& slots) {
  if (scope == domain::XidScope::kJob) return {};
  if (scope != domain::XidScope::kNvlinkDomain) return {gpu};
  auto self =
      std::find_if(slots.begin(), slots.end(), [&](const GpuSlot& s) { return s.index == gpu; });
  if (self == slots.end()) return {gpu};
  std::vector<int32_t> out;
  for (const GpuSlot& s : slots) {
    if (s.nvlink_domain == self->nvlink_domain) out.push_back(s.index);
  }
  return out;
}

// Whether a task of `job` on `node` holds one of `gpus` (any GPU of the node when `whole`).
bool Holds(const store::JobRecord& job, const std::string& node, const std::vector<int32_t>& gpus,
           bool whole) {
  for (const Json& task : job.allocation) {
    if (!task.is_object() || task.value("node", "") != node) continue;
    if (whole) return true;
    for (const Json& d : task.value("devices", Json::array())) {
      const int64_t g = d.is_object() ? d.value("gpu", int64_t{-1}) : -1;
      if (std::find(gpus.begin(), gpus.end(), g) != gpus.end()) return true;
    }
  }
  return false;
}

std::string Hours(double seconds) {
  const double h = seconds / 3600;
  return h == static_cast<int64_t>(h) ? std::to_string(static_cast<int64_t>(h))
                                      : std::to_string(h).substr(0, 4);
}

// Stores what operators (or GPU health, `by`) now ask of the node, then appends `events` in
// order; `seq` is the last one's.
Status PutOps(store::Tx& tx, store::Object* node, const domain::NodeOps& ops, const std::string& by,
              double now, const std::vector<store::Event>& events, int64_t* seq) {
  domain::EncodeNodeOps(ops, &node->spec);
  node->updated_at = now;
  node->updated_by = by;
  if (auto v = tx.PutObject(*node, node->version); !v.ok()) return v.status();
  for (const store::Event& e : events) {
    auto appended = tx.AppendEvent(e);
    if (!appended.ok()) return appended.status();
    *seq = *appended;
  }
  return Status::Ok();
}

Status NotRegistered(const std::string& node) {
  return Status::NotFound("node \"" + node + "\" is not registered");
}

}  // namespace

std::vector<NodeService::XidSeen> NodeService::NewXidsLocked(
    NodeEntry& e, const std::vector<protocol::GpuSample>& samples) {
  std::vector<XidSeen> out;
  for (const protocol::GpuSample& s : samples) {
    auto seen = e.xids_seen.find(s.index);
    const int64_t before =
        seen != e.xids_seen.end() ? seen->second : (e.xids_from_zero ? 0 : s.xid_errors);
    e.xids_seen[s.index] = s.xid_errors;
    // Several XIDs between two samples are seen as their last one: the sample keeps no more.
    if (s.xid_errors > before && s.last_xid > 0) {
      out.push_back({s.index, s.last_xid});
      continue;
    }
    // A row remap that waits for a reset, without its XID (63) seen: the GPU is taken as having
    // reported it, so that nothing is placed on memory pending a remap.
    if (s.row_remap_pending.value_or(false) && !domain::GpuCordoned(e.ops.gpus, s.index)) {
      out.push_back({s.index, kRowRemapXid});
    }
  }
  return out;
}

base::Result<int64_t> NodeService::ApplyXids(const std::string& node,
                                             const std::vector<XidSeen>& xids,
                                             std::vector<domain::NodeFailure>* failed) {
  const double now = clock_->Now();
  domain::GpuHealthPolicy policy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy = gpu_health_;
  }
  domain::NodeOps ops;
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    seq = 0;
    auto o = tx.GetObject("Node", node);
    if (!o.ok()) return Status::Ok();  // deleted meanwhile: nothing to act on
    ops = domain::DecodeNodeOps(o->spec);
    const std::vector<GpuSlot> slots = SlotsOf(*o);
    auto jobs = JobsHolding(tx, {node});
    if (!jobs.ok()) return jobs.status();
    std::vector<store::Event> node_events;
    auto say = [&](const char* type, const char* reason, std::string message) {
      node_events.push_back({0, now, "Node", node, "", type, reason, std::move(message)});
    };
    // What each fault stops: the jobs on these GPUs (every job of the node for a drain).
    struct Stop {
      std::string what;
      std::vector<int32_t> gpus;
      bool whole = false;
    };
    std::vector<Stop> stops;
    bool drain = false;
    std::string drain_why;
    for (const XidSeen& x : xids) {
      const domain::XidClass c = domain::ClassifyXid(x.xid);
      const std::string what =
          "GPU " + std::to_string(x.gpu) + " of node " + node + ": " + domain::DescribeXid(x.xid);
      const std::vector<int32_t> cordon = CordonScope(c.scope, x.gpu, slots);
      if (cordon.empty()) {
        say("Warning", "GpuFault",
            what + ": the application's error; the job on it is stopped, the GPU stays in service");
      }
      for (int32_t g : cordon) {
        const std::string why =
            g == x.gpu ? what : what + " (GPU " + std::to_string(g) + " shares its NVLink domain)";
        const domain::FaultRecorded r =
            domain::RecordGpuFault(&ops.gpus, g, x.xid, why, policy, now);
        say("Warning", "GpuCordoned",
            "GPU " + std::to_string(g) + " cordoned: " + why +
                (c.scope == domain::XidScope::kNode ? "; the node needs a reboot"
                                                    : "; pending a GPU reset"));
        if (r.held) {
          say("Warning", "GpuHeld",
              "GPU " + std::to_string(g) + " faulted " + std::to_string(r.recent) + " times in " +
                  Hours(policy.fault_window) +
                  " h: it stays cordoned, without remediation, until an operator uncordons it "
                  "(meridian uncordon " +
                  node + " --gpu " + std::to_string(g) + ")");
        }
      }
      if (c.scope == domain::XidScope::kNode && !drain) {
        drain = true;
        drain_why = what;
      }
      stops.push_back({what, cordon.empty() ? std::vector<int32_t>{x.gpu} : cordon,
                       c.scope == domain::XidScope::kNode});
    }
    double longest_grace = 0;
    for (const store::JobRecord& j : *jobs) {
      auto spec = api::SpecOf(j);
      longest_grace =
          std::max(longest_grace, spec.ok() ? spec->grace_period : domain::JobSpec{}.grace_period);
    }
    if (drain && !ops.drain) {
      ops.cordoned = true;
      ops.drain =
          domain::NodeDrain{now + longest_grace, drain_why + "; reboot the node", kHealth, now};
      say("Warning", "NodeDraining",
          "drained by " + std::string(kHealth) + " (" + drain_why +
              "): its jobs are stopped and requeued; reboot the node, then uncordon it");
    }
    // The node's events first: the scheduler follows the cordons before the jobs requeue.
    if (Status put = PutOps(tx, &*o, ops, kHealth, now, node_events, &seq); !put.ok()) return put;
    for (store::JobRecord& j : *jobs) {
      auto stop = std::find_if(stops.begin(), stops.end(),
                               [&](const Stop& st) { return Holds(j, node, st.gpus, st.whole); });
      if (stop == stops.end()) continue;
      auto life = api::LifeOf(j);
      if (!life.ok()) return life.status();
      auto spec = api::SpecOf(j);
      const double grace = spec.ok() ? spec->grace_period : domain::JobSpec{}.grace_period;
      auto t = domain::lifecycle::GpuFault(*life, stop->what, RestartOf(j), now + grace, now);
      if (!t.ok() || t->events.empty()) continue;  // ended, or stopping for as strong a reason
      auto c = api::CommitTransition(tx, *t, now, &j);
      if (!c.ok()) return c.status();
      seq = std::max(seq, *c);
      // A run stopped by its GPU's fault failed for a cause that points at the node.
      failed->push_back({now, j.id, j.generation, j.project, domain::FailureCause::kGpuFault});
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  for (const XidSeen& x : xids) {
    base::log::Warn(base::log::Fields{{"node", node}, {"gpu", std::to_string(x.gpu)}},
                    "node {}: GPU {} reported {} ({})", node, x.gpu, domain::DescribeXid(x.xid),
                    domain::ScopeName(domain::ClassifyXid(x.xid).scope));
  }
  if (seq > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = nodes_.find(node); it != nodes_.end()) it->second.ops = ops;
  }
  return seq;
}

NodeService::MigModes NodeService::MigModesLocked(const NodeEntry& e,
                                                  const std::vector<protocol::GpuSample>& samples) {
  MigModes out;
  for (const protocol::GpuSample& s : samples) {
    if (!s.mig_mode_pending) continue;
    const domain::GpuHealth* g = domain::FindGpu(e.ops.gpus, s.index);
    const bool marked = g && g->mig_mode_pending;
    if (*s.mig_mode_pending && !marked) out.pending.push_back(s.index);
    if (!*s.mig_mode_pending && marked) out.settled.push_back(s.index);
  }
  return out;
}

base::Result<int64_t> NodeService::ApplyMigModes(const std::string& node, const MigModes& modes) {
  const double now = clock_->Now();
  bool remediates = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    remediates = gpu_health_.remediates();
  }
  domain::NodeOps ops;
  int64_t seq = 0;
  bool written = false;
  Status s = store_->Write([&](store::Tx& tx) {
    seq = 0;
    written = false;
    auto o = tx.GetObject("Node", node);
    if (!o.ok()) return Status::Ok();  // deleted meanwhile
    written = true;
    ops = domain::DecodeNodeOps(o->spec);
    auto jobs = JobsHolding(tx, {node});
    if (!jobs.ok()) return jobs.status();
    std::vector<store::Event> events;
    auto say = [&](const char* type, const char* reason, std::string message) {
      events.push_back({0, now, "Node", node, "", type, reason, std::move(message)});
    };
    for (int32_t g : modes.pending) {
      const std::string gpu = "GPU " + std::to_string(g);
      const std::string why =
          gpu + " of node " + node + ": its MIG mode change waits for a GPU reset";
      if (!domain::CordonForMigMode(&ops.gpus, g, why, now)) {
        // Cordoned already, for a fault: that cordon's reset puts the mode in effect too.
        say("Normal", "GpuResetPending",
            gpu + " (cordoned already): its MIG mode change waits for the same GPU reset");
        continue;
      }
      say("Warning", "GpuCordoned",
          gpu + " cordoned: its MIG mode change waits for a GPU reset; " +
              (remediates ? "the Policy's remediation resets it once no task holds it"
                          : "no remediation is configured: reset it (nvidia-smi --gpu-reset -i " +
                                std::to_string(g) + ")"));
    }
    for (int32_t g : modes.settled) {
      if (domain::MigModeInEffect(&ops.gpus, g)) {
        say("Normal", "GpuUncordoned",
            "GPU " + std::to_string(g) + ": its MIG mode change is in effect: back in service");
      }
    }
    // The node first, so that the scheduler follows the cordons before the jobs requeue.
    if (Status put = PutOps(tx, &*o, ops, kHealth, now, events, &seq); !put.ok()) return put;
    for (store::JobRecord& j : *jobs) {
      auto held = std::find_if(modes.pending.begin(), modes.pending.end(),
                               [&](int32_t g) { return Holds(j, node, {g}, false); });
      if (held == modes.pending.end()) continue;
      auto spec = api::SpecOf(j);
      const double grace = spec.ok() ? spec->grace_period : domain::JobSpec{}.grace_period;
      auto c = DrainJob(tx, &j,
                        "GPU " + std::to_string(*held) + " of node " + node +
                            " waits for a GPU reset to put its MIG mode change in effect",
                        now + grace, now);
      if (!c.ok()) return c.status();
      seq = std::max(seq, *c);
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (written) {  // a settled flag may be all that changed
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = nodes_.find(node); it != nodes_.end()) it->second.ops = ops;
  }
  return seq;
}

base::Result<int64_t> NodeService::ApplyRemediations(
    const std::string& node, const std::vector<protocol::RemediationResult>& results) {
  const double now = clock_->Now();
  domain::NodeOps ops;
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    seq = 0;
    auto o = tx.GetObject("Node", node);
    if (!o.ok()) return Status::Ok();
    ops = domain::DecodeNodeOps(o->spec);
    std::vector<store::Event> events;
    for (const protocol::RemediationResult& r : results) {
      const domain::GpuHealth* g = domain::FindGpu(ops.gpus, r.gpu);
      if (!g || !g->cordoned || g->held) continue;  // an answer to an order since overtaken
      const std::string gpu = "GPU " + std::to_string(r.gpu);
      if (r.healthy) {
        domain::UncordonGpu(&ops.gpus, r.gpu, domain::Uncordon::kRemediated);
        events.push_back({0, now, "Node", node, "", "Normal", "GpuUncordoned",
                          gpu + " remediated and its health probe passed" +
                              (r.message.empty() ? "" : " (" + r.message + ")") +
                              ": back in service"});
        continue;
      }
      auto held = std::find_if(ops.gpus.begin(), ops.gpus.end(),
                               [&](const domain::GpuHealth& h) { return h.index == r.gpu; });
      held->held = true;
      held->reason += "; remediation failed: " + r.message;
      events.push_back({0, now, "Node", node, "", "Warning", "GpuRemediationFailed",
                        gpu + ": remediation or health probe failed (" + r.message +
                            "): it stays cordoned until an operator uncordons it"});
    }
    if (events.empty()) return Status::Ok();
    return PutOps(tx, &*o, ops, kHealth, now, events, &seq);
  });
  if (!s.ok()) return s;
  if (seq > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = nodes_.find(node); it != nodes_.end()) it->second.ops = ops;
  }
  return seq;
}

void NodeService::HealthOrdersLocked(const std::string& node, NodeEntry& e,
                                     protocol::HeartbeatAnswer* answer) {
  answer->faults = std::move(e.faults_to_send);
  e.faults_to_send.clear();
  if (!gpu_health_.remediates()) return;
  const auto a = assigned_.find(node);
  for (const domain::GpuHealth& g : e.ops.gpus) {
    // A GPU fallen off the bus waits for the node's reboot; a held one, or one an operator
    // cordoned, for an operator. A MIG mode change waiting for a reset is reset.
    if (!g.cordoned || g.held || (g.xid == 0 && !g.mig_mode_pending) ||
        (g.xid != 0 && domain::ClassifyXid(g.xid).scope == domain::XidScope::kNode)) {
      continue;
    }
    // Reset only once no task holds it: its job's tasks are seen to have stopped.
    bool held = false;
    if (a != assigned_.end()) {
      for (const auto& [key, task] : a->second) {
        for (const protocol::DeviceGrant& d : task.assignment.devices)
          held = held || d.gpu == g.index;
      }
    }
    if (held) continue;
    protocol::Remediation r;
    r.gpu = g.index;
    for (const std::string& word : gpu_health_.remediation) {
      std::string w = word;
      for (size_t at = w.find("{gpu}"); at != std::string::npos; at = w.find("{gpu}", at)) {
        w.replace(at, 5, std::to_string(g.index));
      }
      r.command.push_back(std::move(w));
    }
    answer->remediations.push_back(std::move(r));
  }
}

base::Result<Json> NodeService::InjectFault(const std::string& node, const std::string& by,
                                            int32_t gpu, const domain::FaultInjection& fault) {
  const int32_t xid = fault.xid;
  const std::string what =
      fault.warning.empty() ? domain::DescribeXid(xid) : "warning " + fault.warning;
  auto o = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetObject("Node", node); });
  if (!o.ok()) {
    return o.status().code() == base::StatusCode::kNotFound ? NotRegistered(node) : o.status();
  }
  const std::vector<GpuSlot> slots = SlotsOf(*o);
  if (std::none_of(slots.begin(), slots.end(), [&](const GpuSlot& s) { return s.index == gpu; })) {
    return Status::Invalid("index: node " + node + " has no GPU " + std::to_string(gpu) +
                           " (it has " + std::to_string(slots.size()) + ")");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status l = Load(); !l.ok()) return l;
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return NotRegistered(node);
    if (!it->second.simulated) {
      return Status::Conflict("node " + node +
                              " has real GPUs: faults are injected only into simulated GPUs "
                              "(meridian agent --simulate-gpus)");
    }
    it->second.faults_to_send.push_back({gpu, xid, fault.warning});
  }
  const double now = clock_->Now();
  int64_t appended = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto e = tx.AppendEvent(
        {0, now, "Node", node, "", "Normal", "FaultInjected",
         "fault injection by " + by + ": " + what + " on simulated GPU " + std::to_string(gpu)});
    if (!e.ok()) return e.status();
    appended = *e;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  bus_->Notify(appended);
  Ring({node});  // the agent takes the fault up at once
  if (!fault.warning.empty()) return Json{{"node", node}, {"gpu", gpu}, {"warning", fault.warning}};
  const domain::XidClass c = domain::ClassifyXid(xid);
  return Json{{"node", node},
              {"gpu", gpu},
              {"xid", xid},
              {"meaning", std::string(c.meaning)},
              {"scope", std::string(domain::ScopeName(c.scope))}};
}

base::Result<Json> NodeService::UncordonGpu(const std::string& node, const std::string& by,
                                            int32_t gpu) {
  {
    // Memory whose row remap waits for a reset would be cordoned again by the next sample, after
    // work may have been placed on it, and a MIG mode change waiting for one would fail the next
    // grant there: the reset comes first.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(node);
    if (it != nodes_.end()) {
      for (const protocol::GpuSample& s : it->second.telemetry) {
        const char* pending = s.row_remap_pending.value_or(false)  ? "a row remap"
                              : s.mig_mode_pending.value_or(false) ? "a MIG mode change"
                                                                   : nullptr;
        if (s.index == gpu && pending) {
          return Status::Conflict("GPU " + std::to_string(gpu) + " of node " + node + " has " +
                                  pending + " pending: reset it first (nvidia-smi --gpu-reset -i " +
                                  std::to_string(gpu) + ")");
        }
      }
    }
  }
  const double now = clock_->Now();
  domain::NodeOps ops;
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    seq = 0;
    auto o = tx.GetObject("Node", node);
    if (!o.ok()) {
      return o.status().code() == base::StatusCode::kNotFound ? NotRegistered(node) : o.status();
    }
    ops = domain::DecodeNodeOps(o->spec);
    if (!domain::UncordonGpu(&ops.gpus, gpu, domain::Uncordon::kOperator)) {
      // Not cordoned: its fault history, if any, is forgotten all the same.
      domain::EncodeNodeOps(ops, &o->spec);
      if (auto v = tx.PutObject(*o, o->version); !v.ok()) return v.status();
      return Status::Ok();
    }
    return PutOps(tx, &*o, ops, by, now,
                  {{0, now, "Node", node, "", "Normal", "GpuUncordoned",
                    "GPU " + std::to_string(gpu) + " uncordoned by " + by +
                        ": back in service, its faults forgotten"}},
                  &seq);
  });
  if (!s.ok()) return s;
  Operated(node, ops, seq);
  std::lock_guard<std::mutex> lock(mu_);
  return OperationsLocked(node);
}

}  // namespace meridian::server
