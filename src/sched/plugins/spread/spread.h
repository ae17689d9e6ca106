#pragma once

#include "sched/plugin.h"
#include "sched/plugins/best_fit/best_fit.h"

namespace meridian::sched::plugins {

// Score: the more CPU and GPU a node keeps free after the candidate, the higher (0..100): spreads
// load, the opposite of best-fit (for latency-sensitive inference and for failure domains).
class Spread final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "spread"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override {
    return BestFit::LeftShare(ctx, c, BestFit::Normalization::kNodeCapacity) * 100.0;
  }
};

}  // namespace meridian::sched::plugins
