#include "sched/plugins/node_selector/node_selector.h"

#include <algorithm>

namespace meridian::sched::plugins {

namespace {

// The first label of the selector that the node does not carry with that value; null if none.
const std::pair<std::string, std::string>* Missing(const TaskSpec& task, const NodeState& node) {
  for (const auto& wanted : task.node_selector) {
    const auto& [key, value] = wanted;
    auto it =
        std::lower_bound(node.labels.begin(), node.labels.end(), key,
                         [](const auto& label, const std::string& k) { return label.first < k; });
    if (it == node.labels.end() || it->first != key || it->second != value) return &wanted;
  }
  return nullptr;
}

}  // namespace

bool NodeSelector::Filter(const PluginContext& ctx, const NodeState& node) const {
  return Missing(ctx.task, node) == nullptr;
}

std::string NodeSelector::Reason(const PluginContext& ctx, const NodeState& node) const {
  const auto* label = Missing(ctx.task, node);
  return label ? "without label " + label->first + "=" + label->second : "";
}

}  // namespace meridian::sched::plugins
