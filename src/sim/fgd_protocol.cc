#include "sim/fgd_protocol.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "base/rng.h"
#include "sched/assembly.h"
#include "sched/placer.h"
#include "sched/registry.h"

namespace meridian::sim {

namespace {

double ClusterFragmentation(const sched::Snapshot& s, const sched::FragmentationModel& frag) {
  double total = 0;
  for (const sched::NodeState& n : s.nodes) total += frag.NodeFragmentation(s, n);
  return total;
}

// The arrival order: a seeded shuffle of the trace, then uniform draws with replacement until
// the GPU request reaches `inflate` times the capacity.
std::vector<int32_t> ArrivalOrder(const std::vector<sched::TaskSpec>& tasks, int64_t capacity,
                                  double inflate, base::Rng* rng) {
  std::vector<int32_t> order(tasks.size());
  int64_t requested = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    order[i] = static_cast<int32_t>(i);
    requested += tasks[i].GpuMilliTotal();
  }
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[rng->Uniform(i)]);
  }
  const double target = inflate * static_cast<double>(capacity);
  int64_t any_gpu = 0;
  for (const sched::TaskSpec& t : tasks) any_gpu += t.GpuMilliTotal() > 0 ? 1 : 0;
  while (any_gpu > 0 && static_cast<double>(requested) < target) {
    int32_t pick = static_cast<int32_t>(rng->Uniform(tasks.size()));
    order.push_back(pick);
    requested += tasks[pick].GpuMilliTotal();
  }
  return order;
}

}  // namespace

base::Result<FgdRun> RunFgdSeed(const sched::Snapshot& cluster,
                                const std::vector<sched::TaskSpec>& tasks,
                                const sched::FragmentationModel& frag, const std::string& policy,
                                uint64_t seed, const FgdOptions& options) {
  // The published protocol: the policy as it is, whatever the cluster's size.
  sched::Assembly a;
  a.policy = policy;
  a.bound_large_estates = false;
  auto profile = sched::BuildProfile(a, cluster.nodes.size(),
                                     std::make_shared<sched::FragmentationModel>(frag));
  if (!profile.ok()) return profile.status();

  sched::Snapshot state = cluster;
  const int64_t capacity = state.TotalGpuMilli();
  if (capacity <= 0) return base::Status::Invalid("the cluster has no GPUs");
  base::Rng order_rng(seed);
  std::vector<int32_t> order = ArrivalOrder(tasks, capacity, options.inflate, &order_rng);
  sched::Placer placer(&state, &*profile, seed * 0x9e3779b97f4a7c15ULL + 1);
  sched::CycleState cycle;

  FgdRun run;
  run.seed = seed;
  int64_t arrived = 0;
  int64_t allocated = 0;
  size_t next = 0;
  for (int32_t idx : order) {
    const sched::TaskSpec& task = tasks[idx];
    ++run.tasks;
    arrived += task.GpuMilliTotal();
    sched::PlaceOutcome o = placer.Place(task, cycle);
    if (o.placed) {
      placer.Commit(task, o.placement, &cycle);
      allocated += task.GpuMilliTotal();
    } else {
      ++run.failed;
    }
    while (arrived * 100 >= static_cast<int64_t>(run.curve.size()) * capacity &&
           run.curve.size() <= static_cast<size_t>(options.inflate * 100 + 1e-9)) {
      run.curve.push_back(100.0 * static_cast<double>(allocated) / static_cast<double>(capacity));
    }
    while (next < options.points.size() && arrived * 100 >= options.points[next] * capacity) {
      double f = ClusterFragmentation(state, frag);
      double idle = static_cast<double>(capacity - allocated);
      FgdSample sample;
      sample.arrived = options.points[next];
      sample.allocation = 100.0 * static_cast<double>(allocated) / static_cast<double>(capacity);
      sample.frag_amount = 100.0 * f / static_cast<double>(capacity);
      sample.frag_ratio = idle > 0 ? 100.0 * f / idle : 0.0;
      run.samples.push_back(sample);
      ++next;
    }
  }
  return run;
}

base::Result<FgdResult> RunFgd(const sched::Snapshot& cluster,
                               const std::vector<sched::TaskSpec>& tasks, const FgdOptions& options,
                               const std::function<void(int, int)>& progress) {
  auto start = std::chrono::steady_clock::now();
  if (options.seeds.empty()) return base::Status::Invalid("--seeds: at least one seed");
  // Validate the policy once, before starting threads.
  if (auto spec = sched::PolicySpec(options.policy); !spec.ok()) return spec.status();
  const sched::FragmentationModel frag =
      sched::FragmentationModel::FromTasks(tasks, options.typical_coverage);

  FgdResult result;
  result.policy = options.policy;
  result.runs.resize(options.seeds.size());
  std::vector<base::Status> errors(options.seeds.size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mu;
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::clamp(threads, 1, static_cast<int>(options.seeds.size()));
  auto worker = [&]() {
    for (size_t i = next++; i < options.seeds.size(); i = next++) {
      auto run = RunFgdSeed(cluster, tasks, frag, options.policy, options.seeds[i], options);
      if (run.ok()) {
        result.runs[i] = std::move(*run);
      } else {
        errors[i] = run.status();
      }
      int d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress(d, static_cast<int>(options.seeds.size()));
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (const base::Status& e : errors) {
    if (!e.ok()) return e;
  }

  for (size_t p = 0; p < options.points.size(); ++p) {
    FgdPointSummary s;
    s.arrived = options.points[p];
    auto band = [&](auto field) {
      Band b;
      int n = 0;
      for (const FgdRun& r : result.runs) {
        if (p >= r.samples.size()) continue;
        double v = field(r.samples[p]);
        b.mean += v;
        b.min = n == 0 ? v : std::min(b.min, v);
        b.max = n == 0 ? v : std::max(b.max, v);
        ++n;
      }
      if (n > 0) b.mean /= n;
      return b;
    };
    s.allocation = band([](const FgdSample& x) { return x.allocation; });
    s.frag_amount = band([](const FgdSample& x) { return x.frag_amount; });
    s.frag_ratio = band([](const FgdSample& x) { return x.frag_ratio; });
    result.points.push_back(s);
  }
  size_t curve = SIZE_MAX;
  for (const FgdRun& r : result.runs) curve = std::min(curve, r.curve.size());
  for (size_t k = 0; k < curve; ++k) {
    Band b{0, result.runs[0].curve[k], result.runs[0].curve[k]};
    for (const FgdRun& r : result.runs) {
      b.mean += r.curve[k];
      b.min = std::min(b.min, r.curve[k]);
      b.max = std::max(b.max, r.curve[k]);
    }
    b.mean /= static_cast<double>(result.runs.size());
    result.curve.push_back(b);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace meridian::sim
