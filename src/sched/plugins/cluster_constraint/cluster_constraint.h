#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Why a task may not use `cluster`, where its data rules it out: the cluster keeps no
// checkpoints and the task wants them, or lacks one of its datasets and has no cache to stage it
// to. Empty otherwise (its clusters, regions or on-prem constraint).
std::string WhyNot(const Snapshot& s, const TaskSpec& task, int32_t cluster);

// Filter: the node's cluster is one the task may use (its clusters, regions and on-prem-only
// constraints, where it keeps checkpoints and can reach its datasets, folded into a mask when the
// task was resolved).
class ClusterConstraint final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "cluster"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override {
    return (ctx.task.allowed_clusters & Bit(node.cluster)) != 0;
  }
  std::string Reason(const PluginContext& ctx, const NodeState& node) const override {
    return WhyNot(ctx.snapshot, ctx.task, node.cluster);
  }
};

}  // namespace meridian::sched::plugins
