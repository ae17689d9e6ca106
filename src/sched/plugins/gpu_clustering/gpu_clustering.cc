#include "sched/plugins/gpu_clustering/gpu_clustering.h"

#include "sched/node_math.h"

namespace meridian::sched::plugins {

double GpuClustering::Score(const PluginContext& ctx, const Candidate& c) const {
  const uint32_t tag = ctx.task.AffinityTag();
  if (tag == 0) return 0;
  const NodeState& node = ctx.snapshot.nodes[c.node];
  // Integer arithmetic on purpose: it is how the published baseline ranks nodes.
  const int64_t band = 25 * (8000 - GpuMilliLeft(ctx.snapshot, node)) / 8000;
  bool same = false;
  for (const auto& [t, n] : node.gpu_affinity) same = same || (t == tag && n > 0);
  if (same) return static_cast<double>(band + (node.gpu_affinity.size() == 1 ? 75 : 50));
  return static_cast<double>(band + (node.gpu_affinity.empty() ? 25 : 0));
}

}  // namespace meridian::sched::plugins
