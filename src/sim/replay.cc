#include "sim/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <set>
#include <thread>
#include <unordered_map>

#include "domain/gpu_model.h"
#include "sched/assembly.h"
#include "sched/data.h"
#include "sched/elastic.h"
#include "sim/alibaba_trace.h"

namespace meridian::sim {
namespace {

base::Result<sched::SchedulerOptions> PolicyOptions(const std::string& policy) {
  sched::SchedulerOptions o;
  if (policy == "fifo") {
    o.order = sched::QueueOrder::kFifo;
    o.preemption = false;
    o.backfill = false;
  } else if (policy == "sjf") {
    o.order = sched::QueueOrder::kShortestJobFirst;
    o.preemption = false;
    o.backfill = false;
  } else if (policy == "las") {
    o.order = sched::QueueOrder::kLeastAttainedService;
    o.backfill = false;
  } else if (policy == "meridian") {
    o.order = sched::QueueOrder::kMeridian;
  } else {
    return base::Status::Invalid("--policy: unknown policy \"" + policy +
                                 "\" (known: fifo, sjf, las, meridian)");
  }
  return o;
}

struct Setup {
  std::unique_ptr<sched::Scheduler> scheduler;
  std::vector<int32_t> leaf_of_project;  // project index -> quota tree leaf
  std::vector<int32_t> project_of_job;   // job index -> project index
  std::vector<ProjectStats> projects;
  bool resumes = false;  // jobs keep their work through a stop, to their last checkpoint
};

std::vector<sched::TaskSpec> TasksOf(const ReplayJob& j, const sched::Snapshot& s) {
  sched::TaskSpec t =
      GpuTaskSpec(j.cpu_milli, j.memory_mib, j.gpus_per_task, j.gpu_milli, j.gpu_models, s);
  if (!j.mig_profile.empty()) {
    t.gpu_kind = sched::GpuKind::kMig;
    t.gpu_count = 1;
    t.mig_profile = j.mig_profile;
  }
  for (const std::string& d : j.datasets) {
    if (int32_t i = s.FindDataset(d); i >= 0) t.datasets.push_back(i);
  }
  return std::vector<sched::TaskSpec>(static_cast<size_t>(j.tasks), t);
}

sched::JobSpec SpecOf(const Setup& setup, const std::vector<ReplayJob>& jobs, size_t i,
                      const sched::Snapshot& snap) {
  sched::JobSpec spec;
  spec.id = jobs[i].id;
  spec.tenant = setup.leaf_of_project[setup.project_of_job[i]];
  spec.priority = jobs[i].priority;
  spec.gang = jobs[i].gang;
  spec.tasks = TasksOf(jobs[i], snap);
  spec.submit_time = jobs[i].submit_time;
  spec.runtime_estimate = jobs[i].runtime_estimate;
  spec.runtime_limit = jobs[i].runtime_limit;
  spec.resumes = setup.resumes;
  return spec;
}

base::Result<Setup> BuildSetup(const ReplayCluster& cluster, const std::vector<ReplayJob>& jobs,
                               const ReplayOptions& options) {
  auto snapshot =
      sched::Snapshot::Build(cluster.clusters, cluster.nodes, domain::GpuCatalog::Builtin());
  if (!snapshot.ok()) return snapshot.status();
  for (const domain::Dataset& d : cluster.datasets) {
    snapshot->SetDatasetSize(snapshot->AddDataset(d.name), d.size_gib);
  }
  for (const ReplayJob& j : jobs) {
    for (const std::string& d : j.datasets) {
      if (snapshot->FindDataset(d) < 0) {
        return base::Status::Invalid("job " + std::to_string(j.id) + ": dataset \"" + d +
                                     "\" is not among the cluster file's datasets");
      }
    }
  }
  auto order = PolicyOptions(options.policy);
  if (!order.ok()) return order.status();
  if (options.preemption) order->preemption = *options.preemption;
  if (options.backfill) order->backfill = *options.backfill;
  if (options.fair_share_half_life) order->fair_share_half_life = *options.fair_share_half_life;
  if (options.reserve_after) order->reserve_after = *options.reserve_after;
  if (options.starvation_horizon) order->starvation_horizon = *options.starvation_horizon;
  if (options.usage_stretch) order->usage_stretch = *options.usage_stretch;
  if (options.first_start_within) order->first_start_within = *options.first_start_within;
  if (options.first_start_preempts_after) {
    order->first_start_preempts_after = *options.first_start_preempts_after;
  }
  order->mig_static = options.mig_static;
  order->mig_reconfigure_interval = options.mig_reconfigure_interval;

  Setup out;
  out.resumes = options.checkpoint_interval > 0;
  sched::QuotaTree quotas;
  const int32_t root = quotas.AddNode("all", -1);
  std::map<std::string, int32_t> teams, projects;
  auto add_project = [&](const ReplayProject& p) {
    const std::string team = p.team.empty() ? "default-team" : p.team;
    auto [t, new_team] = teams.emplace(team, -1);
    if (new_team) t->second = quotas.AddNode(team, root);
    const int32_t leaf = quotas.AddNode(p.name, t->second, p.weight);
    if (p.guaranteed_gpus > 0 || p.limit_gpus >= 0) {
      quotas.SetQuota(
          leaf, sched::kNoModel, static_cast<int64_t>(p.guaranteed_gpus * 1000),
          p.limit_gpus < 0 ? sched::kUnlimited : static_cast<int64_t>(p.limit_gpus * 1000));
    }
    projects[p.name] = static_cast<int32_t>(out.projects.size());
    out.leaf_of_project.push_back(leaf);
    ProjectStats stats;
    stats.name = p.name;
    stats.weight = p.weight;
    stats.guaranteed_gpus = p.guaranteed_gpus;
    out.projects.push_back(std::move(stats));
  };
  for (const ReplayProject& p : cluster.projects) add_project(p);
  std::vector<sched::TaskSpec> all_tasks;
  for (const ReplayJob& j : jobs) {
    if (!projects.count(j.project)) add_project({j.project, "unassigned", 1, 0, -1});
    out.project_of_job.push_back(projects.at(j.project));
    if (all_tasks.size() < 200000) {
      for (const sched::TaskSpec& t : TasksOf(j, *snapshot)) all_tasks.push_back(t);
    }
  }
  sched::Assembly a;
  a.options = *order;
  a.seed = options.seed;
  a.data_aware = options.data_aware;
  auto scheduler = sched::BuildScheduler(a, std::move(*snapshot), std::move(quotas), all_tasks);
  if (!scheduler.ok()) return scheduler.status();
  out.scheduler = std::move(scheduler.value());
  return out;
}

Percentiles Summarise(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
  };
  p.p50 = at(0.50);
  p.p95 = at(0.95);
  p.p99 = at(0.99);
  return p;
}

// Jain's index of the allocation per unit of weight among projects that want GPUs now.
double Jain(const std::vector<double>& gpus, const std::vector<double>& weights,
            const std::vector<int64_t>& waiting_or_running) {
  double sum = 0, squares = 0;
  int n = 0;
  for (size_t p = 0; p < gpus.size(); ++p) {
    if (waiting_or_running[p] == 0) continue;
    double x = gpus[p] / weights[p];
    sum += x;
    squares += x * x;
    ++n;
  }
  if (n < 2 || squares == 0) return -1;
  return sum * sum / (n * squares);
}

}  // namespace

std::vector<std::string> ReplayPolicyNames() { return {"fifo", "sjf", "las", "meridian"}; }

namespace {

// Replays of the same jobs, one per entry of `runs`, as many at once as there are cores (each
// worker takes the next run when it is done with one); `progress` (may be empty) hears,
// serialised, the fraction done over all of them.
std::vector<base::Result<ReplayResult>> RunAll(const ReplayCluster& cluster,
                                               const std::vector<ReplayJob>& jobs,
                                               std::vector<ReplayOptions> runs,
                                               const std::function<void(double)>& progress) {
  std::vector<base::Result<ReplayResult>> results(runs.size(), base::Status::Invalid("not run"));
  std::vector<double> done(runs.size(), 0);
  std::mutex mu;
  auto run = [&](size_t i) {
    if (progress) {
      runs[i].progress = [&, i](double fraction) {
        std::lock_guard<std::mutex> lock(mu);
        done[i] = fraction;
        double sum = 0;
        for (double d : done) sum += d;
        progress(sum / static_cast<double>(done.size()));
      };
    }
    results[i] = RunReplay(cluster, jobs, runs[i]);
  };
  std::atomic<size_t> taken{0};
  auto worker = [&] {
    for (size_t i; (i = taken.fetch_add(1)) < runs.size();) run(i);
  };
  const size_t width =
      std::min<size_t>(runs.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t w = 1; w < width; ++w) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  return results;
}

}  // namespace

std::vector<base::Result<ReplayResult>> RunReplays(const ReplayCluster& cluster,
                                                   const std::vector<ReplayJob>& jobs,
                                                   const std::vector<std::string>& policies,
                                                   int32_t samples,
                                                   const std::function<void(double)>& progress,
                                                   double reclaim_idle_after, bool data_blind_too,
                                                   bool mig_static_too) {
  // With reclamation, every policy runs twice: as it is, and reclaiming idle jobs; with datasets
  // to compare, as it is and blind to them.
  std::vector<ReplayOptions> runs;
  for (int twice = 0; twice < (reclaim_idle_after > 0 ? 2 : 1); ++twice) {
    for (const std::string& policy : policies) {
      for (int blind = 0; blind < (data_blind_too ? 2 : 1); ++blind) {
        for (int fixed = 0; fixed < (mig_static_too ? 2 : 1); ++fixed) {
          ReplayOptions o;
          o.policy = policy;
          o.samples = samples;
          if (twice) o.reclaim_idle_after = reclaim_idle_after;
          o.data_aware = blind == 0;
          o.mig_static = fixed == 1;
          runs.push_back(std::move(o));
        }
      }
    }
  }
  std::vector<base::Result<ReplayResult>> results = RunAll(cluster, jobs, runs, progress);
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok() && runs[i].reclaim_idle_after > 0) results[i]->policy += "+reclaim";
    if (results[i].ok() && !runs[i].data_aware) results[i]->policy += " data-blind";
    if (results[i].ok() && runs[i].mig_static) results[i]->policy += " static-MIG";
  }
  return results;
}

std::vector<base::Result<ReplayResult>> RunBurstReplays(
    const ReplayCluster& cluster, const std::vector<ReplayJob>& jobs, const std::string& policy,
    const std::vector<double>& budgets, int32_t samples,
    const std::function<void(double)>& progress, bool block_cloud, bool with_ends) {
  // On-prem only, each budget, then no budget; or the budgets alone.
  std::vector<ReplayOptions> runs;
  auto add = [&](bool burst, double budget) {
    ReplayOptions o;
    o.policy = policy;
    o.samples = samples;
    o.burst = burst;
    o.burst_budget = budget;
    o.burst_block_cloud = block_cloud;
    runs.push_back(std::move(o));
  };
  if (with_ends) add(false, -1);
  for (double b : budgets) add(true, b);
  if (with_ends) add(true, -1);
  std::vector<base::Result<ReplayResult>> results = RunAll(cluster, jobs, runs, progress);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) continue;
    char label[64];
    std::snprintf(label, sizeof label, "burst <= %.2f", runs[i].burst_budget);
    results[i]->policy = !runs[i].burst              ? "on-prem only"
                         : runs[i].burst_budget >= 0 ? label
                                                     : "burst";
  }
  return results;
}

base::Result<std::map<int64_t, std::vector<std::string>>> ReplayFirstCycle(
    const ReplayCluster& cluster, const std::vector<ReplayJob>& jobs,
    const ReplayOptions& options) {
  auto setup = BuildSetup(cluster, jobs, options);
  if (!setup.ok()) return setup.status();
  sched::Scheduler& sched = *setup->scheduler;
  double now = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    now = std::max(now, jobs[i].submit_time);
    base::Status s = sched.Submit(SpecOf(*setup, jobs, i, sched.snapshot()));
    if (!s.ok() && s.code() != base::StatusCode::kFailedPrecondition) return s;
  }
  std::map<int64_t, std::vector<std::string>> started;
  for (const sched::StartDecision& d : sched.Cycle(now).started) {
    for (const sched::Placement& p : d.placements) {
      started[d.job].push_back(sched.snapshot().nodes[static_cast<size_t>(p.node)].name);
    }
  }
  return started;
}

base::Result<ReplayResult> RunReplay(const ReplayCluster& cluster,
                                     const std::vector<ReplayJob>& jobs,
                                     const ReplayOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (jobs.empty()) return base::Status::Invalid("no jobs to replay");
  auto setup = BuildSetup(cluster, jobs, options);
  if (!setup.ok()) return setup.status();
  sched::Scheduler& sched = *setup->scheduler;
  const sched::Snapshot& snap = sched.snapshot();

  ReplayResult res;
  res.policy = options.policy;
  res.jobs = static_cast<int64_t>(jobs.size());
  res.total_gpus = static_cast<double>(snap.TotalGpuMilli()) / 1000.0;
  res.projects = setup->projects;
  const size_t n_projects = res.projects.size();
  // MIG (issue 20): the slices of GPUs in MIG mode and those allocated, counted as the layout
  // is now, when any job asks for an instance.
  const bool has_mig = std::any_of(jobs.begin(), jobs.end(),
                                   [](const ReplayJob& j) { return !j.mig_profile.empty(); });
  double mig_slice_time = 0, mig_used_time = 0;
  auto mig_slices = [&](double* used) {
    double total = 0;
    *used = 0;
    for (const sched::GpuState& g : snap.gpus) {
      if (!g.mig_enabled || !g.healthy) continue;
      total += domain::kMigMemorySlices;
      for (const sched::MigSlot& m : g.mig) *used += m.allocated ? m.width : 0;
    }
    return total;
  };

  // Jobs in arrival order; the scheduler knows them by index.
  std::vector<size_t> arrival(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) arrival[i] = i;
  std::stable_sort(arrival.begin(), arrival.end(),
                   [&](size_t a, size_t b) { return jobs[a].submit_time < jobs[b].submit_time; });
  struct State {
    double first_start = -1, start = 0, end = -1;
    double worked = 0;    // seconds of its work done, at its end
    double progress = 0;  // seconds of work saved by checkpoints
    int64_t milli = 0;
    double price_rate = 0;  // per hour while running
    uint32_t generation = 0;
    bool running = false;
    double idle_start = -1;  // this run: when its GPUs go idle (-1: they never do)
    double finish_at = 0;    // this run: when it would end by itself
  };
  std::vector<State> st(jobs.size());
  // Each cluster's cache of staged datasets.
  struct CachedCopy {
    int32_t dataset;
    double gib;
    double last_used;
  };
  std::vector<std::vector<CachedCopy>> caches(cluster.clusters.size());
  // kBoot and kIdle are about an elastic node (`job` is its index in `elastic`), kPlan about
  // the burst plan, the others about a job.
  enum class What { kFinish, kEviction, kReclaim, kBoot, kIdle, kPlan };
  struct Event {
    double time;
    size_t job;
    uint32_t generation;
    What what;
    bool operator>(const Event& o) const { return time > o.time; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;

  // Elastic pools' nodes: in the estate, off (unschedulable) until a burst asks for them.
  enum class Up { kOff, kBooting, kUp };
  struct ElasticNode {
    size_t pool = 0;
    int32_t node = 0;  // in the snapshot
    Up state = Up::kOff;
    double gpus = 0;
    double price = 0;        // per GPU-hour
    double idle_since = -1;  // up: when it was first seen empty (-1: busy at the last look)
  };
  std::vector<ElasticNode> elastic;
  std::vector<domain::Node> pool_shape;  // by pool
  double capacity = res.total_gpus;      // GPUs that can be used now (elastic ones when up)
  {
    std::unordered_map<std::string, int32_t> node_of;
    for (size_t i = 0; i < snap.nodes.size(); ++i)
      node_of[snap.nodes[i].name] = static_cast<int32_t>(i);
    std::unordered_map<std::string, const domain::Node*> spec_of;
    for (const domain::Node& n : cluster.nodes) spec_of[n.name] = &n;
    for (size_t p = 0; p < cluster.elastic.size(); ++p) {
      const ReplayElasticPool& pool = cluster.elastic[p];
      const domain::Node* shape = pool.nodes.empty() ? nullptr : spec_of.at(pool.nodes.front());
      pool_shape.push_back(shape ? *shape : domain::Node{});
      double price = pool.price_per_gpu_hour;
      if (price < 0 && shape && !shape->gpus.empty()) {
        price = 0;
        for (const domain::Cluster& c : cluster.clusters) {
          auto it = c.price_per_gpu_hour.find(shape->gpus.front().model);
          if (c.name == pool.cluster && it != c.price_per_gpu_hour.end()) price = it->second;
        }
      }
      for (const std::string& name : pool.nodes) {
        auto it = node_of.find(name);
        if (it == node_of.end()) continue;  // refused by the snapshot
        const double gpus = static_cast<double>(snap.nodes[it->second].gpu_count);
        elastic.push_back({p, it->second, Up::kOff, gpus, std::max(0.0, price), -1});
        sched.SetSchedulable(it->second, false);
        capacity -= gpus;
      }
    }
  }
  double cloud_rate = 0;  // per hour, of the instances billed now
  double billed_nodes = 0;
  double period_spend = 0;  // on instances in this budget period (30 days of trace time)
  constexpr double kBudgetPeriod = 30 * 86400.0;
  double period_end = jobs[arrival.front()].submit_time + kBudgetPeriod;  // of the first
  constexpr double kPlanInterval = 30;  // the burst plan, at most this often in trace time
  double next_plan = -HUGE_VAL;
  bool plan_queued = false;
  double capacity_time = 0;
  auto node_empty = [&](int32_t n) {
    const sched::NodeState& node = snap.nodes[static_cast<size_t>(n)];
    if (node.cpu_free != node.cpu_capacity || node.memory_free != node.memory_capacity)
      return false;
    for (int32_t g = node.gpu_begin; g < node.gpu_begin + node.gpu_count; ++g) {
      if (snap.gpus[static_cast<size_t>(g)].free_milli != 1000 ||
          snap.gpus[static_cast<size_t>(g)].mig_enabled) {
        return false;
      }
    }
    return true;
  };

  const double first = jobs[arrival.front()].submit_time;
  const double span = std::max(1.0, jobs[arrival.back()].submit_time - first);
  const double interval = std::max(1.0, span / std::max(1, options.samples));
  double next_sample = first;
  double alloc = 0, rate = 0;  // GPUs held now, cost per hour now
  std::vector<double> project_gpus(n_projects, 0);
  std::vector<int64_t> project_active(n_projects, 0);  // pending + running jobs
  int64_t running = 0, pending = 0;
  double jain_sum = 0;
  int64_t jain_n = 0;
  double now = first;

  size_t next = 0;  // the next job to arrive, in arrival order
  auto advance = [&](double to) {
    const double dt = to - now;
    if (dt > 0) {
      // Instances are billed until they are released; a period's spend is what fell within it.
      res.cloud_cost += cloud_rate * dt / 3600.0;
      res.cloud_node_hours += billed_nodes * dt / 3600.0;
      double from = now;
      while (to >= period_end) {
        res.peak_period_spend =
            std::max(res.peak_period_spend, period_spend + cloud_rate * (period_end - from) / 3600);
        period_spend = 0;
        from = period_end;
        period_end += kBudgetPeriod;
      }
      period_spend += cloud_rate * (to - from) / 3600.0;
      res.peak_period_spend = std::max(res.peak_period_spend, period_spend);
    }
    // The estate's use counts while there is work; the tail in which idle elastic nodes wait to
    // be released is billing alone.
    const bool work = running > 0 || pending > 0 || next < arrival.size();
    if (dt > 0 && work && has_mig) {
      double used = 0;
      mig_slice_time += mig_slices(&used) * dt;
      mig_used_time += used * dt;
    }
    if (dt > 0 && work) {
      res.utilization += alloc * dt;
      capacity_time += capacity * dt;
      res.cost += rate * dt / 3600.0;
      res.idle_gpu_hours += (capacity - alloc) * dt / 3600.0;
      if (pending > 0) res.idle_gpu_hours_queued += (capacity - alloc) * dt / 3600.0;
      for (size_t p = 0; p < n_projects; ++p)
        res.projects[p].gpu_hours += project_gpus[p] * dt / 3600.0;
    }
    while (next_sample <= to) {
      res.samples.push_back(
          {next_sample, capacity > 0 ? alloc / capacity : 0, pending, running, project_gpus});
      std::vector<double> weights(n_projects);
      for (size_t p = 0; p < n_projects; ++p) weights[p] = res.projects[p].weight;
      double j = Jain(project_gpus, weights, project_active);
      if (j >= 0) {
        jain_sum += j;
        ++jain_n;
      }
      next_sample += interval;
    }
    now = to;
  };
  auto stop_running = [&](size_t i) {
    State& s = st[i];
    // What the run held while its GPUs idled, up to now.
    if (s.idle_start >= 0 && now > s.idle_start) {
      res.idle_held_gpu_hours +=
          static_cast<double>(s.milli) / 1000.0 * (now - s.idle_start) / 3600.0;
    }
    s.running = false;
    --running;
    alloc -= static_cast<double>(s.milli) / 1000.0;
    rate -= s.price_rate;
    project_gpus[setup->project_of_job[i]] -= static_cast<double>(s.milli) / 1000.0;
  };
  std::unordered_map<int64_t, size_t> index_of;
  for (size_t i = 0; i < jobs.size(); ++i) index_of[jobs[i].id] = i;

  bool cloud_blocked = false;  // a spent block-cloud budget holds the elastic nodes out
  while (next < arrival.size() || !events.empty()) {
    // A plan due when nothing waits has nothing to plan for: it must not stretch the replay.
    if (!events.empty() && events.top().what == What::kPlan && pending == 0) {
      events.pop();
      plan_queued = false;
      continue;
    }
    double t = next < arrival.size() ? jobs[arrival[next]].submit_time : HUGE_VAL;
    if (!events.empty()) t = std::min(t, events.top().time);
    advance(t);
    for (; next < arrival.size() && jobs[arrival[next]].submit_time <= now; ++next) {
      const size_t i = arrival[next];
      if (base::Status s = sched.Submit(SpecOf(*setup, jobs, i, snap)); !s.ok()) {
        if (s.code() != base::StatusCode::kFailedPrecondition) return s;
        ++res.refused;  // nothing in the estate could ever run it
        continue;
      }
      ++pending;
      ++project_active[setup->project_of_job[i]];
      if (options.progress && next % 1024 == 0) {
        options.progress(static_cast<double>(next) / static_cast<double>(arrival.size()));
      }
    }
    while (!events.empty() && events.top().time <= now) {
      const Event e = events.top();
      events.pop();
      if (e.what == What::kPlan) {
        plan_queued = false;
        continue;  // the cycle below plans
      }
      if (e.what == What::kBoot || e.what == What::kIdle) {
        ElasticNode& n = elastic[e.job];
        const ReplayElasticPool& pool = cluster.elastic[n.pool];
        if (e.what == What::kBoot && n.state == Up::kBooting) {
          n.state = Up::kUp;
          n.idle_since = now;
          sched.SetSchedulable(n.node, !cloud_blocked);
          capacity += n.gpus;
          events.push({now + pool.idle_timeout, e.job, 0, What::kIdle});
        } else if (e.what == What::kIdle && n.state == Up::kUp) {
          // Released once empty for its idle timeout (idle_since is kept after every cycle);
          // looked at again when that would be.
          if (n.idle_since >= 0 && now - n.idle_since >= pool.idle_timeout) {
            n.state = Up::kOff;
            sched.SetSchedulable(n.node, false);
            capacity -= n.gpus;
            cloud_rate -= n.gpus * n.price;
            billed_nodes -= 1;
            continue;
          }
          const double at =
              n.idle_since < 0 ? now + pool.idle_timeout : n.idle_since + pool.idle_timeout;
          events.push({std::max(at, now + 1), e.job, 0, What::kIdle});
        }
        continue;
      }
      State& s = st[e.job];
      if (e.generation != s.generation || !s.running) continue;
      if (e.what == What::kReclaim) {
        // Its work was done when its GPUs went idle: it leaves, and what it would have held
        // idle until it ended is free for the queue.
        res.reclaimed_gpu_hours +=
            static_cast<double>(s.milli) / 1000.0 * (s.finish_at - now) / 3600.0;
        ++res.reclaimed;
      }
      if (e.what == What::kEviction) {
        sched.Evicted(jobs[e.job].id, now);
        ++s.generation;
        stop_running(e.job);
        ++pending;
        continue;
      }
      sched.Finish(jobs[e.job].id, now);
      // Its work: what its checkpoints kept of earlier runs, and this run (cut at its limit, or
      // ended early by a reclaim).
      s.worked = s.progress + std::max(0.0, now - s.start);
      stop_running(e.job);
      s.end = now;
      --project_active[setup->project_of_job[e.job]];
      ++res.completed;
    }
    if (options.burst_block_cloud && options.burst_budget >= 0) {
      const bool spent = period_spend >= options.burst_budget;
      if (spent != cloud_blocked) {
        cloud_blocked = spent;
        for (const ElasticNode& n : elastic) {
          if (n.state == Up::kUp) sched.SetSchedulable(n.node, !spent);
        }
      }
    }
    sched::CycleResult r = sched.Cycle(now);
    // Which up elastic nodes hold nothing now, and since when.
    for (ElasticNode& n : elastic) {
      if (n.state != Up::kUp) continue;
      const bool empty = node_empty(n.node);
      if (!empty) n.idle_since = -1;
      if (empty && n.idle_since < 0) n.idle_since = now;
    }
    // Starts first: a job may start and be preempted within one cycle.
    for (const sched::StartDecision& d : r.started) {
      const size_t i = index_of.at(d.job);
      State& s = st[i];
      const ReplayJob& j = jobs[i];
      if (s.running) {  // its GPUs would be counted twice from here on
        return base::Status::Internal("replay: the scheduler started job " + std::to_string(j.id) +
                                      " at " + std::to_string(now) + ", which runs already");
      }
      s.running = true;
      s.start = now;
      if (s.first_start < 0) s.first_start = now;
      ++s.generation;
      s.milli = 0;
      s.price_rate = 0;
      for (const sched::Placement& p : d.placements) {
        const sched::NodeState& node = snap.nodes[p.node];
        for (const sched::DeviceGrant& g : p.devices) {
          // A MIG instance holds its share of the GPU's memory slices.
          const int32_t milli =
              g.mig_profile >= 0
                  ? snap.model(node.model).mig_profiles[g.mig_profile].memory_slices * 1000 /
                        domain::kMigMemorySlices
                  : g.milli;
          s.milli += milli;
          const auto& prices = snap.clusters[node.cluster].price_by_model;
          s.price_rate += node.model >= 0 ? prices[node.model] * milli / 1000.0 : 0;
        }
      }
      for (const sched::DeviceGrant& c : d.layout_changes) {
        res.layout_changes += sched::ReshapesGpu(c.mig_change) ? 1 : 0;
      }
      ++running;
      --pending;
      alloc += static_cast<double>(s.milli) / 1000.0;
      rate += s.price_rate;
      project_gpus[setup->project_of_job[i]] += static_cast<double>(s.milli) / 1000.0;
      // Its datasets first, where the site lacks them: the copy holds its GPUs, and stays in
      // the site's cache for the jobs after it.
      double staging = 0;
      if (!d.placements.empty()) {
        const sched::TaskSpec& task = sched.Find(d.job)->tasks.front();
        const int32_t where = snap.nodes[d.placements.front().node].cluster;
        const sched::DataCost data = sched::DataCostAt(snap, task.datasets, where);
        std::vector<CachedCopy>& cache = caches[static_cast<size_t>(where)];
        for (int32_t dataset : task.datasets) {  // found in the cache: used now
          for (CachedCopy& c : cache) c.last_used = c.dataset == dataset ? now : c.last_used;
        }
        for (const sched::DataMove& m : data.moves) {
          if (m.from < 0 || m.gib < 0) continue;
          ++res.stagings;
          // Least recently used copies leave a capped cache first, as the server evicts them.
          const double cap =
              cluster.clusters[static_cast<size_t>(where)].storage.cache_capacity_gib;
          double used = 0;
          for (const CachedCopy& c : cache) used += c.gib;
          std::sort(cache.begin(), cache.end(), [](const CachedCopy& a, const CachedCopy& b) {
            return a.last_used < b.last_used;
          });
          while (cap > 0 && !cache.empty() && used + m.gib > cap) {
            used -= cache.front().gib;
            sched.SetCached(cache.front().dataset, where, false);
            cache.erase(cache.begin());
            ++res.evictions;
          }
          cache.push_back({m.dataset, m.gib, now});
          sched.SetCached(m.dataset, where, true);
        }
        staging = data.seconds;
        res.staged_gib += data.gib;
        res.egress += data.egress;
        res.staging_hours += data.seconds / 3600.0;
      }
      s.start = now + staging;  // its work starts once its data is there
      const double remaining = std::max(0.0, j.duration - s.progress);
      const double run_for = j.runtime_limit > 0 ? std::min(remaining, j.runtime_limit) : remaining;
      s.finish_at = now + staging + run_for;
      s.idle_start = j.idle_from >= 0 ? s.start + std::max(0.0, j.idle_from - s.progress) : -1;
      events.push({s.finish_at, i, s.generation, What::kFinish});
      if (options.reclaim_idle_after > 0 && s.idle_start >= 0 &&
          s.idle_start + options.reclaim_idle_after < s.finish_at) {
        events.push({s.idle_start + options.reclaim_idle_after, i, s.generation, What::kReclaim});
      }
    }
    // Bursting: the server's plan, on what this cycle left short of capacity.
    if (options.burst && !elastic.empty() && !r.short_of_capacity.empty()) {
      const bool spent = options.burst_budget >= 0 && period_spend >= options.burst_budget;
      if (spent) {
        // Blocked until the next period starts, when the budget is whole again.
        if (!plan_queued) {
          events.push({std::max(period_end, now + 1), 0, 0, What::kPlan});
          plan_queued = true;
        }
      } else if (now < next_plan) {
        if (!plan_queued) {
          events.push({next_plan, 0, 0, What::kPlan});
          plan_queued = true;
        }
      } else {
        next_plan = now + kPlanInterval;
        std::set<int64_t> started;
        for (const sched::StartDecision& d : r.started) started.insert(d.job);
        std::vector<sched::WaitingJob> waiting;
        for (int64_t id : r.short_of_capacity) {
          if (waiting.size() >= 256) break;
          const sched::JobSpec* job = sched.Find(id);
          if (job && !started.count(id)) waiting.push_back({job, sched.EstimatedStart(id, now)});
        }
        std::vector<sched::ElasticPool> pools;
        for (size_t p = 0; p < cluster.elastic.size(); ++p) {
          sched::ElasticPool ep;
          ep.name = cluster.elastic[p].name;
          ep.shape = pool_shape[p];
          ep.boot_seconds = cluster.elastic[p].boot_delay;
          for (const ElasticNode& n : elastic) {
            if (n.pool != p) continue;
            ep.price_per_gpu_hour = n.price;
            if (n.state == Up::kOff) ++ep.headroom;
            if (n.state == Up::kBooting) ++ep.booting;
            if (n.state == Up::kUp && node_empty(n.node)) ++ep.idle;
          }
          pools.push_back(std::move(ep));
        }
        // A budget plans no more than it has left, as the server's does.
        std::vector<double> left;
        if (options.burst_budget >= 0) {
          left.push_back(std::max(0.0, options.burst_budget - period_spend));
          for (sched::WaitingJob& w : waiting) w.budget = 0;
        }
        const sched::BurstPlan plan =
            sched::PlanBurst(snap, sched.profile(), waiting, pools, now, options.seed, left);
        for (size_t p = 0; p < pools.size(); ++p) {
          int32_t grow = plan.grow[p];
          for (size_t k = 0; k < elastic.size() && grow > 0; ++k) {
            ElasticNode& n = elastic[k];
            if (n.pool != p || n.state != Up::kOff) continue;
            n.state = Up::kBooting;
            cloud_rate += n.gpus * n.price;
            billed_nodes += 1;
            ++res.nodes_grown;
            --grow;
            events.push({now + cluster.elastic[p].boot_delay, k, 0, What::kBoot});
          }
        }
      }
    }
    for (const sched::PreemptDecision& p : r.preempted) {
      const size_t i = index_of.at(p.job);
      State& s = st[i];
      ++res.preemptions;
      const double ran = std::max(0.0, now - s.start);
      const double saved =
          options.checkpoint_interval > 0
              ? std::floor(ran / options.checkpoint_interval) * options.checkpoint_interval
              : 0;
      s.progress += saved;
      res.preempted_gpu_hours += static_cast<double>(s.milli) / 1000.0 * (ran - saved) / 3600.0;
      if (p.stop_at > now) {
        events.push({p.stop_at, i, s.generation, What::kEviction});
      } else {
        ++s.generation;  // its completion will not happen: it is back in the queue
        stop_running(i);
        ++pending;
      }
    }
  }
  advance(now);
  if (options.progress) options.progress(1.0);

  std::vector<double> jct, delay, not_running, mig_delay, gpu_delay;
  std::vector<std::vector<double>> project_jct(n_projects), project_delay(n_projects);
  double last_end = first;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto p = static_cast<size_t>(setup->project_of_job[i]);
    ++res.projects[p].jobs;
    if (st[i].end < 0) continue;
    ++res.projects[p].completed;
    jct.push_back(st[i].end - jobs[i].submit_time);
    delay.push_back(st[i].first_start - jobs[i].submit_time);
    not_running.push_back(jct.back() - st[i].worked);
    if (!jobs[i].mig_profile.empty()) {
      mig_delay.push_back(delay.back());
    } else if (jobs[i].gpus_per_task > 0) {
      gpu_delay.push_back(delay.back());
    }
    project_jct[p].push_back(jct.back());
    project_delay[p].push_back(delay.back());
    last_end = std::max(last_end, st[i].end);
  }
  res.never_started = res.jobs - res.completed;
  res.jct = Summarise(jct);
  res.queueing_delay = Summarise(delay);
  res.not_running = Summarise(std::move(not_running));
  if (has_mig) {
    res.mig_jobs = std::count_if(jobs.begin(), jobs.end(),
                                 [](const ReplayJob& j) { return !j.mig_profile.empty(); });
    res.mig_queueing_delay = Summarise(std::move(mig_delay));
    res.gpu_queueing_delay = Summarise(std::move(gpu_delay));
    res.slice_utilization = mig_slice_time > 0 ? mig_used_time / mig_slice_time : 0;
  }
  for (size_t p = 0; p < n_projects; ++p) {
    res.projects[p].jct = Summarise(std::move(project_jct[p]));
    res.projects[p].queueing_delay = Summarise(std::move(project_delay[p]));
  }
  res.makespan = last_end - first;
  res.budget = options.burst ? options.burst_budget : -1;
  res.block_cloud = options.burst && options.burst_block_cloud;
  if (elastic.empty()) {
    capacity_time = res.total_gpus * std::max(res.makespan, 1e-9);
  } else {
    res.total_gpus = capacity;  // the estate without the elastic pools' nodes, all off now
  }
  res.utilization = res.makespan > 0 && capacity_time > 0 ? res.utilization / capacity_time : 0;
  res.jain_fairness = jain_n > 0 ? jain_sum / static_cast<double>(jain_n) : 1.0;
  double delivered = 0, guaranteed = 0;
  for (const ProjectStats& p : res.projects) {
    delivered += p.gpu_hours;
    guaranteed += p.guaranteed_gpus;
  }
  for (ProjectStats& p : res.projects) {
    p.mean_gpus = res.makespan > 0 ? p.gpu_hours * 3600.0 / res.makespan : 0;
    p.share = delivered > 0 ? p.gpu_hours / delivered : 0;
    p.quota_share = guaranteed > 0 ? p.guaranteed_gpus / guaranteed : 0;
  }
  // Keep the time series to at most twice the asked number of points.
  if (res.samples.size() > static_cast<size_t>(2 * options.samples) && options.samples > 0) {
    const size_t stride = res.samples.size() / static_cast<size_t>(options.samples);
    std::vector<ReplaySample> thin;
    for (size_t i = 0; i < res.samples.size(); i += stride) thin.push_back(res.samples[i]);
    res.samples = std::move(thin);
  }
  res.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return res;
}

}  // namespace meridian::sim
