#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sched/plugin.h"

namespace meridian::sched {

// How the engine picks devices on a node before scoring.
enum class DeviceChoice {
  kBestFit,    // one candidate per node: the fitting GPU with the least free share
  kRandom,     // one candidate per node: a random fitting GPU
  kEnumerate,  // one candidate per distinct fitting GPU, so that scores choose the device
};

// Which of several candidates with the best score wins.
enum class TieBreak {
  kRandom,     // uniformly at random, from the placer's seed
  kNodeOrder,  // the node listed first in the snapshot (then the first device choice)
};

struct WeightedScore {
  std::unique_ptr<ScorePlugin> plugin;
  double weight = 1;
};

// A placement policy: which filters and scores run, and how. Built by a Registry.
struct Profile {
  std::string name;
  std::vector<std::unique_ptr<FilterPlugin>> filters;
  std::vector<WeightedScore> scores;
  DeviceChoice device_choice = DeviceChoice::kEnumerate;
  // Truncate each plugin's score to an integer before weighting, as kube-scheduler's int64 scores
  // do; only the reproductions of published policies want this.
  bool quantize_scores = false;
  TieBreak tie_break = TieBreak::kRandom;
  // 0: score every feasible node. Otherwise stop after this many feasible nodes, visited
  // tightest fit first through the index (bounded work per task at large scale).
  int32_t max_feasible_nodes = 0;
};

// Scratch state of one scheduling cycle, shared by the placements made in it.
struct CycleState {
  // Racks and cluster already used by each task group placed in this cycle.
  std::unordered_map<int32_t, std::vector<int32_t>> group_racks;
  std::unordered_map<int32_t, int32_t> group_cluster;
  // Backfill: nodes held for the reserved head of the queue, and whether the task now being
  // placed must keep off them (it would still run when the reservation starts).
  std::vector<uint8_t> reserved_nodes;
  bool avoid_reserved = false;
  // Nodes the task now being placed keeps off: those a job laid out as the same number of tasks
  // on each node already uses (Scheduler::PlaceEvenly). What fits nowhere while some are kept
  // off is not remembered: it says nothing of the shape.
  std::vector<uint8_t> keep_off;  // by node; all 0 (or short) when kept_off is 0
  int32_t kept_off = 0;           // how many are
};

}  // namespace meridian::sched
