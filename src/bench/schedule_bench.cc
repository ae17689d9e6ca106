#include "bench/schedule_bench.h"

#include <sys/resource.h>

#include <chrono>
#include <memory>

#include "sched/placer.h"
#include "sched/registry.h"
#include "sim/synthetic.h"

namespace meridian::bench {

nlohmann::json ScheduleBenchResult::ToJson() const {
  return {{"tasks", tasks},
          {"placed", placed},
          {"unschedulable", unschedulable},
          {"feasibility_cache_hits", cache_hits},
          {"cycle_seconds", cycle_seconds},
          {"placements_per_second", placements_per_second},
          {"attempts_per_second", attempts_per_second},
          {"peak_rss_mib", peak_rss_mib},
          {"gpu_allocation_percent", gpu_allocation}};
}

base::Result<ScheduleBenchResult> RunScheduleBench(const ScheduleBenchOptions& o) {
  if (o.nodes < 1 || o.gpus_per_node < 1 || o.gpus_per_node > 64 || o.pending < 1) {
    return base::Status::Invalid("--nodes, --pending >= 1 and --gpus-per-node in 1..64");
  }
  std::vector<domain::Cluster> clusters;
  std::vector<domain::Node> nodes;
  sim::SyntheticEstate({o.nodes, o.gpus_per_node, o.seed}, &clusters, &nodes);
  auto snapshot = sched::Snapshot::Build(clusters, nodes, domain::GpuCatalog::Builtin());
  if (!snapshot.ok()) return snapshot.status();
  nodes.clear();
  nodes.shrink_to_fit();
  std::vector<sched::TaskSpec> tasks = sim::SyntheticTasks(*snapshot, o.pending, o.seed + 1);

  auto spec = sched::PolicySpec("meridian");
  if (!spec.ok()) return spec.status();
  spec->max_feasible_nodes = o.max_feasible_nodes;
  sched::PluginArgs args;
  args.fragmentation = std::make_shared<sched::FragmentationModel>(
      sched::FragmentationModel::FromTasks(tasks, 0.95));
  auto profile = sched::BuiltinRegistry().Build(*spec, args);
  if (!profile.ok()) return profile.status();

  ScheduleBenchResult r;
  r.tasks = static_cast<int64_t>(tasks.size());
  auto start = std::chrono::steady_clock::now();
  sched::Placer placer(&*snapshot, &*profile, o.seed);
  sched::CycleState cycle;
  for (const sched::TaskSpec& t : tasks) {
    sched::PlaceOutcome out = placer.Place(t, cycle);
    if (out.placed) {
      placer.Commit(t, out.placement, &cycle);
      ++r.placed;
    } else {
      ++r.unschedulable;
    }
  }
  r.cycle_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.cache_hits = placer.cache_hits();
  r.placements_per_second = static_cast<double>(r.placed) / r.cycle_seconds;
  r.attempts_per_second = static_cast<double>(r.tasks) / r.cycle_seconds;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  r.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  r.gpu_allocation = 100.0 * static_cast<double>(snapshot->AllocatedGpuMilli()) /
                     static_cast<double>(snapshot->TotalGpuMilli());
  return r;
}

}  // namespace meridian::bench
