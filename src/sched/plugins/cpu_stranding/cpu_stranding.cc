#include "sched/plugins/cpu_stranding/cpu_stranding.h"

#include <algorithm>

#include "sched/node_math.h"

namespace meridian::sched::plugins {

CpuStranding::CpuStranding(const FragmentationModel& model) {
  double cpu = 0;
  double gpu = 0;
  for (const TypicalShape& s : model.shapes()) {
    cpu += s.weight * static_cast<double>(s.cpu_milli);
    gpu += s.weight * static_cast<double>(s.gpu_milli) * s.gpu_count;
  }
  ratio_ = gpu > 0 ? cpu / gpu : 0;
}

double CpuStranding::Score(const PluginContext& ctx, const Candidate& c) const {
  if (ratio_ <= 0) return 0;
  const NodeState& node = ctx.snapshot.nodes[c.node];
  int32_t now[kMaxGpusPerNode];
  int32_t after[kMaxGpusPerNode];
  GpuFreeNow(ctx.snapshot, node, now);
  GpuFreeAfter(ctx.snapshot, node, c, after);
  auto stranded = [&](int64_t cpu_free, const int32_t* free) {
    double gpu_free = 0;
    for (int32_t i = 0; i < node.gpu_count; ++i) gpu_free += free[i];
    return std::max(0.0, gpu_free - static_cast<double>(std::max<int64_t>(cpu_free, 0)) / ratio_);
  };
  const double grown =
      stranded(node.cpu_free - ctx.task.cpu_milli, after) - stranded(node.cpu_free, now);
  return -grown / 1000.0;
}

}  // namespace meridian::sched::plugins
