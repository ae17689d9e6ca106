#pragma once

#include <map>
#include <string>
#include <vector>

#include "domain/cluster.h"
#include "protocol/agent_protocol.h"

namespace meridian::server {

// Where a task of a job that runs in `cluster` finds each dataset it reads
// (docs/adr/0044-datasets.md): at a location the Dataset has there (a path on the site's
// shared filesystem), or in the site's cache, staged from the nearest other location: an object
// store of the same site first, then the site with the fastest link (the cheaper egress between
// equals). A dataset the cluster can neither reach nor cache, or one no longer declared, gets an
// empty path: the agent refuses the task, saying which.
std::vector<protocol::DataMount> DataMounts(const std::map<std::string, domain::Dataset>& datasets,
                                            const std::map<std::string, domain::Cluster>& sites,
                                            const std::vector<std::string>& names,
                                            const std::string& cluster);

// A job's checkpoint folder in `cluster`: <storage.checkpoints>/<project>/<job>; empty where the
// cluster keeps none.
std::string CheckpointDir(const std::map<std::string, domain::Cluster>& sites,
                          const std::string& cluster, const std::string& project, int64_t job);

}  // namespace meridian::server
