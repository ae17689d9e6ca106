#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/alibaba_trace.h"

namespace meridian::sim {

// Variants of an Alibaba task list, made the way the FGD authors made theirs: the same tasks
// with one property of the mix moved, so that a policy tuned on one mix can be checked on others.
// Each share left unset keeps the list's own.
struct TraceVariant {
  // Share of GPU tasks that may run only on one family of GPU models (V100M16 and V100M32 are
  // one family). The family is drawn among those with a node that can hold the task, in
  // proportion to the family's GPUs, so constrained demand follows supply.
  std::optional<double> constrained;
  // Share of GPU tasks that ask for several whole GPUs (drawn from the list's multi-GPU tasks).
  std::optional<double> multi_gpu;
  // Share of single-GPU tasks that ask for a fraction of a GPU (drawn from its fractional tasks).
  std::optional<double> fractional;
  // Share of all tasks that ask for no GPU (drawn from its CPU-only tasks).
  std::optional<double> cpu_only;
  uint64_t seed = 1;

  bool Any() const { return constrained || multi_gpu || fractional || cpu_only; }
  // "constrained30-multigpu25": what the variant moved, for reports; empty when nothing.
  std::string Name() const;
};

// The variant of `tasks` on the cluster `nodes`. A task that changes class is replaced by a
// uniform draw (with replacement) of the class it joins, keeping its name, so each class keeps
// the list's own distribution of CPU, memory and GPU shares. Fails, saying why, when a share is
// outside [0, 1] or a class to draw from is empty.
base::Result<std::vector<TraceTask>> VaryTrace(std::vector<TraceTask> tasks,
                                               const std::vector<TraceNode>& nodes,
                                               const TraceVariant& variant);

// The task list as CSV in the trace's own schema (what ReadAlibabaTasks reads back).
std::string AlibabaTasksCsv(const std::vector<TraceTask>& tasks);

}  // namespace meridian::sim
