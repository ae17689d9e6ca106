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

// Published allocation curves (the artifact's analysis_allo_discrete.csv: a row per workload,
// policy and seed, a column per whole percent arrived) for one workload: policy -> the band over
// the seeds at each percent.
using PublishedCurves = std::map<std::string, std::vector<Band>>;
base::Result<PublishedCurves> ReadPublishedCurves(const std::string& path,
                                                  const std::string& workload);

// Where `policy` is least ahead of `against` in mean allocation, over whole percents arrived in
// [from, to]; `gap` is policy minus against, in points (negative: behind).
struct Margin {
  int arrived = -1;  // -1: the curves do not overlap in [from, to]
  double gap = 0;
};
Margin LowestMargin(const std::vector<Band>& policy, const std::vector<Band>& against, int from,
                    int to);

// A self-contained HTML page: allocation against arrived for each policy run here (mean, and
// the seeds' min and max) beside the published means, and each run policy's margin over `fgd`.
std::string FgdHtml(const std::vector<FgdResult>& results, const PublishedCurves& published,
                    const std::string& title);

// The machine-readable form: {"workload", "seeds", "policies": [{"policy", "points": [{"arrived",
// "allocation": {mean,min,max}, "fragmentation_amount": ..., "fragmentation_ratio": ...}], "curve":
// [allocation mean at 0%, 1%, ...]}]}.
nlohmann::json FgdJson(const std::vector<FgdResult>& results, const std::string& workload);

}  // namespace meridian::sim
