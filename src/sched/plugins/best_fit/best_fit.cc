#include "sched/plugins/best_fit/best_fit.h"

#include "sched/node_math.h"

namespace meridian::sched::plugins {

double BestFit::LeftShare(const PluginContext& ctx, const Candidate& c, Normalization n) {
  const NodeState& node = ctx.snapshot.nodes[c.node];
  int64_t gpu_taken = 0;
  for (const DeviceGrant& d : c.devices) gpu_taken += d.mig_profile >= 0 ? 1000 : d.milli;
  const double cpu_left = static_cast<double>(node.cpu_free - ctx.task.cpu_milli);
  const double gpu_left = static_cast<double>(GpuMilliLeft(ctx.snapshot, node) - gpu_taken);
  double cpu_scale = 128000;
  double gpu_scale = 8000;
  if (n == Normalization::kNodeCapacity) {
    cpu_scale = static_cast<double>(node.cpu_capacity > 0 ? node.cpu_capacity : 1);
    gpu_scale = node.gpu_count > 0 ? 1000.0 * node.gpu_count : 1.0;
  }
  return 0.5 * cpu_left / cpu_scale + 0.5 * gpu_left / gpu_scale;
}

double BestFit::Score(const PluginContext& ctx, const Candidate& c) const {
  return (1.0 - LeftShare(ctx, c, norm_)) * 100.0;
}

}  // namespace meridian::sched::plugins
