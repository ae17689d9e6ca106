#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score (0..100): the cheaper a GPU-hour of the node's model in its cluster, the higher, relative
// to the dearest price in the snapshot. CPU-only tasks and unpriced GPUs score 100.
class Cost final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "cost"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
};

}  // namespace meridian::sched::plugins
