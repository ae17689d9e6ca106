#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "domain/cluster.h"
#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sim {

// Synthetic estates and workloads that the project generates itself (for `make run`, the
// benchmarks and tests); nothing here comes from a trace.

struct SyntheticEstateOptions {
  int nodes = 12;
  int gpus_per_node = 8;
  uint64_t seed = 1;
};

// A hybrid estate: an on-prem cluster (H100-80GB, H200-141GB, A100-40GB, NVLink domains of 4,
// amortised prices) and a cloud region (A100-80GB, L40S, T4 at cloud prices), about two thirds
// of the nodes on-prem. Racks of 8 nodes.
void SyntheticEstate(const SyntheticEstateOptions& o, std::vector<domain::Cluster>* clusters,
                     std::vector<domain::Node>* nodes);

// A mixed queue: whole GPUs (1, 2, 4, 8), fractions, MIG instances, CPU-only tasks, some
// constrained to GPU models or to on-prem, some naming a dataset.
std::vector<sched::TaskSpec> SyntheticTasks(const sched::Snapshot& snapshot, int count,
                                            uint64_t seed);

struct SyntheticReplayOptions {
  int jobs = 1000;
  int gpus = 64;      // total, in 8-GPU nodes
  double load = 0.9;  // offered GPU demand as a share of capacity
  uint64_t seed = 1;
};

// A replay workload in Meridian's formats: a cluster description (YAML, one on-prem cluster of
// 8-GPU nodes and four projects with guarantees) and a job list (CSV) with Poisson arrivals,
// heavy-tailed durations, priorities, gangs and fractions, offering `load` of the capacity.
void SyntheticReplay(const SyntheticReplayOptions& o, std::string* cluster_yaml,
                     std::string* jobs_csv);

}  // namespace meridian::sim
