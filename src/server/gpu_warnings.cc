// NodeService's side of warnings before failures and of failing nodes
// (docs/adr/0020-gpu-warnings-and-failing-nodes.md): GPU samples become node conditions, which
// /api/v1/nodes shows and alert rules watch, and nothing is cordoned for them; failed runs whose
// cause points at the node are counted across projects, and a node that fails many jobs of many
// projects is flagged, and cordoned when the Policy's failingNodes says so.
#include <cstdio>
#include <set>
#include <utility>

#include "base/log.h"
#include "server/nodes.h"

namespace meridian::server {

using base::Status;

namespace {

// Who the flag's writes are by, in events and in the cordon's record.
constexpr const char* kFailingNodes = "failing-nodes";

std::string WarningFigure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

domain::GpuReading ReadingOf(const protocol::GpuSample& s) {
  domain::GpuReading r;
  r.index = s.index;
  r.temperature_c = s.temperature_c;
  r.slowdown_temperature_c = s.slowdown_temperature_c;
  if (s.throttle_reasons) r.throttle_reasons = static_cast<uint64_t>(*s.throttle_reasons);
  r.ecc_corrected = s.ecc_single_bit;
  r.nvlink_crc_errors = s.nvlink_crc_errors;
  return r;
}

}  // namespace

std::vector<domain::NodeCondition> NodeService::ConditionsLocked(const NodeEntry& e,
                                                                 double now) const {
  std::vector<domain::NodeCondition> out = e.warnings.current();
  const domain::FailingVerdict v = domain::AssessNode(e.failures, failing_nodes_, now);
  if (v.flagged) {
    out.push_back({domain::kFailingJobs, -1,
                   std::to_string(v.failures) + " runs of jobs of " + std::to_string(v.projects) +
                       " projects failed here in the last " + WarningFigure(failing_nodes_.window) +
                       " s for causes that point at the node (GPU faults, lost leases, tasks "
                       "that could not start, NCCL errors)",
                   e.failing_since > 0 ? e.failing_since : now, static_cast<double>(v.failures)});
  }
  return out;
}

std::vector<domain::NodeCondition> NodeService::ObserveWarningsLocked(
    NodeEntry& e, const std::vector<protocol::GpuSample>& samples, double now) {
  std::vector<domain::GpuReading> readings;
  for (const protocol::GpuSample& s : samples) readings.push_back(ReadingOf(s));
  // What held before this sample, by type and GPU: a condition not among them began now.
  std::set<std::pair<std::string, int32_t>> held;
  for (const domain::NodeCondition& c : e.warnings.current()) held.insert({c.type, c.gpu});
  std::vector<domain::NodeCondition> began;
  for (const domain::NodeCondition& c : e.warnings.Observe(readings, gpu_warnings_, now)) {
    if (!held.count({c.type, c.gpu})) began.push_back(c);
  }
  return began;
}

base::Result<int64_t> NodeService::RecordWarnings(const std::string& node,
                                                  const std::vector<domain::NodeCondition>& began) {
  const double now = clock_->Now();
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    seq = 0;
    for (const domain::NodeCondition& c : began) {
      auto e =
          tx.AppendEvent({0, now, "Node", node, "", "Warning", "GpuWarning",
                          c.type + ": " + c.message + " (a warning: the GPU stays in service)"});
      if (!e.ok()) return e.status();
      seq = *e;
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  for (const domain::NodeCondition& c : began) {
    base::log::Warn(base::log::Fields{{"node", node}}, "node {}: warning {}: {}", node, c.type,
                    c.message);
  }
  return seq;
}

base::Result<int64_t> NodeService::RecordFailures(
    const std::string& node, const std::vector<domain::NodeFailure>& failures) {
  const double now = clock_->Now();
  domain::FailingVerdict verdict;
  domain::FailingNodePolicy policy;
  bool rose = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return int64_t{0};
    policy = failing_nodes_;
    // The flag is edge-triggered: it is said (and cordons) when it rises, so that an operator who
    // uncordons a flagged node is not overruled until it has cleared (its failures aged out of
    // the window) and risen again.
    const bool was = domain::AssessNode(it->second.failures, policy, now).flagged;
    for (const domain::NodeFailure& f : failures) {
      domain::RecordNodeFailure(&it->second.failures, f, policy, now);
    }
    verdict = domain::AssessNode(it->second.failures, policy, now);
    rose = verdict.flagged && !was;
    if (rose) it->second.failing_since = now;
  }
  if (!rose) return int64_t{0};
  const std::string message =
      std::to_string(verdict.failures) + " runs of jobs of " + std::to_string(verdict.projects) +
      " projects failed on this node in the last " + WarningFigure(policy.window) +
      " s for causes that point at the node" +
      (policy.cordon ? ": cordoned by the Policy's failingNodes.cordon"
                     : "; the Policy's failingNodes.cordon is off: it stays schedulable");
  base::log::Warn(base::log::Fields{{"node", node}}, "node {}: flagged: {}", node, message);
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto e = tx.AppendEvent({0, now, "Node", node, "", "Warning", "NodeFailingJobs", message});
    if (!e.ok()) return e.status();
    seq = *e;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (policy.cordon) {
    auto cordoned = Cordon(node, kFailingNodes, true);
    if (!cordoned.ok()) return cordoned.status();
  }
  return seq;
}

}  // namespace meridian::server
