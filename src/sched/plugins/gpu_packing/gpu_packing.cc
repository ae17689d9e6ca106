#include "sched/plugins/gpu_packing/gpu_packing.h"

#include <algorithm>

#include "sched/node_math.h"

namespace meridian::sched::plugins {

double GpuPacking::Score(const PluginContext& ctx, const Candidate& c) const {
  if (ctx.task.GpuMilliTotal() <= 0) return 0;
  const NodeState& node = ctx.snapshot.nodes[c.node];
  const int64_t idle = IdleGpus(ctx.snapshot, node);
  if (idle == node.gpu_count) return static_cast<double>(std::max<int64_t>(33 - idle, idle));
  int64_t idle_taken = 0;
  int64_t free_share_pct = 0;
  for (const DeviceGrant& d : c.devices) {
    const GpuState& g = ctx.snapshot.gpus[d.gpu];
    if (g.free_milli == 1000) ++idle_taken;
    free_share_pct += g.free_milli * 100 / 1000;
  }
  if (idle_taken > 0) return static_cast<double>(std::max<int64_t>(50 - idle_taken, 33));
  return static_cast<double>(std::max<int64_t>(100 - free_share_pct / 10, 50));
}

}  // namespace meridian::sched::plugins
