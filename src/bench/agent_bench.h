#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace meridian::bench {

struct AgentBenchOptions {
  int agents = 1000;  // simulated agents (nodes), all in this process
  int gpus_per_node = 8;
  double interval = 2.0;  // heartbeat interval (the policy's default)
  double seconds = 20;    // how long they heartbeat, after registering
  int jobs = 2000;        // 1-GPU jobs submitted first, so heartbeats carry assignments
  int dashboards = 2;     // open dashboards, each reading what the Estate view reads every 5 s
  // Each agent keeps a wait for orders open and heartbeats at once when rung, and again at once
  // to report new tasks running, as `meridian agent` does (docs/adr/0030).
  bool waits = true;
  bool channel = false;  // one WebSocket per agent instead (AsyncAgentsOptions::channel)
  // Jobs submitted one after another while the agents heartbeat, each timed from its
  // submission to Running (there must be free GPUs: `jobs` below agents x GPUs).
  int probes = 20;
  std::string binary;  // the meridian binary to start (this one)
};

struct AgentBenchResult {
  int64_t heartbeats = 0;
  int64_t errors = 0;
  double seconds = 0;
  double heartbeats_per_second = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double register_seconds = 0;  // all agents registering, one after another
  double server_cores = 0;      // CPU seconds of the server per second, while heartbeating
  double server_rss_mib = 0;
  int64_t nodes_lost = 0;  // should stay 0: no agent misses its heartbeats
  int64_t tasks_running = 0;
  // What the dashboards' reads cost while the agents heartbeat: per path, latency and size.
  struct Read {
    std::string path;
    int64_t count = 0, errors = 0;
    double p50_ms = 0, p99_ms = 0;
    int64_t bytes = 0;  // of the last answer, as sent (gzip, to a browser's Accept-Encoding)
  };
  std::vector<Read> dashboard_reads;
  int64_t waits_answered = 0;  // waits for orders the server answered (rung or timed out)
  // Submission to Running of the probe jobs.
  int64_t probes = 0, probes_late = 0;  // late: not Running within 30 s
  double probe_p50_ms = 0, probe_p99_ms = 0, probe_max_ms = 0;

  nlohmann::json ToJson() const;
};

// Many agents heartbeating against one real server on SQLite: `agents` simulated nodes register
// (8 GPUs each), `jobs` jobs are placed on them, then every agent heartbeats each `interval`
// seconds (spread evenly) with telemetry and what runs on it, reporting its assigned tasks as
// running. Heartbeats go over a connection each agent keeps. With `waits`, each agent also keeps a
// wait for orders open and heartbeats at once when rung (all agents on one event loop:
// bench/async_agents.h); `probes` jobs are
// then timed from submission to Running. Meanwhile `dashboards`
// clients read what the dashboard's Estate view reads, every 5 s each.
base::Result<AgentBenchResult> RunAgentBench(const AgentBenchOptions& options,
                                             const std::function<void(double)>& progress);

}  // namespace meridian::bench
