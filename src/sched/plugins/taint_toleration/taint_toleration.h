#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Filter: the task tolerates every taint of the node. A toleration with an empty value tolerates
// any value of its key. A rejected node is explained by its first taint the task does not
// tolerate ("with untolerated taint dedicated=ml").
class TaintToleration final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "taint-toleration"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override;
  std::string Reason(const PluginContext& ctx, const NodeState& node) const override;
};

}  // namespace meridian::sched::plugins
