#pragma once

#include <vector>

#include "sched/fragmentation.h"
#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: keeps the GPUs of models that constrained work needs for that work. Each typical shape
// that may run only on some of the models with free GPUs claims its share of the workload's GPU
// demand from those models' free GPUs, in proportion to them. A model's pressure is the demand
// claimed from it against its free GPUs, relative to the estate's: the constrained share of
// demand when free GPUs are where the claims are (balance), and rising as a model's free GPUs run
// short of its claims. Returns minus the GPUs the candidate takes times its node's model's
// pressure above balance, so that unconstrained work leaves a model before constrained work
// finds it full, and constrained work goes to the least pressed of the models it may use; at
// balance the other scores decide. FGD's measure counts a model's
// GPUs as fragment for the shapes that cannot use them, which draws unconstrained work to the
// rarest models first (a model few shapes ask for is the one those few need); this corrects that.
class ModelReserve final : public ScorePlugin {
 public:
  explicit ModelReserve(const FragmentationModel& model);

  std::string_view Name() const override { return "model-reserve"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;

 private:
  struct Claim {
    Mask models = kAll;
    double demand = 0;  // share of the typical shapes' GPU demand
  };
  std::vector<Claim> claims_;  // one per distinct model set short of all models
  Mask claimed_ = 0;           // the models any claim may use
};

}  // namespace meridian::sched::plugins
