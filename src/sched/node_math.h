#pragma once

#include <cstdint>

#include "sched/plugin.h"

namespace meridian::sched {

// Helpers that score plugins share: what is free on a node's GPUs now and after a candidate.
// MIG and unhealthy GPUs count as 0 free milli-GPU; `out` must hold node.gpu_count entries.

void GpuFreeNow(const Snapshot& s, const NodeState& node, int32_t* out);
void GpuFreeAfter(const Snapshot& s, const NodeState& node, const Candidate& c, int32_t* out);
int64_t GpuMilliLeft(const Snapshot& s, const NodeState& node);
int32_t IdleGpus(const Snapshot& s, const NodeState& node);

// Most GPUs a node may hold for the fixed-size scratch arrays above; Snapshot::Build enforces it.
inline constexpr int kMaxGpusPerNode = 64;

}  // namespace meridian::sched
