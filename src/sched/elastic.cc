#include "sched/elastic.h"

#include <memory>
#include <set>
#include <utility>

#include "sched/placer.h"

namespace meridian::sched {

namespace {

// A pool's nodes-to-be, and a placer over them.
struct Sandbox {
  Snapshot snapshot;
  std::unique_ptr<Placer> placer;
  CycleState cycle;
  std::set<int32_t> used;  // nodes that hold a planned task
};

std::unique_ptr<Sandbox> SandboxOf(const Snapshot& estate, const Profile& profile,
                                   const ElasticPool& pool, uint64_t seed) {
  const int32_t count = std::min(pool.idle + pool.booting + pool.headroom, kMaxPlannedNodesPerPool);
  if (!pool.available || count <= 0) return nullptr;
  auto box = std::make_unique<Sandbox>();
  box->snapshot = estate.WithoutNodes();
  for (int32_t i = 0; i < count; ++i) {
    domain::Node n = pool.shape;
    n.name = pool.name + "#" + std::to_string(i);
    n.schedulable = true;
    if (!box->snapshot.AddNode(n).ok()) return nullptr;  // a model or cluster it cannot hold
  }
  box->placer = std::make_unique<Placer>(&box->snapshot, &profile, seed);
  return box;
}

// Places every task of `job` in the sandbox; on failure nothing stays committed. With `keep`
// false the placements are taken back either way (a trial).
bool PlaceJob(Sandbox& box, const JobSpec& job, bool keep) {
  std::vector<Placement> done;
  bool ok = true;
  {
    std::unique_ptr<Placer::Trial> trial;
    if (!keep) trial = std::make_unique<Placer::Trial>(*box.placer);
    for (const TaskSpec& t : job.tasks) {
      PlaceOutcome o = box.placer->Place(t, box.cycle);
      if (!o.placed) {
        ok = false;
        break;
      }
      box.placer->Commit(t, o.placement, &box.cycle);
      done.push_back(o.placement);
    }
    if (!ok || !keep) {
      for (size_t i = done.size(); i-- > 0;) {
        if (keep) {
          box.placer->Release(job.tasks[i], done[i]);
        } else {
          box.placer->Undo(job.tasks[i], done[i]);
        }
      }
    }
  }
  if (ok && keep) {
    for (const Placement& p : done) box.used.insert(p.node);
  }
  return ok;
}

double GpusOf(const JobSpec& job) {
  double milli = 0;
  for (const TaskSpec& t : job.tasks) milli += static_cast<double>(t.GpuMilliTotal());
  return milli / 1000.0;
}

}  // namespace

BurstPlan PlanBurst(const Snapshot& estate, const Profile& profile,
                    const std::vector<WaitingJob>& waiting, const std::vector<ElasticPool>& pools,
                    double now, uint64_t seed, std::vector<double> budget_left) {
  BurstPlan plan;
  plan.grow.assign(pools.size(), 0);
  std::vector<std::unique_ptr<Sandbox>> boxes;
  for (size_t p = 0; p < pools.size(); ++p) {
    boxes.push_back(SandboxOf(estate, profile, pools[p], seed + p));
  }
  for (const WaitingJob& w : waiting) {
    if (!w.job || w.job->tasks.empty()) continue;
    const double gpus = GpusOf(*w.job);
    const double hours = w.job->runtime_estimate > 0 ? w.job->runtime_estimate / 3600 : 1;
    int32_t best = -1;
    double best_cost = 0;
    for (size_t p = 0; p < pools.size(); ++p) {
      if (!boxes[p] || (pools[p].spot && w.avoid_spot)) continue;
      // The estate's own capacity frees up for it before a new node could boot.
      if (w.estimated_start < kNever && w.estimated_start <= now + pools[p].boot_seconds) continue;
      if (!PlaceJob(*boxes[p], *w.job, false)) continue;
      // What the job costs there: a slower GPU is cheaper by the hour and dearer by the job.
      const double cost = gpus * pools[p].price_per_gpu_hour * hours / pools[p].speed;
      if (best < 0 || cost < best_cost ||
          (cost == best_cost && pools[p].boot_seconds < pools[best].boot_seconds)) {
        best = static_cast<int32_t>(p);
        best_cost = cost;
      }
    }
    if (best < 0) continue;
    const bool budgeted = w.budget >= 0 && static_cast<size_t>(w.budget) < budget_left.size();
    if (budgeted && best_cost > budget_left[static_cast<size_t>(w.budget)]) {
      plan.over_budget[w.job->id] = best_cost;
      continue;
    }
    if (PlaceJob(*boxes[best], *w.job, true)) {
      plan.pool_of_job[w.job->id] = best;
      if (budgeted) budget_left[static_cast<size_t>(w.budget)] -= best_cost;
    }
  }
  for (size_t p = 0; p < pools.size(); ++p) {
    if (!boxes[p]) continue;
    const int32_t used = static_cast<int32_t>(boxes[p]->used.size());
    const int32_t coming = pools[p].idle + pools[p].booting;
    plan.grow[p] = std::min(std::max(0, used - coming), pools[p].headroom);
  }
  return plan;
}

}  // namespace meridian::sched
