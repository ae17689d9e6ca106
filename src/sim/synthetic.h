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

// The kinds of workload `sim generate` writes.
enum class WorkloadShape {
  // Durations log-uniform from 1 minute to about 14 hours; jobs of 1-8 GPUs, fractions, and
  // 2-node gangs; users over-estimate by 1-3x.
  kMixed,
  // The properties of a production deep-learning trace (not its data): durations lognormal with
  // a median of 20 minutes and a p90 of 3 hours, capped at 53 days; most jobs one GPU, the rest
  // powers of two up to `max_gang_gpus`, halving in number at each doubling; estimates exact
  // unless `estimate_noise` says otherwise.
  kDeep,
};

struct SyntheticReplayOptions {
  int jobs = 1000;
  int gpus = 64;      // total, in 8-GPU nodes
  double load = 0.9;  // offered GPU demand as a share of capacity
  uint64_t seed = 1;
  WorkloadShape shape = WorkloadShape::kMixed;
  // Projects. Four are vision, language, speech and research with guarantees of 40/30/20/10% of
  // the GPUs; any other number are t01..tNN, each guaranteed in proportion to 1/i^(skew/2).
  int tenants = 4;
  // Zipf exponent of each tenant's share of the submissions (tenant i draws 1/i^skew of them):
  // 0 is equal use; 1.5 gives the first of 15 tenants about half of the jobs.
  double tenant_skew = 0;
  // kDeep: the largest job, in GPUs (a power of two); 0: 128, or the largest power of two the
  // cluster holds when that is smaller.
  int max_gang_gpus = 0;
  // kDeep: the estimate is the true duration times exp(N(0, noise)); 0 is exact. The runtime
  // limit stays an upper bound users set: 1-3x the true duration, so no job is killed by it.
  double estimate_noise = 0;
  // kDeep: the share of jobs submitted in sweeps (one user's 10-1,000 variants of a job of up to
  // 8 GPUs, a second apart), which is what makes queues thousands deep at a moderate load.
  double sweep_share = 0;
  // Sites and datasets (docs/adr/0044-datasets.md). With `sites` > 1, the nodes are split over
  // on-prem sites site-1..site-N, 10 Gbit/s apart, egress 0.02 a GiB, each caching `cache_gib`
  // of staged datasets; `datasets` ds01..dsNN of
  // 50 GiB to 5 TiB (log-uniform) each live at one site (in turn), and `data_share` of the jobs
  // read one of them (drawn uniformly). The defaults write what one site always did.
  int sites = 1;
  int datasets = 0;
  double data_share = 0.6;
  double cache_gib = 4000;  // each site's cache of staged datasets (0: no cap)
  // MIG (docs/adr/0045-gpu-partitioning.md): `mig_share` of the jobs ask for one MIG instance
  // (half 1g.10gb, a quarter each 2g.20gb and 3g.40gb) instead of GPUs, and every GPU of the
  // first `mig_nodes` nodes starts partitioned as 3g.40gb + 2g.20gb + 1g.10gb (what a static
  // layout dedicates to MIG work). The defaults write what a workload without MIG always was.
  double mig_share = 0;
  int mig_nodes = 0;
};

// A replay workload in Meridian's formats: a cluster description (YAML, one on-prem cluster of
// 8-GPU nodes and its projects with guarantees) and a job list (CSV) with Poisson arrivals,
// heavy-tailed durations, priorities, gangs and fractions, offering `load` of the capacity.
void SyntheticReplay(const SyntheticReplayOptions& o, std::string* cluster_yaml,
                     std::string* jobs_csv);

}  // namespace meridian::sim
