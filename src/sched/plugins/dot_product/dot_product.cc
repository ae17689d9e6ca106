#include "sched/plugins/dot_product/dot_product.h"

#include "sched/node_math.h"

namespace meridian::sched::plugins {

double DotProduct::Score(const PluginContext& ctx, const Candidate& c) const {
  const NodeState& node = ctx.snapshot.nodes[c.node];
  constexpr double kCpu = 128000;
  constexpr double kGpu = 8000;
  double cpu =
      static_cast<double>(node.cpu_free) / kCpu * static_cast<double>(ctx.task.cpu_milli) / kCpu;
  double gpu = static_cast<double>(GpuMilliLeft(ctx.snapshot, node)) / kGpu *
               static_cast<double>(ctx.task.GpuMilliTotal()) / kGpu;
  return (1.0 - (cpu + gpu) / 2.0) * 100.0;
}

}  // namespace meridian::sched::plugins
