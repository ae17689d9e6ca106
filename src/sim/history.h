#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/replay.h"
#include "sim/replay_input.h"

namespace meridian::sim {

// What-if on real history (docs/adr/0032-what-if-on-history.md): a live server's estate and jobs
// written as a replay trace (`meridian sim export`), and that trace replayed under the live
// documents and under proposed ones (`meridian plan --what-if`), side by side per project.

using Json = nlohmann::json;

// The live state as the API answers it.
struct LiveState {
  Json nodes = Json::array();      // items of GET /api/v1/nodes
  Json documents = Json::array();  // configuration documents: {kind, metadata: {name}, spec}
  Json jobs = Json::array();       // items of GET /api/v1/jobs, every phase, arrays as elements
};

struct HistoryTrace {
  ReplayCluster cluster;
  std::vector<ReplayJob> jobs;  // submit_time in seconds after `origin`
  double origin = 0;            // Unix seconds
  // Jobs of the window left out, with why: they never ran and no runtime limit or estimate
  // says how long they would have.
  int64_t left_out = 0;
  std::vector<std::string> notes;  // what the trace approximates, for the reader
};

// The jobs submitted in [from, to) (Unix seconds; `to` <= 0: until `now`) with the estate they
// ran on. A job's duration is how long it ran (until `now` for one still running); one that has
// not run yet is kept with its runtime limit, or else its estimate, as its duration.
base::Result<HistoryTrace> TraceOfHistory(const LiveState& live, double from, double to,
                                          double now);

// The trace in the formats `meridian sim replay` reads (docs/replay-format.md): the cluster
// description (JSON, which is YAML) and the jobs CSV.
std::string ReplayClusterYaml(const ReplayCluster& cluster);
std::string ReplayJobsCsv(const std::vector<ReplayJob>& jobs);

// The trace's estate as `documents` (configuration documents in canonical form) would make it:
// its projects, their weights and project quotas; the nodes node pools declare; the clusters'
// prices; the Policy's queue order, preemption and backfill. Nodes that agents registered are
// kept as they were.
struct ReplaySetup {
  ReplayCluster cluster;
  ReplayOptions options;
  std::vector<std::string> notes;  // what the replay does not model of these documents
};
ReplaySetup SetupOfDocuments(const ReplayCluster& trace, const Json& documents);

// The live documents with `changes` applied as `meridian apply` would: by kind and name,
// replaced or added; with `prune`, `changes` is the whole desired state.
Json ProposedDocuments(const Json& live, const Json& changes, bool prune);

// The two replays side by side: per project, jobs, mean and p95 JCT and wait, GPU share; and the
// estate's utilisation, preemptions and makespan.
Json WhatIfJson(const ReplayResult& current, const ReplayResult& proposed);
// The same as a table (a row per project, each cell "live -> proposed") and the estate's line.
struct WhatIfText {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
  std::string estate;
};
WhatIfText WhatIfTable(const ReplayResult& current, const ReplayResult& proposed);

}  // namespace meridian::sim
