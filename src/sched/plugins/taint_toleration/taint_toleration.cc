#include "sched/plugins/taint_toleration/taint_toleration.h"

namespace meridian::sched::plugins {

namespace {

// The node's first taint that no toleration of the task covers; null if it tolerates them all.
const domain::Taint* Untolerated(const TaskSpec& task, const NodeState& node) {
  for (const domain::Taint& taint : node.taints) {
    bool tolerated = false;
    for (const domain::Toleration& t : task.tolerations) {
      if (t.key == taint.key && (t.value.empty() || t.value == taint.value)) {
        tolerated = true;
        break;
      }
    }
    if (!tolerated) return &taint;
  }
  return nullptr;
}

}  // namespace

bool TaintToleration::Filter(const PluginContext& ctx, const NodeState& node) const {
  return Untolerated(ctx.task, node) == nullptr;
}

std::string TaintToleration::Reason(const PluginContext& ctx, const NodeState& node) const {
  const domain::Taint* taint = Untolerated(ctx.task, node);
  if (!taint) return "";
  return "with untolerated taint " + taint->key + (taint->value.empty() ? "" : "=" + taint->value);
}

}  // namespace meridian::sched::plugins
