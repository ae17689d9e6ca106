#pragma once

#include <memory>

#include "sched/fragmentation.h"
#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: how much a candidate lowers the node's expected GPU fragmentation against the workload's
// typical task shapes (FGD, Weng et al., ATC'23: move in the direction of the steepest descent of
// fragmentation).
//  - kExact: the change itself, in GPUs (before - after; higher is better). Meridian's own.
//  - kPaper: sigmoid(change in milli-GPU / 1000) * 100, the published plugin's scale, to be
//    quantised to an integer by the profile like kube-scheduler's scores.
class Fragmentation final : public ScorePlugin {
 public:
  enum class Mode { kExact, kPaper };
  Fragmentation(std::shared_ptr<const FragmentationModel> model, Mode mode)
      : model_(std::move(model)), mode_(mode) {}

  std::string_view Name() const override { return mode_ == Mode::kPaper ? "fgd" : "fragmentation"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;

 private:
  std::shared_ptr<const FragmentationModel> model_;
  Mode mode_;
};

}  // namespace meridian::sched::plugins
