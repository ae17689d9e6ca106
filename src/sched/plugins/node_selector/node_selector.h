#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Filter: the node carries every label the task selects (key and value equal).
class NodeSelector final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "node-selector"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override;
};

}  // namespace meridian::sched::plugins
