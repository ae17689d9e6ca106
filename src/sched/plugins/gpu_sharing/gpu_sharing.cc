#include "sched/plugins/gpu_sharing/gpu_sharing.h"

namespace meridian::sched::plugins {

bool GpuSharingMatch::Filter(const PluginContext& ctx, const NodeState& node) const {
  return ctx.task.gpu_kind != GpuKind::kFraction ||
         node.gpu_sharing != domain::GpuSharing::kExclusive;
}

std::string GpuSharingMatch::Reason(const PluginContext& ctx, const NodeState& node) const {
  (void)ctx;
  (void)node;
  return "whose pool gives GPUs whole (gpuSharing: exclusive), not in shares";
}

}  // namespace meridian::sched::plugins
