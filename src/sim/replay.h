#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/replay_input.h"

namespace meridian::sim {

// Dynamic trace replay: a discrete-event simulation on a virtual clock that runs the scheduler
// unchanged. Jobs arrive at their submit time, wait, run for their duration (or until their
// runtime limit), may be preempted and requeued (their work so far is lost), and leave.
struct ReplayOptions {
  std::string policy = "meridian";  // fifo | sjf | las | meridian
  int32_t samples = 400;            // points of the time series
  // Preempted jobs resume from their last checkpoint, taken every this many seconds of run
  // time (0: no checkpoints, a preempted job starts over).
  double checkpoint_interval = 600;
  uint64_t seed = 1;
  // Idle reclamation (docs/adr/0019-idle-reclamation.md): a job whose GPUs have idled this many
  // seconds (an IdlePolicy's idleFor plus its grace) is stopped and leaves, its GPUs free for
  // the queue. 0: off.
  double reclaim_idle_after = 0;
  // A live Policy's switches over the queue order's own (a what-if of the live estate runs its
  // queue order with its preemption and backfill, src/sim/history.h); unset: the order's.
  std::optional<bool> preemption;
  std::optional<bool> backfill;
  std::optional<double> fair_share_half_life;
  std::optional<double> reserve_after;
  std::optional<double> starvation_horizon;
  std::optional<double> usage_stretch;
  std::optional<double> first_start_within;
  std::optional<double> first_start_preempts_after;
  // Elastic pools (ReplayCluster::elastic): off, their nodes stay off (on-prem only); on, they
  // grow as the server's burst planning decides (sched/elastic.h, every 30 s of trace time) and
  // release nodes empty for their idle timeout. `burst_budget` (money per 30 days of trace
  // time, spent on instances) stops growth once reached, as a Budget's block-bursts does
  // (docs/adr/0041-budgets.md); negative: no budget.
  bool burst = false;
  double burst_budget = -1;
  // A spent budget also takes the elastic nodes out of placement (block-cloud): they finish
  // what runs and are released idle. Off: they take new work until they idle out (block-bursts).
  bool burst_block_cloud = false;
  // Off: placement ignores where jobs' datasets are (the data-locality score is left out);
  // staging still costs what it costs.
  bool data_aware = true;
  // MIG (docs/adr/0045-gpu-partitioning.md): on, the cluster file's layout is kept as it is (MIG
  // tasks take only its instances, whole-GPU work only GPUs outside MIG mode); off, the
  // scheduler shapes it by demand, each GPU's layout kept at least `mig_reconfigure_interval`.
  bool mig_static = false;
  double mig_reconfigure_interval = 60;
  std::function<void(double done)> progress;  // fraction of jobs arrived; may be empty
};

struct ReplaySample {
  double time = 0;
  double utilization = 0;  // allocated / total GPU, 0..1
  int64_t pending = 0;
  int64_t running = 0;
  std::vector<double> project_gpus;  // GPUs held per project
};

struct Percentiles {
  double mean = 0, p50 = 0, p95 = 0, p99 = 0;
};

struct ProjectStats {
  std::string name;
  double weight = 1;
  double guaranteed_gpus = 0;
  double gpu_hours = 0;    // received
  double mean_gpus = 0;    // over the makespan
  double share = 0;        // of all GPU-hours delivered
  double quota_share = 0;  // its guarantee as a share of all guarantees (0 when none)
  int64_t jobs = 0;
  int64_t completed = 0;
  Percentiles jct;             // seconds, its completed jobs
  Percentiles queueing_delay;  // seconds from submission to first start
};

struct ReplayResult {
  std::string policy;
  int64_t jobs = 0;
  int64_t completed = 0;
  int64_t never_started = 0;   // did not run: refused, or still pending at the end
  int64_t refused = 0;         // no node of the estate could ever hold them
  Percentiles jct;             // seconds, completed jobs
  Percentiles queueing_delay;  // seconds from submission to first start
  // Seconds a completed job spent not doing its work: its JCT less the work it did (its
  // duration, or less if its limit or a reclaim cut it). Unlike the wait to first start, it
  // counts the waits after each preemption, the work preemptions threw away and staging.
  Percentiles not_running;
  double makespan = 0;       // first submission to last completion
  double utilization = 0;    // GPU-time allocated / GPU-time available over the makespan
  double jain_fairness = 0;  // time-averaged over moments when two or more projects compete
  int64_t preemptions = 0;
  double preempted_gpu_hours = 0;    // work lost to preemption
  double idle_gpu_hours = 0;         // over the makespan
  double idle_gpu_hours_queued = 0;  // while jobs were waiting
  double cost = 0;                   // sum of price per GPU-hour over what was allocated
  // Idle phases (ReplayJob::idle_from): GPU-hours jobs held while idle, and what reclamation
  // took back (the idle GPU-hours the reclaimed jobs would have held until they ended).
  double idle_held_gpu_hours = 0;
  double reclaimed_gpu_hours = 0;
  int64_t reclaimed = 0;  // jobs stopped for being idle (counted in completed too)
  // Elastic pools: what their instances cost (each node's GPUs at the pool's price, from its
  // request to its release, idle time and boot included), their node-hours, and how many
  // nodes were asked for.
  double cloud_cost = 0;
  double peak_period_spend = 0;  // the most spent on instances in one 30-day period
  double cloud_node_hours = 0;
  int64_t nodes_grown = 0;
  double budget = -1;        // the burst budget it ran under (per 30 days); negative: none
  bool block_cloud = false;  // and whether a spent one took the cloud nodes out of placement
  double total_gpus = 0;     // the estate's, elastic pools' nodes left out
  // Datasets (docs/adr/0044-datasets.md): copies made because a job ran where its data was not
  // (each site keeps its copies, so a later job there finds them), what they moved, the hours
  // jobs waited for them on their GPUs, and the egress they paid.
  int64_t stagings = 0;
  int64_t evictions = 0;  // copies that left a capped cache for another (`cache_gib`)
  double staged_gib = 0;
  double staging_hours = 0;
  double egress = 0;
  // MIG, when jobs ask for instances: how many did, their wait and that of GPU jobs, the share of
  // the slices of GPUs in MIG mode that instances held (time-averaged), and how often a GPU's
  // layout changed (MIG mode on or off, a re-partition).
  int64_t mig_jobs = 0;
  Percentiles mig_queueing_delay;
  Percentiles gpu_queueing_delay;
  double slice_utilization = 0;
  int64_t layout_changes = 0;
  std::vector<ProjectStats> projects;
  std::vector<ReplaySample> samples;
  double wall_seconds = 0;
};

base::Result<ReplayResult> RunReplay(const ReplayCluster& cluster,
                                     const std::vector<ReplayJob>& jobs,
                                     const ReplayOptions& options);

std::vector<std::string> ReplayPolicyNames();

// The replay's first scheduling cycle, with every job submitted: the node of each task of each
// job it starts. What the golden test compares with the server's path on the same input.
base::Result<std::map<int64_t, std::vector<std::string>>> ReplayFirstCycle(
    const ReplayCluster& cluster, const std::vector<ReplayJob>& jobs, const ReplayOptions& options);

// One policy on the same jobs with elastic pools: on-prem only (no burst), bursting within each
// of `budgets` (money per 30 days of trace time), and bursting with no budget (the first and last
// only `with_ends`); as many at once as there are cores. `block_cloud`: a spent budget also
// takes the cloud nodes out of placement (ReplayOptions::burst_block_cloud). Each result's `policy`
// names the run
// ("on-prem only", "burst <= 500", "burst").
std::vector<base::Result<ReplayResult>> RunBurstReplays(
    const ReplayCluster& cluster, const std::vector<ReplayJob>& jobs, const std::string& policy,
    const std::vector<double>& budgets, int32_t samples,
    const std::function<void(double)>& progress, bool block_cloud = false, bool with_ends = true);

// Every policy on the same jobs, side by side, one thread each; with `reclaim_idle_after` > 0,
// each policy again with idle reclamation ("meridian+reclaim"), so that the report shows its gain;
// with `data_blind_too`, each again with placement blind to datasets ("meridian data-blind");
// with `mig_static_too`, each again on the cluster file's MIG layout kept as it is ("meridian
// static-MIG").
// `progress` (may be empty) is called, serialised, with the fraction done by the slowest policy.
std::vector<base::Result<ReplayResult>> RunReplays(
    const ReplayCluster& cluster, const std::vector<ReplayJob>& jobs,
    const std::vector<std::string>& policies, int32_t samples,
    const std::function<void(double)>& progress, double reclaim_idle_after = 0,
    bool data_blind_too = false, bool mig_static_too = false);

}  // namespace meridian::sim
