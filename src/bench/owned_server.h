#pragma once

// What the benchmarks that drive a real server share: a server process they own, and
// percentiles.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace meridian::bench {

// A `meridian server` process a benchmark owns, on a temporary data dir removed afterwards.
struct OwnedServer {
  pid_t pid = -1;
  std::string dir;
  int port = 0;

  ~OwnedServer();
  // CPU seconds (user + system) and resident memory of the process, from /proc.
  void Usage(double* cpu_seconds, double* rss_mib) const;
  std::string admin_token() const;
};

// The organization, team and project "bench" and the on-prem cluster "onprem" that the
// benchmarks' estates start with (YAML documents).
inline constexpr const char* kBenchTenancy = R"(kind: Organization
metadata: {name: bench}
---
kind: Team
metadata: {name: bench}
spec: {organization: bench}
---
kind: Project
metadata: {name: bench}
spec: {team: bench}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem}
)";

// Starts `binary server` on a free loopback port, with `flags` after its own, and waits until
// it has bound it.
base::Result<std::unique_ptr<OwnedServer>> StartServer(const std::string& binary,
                                                       const std::vector<std::string>& flags = {});

// The q-quantile (0..1) of `v`, reordering it; 0 when empty.
double Percentile(std::vector<double>& v, double q);

// A file's text without its trailing newlines.
std::string Slurp(const std::string& path);

}  // namespace meridian::bench
