#include "sim/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/replay_input.h"

namespace meridian::sim {
namespace {

struct Generated {
  ReplayCluster cluster;
  std::vector<ReplayJob> jobs;
};

Generated Generate(const SyntheticReplayOptions& o) {
  std::string cluster, jobs;
  SyntheticReplay(o, &cluster, &jobs);
  auto c = ParseReplayCluster(cluster, "cluster.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  auto j = ParseReplayJobs(jobs, "jobs.csv");
  EXPECT_TRUE(j.ok()) << j.status().message();
  return {c.ok() ? *c : ReplayCluster{}, j.ok() ? *j : std::vector<ReplayJob>{}};
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

SyntheticReplayOptions Deep() {
  SyntheticReplayOptions o;
  o.shape = WorkloadShape::kDeep;
  o.jobs = 20000;
  o.gpus = 448;
  o.tenants = 15;
  o.tenant_skew = 1.5;
  o.seed = 7;
  return o;
}

TEST(SyntheticReplay, DeepDurationsHaveTheStatedMedianTailAndCap) {
  const Generated g = Generate(Deep());
  ASSERT_EQ(g.jobs.size(), 20000u);
  std::vector<double> d;
  for (const ReplayJob& j : g.jobs) d.push_back(j.duration);
  EXPECT_NEAR(Quantile(d, 0.5), 1200, 120);
  EXPECT_NEAR(Quantile(d, 0.9), 10800, 1600);
  EXPECT_LE(*std::max_element(d.begin(), d.end()), 53 * 86400.0);
  EXPECT_GE(*std::min_element(d.begin(), d.end()), 1.0);
  // Heavy-tailed: the longest jobs are days long, and the mean is far above the median
  // (e^(sigma^2/2), about 4.3 times, for a lognormal).
  EXPECT_GT(Quantile(d, 0.999), 2 * 86400.0);
  double mean = 0;
  for (double x : d) mean += x / static_cast<double>(d.size());
  EXPECT_GT(mean, 3.5 * Quantile(d, 0.5));
}

TEST(SyntheticReplay, DeepSizesArePowersOfTwoUpToTheLargestGangOfWholeNodes) {
  SyntheticReplayOptions o = Deep();
  o.max_gang_gpus = 64;
  const Generated g = Generate(o);
  std::map<int, int> by_size;
  for (const ReplayJob& j : g.jobs) {
    const int size = j.tasks * j.gpus_per_task;
    ++by_size[size];
    EXPECT_EQ(size & (size - 1), 0) << "job " << j.id << ": " << size << " GPUs";
    EXPECT_LE(size, 64) << "job " << j.id;
    if (size > 8) {
      EXPECT_EQ(j.gpus_per_task, 8) << "job " << j.id << ": a gang of whole nodes";
      EXPECT_TRUE(j.gang) << "job " << j.id;
    }
    if (j.gpu_milli < 1000) {
      EXPECT_EQ(size, 1) << "job " << j.id << ": fractions take one GPU";
    }
  }
  EXPECT_NEAR(by_size[1] / 20000.0, 0.6, 0.02);
  // Each doubling halves the count (the largest size takes the remainder of the tail).
  for (int s = 2; s <= 16; s *= 2) {
    EXPECT_NEAR(static_cast<double>(by_size[2 * s]) / by_size[s], 0.5, 0.12) << s << " GPUs";
  }
}

TEST(SyntheticReplay, TenantsUseTheClusterUnequallyAndAreGuaranteedLessUnequally) {
  const Generated g = Generate(Deep());
  ASSERT_EQ(g.cluster.projects.size(), 15u);
  std::map<std::string, int> jobs;
  for (const ReplayJob& j : g.jobs) ++jobs[j.project];
  // 1/i^1.5 over 15 tenants: the first draws about 45%, the last about 0.8%.
  EXPECT_NEAR(jobs["t01"] / 20000.0, 0.45, 0.03);
  EXPECT_NEAR(jobs["t15"] / 20000.0, 0.008, 0.004);
  double guaranteed = 0;
  for (const auto& p : g.cluster.projects) guaranteed += p.guaranteed_gpus;
  EXPECT_LE(guaranteed, 448);
  EXPECT_GE(guaranteed, 448 - 15);
  EXPECT_GT(g.cluster.projects.front().guaranteed_gpus, g.cluster.projects.back().guaranteed_gpus);
  // Guarantees are less unequal than use: the heaviest user borrows.
  EXPECT_LT(g.cluster.projects.front().guaranteed_gpus / 448.0, jobs["t01"] / 20000.0);
}

TEST(SyntheticReplay, EstimatesAreExactOrOffByTheStatedNoiseAndLimitsAreUpperBounds) {
  SyntheticReplayOptions o = Deep();
  for (double noise : {0.0, 1.0}) {
    o.estimate_noise = noise;
    const Generated g = Generate(o);
    double sum = 0, sum2 = 0;
    for (const ReplayJob& j : g.jobs) {
      const double r = std::log(j.runtime_estimate / std::max(j.duration, 1.0));
      sum += r;
      sum2 += r * r;
      EXPECT_GE(j.runtime_limit, j.duration) << "job " << j.id << ": a limit no job reaches";
      EXPECT_LE(j.runtime_limit, 3 * j.duration + 60) << "job " << j.id;
    }
    const double n = static_cast<double>(g.jobs.size());
    const double sd = std::sqrt(std::max(0.0, sum2 / n - (sum / n) * (sum / n)));
    EXPECT_NEAR(sd, noise, 0.05) << "noise " << noise;
    EXPECT_NEAR(sum / n, 0.0, 0.05) << "noise " << noise;
  }
}

TEST(SyntheticReplay, SweepsSubmitManyJobsOfOneUserAtOnce) {
  SyntheticReplayOptions o = Deep();
  o.sweep_share = 0.3;
  const Generated g = Generate(o);
  ASSERT_EQ(g.jobs.size(), 20000u);
  // A sweep: jobs a second apart, of one project and one size, 10 to 1,000 of them.
  int in_sweeps = 0, sweeps = 0;
  for (size_t i = 0; i < g.jobs.size();) {
    size_t k = i + 1;
    while (k < g.jobs.size() && g.jobs[k].submit_time - g.jobs[k - 1].submit_time == 1.0 &&
           g.jobs[k].project == g.jobs[i].project &&
           g.jobs[k].gpus_per_task == g.jobs[i].gpus_per_task && g.jobs[k].tasks == 1) {
      ++k;
    }
    if (k - i >= 10) {
      ++sweeps;
      in_sweeps += static_cast<int>(k - i);
      EXPECT_LE(k - i, 1000u);
      EXPECT_LE(g.jobs[i].gpus_per_task, 8);
    }
    i = k;
  }
  EXPECT_GE(sweeps, 5);
  EXPECT_NEAR(in_sweeps / 20000.0, 0.3, 0.12);
}

TEST(SyntheticReplay, TheMixedShapeKeepsItsFourProjectsAndItsSizes) {
  SyntheticReplayOptions o;
  o.jobs = 5000;
  const Generated g = Generate(o);
  ASSERT_EQ(g.cluster.projects.size(), 4u);
  EXPECT_EQ(g.cluster.projects[0].name, "vision");
  for (const ReplayJob& j : g.jobs) {
    EXPECT_LE(j.tasks * j.gpus_per_task, 16) << "job " << j.id;
    EXPECT_GE(j.runtime_estimate, j.duration - 0.1) << "job " << j.id << ": users over-estimate";
    EXPECT_NEAR(j.runtime_limit, 2 * j.runtime_estimate, 0.2) << "job " << j.id;
  }
}

}  // namespace
}  // namespace meridian::sim
