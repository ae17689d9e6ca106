#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace meridian::bench {

struct ApiBenchOptions {
  int clients = 16;     // concurrent clients, each with its own keep-alive connection
  double seconds = 10;  // how long they submit
  std::string server;   // an existing server's URL; empty: start one on a temporary data dir
  std::string token;    // for --server; a started server's admin token is used otherwise
  std::string binary;   // the meridian binary to start (this one)
  std::string project = "bench";
  // A started server's store: empty for SQLite in its temporary data dir, or a postgresql://
  // URL (`server --store`) of a database the benchmark may fill.
  std::string store;
};

struct ApiBenchResult {
  int64_t submissions = 0;  // acknowledged with 201, so durable
  int64_t errors = 0;
  double seconds = 0;
  double submissions_per_second = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double server_cpu_seconds = 0;  // of a server this benchmark started (0 otherwise)
  double server_rss_mib = 0;
  int64_t jobs_placed = 0;  // by the scheduler loop, meanwhile

  nlohmann::json ToJson() const;
};

// Durable job submissions per second against a real server process on SQLite (or the
// PostgreSQL of `store`): `clients`
// threads POST /api/v1/jobs for `seconds`, each waiting for its answer before the next. A
// started server gets an estate (one organization, team, project; 64 nodes of 8 GPUs) so that
// its scheduler loop works on the submissions meanwhile, as it would in production.
base::Result<ApiBenchResult> RunApiBench(const ApiBenchOptions& options,
                                         const std::function<void(double)>& progress);

}  // namespace meridian::bench
