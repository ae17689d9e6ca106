#include "sched/plugins/model_reserve/model_reserve.h"

#include <algorithm>
#include <bit>

#include "sched/node_index.h"

namespace meridian::sched::plugins {

ModelReserve::ModelReserve(const FragmentationModel& model) {
  double total = 0;
  for (const TypicalShape& s : model.shapes()) {
    const double demand = s.weight * static_cast<double>(s.gpu_milli) * s.gpu_count;
    if (demand <= 0) continue;
    total += demand;
    if (s.models == kAll) continue;
    auto it = std::find_if(claims_.begin(), claims_.end(),
                           [&](const Claim& c) { return c.models == s.models; });
    if (it == claims_.end()) {
      claims_.push_back({s.models, demand});
    } else {
      it->demand += demand;
    }
  }
  for (Claim& c : claims_) {
    c.demand /= total;
    claimed_ |= c.models;
  }
}

double ModelReserve::Score(const PluginContext& ctx, const Candidate& c) const {
  const NodeState& node = ctx.snapshot.nodes[c.node];
  const int64_t gpus = ctx.task.GpuMilliTotal();
  if (gpus == 0 || !ctx.index) return 0;
  const std::span<const int64_t> free = ctx.index->FreeGpuMilliByModel();
  if (free.empty() || node.model == kNoModel || !(claimed_ & Bit(node.model)) ||
      static_cast<size_t>(node.model) >= free.size()) {
    return 0;
  }
  Mask present = 0;
  double estate = 0;
  for (size_t m = 0; m < free.size(); ++m) {
    if (free[m] > 0) present |= Bit(static_cast<ModelId>(m));
    estate += static_cast<double>(free[m]);
  }
  double pressure = 0;
  double constrained = 0;  // the claims' share of demand: the pressure when free GPUs match them
  for (const Claim& claim : claims_) {
    const Mask usable = claim.models & present;
    // A shape that may use every model with free GPUs needs none in particular.
    if (usable == present) continue;
    constrained += claim.demand;
    if (!(usable & Bit(node.model))) continue;
    double pool = 0;
    for (Mask rest = usable; rest != 0; rest &= rest - 1) {
      pool += static_cast<double>(free[static_cast<size_t>(std::countr_zero(rest))]);
    }
    pressure += claim.demand * estate / std::max(pool, 1.0);
  }
  // Only what is above balance costs: while free GPUs are where the claims are, the other scores
  // (keeping whole nodes for whole-node work, above all) decide.
  return -std::max(0.0, pressure - constrained) * static_cast<double>(gpus) / 1000.0;
}

}  // namespace meridian::sched::plugins
