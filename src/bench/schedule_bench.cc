#include "bench/schedule_bench.h"

#include <sys/resource.h>

#include <chrono>
#include <memory>

#include "base/rng.h"
#include "sched/assembly.h"
#include "sched/placer.h"
#include "sched/scheduler.h"
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
          {"gpu_allocation_percent", gpu_allocation},
          {"mode",
           queueing ? "scheduler cycle (quotas, gangs, preemption, backfill)" : "placement only"},
          {"jobs", jobs},
          {"preemptions", preemptions}};
}

namespace {

double PeakRssMib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// The same tasks as jobs of four projects under quota, one cycle of the scheduler over all.
void RunQueueingPass(const ScheduleBenchOptions& o, sched::Snapshot snapshot,
                     sched::Profile profile, const std::vector<sched::TaskSpec>& tasks,
                     ScheduleBenchResult* r) {
  const int64_t capacity = snapshot.TotalGpuMilli();
  sched::QuotaTree quotas;
  const int32_t org = quotas.AddNode("org", -1);
  std::vector<int32_t> projects;
  for (int t = 0; t < 2; ++t) {
    const int32_t team = quotas.AddNode("team" + std::to_string(t), org);
    quotas.SetQuota(team, sched::kNoModel, capacity / 2, capacity);
    for (int p = 0; p < 2; ++p) {
      const int32_t leaf = quotas.AddNode("project" + std::to_string(2 * t + p), team);
      quotas.SetQuota(leaf, sched::kNoModel, capacity / 4, capacity * 3 / 4);
      projects.push_back(leaf);
    }
  }
  sched::SchedulerOptions so;
  so.queue_depth = static_cast<int32_t>(tasks.size());
  sched::Scheduler scheduler(std::move(snapshot), std::move(profile), std::move(quotas), so,
                             o.seed);
  base::Rng rng(o.seed + 7);
  int64_t id = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    sched::JobSpec job;
    job.id = ++id;
    job.tenant = projects[rng.Uniform(projects.size())];
    job.priority = rng.Uniform(10) == 0 ? 100 : 0;
    job.submit_time = 0;
    job.runtime_estimate = 600 + static_cast<double>(rng.Uniform(7200));
    job.tasks.push_back(tasks[i]);
    if (i % 20 == 0 && i + 1 < tasks.size() && tasks[i].WantsGpu()) {
      job.gang = true;
      job.tasks.push_back(tasks[++i]);
      job.tasks.back() = job.tasks.front();
    }
    // A refused job (no node could ever hold it) simply counts among the unschedulable tasks.
    if (!scheduler.Submit(std::move(job)).ok()) continue;
  }
  r->jobs = id;
  auto start = std::chrono::steady_clock::now();
  sched::CycleResult result = scheduler.Cycle(0);
  r->cycle_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r->queueing = true;
  r->preemptions = static_cast<int64_t>(result.preempted.size());
  r->cache_hits = scheduler.cache_hits();
  for (const sched::StartDecision& d : result.started)
    r->placed += static_cast<int64_t>(d.placements.size());
  r->unschedulable = r->tasks - r->placed;
  r->placements_per_second = static_cast<double>(r->placed) / r->cycle_seconds;
  r->attempts_per_second = static_cast<double>(r->tasks) / r->cycle_seconds;
  r->peak_rss_mib = PeakRssMib();
  r->gpu_allocation = 100.0 * static_cast<double>(scheduler.snapshot().AllocatedGpuMilli()) /
                      static_cast<double>(scheduler.snapshot().TotalGpuMilli());
}

}  // namespace

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

  sched::Assembly a;
  a.max_feasible_nodes = o.max_feasible_nodes;
  a.seed = o.seed;
  auto profile = sched::BuildProfile(a, snapshot->nodes.size(), tasks);
  if (!profile.ok()) return profile.status();

  ScheduleBenchResult r;
  r.tasks = static_cast<int64_t>(tasks.size());
  if (o.queueing) {
    RunQueueingPass(o, std::move(*snapshot), std::move(*profile), tasks, &r);
    return r;
  }
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
  r.peak_rss_mib = PeakRssMib();
  r.gpu_allocation = 100.0 * static_cast<double>(snapshot->AllocatedGpuMilli()) /
                     static_cast<double>(snapshot->TotalGpuMilli());
  return r;
}

}  // namespace meridian::bench
