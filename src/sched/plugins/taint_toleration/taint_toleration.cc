#include "sched/plugins/taint_toleration/taint_toleration.h"

namespace meridian::sched::plugins {

bool TaintToleration::Filter(const PluginContext& ctx, const NodeState& node) const {
  for (const domain::Taint& taint : node.taints) {
    bool tolerated = false;
    for (const domain::Toleration& t : ctx.task.tolerations) {
      if (t.key == taint.key && (t.value.empty() || t.value == taint.value)) {
        tolerated = true;
        break;
      }
    }
    if (!tolerated) return false;
  }
  return true;
}

}  // namespace meridian::sched::plugins
