#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "server/server.h"

namespace meridian::dev {

// `meridian server --dev`: a whole hybrid estate on one machine, for trying Meridian at once.
// The server (production code, SQLite in a fresh data dir unless one is given) loads the
// example configuration embedded from examples/estate.yaml, creates an agent identity, and
// starts local agents as child processes: an on-prem cluster (`onprem_nodes` nodes of 8
// simulated H100-80GB, one NVLink domain each) and a cloud cluster in another region
// (`cloud_nodes` nodes of 8 simulated A100-80GB, dearer per GPU-hour), whose elastic pool of
// H200-141GB nodes grows from none when work waits for it, through `meridian dev-cloud` (a fake
// cloud: its instances are local agents). With `slurm` (on, or auto when Slurm can run here:
// slurm::LocalCluster::Runnable), a third: a real local Slurm cluster `hpc` (`slurm_nodes` nodes
// of 4 fake H100-80GB) that `meridian slurm-connector` federates, as a site's would. It prints the
// URL, the admin token and commands to try; SIGINT or SIGTERM stops the agents and the connector
// (which stop their tasks), Slurm, and the server.
struct DevOptions {
  server::ServerOptions server;
  bool fresh_data_dir = true;           // false: --data-dir was given
  std::vector<std::string> agent_args;  // added to each agent's command line (its log flags)
  int onprem_nodes = 4;
  int cloud_nodes = 2;
  std::string slurm = "auto";  // auto, on, off
  int slurm_nodes = 2;
};

base::Status RunDevEstate(DevOptions options);

// The example configuration the dev estate loads (examples/estate.yaml, embedded at build).
const char* ExampleEstate();

}  // namespace meridian::dev
