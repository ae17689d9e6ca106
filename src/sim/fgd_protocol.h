#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sched/fragmentation.h"
#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sim {

// The FGD paper's evaluation protocol (../shared/traces/README.md, "The published protocol"):
// tasks arrive one by one in a seeded shuffle of the trace, inflated by random draws until their
// GPU request reaches `inflate` times the cluster's GPU capacity; each is placed once or fails,
// and nothing leaves. Metrics are read when the arrived GPU request crosses each point.
struct FgdOptions {
  std::string policy = "meridian";
  std::vector<uint64_t> seeds = {42, 43, 44, 45, 46, 47, 48, 49, 50, 51};
  double inflate = 1.3;
  std::vector<int> points = {50, 80, 90, 100, 110, 120, 130};  // % of GPU capacity arrived
  // The allocation is also read at every whole percent arrived, from 0 up to `inflate` (the
  // curve the reports draw and the margins are taken on).
  double typical_coverage = 0.95;  // the typical shapes cover this share of the tasks
  int threads = 0;                 // 0: one per core
};

struct FgdSample {
  int arrived = 0;         // %
  double allocation = 0;   // allocated milli-GPU / capacity, %
  double frag_amount = 0;  // fragmented milli-GPU / capacity, %
  double frag_ratio = 0;   // fragmented / idle milli-GPU, %
};

struct FgdRun {
  uint64_t seed = 0;
  int64_t tasks = 0;
  int64_t failed = 0;
  std::vector<FgdSample> samples;
  std::vector<double> curve;  // allocation %, [k]: when k% of the capacity had arrived
};

struct Band {
  double mean = 0, min = 0, max = 0;
};

struct FgdPointSummary {
  int arrived = 0;
  Band allocation, frag_amount, frag_ratio;
};

struct FgdResult {
  std::string policy;
  std::vector<FgdRun> runs;
  std::vector<FgdPointSummary> points;
  std::vector<Band> curve;  // allocation % over the seeds at each whole percent arrived
  double seconds = 0;
};

// One seed. `cluster` is copied; `frag` is the workload's typical shapes.
base::Result<FgdRun> RunFgdSeed(const sched::Snapshot& cluster,
                                const std::vector<sched::TaskSpec>& tasks,
                                const sched::FragmentationModel& frag, const std::string& policy,
                                uint64_t seed, const FgdOptions& options);

// Every seed, in parallel; `progress` (may be empty) is told of each finished seed.
base::Result<FgdResult> RunFgd(const sched::Snapshot& cluster,
                               const std::vector<sched::TaskSpec>& tasks, const FgdOptions& options,
                               const std::function<void(int done, int total)>& progress);

}  // namespace meridian::sim
