#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: 100 on a node of an on-prem cluster, 0 on a cloud one. On-prem capacity is paid for
// whether it is used or not, cloud capacity by the hour: with a heavy weight, work bursts to the
// cloud only when no on-prem node can hold it. Prices per GPU-hour cannot decide this across
// models (a T4 hour is cheaper than an H100 hour, and slower); the cost score still chooses
// between clusters for the same model.
class OnPremFirst final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "on-prem-first"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override {
    const NodeState& node = ctx.snapshot.nodes[c.node];
    return ctx.snapshot.clusters[node.cluster].kind == domain::SiteKind::kOnPrem ? 100.0 : 0.0;
  }
};

}  // namespace meridian::sched::plugins
