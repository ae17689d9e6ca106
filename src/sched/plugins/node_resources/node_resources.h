#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Filter: the node has the CPU and memory the task asks for free.
class NodeResources final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "node-resources"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override {
    return node.cpu_free >= ctx.task.cpu_milli && node.memory_free >= ctx.task.memory_mib;
  }
};

}  // namespace meridian::sched::plugins
