#include "sched/node_math.h"

namespace meridian::sched {

void GpuFreeNow(const Snapshot& s, const NodeState& node, int32_t* out) {
  for (int32_t i = 0; i < node.gpu_count; ++i) {
    const GpuState& g = s.gpus[node.gpu_begin + i];
    out[i] = g.healthy && !g.mig_enabled ? g.free_milli : 0;
  }
}

void GpuFreeAfter(const Snapshot& s, const NodeState& node, const Candidate& c, int32_t* out) {
  GpuFreeNow(s, node, out);
  for (const DeviceGrant& d : c.devices) {
    int32_t i = d.gpu - node.gpu_begin;
    // A MIG grant takes the GPU out of the pool of shares, whatever its change.
    out[i] = d.mig_profile >= 0 ? 0 : out[i] - d.milli;
  }
}

int64_t GpuMilliLeft(const Snapshot& s, const NodeState& node) {
  int64_t left = 0;
  for (int32_t i = 0; i < node.gpu_count; ++i) {
    const GpuState& g = s.gpus[node.gpu_begin + i];
    left += g.healthy && !g.mig_enabled ? g.free_milli : 0;
  }
  return left;
}

int32_t IdleGpus(const Snapshot& s, const NodeState& node) {
  int32_t idle = 0;
  for (int32_t i = 0; i < node.gpu_count; ++i) idle += s.gpus[node.gpu_begin + i].Idle() ? 1 : 0;
  return idle;
}

}  // namespace meridian::sched
