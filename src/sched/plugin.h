#pragma once

#include <span>
#include <string>
#include <string_view>

#include "sched/placement.h"
#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sched {

struct CycleState;
class NodeIndex;

// A placement being considered: a node and the devices the task would get on it.
struct Candidate {
  int32_t node = -1;
  std::span<const DeviceGrant> devices;
};

// What every plugin call sees. The engine never changes the snapshot while plugins run.
struct PluginContext {
  const Snapshot& snapshot;
  const TaskSpec& task;
  const CycleState& cycle;
  // What is free across the estate, as the engine keeps it (free GPUs by model, nodes by idle
  // GPUs); null when the caller keeps none, and a plugin that needs it is then neutral.
  const NodeIndex* index = nullptr;
};

// Turns nodes away for a reason of policy (labels, taints, CPU and memory, clusters). GPU fit is
// the engine's own job (it chooses the devices). Filters are pure and thread-compatible.
class FilterPlugin {
 public:
  virtual ~FilterPlugin() = default;
  virtual std::string_view Name() const = 0;
  virtual bool Filter(const PluginContext& ctx, const NodeState& node) const = 0;
  // Why this filter turned `node` away, as words that follow a count of nodes in a pending
  // reason ("without label gpu-tier=premium"); nodes with the same words are counted together.
  // Called only for nodes that Filter rejected, and only when the task was left unplaced, so it
  // may build strings. Empty (the default): the reason is the filter's name.
  virtual std::string Reason(const PluginContext& ctx, const NodeState& node) const {
    (void)ctx;
    (void)node;
    return {};
  }
};

// Ranks feasible candidates: higher is better. A plugin's scale is its own; the profile's weights
// combine them. Called only for candidates that passed every filter. Pure.
class ScorePlugin {
 public:
  virtual ~ScorePlugin() = default;
  virtual std::string_view Name() const = 0;
  virtual double Score(const PluginContext& ctx, const Candidate& c) const = 0;
};

}  // namespace meridian::sched
