#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: the less CPU and GPU a node has left after the candidate, the higher (0..100), CPU and
// GPU weighted equally.
//  - kNodeCapacity: what is left as a share of the node's own capacity. Meridian's own.
//  - kAbsolute: what is left as a share of a fixed 128 cores and 8 GPUs, as the FGD artifact's
//    BestFit normalises it (to reproduce the published results).
class BestFit final : public ScorePlugin {
 public:
  enum class Normalization { kNodeCapacity, kAbsolute };
  explicit BestFit(Normalization n) : norm_(n) {}
  std::string_view Name() const override { return "best-fit"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;

  // The share of the node left after the candidate, 0..1 (shared with the spread score).
  static double LeftShare(const PluginContext& ctx, const Candidate& c, Normalization n);

 private:
  Normalization norm_;
};

}  // namespace meridian::sched::plugins
