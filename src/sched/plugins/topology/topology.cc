#include "sched/plugins/topology/topology.h"

#include <algorithm>

#include "sched/profile.h"

namespace meridian::sched::plugins {

double Topology::Score(const PluginContext& ctx, const Candidate& c) const {
  int16_t seen[64];
  int domains = 0;
  for (const DeviceGrant& d : c.devices) {
    int16_t dom = ctx.snapshot.gpus[d.gpu].nvlink_domain;
    if (std::find(seen, seen + domains, dom) == seen + domains && domains < 64)
      seen[domains++] = dom;
  }
  double score = 50.0 / std::max(domains, 1);
  const NodeState& node = ctx.snapshot.nodes[c.node];
  if (ctx.task.group < 0) return score + 50.0;
  auto it = ctx.cycle.group_racks.find(ctx.task.group);
  if (it == ctx.cycle.group_racks.end() || it->second.empty()) return score + 50.0;
  bool same_rack = std::find(it->second.begin(), it->second.end(), node.rack) != it->second.end();
  return score + (same_rack ? 50.0 : 0.0);
}

}  // namespace meridian::sched::plugins
