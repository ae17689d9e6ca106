#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/replay.h"

namespace meridian::sim {

// The summary a person reads: one column per policy.
void PrintReplayTable(const std::vector<ReplayResult>& results, std::ostream& out);

// {"policies": [{"policy", "jct": {mean,p50,p95,p99}, "queueing_delay": {...} (to first start),
// "not_running": {...} (JCT less the work done), "makespan",
// "utilization", "jain_fairness", "preemptions", ...}]}; times in seconds.
nlohmann::json ReplayJson(const std::vector<ReplayResult>& results);

// One CSV per policy in `dir` (created if missing): replay-<policy>.csv with time, utilization,
// pending, running and the GPUs of each project; plus replay-projects.csv.
base::Status WriteReplayCsv(const std::vector<ReplayResult>& results, const std::string& dir);

// With elastic pools (RunBurstReplays): on-prem only, each budget and no budget, by cloud cost:
// the cost/JCT frontier, as a table and as SVG plots (empty with fewer than two such runs).
void PrintBurstFrontier(const std::vector<ReplayResult>& results, std::ostream& out);
std::string BurstFrontierHtml(const std::vector<ReplayResult>& results);

// A self-contained HTML page: the summary table and SVG plots of utilisation and queue length
// over time, completion time and queueing delay percentiles, and each project's share.
std::string ReplayHtml(const std::vector<ReplayResult>& results, const std::string& title);

}  // namespace meridian::sim
