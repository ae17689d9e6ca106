#include "sched/plugins/node_selector/node_selector.h"

#include <algorithm>

namespace meridian::sched::plugins {

bool NodeSelector::Filter(const PluginContext& ctx, const NodeState& node) const {
  for (const auto& [key, value] : ctx.task.node_selector) {
    auto it =
        std::lower_bound(node.labels.begin(), node.labels.end(), key,
                         [](const auto& label, const std::string& k) { return label.first < k; });
    if (it == node.labels.end() || it->first != key || it->second != value) return false;
  }
  return true;
}

}  // namespace meridian::sched::plugins
