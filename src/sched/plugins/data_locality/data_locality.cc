#include "sched/plugins/data_locality/data_locality.h"

#include <algorithm>

#include "sched/data.h"

namespace meridian::sched::plugins {

double DataLocality::Score(const PluginContext& ctx, const Candidate& c) const {
  if (ctx.task.datasets.empty()) return 100.0;
  const DataCost cost =
      DataCostAt(ctx.snapshot, ctx.task.datasets, ctx.snapshot.nodes[c.node].cluster);
  if (cost.unknown) return 0.0;
  if (cost.moves.empty()) return 100.0;
  const NodeState& node = ctx.snapshot.nodes[c.node];
  double price = 0;
  if (ctx.task.WantsGpu() && node.model != kNoModel) {
    // A MIG instance is priced as its GPU: what the task keeps others from.
    const double gpus = ctx.task.gpu_kind == GpuKind::kMig
                            ? 1.0
                            : static_cast<double>(ctx.task.GpuMilliTotal()) / 1000.0;
    price = ctx.snapshot.clusters[node.cluster].price_by_model[node.model] * gpus;
  }
  const double hours = cost.seconds / 3600.0 + cost.egress / std::max(1.0, price);
  return 100.0 * (1.0 - std::min(1.0, hours * 3600.0 / kDataHorizon));
}

}  // namespace meridian::sched::plugins
