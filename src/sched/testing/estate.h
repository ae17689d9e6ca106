#pragma once

// Builders of small hand-made estates for the scheduler's tests.

#include <string>
#include <vector>

#include "domain/cluster.h"
#include "domain/gpu_model.h"
#include "sched/placer.h"
#include "sched/registry.h"
#include "sched/snapshot.h"

namespace meridian::sched::testing {

struct NodeSpec {
  std::string name;
  std::string model;  // empty: CPU-only
  int gpus = 0;
  int64_t cpu_milli = 64000;
  int64_t memory_mib = 256 * 1024;
  std::string cluster = "onprem";
  std::string rack = "r1";
  int gpus_per_nvlink_domain = 0;  // 0: one domain
};

inline domain::Node MakeNode(const NodeSpec& s) {
  domain::Node n;
  n.name = s.name;
  n.cluster = s.cluster;
  n.rack = s.rack;
  n.cpu_milli = s.cpu_milli;
  n.memory_mib = s.memory_mib;
  for (int i = 0; i < s.gpus; ++i) {
    domain::GpuDevice g;
    g.uuid = s.name + "-" + std::to_string(i);
    g.model = s.model;
    g.nvlink_domain = s.gpus_per_nvlink_domain > 0 ? i / s.gpus_per_nvlink_domain : 0;
    n.gpus.push_back(g);
  }
  return n;
}

inline std::vector<domain::Cluster> TwoClusters() {
  domain::Cluster onprem{"onprem",
                         domain::SiteKind::kOnPrem,
                         "eu-west",
                         domain::Backend::kAgent,
                         {{"H100-80GB", 2.0}, {"A100-80GB", 1.5}},
                         {"imagenet"}};
  domain::Cluster cloud{"cloud",
                        domain::SiteKind::kCloud,
                        "us-east",
                        domain::Backend::kAgent,
                        {{"H100-80GB", 6.0}, {"A100-80GB", 4.0}},
                        {}};
  return {onprem, cloud};
}

inline Snapshot Build(const std::vector<NodeSpec>& nodes,
                      std::vector<domain::Cluster> clusters = TwoClusters()) {
  std::vector<domain::Node> dn;
  for (const NodeSpec& s : nodes) dn.push_back(MakeNode(s));
  auto snap = Snapshot::Build(clusters, dn, domain::GpuCatalog::Builtin());
  if (!snap.ok()) throw std::runtime_error(snap.status().message());
  return std::move(*snap);
}

inline TaskSpec Whole(int n, int64_t cpu = 1000, int64_t mem = 1024) {
  TaskSpec t;
  t.cpu_milli = cpu;
  t.memory_mib = mem;
  t.gpu_kind = GpuKind::kWhole;
  t.gpu_count = n;
  t.gpu_milli = 1000;
  return t;
}

inline TaskSpec Fraction(int milli, int64_t gpu_mem = 0, int64_t cpu = 1000) {
  TaskSpec t;
  t.cpu_milli = cpu;
  t.memory_mib = 1024;
  t.gpu_kind = GpuKind::kFraction;
  t.gpu_count = 1;
  t.gpu_milli = milli;
  t.gpu_memory_mib = gpu_mem;
  return t;
}

inline TaskSpec Mig(const std::string& profile) {
  TaskSpec t;
  t.cpu_milli = 1000;
  t.memory_mib = 1024;
  t.gpu_kind = GpuKind::kMig;
  t.gpu_count = 1;
  t.mig_profile = profile;
  return t;
}

inline TaskSpec CpuOnly(int64_t cpu, int64_t mem = 1024) {
  TaskSpec t;
  t.cpu_milli = cpu;
  t.memory_mib = mem;
  return t;
}

// A profile of the built-in filters and the given scores.
inline Profile MakeProfile(std::vector<std::pair<std::string, double>> scores,
                           DeviceChoice choice = DeviceChoice::kEnumerate,
                           std::shared_ptr<const FragmentationModel> frag = nullptr,
                           int32_t max_feasible = 0) {
  ProfileSpec spec;
  spec.name = "test";
  spec.filters = {"cluster",       "pool-purpose",     "gpu-sharing",
                  "node-selector", "taint-toleration", "node-resources"};
  spec.scores = std::move(scores);
  spec.device_choice = choice;
  spec.max_feasible_nodes = max_feasible;
  PluginArgs args;
  args.fragmentation = std::move(frag);
  auto p = BuiltinRegistry().Build(spec, args);
  if (!p.ok()) throw std::runtime_error(p.status().message());
  return std::move(*p);
}

// Places `tasks` one after another on a copy of `s` under `profile`, each committed when placed;
// which of them placed, in order.
inline std::vector<bool> PlaceInTurn(const Snapshot& s, const Profile& profile,
                                     const std::vector<TaskSpec>& tasks, uint64_t seed = 1) {
  Snapshot copy = s;
  Placer placer(&copy, &profile, seed);
  CycleState cycle;
  std::vector<bool> placed;
  for (const TaskSpec& t : tasks) {
    PlaceOutcome o = placer.Place(t, cycle);
    if (o.placed) placer.Commit(t, o.placement, &cycle);
    placed.push_back(o.placed);
  }
  return placed;
}

}  // namespace meridian::sched::testing
