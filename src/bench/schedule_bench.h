#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "base/status.h"

namespace meridian::bench {

struct ScheduleBenchOptions {
  int nodes = 10000;
  int gpus_per_node = 8;
  int pending = 100000;
  int max_feasible_nodes = 8;  // the engine's bounded search; 0 scores every feasible node
  uint64_t seed = 1;
  // Run the pass as one cycle of the full scheduler: quotas (four projects with guarantees and
  // limits), priorities with preemption, gangs (every 20th job has two tasks), backfill.
  bool queueing = true;
};

struct ScheduleBenchResult {
  int64_t tasks = 0;
  int64_t placed = 0;
  int64_t unschedulable = 0;
  int64_t cache_hits = 0;
  double cycle_seconds = 0;          // one pass over every pending task
  double placements_per_second = 0;  // placed tasks / cycle_seconds
  double attempts_per_second = 0;    // tasks considered / cycle_seconds
  double peak_rss_mib = 0;
  double gpu_allocation = 0;  // % of GPU capacity allocated after the pass
  bool queueing = false;
  int64_t jobs = 0;
  int64_t preemptions = 0;

  nlohmann::json ToJson() const;
};

// One scheduling pass of the placement engine (policy "meridian", indexed search) over a
// synthetic estate and queue of mixed shapes: fractions, multi-GPU, MIG, model constraints.
base::Result<ScheduleBenchResult> RunScheduleBench(const ScheduleBenchOptions& o);

}  // namespace meridian::bench
