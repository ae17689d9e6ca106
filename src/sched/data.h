#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/snapshot.h"

namespace meridian::sched {

// Gbit/s assumed between two sites whose Clusters declare no bandwidth to each other.
inline constexpr double kDefaultSiteGbps = 1.0;

// One dataset a task would have copied to the cluster it runs in: from the site that has it
// nearest (the fastest link; the cheaper egress between equals), how much and how long.
struct DataMove {
  int32_t dataset = -1;
  int32_t from = -1;  // cluster; -1 when no site has it
  double gib = 0;
  double seconds = 0;
  double egress = 0;  // what leaving `from` costs
};

// What running a task's reads in `cluster` costs in data: the copies to make first, the time they
// take one after another, and the egress they pay. A dataset the cluster has (a location or its
// cache) moves nothing; one of unknown size (named by a Cluster with no Dataset document) that
// the cluster lacks counts as `unknown`, which the data score treats as the worst.
struct DataCost {
  std::vector<DataMove> moves;
  double seconds = 0;
  double gib = 0;
  double egress = 0;
  bool unknown = false;
};
DataCost DataCostAt(const Snapshot& snapshot, const std::vector<int32_t>& datasets,
                    int32_t cluster);

// "local" / "stage imagenet 150 GiB from onprem-a (2 min at 10 Gbit/s, egress 13.50)", for
// explanations and events.
std::string DescribeDataCost(const Snapshot& snapshot, const DataCost& cost);

}  // namespace meridian::sched
