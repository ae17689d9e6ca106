#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Filter: the node's cluster is one the task may use (its clusters, regions and on-prem-only
// constraints, folded into a mask when the task was resolved).
class ClusterConstraint final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "cluster"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override {
    return (ctx.task.allowed_clusters & Bit(node.cluster)) != 0;
  }
  std::string Reason(const PluginContext& ctx, const NodeState& node) const override {
    const ClusterState& c = ctx.snapshot.clusters[static_cast<size_t>(node.cluster)];
    if (ctx.task.checkpoint && !c.keeps_checkpoints) {
      return "in cluster " + c.name + ", which keeps no checkpoints (storage.checkpoints)";
    }
    return {};
  }
};

}  // namespace meridian::sched::plugins
