// `meridian sim ...` and `meridian bench schedule`: flags, and calls into the sim and bench
// modules.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "apps/meridian/commands.h"
#include "base/strings.h"
#include "bench/agent_bench.h"
#include "bench/api_bench.h"
#include "bench/schedule_bench.h"
#include "bench/server_bench.h"
#include "sched/registry.h"
#include "sim/alibaba_trace.h"
#include "sim/demo.h"
#include "sim/fgd_protocol.h"
#include "sim/fgd_report.h"
#include "sim/replay.h"
#include "sim/replay_report.h"
#include "sim/synthetic.h"
#include "sim/trace_variants.h"

namespace {

using meridian::base::Result;
using meridian::base::Status;

// "42-51" or "42,43,50" or "7".
Result<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  for (std::string_view part : meridian::base::Split(text, ',')) {
    auto range = meridian::base::Split(part, '-');
    long long lo = 0, hi = 0;
    if (range.size() == 1 && meridian::base::ParseInt64(range[0], &lo) && lo >= 0) {
      seeds.push_back(static_cast<uint64_t>(lo));
    } else if (range.size() == 2 && meridian::base::ParseInt64(range[0], &lo) &&
               meridian::base::ParseInt64(range[1], &hi) && lo >= 0 && hi >= lo &&
               hi - lo < 100000) {
      for (long long s = lo; s <= hi; ++s) seeds.push_back(static_cast<uint64_t>(s));
    } else {
      return Status::Invalid("--seeds: expected N, N-M or a comma-separated list, got \"" +
                             std::string(part) + "\"");
    }
  }
  return seeds;
}

struct FgdFlags {
  std::string nodes, tasks, seeds = "42-51", compare, compare_curves, workload, html, write_tasks;
  meridian::sim::TraceVariant variant;
  std::vector<std::string> policies;
  double inflate = 1.3;
  int threads = 0;
  bool json = false;
};

int RunSimFgd(const FgdFlags& f) {
  auto seeds = ParseSeeds(f.seeds);
  if (!seeds.ok()) return Fail(seeds.status());
  if (f.inflate <= 0 || f.inflate > 10)
    return Fail(Status::Invalid("--inflate: must be in (0, 10]"));
  auto nodes = meridian::sim::ReadAlibabaNodes(f.nodes);
  if (!nodes.ok()) return Fail(nodes.status());
  auto trace = meridian::sim::ReadAlibabaTasks(f.tasks);
  if (!trace.ok()) return Fail(trace.status());
  if (f.variant.Any()) {
    if (!f.compare.empty() || !f.compare_curves.empty()) {
      return Fail(Status::Invalid(
          "--compare: the published figures are of the task list as it is, not of a variant"));
    }
    trace = meridian::sim::VaryTrace(std::move(*trace), *nodes, f.variant);
    if (!trace.ok()) return Fail(trace.status());
  }
  if (!f.write_tasks.empty()) {
    std::ofstream out(f.write_tasks);
    out << meridian::sim::AlibabaTasksCsv(*trace);
    if (!out) return Fail(Status::Io(f.write_tasks + ": cannot write"));
  }
  auto snapshot = meridian::sim::SnapshotFromTrace(*nodes);
  if (!snapshot.ok()) return Fail(snapshot.status());
  auto tasks = meridian::sim::TasksFromTrace(*trace, *snapshot);

  std::vector<std::string> policies = f.policies;
  if (policies.empty()) policies = {"meridian"};
  if (policies.size() == 1 && policies[0] == "all") policies = meridian::sched::PolicyNames();
  std::string workload = f.workload;
  if (workload.empty()) {
    // openb_pod_list_default.csv -> default
    std::string base = f.tasks.substr(f.tasks.find_last_of('/') + 1);
    if (base.rfind("openb_pod_list_", 0) == 0) base = base.substr(15);
    workload = base.substr(0, base.find('.'));
    if (f.variant.Any()) workload += "+" + f.variant.Name();
  }
  const bool tty = isatty(STDERR_FILENO);
  std::vector<meridian::sim::FgdResult> results;
  for (const std::string& policy : policies) {
    meridian::sim::FgdOptions o;
    o.policy = policy;
    o.seeds = *seeds;
    o.inflate = f.inflate;
    o.threads = f.threads;
    auto progress = [&](int done, int total) {
      if (tty) std::fprintf(stderr, "\r%-16s seed %d/%d", policy.c_str(), done, total);
      if (tty && done == total) std::fprintf(stderr, "\n");
    };
    auto r = meridian::sim::RunFgd(*snapshot, tasks, o, progress);
    if (!r.ok()) return Fail(r.status());
    results.push_back(std::move(*r));
  }
  meridian::sim::PublishedCurves curves;
  if (!f.compare_curves.empty()) {
    auto c = meridian::sim::ReadPublishedCurves(f.compare_curves, workload);
    if (!c.ok()) return Fail(c.status());
    curves = std::move(*c);
  }
  if (!f.html.empty()) {
    std::ofstream out(f.html);
    out << meridian::sim::FgdHtml(results, curves, "Meridian on the FGD protocol: " + workload);
    if (!out) return Fail(Status::Io(f.html + ": cannot write"));
  }
  // Where each policy is least ahead of FGD (ours, and the published curve) over the arrived
  // points 50..130%.
  struct MarginOf {
    std::string policy, against;
    meridian::sim::Margin margin;
  };
  std::vector<MarginOf> margins;
  const meridian::sim::FgdResult* fgd = nullptr;
  for (const auto& r : results) {
    if (r.policy == "fgd") fgd = &r;
  }
  for (const auto& r : results) {
    if (fgd && &r != fgd) {
      margins.push_back(
          {r.policy, "fgd", meridian::sim::LowestMargin(r.curve, fgd->curve, 50, 130)});
    }
    if (auto c = curves.find("fgd"); c != curves.end() && r.policy != "fgd") {
      margins.push_back(
          {r.policy, "published fgd", meridian::sim::LowestMargin(r.curve, c->second, 50, 130)});
    }
  }
  if (f.json) {
    nlohmann::json j = meridian::sim::FgdJson(results, workload);
    j["margins"] = nlohmann::json::array();
    for (const MarginOf& m : margins) {
      j["margins"].push_back({{"policy", m.policy},
                              {"against", m.against},
                              {"gap", m.margin.gap},
                              {"arrived", m.margin.arrived}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  meridian::sim::PublishedTable published;
  bool have_published = false;
  if (!f.compare.empty()) {
    auto p = meridian::sim::ReadPublishedSummary(f.compare, workload);
    if (!p.ok()) return Fail(p.status());
    published = std::move(*p);
    have_published = true;
  }
  std::cout << "FGD protocol: workload " << workload << ", " << nodes->size() << " nodes, "
            << snapshot->TotalGpuMilli() / 1000 << " GPUs, " << tasks.size() << " tasks, inflate "
            << f.inflate << ", " << seeds->size() << " seeds\n";
  meridian::sim::PrintFgdTable(results, have_published ? &published : nullptr, std::cout);
  for (const MarginOf& m : margins) {
    if (m.margin.arrived < 0) continue;
    std::printf("lowest margin of %s over %s, 50-130%% arrived: %+.2f points at %d%%\n",
                m.policy.c_str(), m.against.c_str(), m.margin.gap, m.margin.arrived);
  }
  if (!f.html.empty()) std::cout << "report: " << f.html << "\n";
  return 0;
}

struct ReplayFlags {
  std::string cluster, jobs, csv_dir, html;
  std::vector<std::string> policies;
  int samples = 400;
  double time_scale = 1.0;
  bool json = false;
  double idle_share = 0, idle_fraction = 0.5, reclaim_after = 0;
  uint64_t seed = 1;
  std::vector<double> budgets;  // burst budgets, per 30 days of trace time
  int budget_sweep = 0;         // that many budgets more, spread below the unbounded burst's spend
  std::string budget_action = "block-bursts";
};

int RunSimReplay(const ReplayFlags& f) {
  auto cluster = meridian::sim::ReadReplayCluster(f.cluster);
  if (!cluster.ok()) return Fail(cluster.status());
  auto jobs = meridian::sim::ReadReplayJobs(f.jobs);
  if (!jobs.ok()) return Fail(jobs.status());
  if (!(f.time_scale > 0 && f.time_scale <= 1000)) {
    return Fail(Status::Invalid("--time-scale: must be in (0, 1000]"));
  }
  // Compressing arrivals (a scale below 1) turns a sparse trace into a busy queue; durations
  // stay as they are.
  for (meridian::sim::ReplayJob& j : *jobs) j.submit_time *= f.time_scale;
  if (!(f.idle_share >= 0 && f.idle_share <= 1)) {
    return Fail(Status::Invalid("--idle-share: must be in [0, 1]"));
  }
  if (!(f.idle_fraction >= 0 && f.idle_fraction <= 1)) {
    return Fail(Status::Invalid("--idle-fraction: must be in [0, 1]"));
  }
  if (!(f.reclaim_after >= 0)) return Fail(Status::Invalid("--reclaim-idle-after: must be >= 0"));
  if (f.idle_share > 0) {
    meridian::sim::ModelIdlePhases(&*jobs, f.idle_share, f.idle_fraction, f.seed);
  }
  std::vector<std::string> policies = f.policies;
  if (policies.empty() || (policies.size() == 1 && policies[0] == "all")) {
    policies = meridian::sim::ReplayPolicyNames();
  }
  const bool burst = !cluster->elastic.empty();
  if (!burst && (!f.budgets.empty() || f.budget_sweep > 0)) {
    return Fail(Status::Invalid(
        "--burst-budget and --budget-sweep need elastic node groups in --cluster (elastic: "
        "{boot_delay, idle_timeout, price}; docs/replay-format.md)"));
  }
  for (size_t i = 0; i < f.budgets.size(); ++i) {
    if (!(f.budgets[i] >= 0)) return Fail(Status::Invalid("--burst-budget: must be 0 or more"));
    for (size_t k = 0; k < i; ++k) {
      if (std::round(f.budgets[k] * 100) == std::round(f.budgets[i] * 100)) {
        return Fail(
            Status::Invalid("--burst-budget: " + std::to_string(f.budgets[i]) + " is given twice"));
      }
    }
  }
  if (f.budget_sweep < 0 || f.budget_sweep > 64) {
    return Fail(Status::Invalid("--budget-sweep: 0 to 64 budgets"));
  }
  if (burst && f.reclaim_after > 0) {
    return Fail(
        Status::Invalid("--reclaim-idle-after: not with elastic pools (one what-if at a time)"));
  }
  const bool tty = isatty(STDERR_FILENO) && !f.json;
  std::string what = "replaying";
  auto bar = [&](double slowest) {
    int width = 40, filled = static_cast<int>(slowest * width);
    std::fprintf(stderr, "\r%s %zu jobs [%s%s] %3.0f%%", what.c_str(), jobs->size(),
                 std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                 100 * slowest);
  };
  const auto progress = tty ? std::function<void(double)>(bar) : nullptr;
  std::vector<Result<meridian::sim::ReplayResult>> results;
  if (burst) {
    // One policy (the first asked for; meridian by default) on-prem only, within each budget,
    // and without one; a sweep adds budgets spread below what bursting without one spent.
    const std::string policy =
        f.policies.empty() || f.policies[0] == "all" ? "meridian" : f.policies[0];
    results = meridian::sim::RunBurstReplays(*cluster, *jobs, policy, f.budgets, f.samples,
                                             progress, f.budget_action == "block-cloud");
    if (f.budget_sweep > 0 && results.back().ok()) {
      // Below the most that bursting without a budget spent in one period, evenly; none twice
      // (nor one asked for already), none of 0.
      const double peak = results.back()->peak_period_spend;
      std::set<double> seen(f.budgets.begin(), f.budgets.end());
      std::vector<double> sweep;
      for (int k = 1; k <= f.budget_sweep; ++k) {
        const double b = std::round(peak * k / (f.budget_sweep + 1) * 100) / 100;
        if (b > 0 && seen.insert(b).second) sweep.push_back(b);
      }
      if (tty) std::fprintf(stderr, "\n");
      what = "sweeping budgets over";
      auto more = meridian::sim::RunBurstReplays(*cluster, *jobs, policy, sweep, f.samples,
                                                 progress, f.budget_action == "block-cloud",
                                                 /*with_ends=*/false);
      for (auto& r : more) results.push_back(std::move(r));
    }
  } else {
    // Jobs that read datasets: each policy also blind to them, to show what data-aware
    // placement buys (docs/adr/0044-datasets.md).
    const bool datasets =
        std::any_of(jobs->begin(), jobs->end(), [](const auto& j) { return !j.datasets.empty(); });
    // Jobs that ask for MIG instances on a cluster with a MIG layout: each policy also on that
    // layout kept static, to show what shaping it by demand buys
    // (docs/adr/0045-gpu-partitioning.md).
    const bool mig = std::any_of(jobs->begin(), jobs->end(),
                                 [](const auto& j) { return !j.mig_profile.empty(); }) &&
                     std::any_of(cluster->nodes.begin(), cluster->nodes.end(), [](const auto& n) {
                       return std::any_of(n.gpus.begin(), n.gpus.end(),
                                          [](const auto& g) { return g.mig_enabled; });
                     });
    results = meridian::sim::RunReplays(*cluster, *jobs, policies, f.samples, progress,
                                        f.reclaim_after, datasets, mig);
  }
  if (tty) std::fprintf(stderr, "\n");
  std::vector<meridian::sim::ReplayResult> ok;
  for (auto& r : results) {
    if (!r.ok()) return Fail(r.status());
    ok.push_back(std::move(*r));
  }
  if (!f.csv_dir.empty()) {
    if (Status s = meridian::sim::WriteReplayCsv(ok, f.csv_dir); !s.ok()) return Fail(s);
  }
  if (!f.html.empty()) {
    std::ofstream out(f.html);
    out << meridian::sim::ReplayHtml(ok, "Meridian replay: " + f.jobs);
    if (!out) return Fail(Status::Io(f.html + ": cannot write"));
  }
  if (f.json) {
    std::cout << meridian::sim::ReplayJson(ok).dump(2) << "\n";
    return 0;
  }
  std::cout << "replay of " << jobs->size() << " jobs on " << ok[0].total_gpus << " GPUs\n";
  // With a sweep, the table holds the runs asked for by name; the frontier, all of them.
  std::vector<meridian::sim::ReplayResult> named(
      ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(
                                   burst ? std::min(ok.size(), f.budgets.size() + 2) : ok.size()));
  meridian::sim::PrintReplayTable(named, std::cout);
  meridian::sim::PrintBurstFrontier(ok, std::cout);
  if (!f.html.empty()) std::cout << "\nreport: " << f.html << "\n";
  return 0;
}

struct GenerateFlags {
  meridian::sim::SyntheticReplayOptions options;
  std::string out_dir;
};

int RunSimGenerate(const GenerateFlags& f) {
  const meridian::sim::SyntheticReplayOptions& o = f.options;
  if (o.jobs < 1 || o.gpus < 8 || o.load <= 0) {
    return Fail(Status::Invalid("--jobs >= 1, --gpus >= 8 and --load > 0"));
  }
  if (o.tenants < 1 || o.tenants > 99) return Fail(Status::Invalid("--tenants: 1 to 99"));
  if (o.tenant_skew < 0) return Fail(Status::Invalid("--tenant-skew: 0 or more"));
  if (o.estimate_noise < 0) return Fail(Status::Invalid("--estimate-noise: 0 or more"));
  const bool deep = o.shape == meridian::sim::WorkloadShape::kDeep;
  if (deep && o.max_gang_gpus != 0 &&
      (o.max_gang_gpus < 2 || (o.max_gang_gpus & (o.max_gang_gpus - 1)) != 0 ||
       o.max_gang_gpus > o.gpus)) {
    return Fail(Status::Invalid("--max-gang-gpus: a power of two from 2 to --gpus (" +
                                std::to_string(o.gpus) + ")"));
  }
  if (o.sweep_share < 0 || o.sweep_share > 1) return Fail(Status::Invalid("--sweep-share: 0 to 1"));
  if (o.sites < 1 || o.sites > 64) return Fail(Status::Invalid("--sites: 1 to 64"));
  if (o.datasets < 0 || o.datasets > 99) return Fail(Status::Invalid("--datasets: 0 to 99"));
  if (o.datasets > 0 && o.sites < 2) {
    return Fail(Status::Invalid("--datasets needs --sites 2 or more (where they live matters)"));
  }
  if (!(o.cache_gib >= 0)) return Fail(Status::Invalid("--cache-gib: 0 or more"));
  if (!(o.data_share >= 0 && o.data_share <= 1)) {
    return Fail(Status::Invalid("--data-share: 0 to 1"));
  }
  if (!(o.mig_share >= 0 && o.mig_share <= 1)) return Fail(Status::Invalid("--mig-share: 0 to 1"));
  if (o.mig_nodes < 0 || o.mig_nodes * 8 > o.gpus) {
    return Fail(Status::Invalid("--mig-nodes: 0 to the number of nodes (--gpus / 8)"));
  }
  if (!deep && o.sweep_share > 0)
    return Fail(Status::Invalid("--sweep-share applies to --shape deep"));
  if (!deep && o.estimate_noise > 0) {
    return Fail(Status::Invalid("--estimate-noise applies to --shape deep"));
  }
  std::string cluster, jobs;
  meridian::sim::SyntheticReplay(f.options, &cluster, &jobs);
  std::filesystem::create_directories(f.out_dir);
  const std::string cluster_path = f.out_dir + "/cluster.yaml";
  const std::string jobs_path = f.out_dir + "/jobs.csv";
  std::ofstream c(cluster_path), j(jobs_path);
  c << cluster;
  j << jobs;
  if (!c || !j) return Fail(Status::Io(f.out_dir + ": cannot write the workload files"));
  std::cout << cluster_path << "\n" << jobs_path << "\n";
  return 0;
}

struct BenchFlags {
  meridian::bench::ScheduleBenchOptions options;
  bool json = false;
};

struct ApiBenchFlags {
  meridian::bench::ApiBenchOptions options;
  bool json = false;
};

void PrintBenchApi(const meridian::bench::ApiBenchOptions& o,
                   const meridian::bench::ApiBenchResult& r, const std::string& against) {
  std::printf("api benchmark: %d clients for %.0f s against %s\n", o.clients, o.seconds,
              against.c_str());
  std::printf("  durable submissions   %lld (%lld errors)\n", static_cast<long long>(r.submissions),
              static_cast<long long>(r.errors));
  std::printf("  submissions/s         %.0f\n", r.submissions_per_second);
  std::printf("  latency p50 / p99     %.1f / %.1f ms (max %.1f)\n", r.p50_ms, r.p99_ms, r.max_ms);
  if (o.server.empty()) {
    std::printf("  server CPU            %.1f s over %.1f s (%.2f cores), RSS %.0f MiB\n",
                r.server_cpu_seconds, r.seconds, r.server_cpu_seconds / r.seconds,
                r.server_rss_mib);
    std::printf("  jobs placed meanwhile %lld\n", static_cast<long long>(r.jobs_placed));
  }
}

int RunBenchApi(ApiBenchFlags f) {
  f.options.binary = "/proc/self/exe";
  if (f.options.token.empty()) {
    if (const char* t = std::getenv("MERIDIAN_TOKEN")) f.options.token = t;
  }
  if (!f.options.store.empty() && !f.options.server.empty()) {
    return Fail(Status::Invalid("--store starts servers of its own: not with --server"));
  }
  if (!f.options.store.empty() && f.options.store.rfind("postgresql://", 0) != 0 &&
      f.options.store.rfind("postgres://", 0) != 0) {
    return Fail(Status::Invalid("--store: expected a postgresql:// URL"));
  }
  // With --store, the same run on SQLite first, then on PostgreSQL: the two figures side by side.
  std::vector<std::pair<std::string, meridian::bench::ApiBenchOptions>> runs;
  if (f.options.store.empty()) {
    runs.emplace_back("", f.options);
  } else {
    meridian::bench::ApiBenchOptions sqlite = f.options;
    sqlite.store.clear();
    runs.emplace_back("sqlite", sqlite);
    runs.emplace_back("postgresql", f.options);
  }
  const bool bar = !f.json && isatty(STDERR_FILENO);
  nlohmann::json all = nlohmann::json::object();
  for (const auto& [name, options] : runs) {
    auto r = meridian::bench::RunApiBench(options, [bar](double done) {
      if (bar) std::fprintf(stderr, "\rsubmitting... %3.0f%%", 100 * done);
    });
    if (bar) std::fprintf(stderr, "\n");
    if (!r.ok()) return Fail(r.status());
    if (f.json) {
      if (name.empty()) {
        std::cout << r->ToJson().dump(2) << "\n";
        return 0;
      }
      all[name] = r->ToJson();
      continue;
    }
    const std::string against =
        !options.server.empty() ? options.server
        : options.store.empty()
            ? "a server on a fresh SQLite data dir (its per-token write limit off: one token "
              "drives every client)"
            : "a server on PostgreSQL (--store; its per-token write limit off)";
    PrintBenchApi(options, *r, against);
  }
  if (f.json) std::cout << all.dump(2) << "\n";
  return 0;
}

struct AgentBenchFlags {
  meridian::bench::AgentBenchOptions options;
  bool json = false;
};

int RunBenchAgents(AgentBenchFlags f) {
  f.options.binary = "/proc/self/exe";
  const bool bar = !f.json && isatty(STDERR_FILENO);
  auto r = meridian::bench::RunAgentBench(f.options, [bar](double done) {
    if (bar) std::fprintf(stderr, "\rheartbeating... %3.0f%%", 100 * done);
  });
  if (bar) std::fprintf(stderr, "\n");
  if (!r.ok()) return Fail(r.status());
  if (f.json) {
    std::cout << r->ToJson().dump(2) << "\n";
    return 0;
  }
  std::printf(
      "agents benchmark: %d agents x %d GPUs, a heartbeat each %.1f s for %.0f s, %d jobs\n",
      f.options.agents, f.options.gpus_per_node, f.options.interval, f.options.seconds,
      f.options.jobs);
  std::printf("  registration          %.1f s for all agents, from 4 clients\n",
              r->register_seconds);
  std::printf("  heartbeats            %lld (%lld errors), %.0f/s\n",
              static_cast<long long>(r->heartbeats), static_cast<long long>(r->errors),
              r->heartbeats_per_second);
  std::printf("  latency p50 / p99     %.1f / %.1f ms (max %.1f)\n", r->p50_ms, r->p99_ms,
              r->max_ms);
  std::printf("  server                %.2f cores, RSS %.0f MiB\n", r->server_cores,
              r->server_rss_mib);
  std::printf("  nodes lost            %lld; jobs reported running %lld\n",
              static_cast<long long>(r->nodes_lost), static_cast<long long>(r->tasks_running));
  if (f.options.channel) {
    std::printf("  channels              one WebSocket per agent, %lld rings\n",
                static_cast<long long>(r->waits_answered));
  } else {
    std::printf("  waits for orders      %s, %lld answered\n", f.options.waits ? "on" : "off",
                static_cast<long long>(r->waits_answered));
  }
  if (f.options.probes > 0) {
    std::printf(
        "  submission to Running p50 %.0f / p99 %.0f ms (max %.0f) over %lld jobs; %lld "
        "not Running within 30 s\n",
        r->probe_p50_ms, r->probe_p99_ms, r->probe_max_ms, static_cast<long long>(r->probes),
        static_cast<long long>(r->probes_late));
  }
  if (f.options.dashboards > 0) {
    std::printf("  %d dashboards, each reading every 5 s:\n", f.options.dashboards);
    for (const auto& read : r->dashboard_reads) {
      std::printf(
          "    %-62s p50 %6.1f ms  p99 %6.1f ms  %7.1f KiB sent  (%lld reads, %lld errors)\n",
          read.path.c_str(), read.p50_ms, read.p99_ms, read.bytes / 1024.0,
          static_cast<long long>(read.count), static_cast<long long>(read.errors));
    }
  }
  return 0;
}

struct ServerBenchFlags {
  meridian::bench::ServerBenchOptions options;
  bool json = false;
};

int RunBenchServer(ServerBenchFlags f) {
  f.options.binary = "/proc/self/exe";
  // Progress on stderr: setting up 10,000 nodes and a deep queue takes a minute or more.
  const bool tell = !f.json || isatty(STDERR_FILENO);
  auto r = meridian::bench::RunServerBench(f.options, [tell](const std::string& line) {
    if (tell) std::fprintf(stderr, "%s\n", line.c_str());
  });
  if (!r.ok()) return Fail(r.status());
  if (f.json) {
    std::cout << r->ToJson().dump(2) << "\n";
    return 0;
  }
  std::printf(
      "server benchmark: %d nodes x %d GPUs (%d spare), %lld jobs running, %lld pending; "
      "a heartbeat each %.1f s%s, measured for %.0f s after %.0f s of set-up\n",
      r->nodes, f.options.gpus_per_node, r->spare_nodes, static_cast<long long>(r->running),
      static_cast<long long>(r->pending), f.options.interval,
      f.options.channel ? " over one WebSocket per agent" : "", r->seconds, r->setup_seconds);
  std::printf(
      "  scheduling cycles     %lld; p50 %.3f s, p99 %.3f s (from the server's histogram)\n",
      static_cast<long long>(r->cycles), r->cycle_p50_s, r->cycle_p99_s);
  std::printf(
      "  heartbeats            %lld (%lld errors), %.0f/s; p50 %.1f / p99 %.1f ms (in the "
      "server's handler: p50 %.1f / p99 %.1f ms)\n",
      static_cast<long long>(r->heartbeats), static_cast<long long>(r->heartbeat_errors),
      r->heartbeats_per_second, r->heartbeat_p50_ms, r->heartbeat_p99_ms,
      r->heartbeat_handler_p50_ms, r->heartbeat_handler_p99_ms);
  std::printf(
      "  submission to Running p50 %.0f / p99 %.0f ms (max %.0f) over %lld jobs; %lld not "
      "Running within 30 s\n",
      r->probe_p50_ms, r->probe_p99_ms, r->probe_max_ms, static_cast<long long>(r->probes),
      static_cast<long long>(r->probes_late));
  std::printf("  server                %.2f cores, RSS %.0f MiB\n", r->server_cores,
              r->server_rss_mib);
  return 0;
}

int RunBenchSchedule(const BenchFlags& f) {
  if (!f.json && isatty(STDERR_FILENO)) {
    std::fprintf(stderr, "building %d nodes x %d GPUs and %d pending tasks...\n", f.options.nodes,
                 f.options.gpus_per_node, f.options.pending);
  }
  auto r = meridian::bench::RunScheduleBench(f.options);
  if (!r.ok()) return Fail(r.status());
  if (f.json) {
    std::cout << r->ToJson().dump(2) << "\n";
    return 0;
  }
  std::printf("schedule benchmark: %d nodes x %d GPUs, %d pending tasks (mixed shapes), one core\n",
              f.options.nodes, f.options.gpus_per_node, f.options.pending);
  std::printf("  mode               %s\n",
              r->queueing ? "one scheduler cycle: quotas, gangs, preemption, backfill"
                          : "placement engine only");
  std::printf("  placed             %lld (%lld unschedulable, %lld answered by the shape cache)\n",
              static_cast<long long>(r->placed), static_cast<long long>(r->unschedulable),
              static_cast<long long>(r->cache_hits));
  std::printf("  cycle              %.3f s for the full pass\n", r->cycle_seconds);
  std::printf("  placements/s       %.0f\n", r->placements_per_second);
  std::printf("  attempts/s         %.0f\n", r->attempts_per_second);
  std::printf("  peak RSS           %.0f MiB\n", r->peak_rss_mib);
  std::printf("  GPU allocation     %.1f%%\n", r->gpu_allocation);
  return 0;
}

}  // namespace

void AddSimCommands(CLI::App& app, int* rc) {
  CLI::App* sim = app.add_subcommand("sim", "Simulate the scheduler on traces");
  sim->require_subcommand(1);
  static FgdFlags fgd;
  CLI::App* fgd_cmd = sim->add_subcommand(
      "fgd", "Reproduce the FGD paper's protocol (Alibaba GPU-2023 trace) for placement policies");
  fgd_cmd->add_option("--nodes", fgd.nodes, "node list CSV (openb_node_list_gpu_node.csv)")
      ->required();
  fgd_cmd->add_option("--tasks", fgd.tasks, "task list CSV (openb_pod_list_*.csv)")->required();
  fgd_cmd->add_option("--policy", fgd.policies,
                      "policy, repeatable or 'all': random, dotprod, gpu-packing, "
                      "gpu-clustering, best-fit, fgd, meridian (default meridian)");
  fgd_cmd->add_option("--seeds", fgd.seeds, "seeds: N, N-M or a list (default 42-51)");
  fgd_cmd->add_option("--inflate", fgd.inflate, "arrive tasks up to this multiple of capacity");
  fgd_cmd->add_option("--threads", fgd.threads, "worker threads (default: one per core)");
  fgd_cmd->add_option("--compare", fgd.compare,
                      "published summary-allocation.txt to print beside our allocation");
  fgd_cmd->add_option("--compare-curves", fgd.compare_curves,
                      "published analysis_allo_discrete.csv: the margin over the published FGD "
                      "at every arrived point, and its curves in --html");
  fgd_cmd->add_option("--workload", fgd.workload,
                      "workload name in --compare (default: from the task file name)");
  fgd_cmd->add_option("--html", fgd.html,
                      "write an HTML report: allocation against arrived, each policy beside the "
                      "published ones, and the margins over FGD");
  auto share = [&](const char* flag, std::optional<double>* into, const char* what) {
    fgd_cmd->add_option_function<double>(
        flag, [into](double v) { *into = v; }, what);
  };
  share("--constrained", &fgd.variant.constrained,
        "a variant: this share (0..1) of GPU tasks may run only on one family of GPU models, "
        "drawn in proportion to the family's GPUs");
  share("--multi-gpu", &fgd.variant.multi_gpu,
        "a variant: this share of GPU tasks asks for several GPUs (drawn from the list's own)");
  share("--fractional", &fgd.variant.fractional,
        "a variant: this share of single-GPU tasks asks for a fraction of a GPU");
  share("--cpu-only", &fgd.variant.cpu_only,
        "a variant: this share of all tasks asks for no GPU (CPU-only tasks added or dropped)");
  fgd_cmd->add_option("--variant-seed", fgd.variant.seed, "seed of the variant's draws (1)");
  fgd_cmd->add_option("--write-tasks", fgd.write_tasks,
                      "write the task list used (the variant, when one is asked) as CSV");
  fgd_cmd->add_flag("--json", fgd.json, "print one JSON object");
  fgd_cmd->callback([rc] { *rc = RunSimFgd(fgd); });

  CLI::App* demo = sim->add_subcommand(
      "demo", "Place example jobs on a synthetic hybrid estate (what `make run` shows)");
  demo->callback([rc] {
    Status s = meridian::sim::RunDemo(std::cout);
    *rc = s.ok() ? 0 : Fail(s);
  });

  static ReplayFlags rf;
  CLI::App* replay = sim->add_subcommand(
      "replay", "Replay jobs over time through the scheduler and compare queueing policies");
  replay
      ->add_option("--cluster", rf.cluster,
                   "cluster description (Meridian YAML, or an Alibaba node list CSV)")
      ->required();
  replay->add_option("--jobs", rf.jobs, "jobs (Meridian CSV, or an Alibaba task list CSV)")
      ->required();
  replay->add_option("--policy", rf.policies,
                     "fifo, sjf, las, meridian; repeatable; default: all four");
  replay->add_option("--csv", rf.csv_dir, "write time series CSV files into this directory");
  replay->add_option("--html", rf.html, "write a self-contained HTML report with plots");
  replay->add_option("--samples", rf.samples, "points of the time series (default 400)");
  replay->add_option("--time-scale", rf.time_scale,
                     "multiply submit times by this (e.g. 0.01 packs 100 days of arrivals into "
                     "one); durations are kept");
  replay->add_flag("--json", rf.json, "print one JSON object");
  replay->add_option("--idle-share", rf.idle_share,
                     "model idle phases: this share of the GPU jobs (0..1, drawn with --seed) "
                     "idles for the end of its run (for traces that record no utilisation)");
  replay->add_option("--idle-fraction", rf.idle_fraction,
                     "the share of each such job's duration that is idle (default 0.5)");
  replay->add_option("--seed", rf.seed, "seed of --idle-share's draw (default 1)");
  replay
      ->add_option("--reclaim-idle-after", rf.reclaim_after,
                   "also run each policy reclaiming jobs idle this long (an IdlePolicy's "
                   "idleFor + grace: 30m, 1h, seconds), side by side with it")
      ->transform(DurationFlag());
  replay->add_option("--burst-budget", rf.budgets,
                     "with elastic node groups: also burst within this budget (money per 30 days "
                     "of trace time, spent on instances); repeatable");
  replay->add_option("--budget-sweep", rf.budget_sweep,
                     "with elastic node groups: also burst within N budgets spread below what "
                     "bursting without one spent, for the cost/JCT frontier (plotted by --html)");
  replay
      ->add_option("--budget-action", rf.budget_action,
                   "what a spent burst budget stops, as a Budget's action: block-bursts (new "
                   "nodes; the default) or block-cloud (new placements on cloud nodes too)")
      ->check(CLI::IsMember({"block-bursts", "block-cloud"}));
  replay->callback([rc] { *rc = RunSimReplay(rf); });

  static GenerateFlags gf;
  CLI::App* generate = sim->add_subcommand(
      "generate", "Write a synthetic replay workload (cluster.yaml and jobs.csv)");
  generate->add_option("--jobs", gf.options.jobs, "number of jobs");
  generate->add_option("--gpus", gf.options.gpus, "GPUs in the cluster (8 per node)");
  generate->add_option("--load", gf.options.load, "offered demand as a share of capacity");
  generate->add_option("--seed", gf.options.seed, "random seed");
  generate->add_option("--out", gf.out_dir, "directory to write into")->required();
  generate
      ->add_option("--shape", gf.options.shape,
                   "mixed (1-8 GPUs, durations 1 min-14 h, estimates 1-3x over) or deep "
                   "(lognormal durations, median 20 min, p90 3 h; gangs up to "
                   "--max-gang-gpus; estimates exact or --estimate-noise)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, meridian::sim::WorkloadShape>{
              {"mixed", meridian::sim::WorkloadShape::kMixed},
              {"deep", meridian::sim::WorkloadShape::kDeep}},
          CLI::ignore_case));
  generate->add_option("--tenants", gf.options.tenants,
                       "projects (4: vision, language, speech, research; else t01..tNN)");
  generate->add_option("--tenant-skew", gf.options.tenant_skew,
                       "Zipf exponent of the projects' shares of the jobs (0: equal)");
  generate->add_option(
      "--max-gang-gpus", gf.options.max_gang_gpus,
      "deep: the largest job in GPUs, a power of two (128, or what the cluster holds)");
  generate->add_option("--estimate-noise", gf.options.estimate_noise,
                       "deep: sigma of the lognormal factor on each runtime estimate (0: exact)");
  generate->add_option("--sweep-share", gf.options.sweep_share,
                       "deep: share of the jobs submitted in sweeps of 10-1,000 at once (0)");
  generate->add_option("--sites", gf.options.sites,
                       "on-prem sites the nodes are split over, 10 Gbit/s apart (1)");
  generate->add_option("--datasets", gf.options.datasets,
                       "datasets of 50 GiB to 5 TiB, each at one site; needs --sites 2+ (0)");
  generate->add_option("--data-share", gf.options.data_share,
                       "share of the jobs that read one of the datasets (0.6)");
  generate->add_option("--cache-gib", gf.options.cache_gib,
                       "each site's cache of staged datasets, GiB (4000; 0: no cap)");
  generate->add_option("--mig-share", gf.options.mig_share,
                       "share of the jobs that ask for one MIG instance (1g, 2g or 3g) (0)");
  generate->add_option("--mig-nodes", gf.options.mig_nodes,
                       "nodes whose GPUs start partitioned as 3g.40gb+2g.20gb+1g.10gb (0)");
  generate->callback([rc] { *rc = RunSimGenerate(gf); });
  AddSimExport(sim, rc);
}

void AddBenchCommands(CLI::App& app, int* rc) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print figures");
  bench->require_subcommand(1);
  static BenchFlags bf;
  CLI::App* sched_bench =
      bench->add_subcommand("schedule", "One placement pass over a large synthetic queue");
  sched_bench->add_option("--nodes", bf.options.nodes, "nodes in the estate");
  sched_bench->add_option("--gpus-per-node", bf.options.gpus_per_node, "GPUs per node");
  sched_bench->add_option("--pending", bf.options.pending, "pending tasks");
  sched_bench->add_option("--max-feasible-nodes", bf.options.max_feasible_nodes,
                          "stop each search after this many feasible nodes (0: all)");
  sched_bench->add_option("--seed", bf.options.seed, "seed of the synthetic estate and queue");
  sched_bench->add_flag("!--placement-only", bf.options.queueing,
                        "measure the placement engine alone, without the scheduler's quotas, "
                        "gangs, preemption and backfill");
  sched_bench->add_flag("--json", bf.json, "print one JSON object");
  sched_bench->callback([rc] { *rc = RunBenchSchedule(bf); });

  static ApiBenchFlags af;
  CLI::App* api_bench = bench->add_subcommand(
      "api",
      "Durable job submissions per second against a real server process on SQLite (and "
      "PostgreSQL with --store)");
  api_bench->add_option("--clients", af.options.clients, "concurrent clients");
  api_bench->add_option("--seconds", af.options.seconds, "how long to submit (30s, 2m, seconds)")
      ->transform(DurationFlag());
  api_bench->add_option("--server", af.options.server,
                        "an existing server's URL (default: start one on a temporary data dir)");
  api_bench->add_option("--token", af.options.token, "token for --server (or MERIDIAN_TOKEN)");
  api_bench->add_option("--project", af.options.project, "project to submit to with --server");
  api_bench->add_option("--store", af.options.store,
                        "postgresql://... : also run the benchmark against a server on this "
                        "database (after one on SQLite), and print both");
  api_bench->add_flag("--json", af.json, "print one JSON object");
  api_bench->callback([rc] { *rc = RunBenchApi(af); });

  static AgentBenchFlags gf;
  CLI::App* agents_bench = bench->add_subcommand(
      "agents", "Heartbeat latency and server load with many agents (simulated in-process)");
  agents_bench->add_option("--agents", gf.options.agents, "simulated agents (nodes)");
  agents_bench->add_option("--interval", gf.options.interval, "heartbeat interval (2s, seconds)")
      ->transform(DurationFlag());
  agents_bench->add_option("--seconds", gf.options.seconds, "how long they heartbeat")
      ->transform(DurationFlag());
  agents_bench->add_option("--jobs", gf.options.jobs, "1-GPU jobs placed on them first");
  agents_bench->add_option("--dashboards", gf.options.dashboards,
                           "open dashboards reading the Estate view every 5 s");
  agents_bench->add_flag("--waits,!--no-waits", gf.options.waits,
                         "agents keep a wait for orders open, as meridian agent does (default)");
  agents_bench->add_flag("--channel", gf.options.channel,
                         "each agent keeps one WebSocket for its heartbeats and its doorbell "
                         "instead of two connections (ADR 0047)");
  agents_bench->add_option("--probes", gf.options.probes,
                           "jobs timed from submission to Running, one after another (20)");
  agents_bench->add_flag("--json", gf.json, "print one JSON object");
  agents_bench->callback([rc] { *rc = RunBenchAgents(gf); });

  static ServerBenchFlags sf;
  CLI::App* server_bench = bench->add_subcommand(
      "server",
      "A real server at scale: agents (simulated in-process) filling every node, a deep queue "
      "behind them, and jobs timed from submission to Running");
  server_bench->add_option("--nodes", sf.options.nodes, "simulated agents (nodes of 8 GPUs)");
  server_bench->add_option("--pending", sf.options.pending,
                           "whole-node jobs queued behind the running ones");
  server_bench->add_option("--spare-nodes", sf.options.spare_nodes,
                           "nodes left free for the probe jobs (0: a hundredth of --nodes)");
  server_bench->add_option("--interval", sf.options.interval, "heartbeat interval (2s, seconds)")
      ->transform(DurationFlag());
  server_bench->add_option("--seconds", sf.options.seconds, "how long the estate is measured")
      ->transform(DurationFlag());
  server_bench->add_option("--probes", sf.options.probes,
                           "1-GPU jobs timed from submission to Running, one after another");
  server_bench->add_flag("--channel", sf.options.channel,
                         "each agent keeps one WebSocket for its heartbeats and its doorbell "
                         "instead of two connections (ADR 0047)");
  server_bench->add_flag("--json", sf.json, "print one JSON object");
  server_bench->callback([rc] { *rc = RunBenchServer(sf); });
}
