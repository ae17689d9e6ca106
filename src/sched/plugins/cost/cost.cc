#include "sched/plugins/cost/cost.h"

#include <algorithm>

namespace meridian::sched::plugins {

double Cost::Score(const PluginContext& ctx, const Candidate& c) const {
  const NodeState& node = ctx.snapshot.nodes[c.node];
  if (!ctx.task.WantsGpu() || node.model == kNoModel) return 100.0;
  const double dearest = ctx.snapshot.max_price_per_gpu_hour;
  if (dearest <= 0) return 100.0;
  double price = ctx.snapshot.clusters[node.cluster].price_by_model[node.model];
  return 100.0 * (1.0 - price / dearest);
}

}  // namespace meridian::sched::plugins
