#include "sched/data.h"

#include <cmath>
#include <cstdio>

namespace meridian::sched {

DataCost DataCostAt(const Snapshot& s, const std::vector<int32_t>& datasets, int32_t cluster) {
  DataCost cost;
  for (int32_t index : datasets) {
    const DatasetState& d = s.datasets[static_cast<size_t>(index)];
    if (d.Held() & Bit(cluster)) continue;
    DataMove m;
    m.dataset = index;
    m.gib = d.size_gib;
    double best_gbps = 0;
    for (int32_t from = 0; from < static_cast<int32_t>(s.clusters.size()); ++from) {
      if (!(d.Held() & Bit(from))) continue;
      double gbps = s.LinkGbps(from, cluster);
      if (gbps <= 0) gbps = kDefaultSiteGbps;
      const double egress = s.clusters[static_cast<size_t>(from)].egress_per_gib;
      if (gbps > best_gbps ||
          (gbps == best_gbps && egress < s.clusters[static_cast<size_t>(m.from)].egress_per_gib)) {
        best_gbps = gbps;
        m.from = from;
      }
    }
    if (m.from < 0 || d.size_gib < 0) {
      cost.unknown = true;
      cost.moves.push_back(m);
      continue;
    }
    // GiB to Gbit: 8 x 1.073741824.
    m.seconds = d.size_gib * 8.589934592 / best_gbps;
    m.egress = d.size_gib * s.clusters[static_cast<size_t>(m.from)].egress_per_gib;
    cost.seconds += m.seconds;
    cost.gib += m.gib;
    cost.egress += m.egress;
    cost.moves.push_back(m);
  }
  return cost;
}

namespace {

std::string Fixed(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string Seconds(double s) {
  if (s < 90) return std::to_string(static_cast<int64_t>(std::ceil(s))) + " s";
  if (s < 5400) return std::to_string(static_cast<int64_t>(std::round(s / 60))) + " min";
  return Fixed("%.1f h", s / 3600);
}

}  // namespace

std::string DescribeDataCost(const Snapshot& s, const DataCost& cost) {
  if (cost.moves.empty()) return "local";
  std::string out;
  for (const DataMove& m : cost.moves) {
    const std::string& name = s.datasets[static_cast<size_t>(m.dataset)].name;
    if (!out.empty()) out += "; ";
    if (m.from < 0) {
      out += "stage " + name + " from its object store (time not estimated)";
      continue;
    }
    const ClusterState& from = s.clusters[static_cast<size_t>(m.from)];
    if (m.gib < 0) {
      out += "stage " + name + " from " + from.name + " (size unknown)";
      continue;
    }
    out += "stage " + name + " " + Fixed("%.0f GiB", m.gib) + " from " + from.name + " (" +
           Seconds(m.seconds);
    if (m.egress > 0) out += Fixed(", egress %.2f", m.egress);
    out += ")";
  }
  return out;
}

}  // namespace meridian::sched
