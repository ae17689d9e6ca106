#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace meridian::bench {

struct ServerBenchOptions {
  int nodes = 10000;  // simulated agents, 8 GPUs each, on one event loop in this process
  int gpus_per_node = 8;
  // Whole-node jobs that wait: they need H100s, and every H100 node is held by a running job.
  int pending = 100000;
  // Nodes of another model (A100) left free, where the probe jobs start.
  int spare_nodes = 0;    // 0: a hundredth of the nodes, at least 1
  double interval = 2.0;  // heartbeat interval
  double seconds = 30;    // how long the estate is measured, once it is full and queued
  int probes = 20;        // 1-GPU jobs of another project, timed from submission to Running
  // The agents keep one WebSocket each (ADR 0047) instead of a heartbeat connection and a wait.
  bool channel = false;
  std::string binary;  // the meridian binary to start (this one)
};

struct ServerBenchResult {
  int nodes = 0, spare_nodes = 0;
  int64_t running = 0, pending = 0;  // the jobs the server lists at the end
  double setup_seconds = 0;          // registering, filling and queueing
  double seconds = 0;                // the measured window
  // Scheduling cycles in the window, from the server's histogram of them (interpolated within
  // a bucket, as Prometheus' histogram_quantile does).
  int64_t cycles = 0;
  double cycle_p50_s = 0, cycle_p99_s = 0;
  int64_t heartbeats = 0, heartbeat_errors = 0;
  double heartbeats_per_second = 0, heartbeat_p50_ms = 0, heartbeat_p99_ms = 0;
  // In the server: its handler's time, from its histogram (the agents' figures above add the
  // connection, the server's I/O threads and the benchmark's own event loop).
  double heartbeat_handler_p50_ms = 0, heartbeat_handler_p99_ms = 0;
  int64_t probes = 0, probes_late = 0;  // late: not Running within 30 s
  double probe_p50_ms = 0, probe_p99_ms = 0, probe_max_ms = 0;
  double server_cores = 0;  // CPU seconds per second in the window
  double server_rss_mib = 0;

  nlohmann::json ToJson() const;
};

// A real `meridian server` on SQLite with `nodes` simulated agents heartbeating (async_agents.h):
// all but the spare nodes are filled by running whole-node jobs, `pending` more wait behind
// them, and then for `seconds` the agents heartbeat while `probes` jobs that fit on the spare
// nodes are timed from submission to Running. What the issue calls `bench server`.
base::Result<ServerBenchResult> RunServerBench(const ServerBenchOptions& options,
                                               const std::function<void(const std::string&)>& say);

}  // namespace meridian::bench
