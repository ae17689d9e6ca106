#include "sched/plugins/data_locality/data_locality.h"

#include <algorithm>

namespace meridian::sched::plugins {

double DataLocality::Score(const PluginContext& ctx, const Candidate& c) const {
  if (ctx.task.dataset.empty()) return 0;
  const auto& held = ctx.snapshot.clusters[ctx.snapshot.nodes[c.node].cluster].datasets;
  return std::find(held.begin(), held.end(), ctx.task.dataset) != held.end() ? 100.0 : 0.0;
}

}  // namespace meridian::sched::plugins
