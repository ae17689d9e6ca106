#include "server/data_mounts.h"

#include <algorithm>

namespace meridian::server {

namespace {

// Gbit/s between two sites as either declares it; 0 when neither does.
double Link(const std::map<std::string, domain::Cluster>& sites, const std::string& a,
            const std::string& b) {
  double gbps = 0;
  for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    auto site = sites.find(from);
    if (site == sites.end()) continue;
    auto link = site->second.bandwidth_gbps.find(to);
    if (link != site->second.bandwidth_gbps.end()) gbps = std::max(gbps, link->second);
  }
  return gbps;
}

double Egress(const std::map<std::string, domain::Cluster>& sites, const std::string& site) {
  auto it = sites.find(site);
  return it == sites.end() ? 0 : it->second.egress_per_gib;
}

}  // namespace

std::vector<protocol::DataMount> DataMounts(const std::map<std::string, domain::Dataset>& datasets,
                                            const std::map<std::string, domain::Cluster>& sites,
                                            const std::vector<std::string>& names,
                                            const std::string& cluster) {
  std::vector<protocol::DataMount> out;
  auto site = sites.find(cluster);
  const domain::ClusterStorage storage =
      site == sites.end() ? domain::ClusterStorage{} : site->second.storage;
  for (const std::string& name : names) {
    protocol::DataMount m;
    m.name = name;
    auto d = datasets.find(name);
    if (d == datasets.end()) {  // no longer declared: nowhere to find it (the agent says so)
      out.push_back(std::move(m));
      continue;
    }
    m.size_gib = d->second.size_gib;
    const domain::DatasetLocation* here = nullptr;
    const domain::DatasetLocation* from = nullptr;
    for (const domain::DatasetLocation& at : d->second.locations) {
      if (at.cluster == cluster && !at.path.empty()) here = &at;
    }
    if (here) {
      m.path = here->path;
      out.push_back(std::move(m));
      continue;
    }
    auto rank = [&](const domain::DatasetLocation& at) {
      // The site's own object store, then the fastest link, then the cheaper egress.
      return std::make_tuple(at.cluster == cluster, Link(sites, at.cluster, cluster),
                             -Egress(sites, at.cluster));
    };
    for (const domain::DatasetLocation& at : d->second.locations) {
      if (!from || rank(at) > rank(*from)) from = &at;
    }
    if (!storage.cache.empty() && from) {
      m.path = storage.cache + "/" + name;
      m.stage_from = from->path.empty() ? from->url : from->path;
      m.staging_command = storage.staging_command;
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::string CheckpointDir(const std::map<std::string, domain::Cluster>& sites,
                          const std::string& cluster, const std::string& project, int64_t job) {
  auto site = sites.find(cluster);
  if (site == sites.end() || site->second.storage.checkpoints.empty()) return "";
  return site->second.storage.checkpoints + "/" + project + "/" + std::to_string(job);
}

}  // namespace meridian::server
