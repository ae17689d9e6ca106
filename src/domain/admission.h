#pragma once

#include <optional>
#include <string>
#include <vector>

#include "domain/cluster.h"
#include "domain/job_spec.h"
#include "domain/spec.h"

namespace meridian::domain {

// Whether anything the estate has, or may be given, could ever hold one task of a job: the
// check `sbatch` makes against partitions ("Requested node configuration is not available"),
// made at submission so that a job nothing could run is refused with its field instead of
// waiting forever.
//
// `nodes` are the estate's nodes whatever their state (cordoned, lost and draining nodes may come
// back); `pool_shapes` hold one node of each node pool's declared shape, standing for the nodes
// agents may register into it (or a cloud pool may add). Only the hardware is judged: cluster,
// GPU model, MIG profile, GPUs per node, a fraction's GPU memory, CPU and memory. Labels, taints
// and purposes are left to placement: an agent may bring them when it registers.
//
// The candidates are narrowed field by field, in that order; the answer names the field at which
// none is left and says what the estate has there, e.g. `spec.gpus: 16 GPUs per task, but the
// most any node or pool of cluster onprem has is 8 (H100-80GB)`. Nothing when one could hold it.
std::optional<FieldError> NeverHeld(const JobSpec& spec, const std::vector<Cluster>& clusters,
                                    const std::vector<Node>& nodes,
                                    const std::vector<Node>& pool_shapes);

}  // namespace meridian::domain
