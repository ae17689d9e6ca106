#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/fgd_protocol.h"

namespace meridian::sim {

// Published results to compare against: policy -> arrived % -> allocation band.
using PublishedTable = std::map<std::string, std::map<int, Band>>;

// Reads the FGD artifact's summary-allocation.txt ("### arrived = N%" sections of
// "workload mean [min-max] ..." rows) for one workload; policies are named as Meridian names them
// ("fgd", "best-fit", ...).
base::Result<PublishedTable> ReadPublishedSummary(const std::string& path,
                                                  const std::string& workload);

// The table a person reads: one row per arrived point, allocation, fragmentation amount and ratio
// as mean [min-max], and the published allocation beside ours when `published` has the policy.
void PrintFgdTable(const std::vector<FgdResult>& results, const PublishedTable* published,
                   std::ostream& out);

// The machine-readable form: {"workload", "seeds", "policies": [{"policy", "points": [{"arrived",
// "allocation": {mean,min,max}, "fragmentation_amount": ..., "fragmentation_ratio": ...}]}]}.
nlohmann::json FgdJson(const std::vector<FgdResult>& results, const std::string& workload);

}  // namespace meridian::sim
