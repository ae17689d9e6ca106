#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "domain/cluster.h"
#include "sched/profile.h"
#include "sched/scheduler.h"
#include "sched/snapshot.h"

// Deciding to burst (docs/adr/0039-elastic-pools.md): which elastic pools should grow, and by how
// many nodes, so that jobs that found no room on the estate can start. The jobs are placed, with
// the estate's own placement profile, on nodes that do not exist yet: the nodes each pool is
// already booting, then as many new ones of its shape as it may still add. Each job goes to the
// pool where it costs least (its GPUs at the pool's price per GPU-hour, for as long as it runs
// there: its estimate, or an hour, divided by the pool's speed), among the pools whose
// boot delay would start it before the estate's own capacity frees up for it. A pool grows by
// the new nodes its jobs took. Pure: no clock, no I/O.
namespace meridian::sched {

struct ElasticPool {
  std::string name;
  domain::Node shape;    // one new node: its cluster, pool, purpose, GPUs, CPU, memory, traits
  int32_t idle = 0;      // joined and holding nothing: there, and unused by this cycle
  int32_t booting = 0;   // asked for and not registered yet: coming anyway
  int32_t headroom = 0;  // how many more it may ask for (maxNodes less what it has and boots)
  double boot_seconds = 0;
  double price_per_gpu_hour = 0;
  double speed = 1;       // a job's speed on its GPUs relative to 1: it runs estimate / speed
  bool spot = false;      // for jobs that may be preempted, and that were not taken back too often
  bool available = true;  // false: backed off after failures, or not yet reconciled
};

// A job that found no room, and when it should start on the estate as it is (kNever: not known).
struct WaitingJob {
  const JobSpec* job = nullptr;
  double estimated_start = kNever;
  bool avoid_spot = false;  // it may not be preempted, or spot nodes were taken from it too often
  int32_t budget = -1;      // the budget it is charged to (an index of PlanBurst's budget_left)
};

struct BurstPlan {
  std::vector<int32_t> grow;               // new nodes per pool, by the pools' order
  std::map<int64_t, int32_t> pool_of_job;  // the pool each job that can go to one waits for
  // Jobs a pool could hold whose cost there is more than their budget has left: none is asked
  // for them. Job -> what it would cost.
  std::map<int64_t, double> over_budget;
};

// At most this many nodes of a pool are considered in one plan (booting and new together).
inline constexpr int32_t kMaxPlannedNodesPerPool = 256;

// `budget_left`: money left in each budget (docs/adr/0041-budgets.md) that waiting jobs name; a
// job is planned only while its cost in its pool (GPUs × price × its estimate, or an hour, ÷
// the pool's speed) fits in what its budget has left, which it then takes from it.
BurstPlan PlanBurst(const Snapshot& estate, const Profile& profile,
                    const std::vector<WaitingJob>& waiting, const std::vector<ElasticPool>& pools,
                    double now, uint64_t seed, std::vector<double> budget_left = {});

}  // namespace meridian::sched
