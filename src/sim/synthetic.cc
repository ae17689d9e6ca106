#include "sim/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "base/rng.h"

namespace meridian::sim {

void SyntheticEstate(const SyntheticEstateOptions& o, std::vector<domain::Cluster>* clusters,
                     std::vector<domain::Node>* nodes) {
  clusters->clear();
  nodes->clear();
  clusters->push_back({"onprem-fra",
                       domain::SiteKind::kOnPrem,
                       "eu-central",
                       domain::Backend::kAgent,
                       {{"H100-80GB", 1.9}, {"H200-141GB", 2.6}, {"A100-40GB", 0.9}},
                       {"imagenet", "common-crawl"}});
  clusters->push_back({"cloud-use1",
                       domain::SiteKind::kCloud,
                       "us-east-1",
                       domain::Backend::kAgent,
                       {{"A100-80GB", 3.7}, {"L40S", 1.8}, {"T4", 0.5}},
                       {"common-crawl"}});
  base::Rng rng(o.seed);
  const char* onprem_models[] = {"H100-80GB", "H100-80GB", "H200-141GB", "A100-40GB"};
  const char* cloud_models[] = {"A100-80GB", "L40S", "T4"};
  for (int i = 0; i < o.nodes; ++i) {
    const bool onprem = i % 3 != 2;
    domain::Node n;
    n.cluster = onprem ? "onprem-fra" : "cloud-use1";
    n.name = (onprem ? "fra-" : "use1-") + std::to_string(i);
    n.rack = (onprem ? "fra-rack" : "use1-rack") + std::to_string(i / 8);
    const std::string model = onprem ? onprem_models[rng.Uniform(4)] : cloud_models[rng.Uniform(3)];
    n.cpu_milli = 16000LL * o.gpus_per_node;
    n.memory_mib = 128LL * 1024 * o.gpus_per_node;
    n.labels = {{"pool", onprem ? "training" : "burst"}};
    for (int g = 0; g < o.gpus_per_node; ++g) {
      domain::GpuDevice d;
      d.uuid = "GPU-" + n.name + "-" + std::to_string(g);
      d.model = model;
      d.nvlink_domain = g / 4;
      n.gpus.push_back(d);
    }
    nodes->push_back(std::move(n));
  }
}

std::vector<sched::TaskSpec> SyntheticTasks(const sched::Snapshot& snapshot, int count,
                                            uint64_t seed) {
  base::Rng rng(seed);
  const char* migs[] = {"1g.10gb", "3g.40gb", "2g.20gb", "1g.18gb"};
  const sched::ModelId h100 = snapshot.FindModel("H100-80GB");
  const sched::ModelId a100 = snapshot.FindModel("A100-80GB");
  const int32_t imagenet = snapshot.FindDataset("imagenet");
  std::vector<sched::TaskSpec> tasks;
  tasks.reserve(count);
  for (int i = 0; i < count; ++i) {
    sched::TaskSpec t;
    t.cpu_milli = 2000 + 2000 * static_cast<int64_t>(rng.Uniform(8));
    t.memory_mib = 8192 * (1 + static_cast<int64_t>(rng.Uniform(8)));
    uint64_t kind = rng.Uniform(100);
    if (kind < 40) {
      t.gpu_kind = sched::GpuKind::kWhole;
      t.gpu_count = 1;
      t.gpu_milli = 1000;
    } else if (kind < 50) {
      t.gpu_kind = sched::GpuKind::kWhole;
      t.gpu_count = 2 << rng.Uniform(3);  // 2, 4, 8
      t.gpu_milli = 1000;
      t.cpu_milli *= t.gpu_count / 2;
    } else if (kind < 75) {
      t.gpu_kind = sched::GpuKind::kFraction;
      t.gpu_count = 1;
      t.gpu_milli = 100 + 100 * static_cast<int32_t>(rng.Uniform(8));
    } else if (kind < 85) {
      t.gpu_kind = sched::GpuKind::kMig;
      t.gpu_count = 1;
      t.mig_profile = migs[rng.Uniform(4)];
    } else if (kind < 90) {
      t.cpu_milli = 4000;  // CPU-only
    } else {
      t.gpu_kind = sched::GpuKind::kWhole;
      t.gpu_count = 1;
      t.gpu_milli = 1000;
      t.allowed_models = 0;
      if (h100 != sched::kNoModel) t.allowed_models |= sched::Bit(h100);
      if (a100 != sched::kNoModel) t.allowed_models |= sched::Bit(a100);
    }
    if (rng.Uniform(10) == 0 && imagenet >= 0) t.datasets = {imagenet};
    if (rng.Uniform(20) == 0) t.allowed_clusters = sched::Bit(0);  // on-prem only
    tasks.push_back(std::move(t));
  }
  return tasks;
}

namespace {

constexpr double kLongestJob = 53 * 86400.0;  // the deep shape's cap on a duration

// A standard normal draw (Box-Muller).
double Normal(base::Rng& rng) {
  const double u = 1.0 - rng.UniformDouble();  // (0, 1]
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * rng.UniformDouble());
}

struct Drawn {
  double duration;
  int tasks, gpus;
  int milli;
  bool follows = false;  // submitted with the job before it, in one sweep
  std::string mig;       // a MIG instance of this profile instead of GPUs
};

// Durations log-uniform from 1 minute to about 14 hours; sizes: mostly 1 GPU, some 2-8, a few
// 2-node gangs, a share of fractions.
Drawn DrawMixed(base::Rng& rng) {
  Drawn d;
  d.duration = 60.0 * std::exp(rng.UniformDouble() * std::log(840.0));
  uint64_t k = rng.Uniform(100);
  d.tasks = 1;
  d.milli = 1000;
  if (k < 50) {
    d.gpus = 1;
  } else if (k < 65) {
    d.gpus = 1;
    d.milli = 250 * (1 + static_cast<int>(rng.Uniform(3)));
  } else if (k < 90) {
    d.gpus = 2 << rng.Uniform(3);
  } else {
    d.gpus = 8;
    d.tasks = 2;
  }
  return d;
}

// Lognormal durations (median 20 minutes, p90 3 hours: sigma = ln 9 / z(0.9)) capped at 53
// days; 60% of jobs take one GPU (15% of those a fraction), the rest 2^k GPUs with
// probability 2^-k up to the largest size; above 8 GPUs a job is a gang of 8-GPU tasks.
Drawn DrawDeep(base::Rng& rng, int max_gang_gpus) {
  constexpr double kMedian = 1200, kSigma = 1.7145;
  Drawn d;
  d.duration = std::clamp(kMedian * std::exp(kSigma * Normal(rng)), 1.0, kLongestJob);
  d.tasks = 1;
  d.milli = 1000;
  d.gpus = 1;
  if (rng.Uniform(100) < 60) {
    if (rng.Uniform(100) < 15) d.milli = 250 * (1 + static_cast<int>(rng.Uniform(3)));
    return d;
  }
  int size = 2;
  while (size < max_gang_gpus && rng.Uniform(2) == 0) size *= 2;
  d.gpus = std::min(size, 8);
  d.tasks = size / d.gpus;
  return d;
}

}  // namespace

void SyntheticReplay(const SyntheticReplayOptions& o, std::string* cluster_yaml,
                     std::string* jobs_csv) {
  const int nodes = std::max(1, o.gpus / 8);
  const double gpus = 8.0 * nodes;
  const int sites = std::clamp(o.sites, 1, std::min(nodes, 64));
  auto site_nodes = [&](int i, const std::string& name) {
    const int count = nodes / sites + (i < nodes % sites ? 1 : 0);
    // The first site's first mig_nodes nodes start partitioned, in a group of their own.
    const int mig = i == 0 ? std::min(o.mig_nodes, count) : 0;
    auto group = [&](const std::string& group_name, int n, const std::string& extra) {
      return "      - {name: " + group_name + ", count: " + std::to_string(n) +
             ", gpus: 8, model: H100-80GB, cpu_milli: 128000, memory_mib: 1048576, "
             "nvlink_domain_size: 8, rack_size: 8" +
             extra + "}\n";
    };
    return "    nodes:\n" +
           (mig > 0 ? group(name + "-mig", mig,
                            ", mig_gpus: 8, mig_layout: \"3g.40gb@0,2g.20gb@4,1g.10gb@6\"")
                    : std::string()) +
           (count > mig ? group(name, count - mig, "") : std::string());
  };
  if (sites == 1) {
    *cluster_yaml = std::string("# Generated by `meridian sim generate`: one on-prem cluster, ") +
                    std::to_string(o.tenants) +
                    " projects.\n"
                    "clusters:\n"
                    "  - name: onprem\n"
                    "    kind: on-prem\n"
                    "    region: eu-west\n"
                    "    prices: {H100-80GB: 2.0}\n" +
                    site_nodes(0, "gpu");
  } else {
    *cluster_yaml = "# Generated by `meridian sim generate`: " + std::to_string(sites) +
                    " on-prem sites, " + std::to_string(o.datasets) + " datasets, " +
                    std::to_string(o.tenants) + " projects.\nclusters:\n";
    for (int i = 0; i < sites; ++i) {
      const std::string name = "site-" + std::to_string(i + 1);
      std::string links;
      for (int k = i + 1; k < sites; ++k) {
        links += std::string(links.empty() ? "" : ", ") + "site-" + std::to_string(k + 1) + ": 10";
      }
      *cluster_yaml += "  - name: " + name +
                       "\n"
                       "    kind: on-prem\n"
                       "    prices: {H100-80GB: 2.0}\n"
                       "    egress_per_gib: 0.02\n"
                       "    cache_gib: " +
                       std::to_string(static_cast<int64_t>(o.cache_gib)) + "\n" +
                       (links.empty() ? "" : "    bandwidth_gbps: {" + links + "}\n") +
                       site_nodes(i, "s" + std::to_string(i + 1) + "-gpu");
    }
  }
  // Datasets: their own draws, so that the jobs' draws stay as they were without them.
  std::vector<std::string> dataset_names;
  if (sites > 1 && o.datasets > 0) {
    base::Rng data_rng(o.seed ^ 0x5eedda7aULL);
    *cluster_yaml += "datasets:\n";
    for (int d = 0; d < o.datasets; ++d) {
      char name[16];
      std::snprintf(name, sizeof name, "ds%02d", d + 1);
      dataset_names.push_back(name);
      const double size = 50 * std::exp(data_rng.UniformDouble() * std::log(100.0));
      char line[128];
      std::snprintf(line, sizeof line, "  - {name: %s, size_gib: %.0f, clusters: [site-%d]}\n",
                    name, size, d % sites + 1);
      *cluster_yaml += line;
    }
  }
  *cluster_yaml += "projects:\n";
  // The projects, their guarantees, and each one's share of the submissions.
  std::vector<std::string> names = {"vision", "language", "speech", "research"};
  std::vector<double> guarantee = {0.4, 0.3, 0.2, 0.1};
  if (o.tenants != 4) {
    names.clear();
    guarantee.clear();
    double sum = 0;
    for (int i = 1; i <= o.tenants; ++i) {
      char name[16];
      std::snprintf(name, sizeof name, "t%02d", i);
      names.push_back(name);
      guarantee.push_back(std::pow(i, -o.tenant_skew / 2));
      sum += guarantee.back();
    }
    for (double& g : guarantee) g /= sum;
  }
  std::vector<double> use_cdf;  // empty when use is equal
  if (o.tenant_skew > 0) {
    double sum = 0;
    for (int i = 1; i <= o.tenants; ++i) use_cdf.push_back(sum += std::pow(i, -o.tenant_skew));
    for (double& c : use_cdf) c /= sum;
  }
  for (size_t p = 0; p < names.size(); ++p) {
    *cluster_yaml +=
        "  - {name: " + names[p] + ", team: " + (p < names.size() / 2 ? "product" : "lab") +
        ", weight: 1, guaranteed_gpus: " + std::to_string(static_cast<int>(gpus * guarantee[p])) +
        "}\n";
  }
  int max_gang = o.max_gang_gpus;
  if (max_gang <= 0) {
    for (max_gang = 128; max_gang > static_cast<int>(gpus) && max_gang > 1;) max_gang /= 2;
  }
  base::Rng rng(o.seed);
  // Arrivals: Poisson at the rate that offers `load`.
  std::vector<Drawn> drawn;
  // Sweeps (kDeep): one user submits 10-1,000 variants of a job of up to 8 GPUs at once, their
  // durations spread around the first's. A sweep starts with the probability that puts
  // `sweep_share` of the jobs in sweeps (their mean size is 990 / ln 100, about 215).
  const double mean_sweep = 990 / std::log(100.0);
  const double sweep_start = o.sweep_share / (mean_sweep * (1 - o.sweep_share) + o.sweep_share);
  int arrivals = 0;
  for (int i = 0; i < o.jobs; ++arrivals) {
    if (o.shape == WorkloadShape::kDeep && o.sweep_share > 0 && rng.UniformDouble() < sweep_start) {
      const int size = std::min(
          o.jobs - i,
          static_cast<int>(std::exp(std::log(10.0) + rng.UniformDouble() * std::log(100.0))));
      const Drawn first = DrawDeep(rng, std::min(8, max_gang));
      for (int k = 0; k < size; ++k, ++i) {
        Drawn d = first;
        d.duration = std::clamp(first.duration * std::exp(0.5 * Normal(rng)), 1.0, kLongestJob);
        d.follows = k > 0;
        drawn.push_back(d);
      }
      continue;
    }
    drawn.push_back(o.shape == WorkloadShape::kDeep ? DrawDeep(rng, max_gang) : DrawMixed(rng));
    ++i;
  }
  // MIG jobs: their own draws, so that the others stay as they were without them. A MIG job
  // offers its instance's share of a GPU (its memory slices out of eight).
  if (o.mig_share > 0) {
    base::Rng mig_rng(o.seed ^ 0x3167a11ULL);
    for (Drawn& d : drawn) {
      if (mig_rng.UniformDouble() >= o.mig_share) continue;
      const uint64_t k = mig_rng.Uniform(4);
      d.mig = k < 2 ? "1g.10gb" : k == 2 ? "2g.20gb" : "3g.40gb";
      d.tasks = 1;
      d.gpus = 1;
      d.milli = k < 2 ? 125 : k == 2 ? 250 : 500;
    }
  }
  double demand = 0;  // GPU-seconds
  for (const Drawn& d : drawn) demand += d.duration * d.tasks * d.gpus * d.milli / 1000.0;
  const double mean_gap = demand / (gpus * std::max(0.05, o.load)) / std::max(1, arrivals);
  *jobs_csv =
      "id,submit_time,duration,tasks,gpus_per_task,gpu_milli,project,priority,runtime_estimate,"
      "runtime_limit,gang";
  *jobs_csv += dataset_names.empty() ? "" : ",datasets";
  *jobs_csv += o.mig_share > 0 ? ",mig\n" : "\n";
  base::Rng read_rng(o.seed ^ 0xda7a5e7ULL);
  double t = 0;
  char line[256];
  size_t project = 0;
  int priority = 0;
  for (int i = 0; i < o.jobs; ++i) {
    const Drawn& d = drawn[i];
    if (d.follows) {  // a sweep's next job: the same user and priority, a second later
      t += 1;
    } else {
      t += -std::log(1.0 - rng.UniformDouble()) * mean_gap;
      if (use_cdf.empty()) {
        project = rng.Uniform(names.size());
      } else {
        const double u = rng.UniformDouble();
        project = static_cast<size_t>(std::lower_bound(use_cdf.begin(), use_cdf.end(), u) -
                                      use_cdf.begin());
        project = std::min(project, names.size() - 1);
      }
      priority = rng.Uniform(10) == 0 ? 100 : 0;
    }
    double estimate, limit;
    if (o.shape == WorkloadShape::kDeep) {
      // A noisy estimate (what a predictor or a user says) beside a limit that is an upper
      // bound.
      estimate = std::max(1.0, d.duration * std::exp(o.estimate_noise * Normal(rng)));
      limit = 60 * std::ceil(d.duration * (1.0 + 2.0 * rng.UniformDouble()) / 60);  // minutes
    } else {
      // Users over-estimate: the estimate is 1-3x the true duration, the limit twice the
      // estimate.
      estimate = d.duration * (1.0 + 2.0 * rng.UniformDouble());
      limit = 2 * estimate;
    }
    std::snprintf(line, sizeof line, "%d,%.1f,%.1f,%d,%d,%d,%s,%d,%.1f,%.1f,%d", i + 1, t,
                  d.duration, d.tasks, d.gpus, d.mig.empty() ? d.milli : 1000,
                  names[project].c_str(), priority, estimate, limit, d.tasks > 1 ? 1 : 0);
    *jobs_csv += line;
    if (!dataset_names.empty()) {
      *jobs_csv += ",";
      if (read_rng.UniformDouble() < o.data_share) {
        *jobs_csv += dataset_names[read_rng.Uniform(dataset_names.size())];
      }
    }
    if (o.mig_share > 0) *jobs_csv += "," + d.mig;
    *jobs_csv += "\n";
  }
}

}  // namespace meridian::sim
