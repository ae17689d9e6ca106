#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Filter: the node carries every label the task selects (key and value equal). A rejected node
// is explained by the first selected label it lacks ("without label gpu-tier=premium").
class NodeSelector final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "node-selector"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override;
  std::string Reason(const PluginContext& ctx, const NodeState& node) const override;
};

}  // namespace meridian::sched::plugins
