#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "store/store.h"

// Accounting (docs/adr/0040-accounting.md): what each run of each job used, recorded when the run
// ends, in the transaction that ends it (api/job_life.h), and summed over a time window as
// Slurm's sreport sums its job records.
namespace meridian::api {

// The records of the job's current run, one per task, as if it ended at `end` with `outcome`:
// its devices from the allocation (a fraction or MIG slice as its share of a GPU), the pool,
// model and price the allocation took when it was placed, CPU and memory from the spec, from
// the run's start (`status.startedAt`). None for a run that never started.
std::vector<store::UsageRecord> UsageOfRun(const store::JobRecord& job, double end,
                                           const std::string& outcome);

// Reads in `tx` what a report or a budget sums: the records `filter` selects (every page), then
// the runs still going of its projects (all projects when it names none) as if they ended at
// `now`. One transaction, so that a run ending meanwhile is counted once.
base::Status ReadUsage(store::Tx& tx, store::UsageFilter filter, double now,
                       std::vector<store::UsageRecord>* out);

// What some records add up to within a window: every record clipped to it.
struct UsageTotals {
  int64_t jobs = 0;  // distinct jobs
  int64_t runs = 0;  // distinct runs (job, generation)
  double gpu_seconds = 0;
  double cpu_seconds = 0;  // core-seconds
  double memory_gib_seconds = 0;
  double cost = 0;  // GPU-hours × each run's price
};

// The row of records that have no key for a report (a CPU-only run by GPU model, a node without
// a pool, a project no longer in a team).
inline constexpr const char* kNoKey = "(none)";

// Sums `records` clipped to [from, to), by the key `key_of` gives each (kNoKey for an empty
// one); records outside the window count for nothing. `total` gets the sum of them all.
std::map<std::string, UsageTotals> SumUsage(
    const std::vector<store::UsageRecord>& records, double from, double to,
    const std::function<std::string(const store::UsageRecord&)>& key_of, UsageTotals* total);

// The same over time: [from, to) cut into `steps` steps of `step` seconds (the last ends at `to`),
// and each key's GPU-seconds and cost in each, in one pass over the records.
struct UsageStep {
  double gpu_seconds = 0;
  double cost = 0;
};
std::map<std::string, std::vector<UsageStep>> SumUsageByStep(
    const std::vector<store::UsageRecord>& records, double from, double to, double step,
    int64_t steps, const std::function<std::string(const store::UsageRecord&)>& key_of);

}  // namespace meridian::api
