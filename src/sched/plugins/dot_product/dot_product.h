#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: Tetris's alignment heuristic as the FGD artifact configures it ("merge" dimensions,
// "max" normalisation): the dot product of the node's free (CPU, GPU) vector and the task's
// request, each over a fixed 128 cores and 8 GPUs; the smaller the product, the higher the score
// (0..100). Kept to reproduce the published baseline.
class DotProduct final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "dot-product"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
};

}  // namespace meridian::sched::plugins
