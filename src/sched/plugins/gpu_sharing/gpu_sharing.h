#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Filter: a share of a GPU goes only to pools that share their GPUs (gpuSharing mps or
// time-slicing); an exclusive pool gives GPUs whole or as MIG instances. Since a pool's GPUs have
// one mode, tasks placed on one GPU always share it the same way. Rejected nodes are explained by
// the pool's mode ("whose pool gives GPUs whole (gpuSharing: exclusive)").
class GpuSharingMatch final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "gpu-sharing"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override;
  std::string Reason(const PluginContext& ctx, const NodeState& node) const override;
};

}  // namespace meridian::sched::plugins
