#include "sim/replay.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "sim/replay_input.h"
#include "sim/replay_report.h"

namespace meridian::sim {
namespace {

const char* kCluster = R"(clusters:
  - name: onprem
    kind: on-prem
    region: eu-west
    prices: {H100-80GB: 2.0}
    nodes:
      - {name: gpu, count: 2, gpus: 8, model: H100-80GB, cpu_milli: 128000, memory_mib: 1048576}
projects:
  - {name: a, team: t1, guaranteed_gpus: 8}
  - {name: b, team: t1, guaranteed_gpus: 8}
)";

ReplayCluster Cluster() {
  auto c = ParseReplayCluster(kCluster, "cluster.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

std::vector<ReplayJob> Jobs(const std::string& rows) {
  auto j = ParseReplayJobs(
      "id,submit_time,duration,tasks,gpus_per_task,project,priority,runtime_estimate\n" + rows,
      "jobs.csv");
  EXPECT_TRUE(j.ok()) << j.status().message();
  return j.ok() ? *j : std::vector<ReplayJob>{};
}

TEST(ReplayInput, ReadsTheClusterDescription) {
  ReplayCluster c = Cluster();
  ASSERT_EQ(c.clusters.size(), 1u);
  EXPECT_EQ(c.clusters[0].price_per_gpu_hour.at("H100-80GB"), 2.0);
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[1].name, "gpu-1");
  EXPECT_EQ(c.nodes[1].gpus.size(), 8u);
  ASSERT_EQ(c.projects.size(), 2u);
  EXPECT_EQ(c.projects[1].guaranteed_gpus, 8);
}

TEST(ReplayInput, ClusterErrorsNameFileLineColumnAndField) {
  struct Case {
    std::string text;
    std::string want;
  };
  const Case cases[] = {
      {"clusters:\n  - name: x\n    colour: red\n    nodes: []\n",
       "c.yaml:3:5: clusters[0].colour: unknown field"},
      {"clusters:\n  - name: x\n    kind: moon\n    nodes: [{name: n, cpu_milli: 1, "
       "memory_mib: 1}]\n",
       "c.yaml:3:5: clusters[0].kind: \"moon\" is not one of on-prem, cloud"},
      {"clusters:\n  - name: x\n    nodes:\n      - {name: n, gpus: lots, cpu_milli: 1, "
       "memory_mib: 1}\n",
       "c.yaml:4:19: clusters[0].nodes[0].gpus: must be an integer, not a string"},
      {"clusters:\n  - name: x\n    nodes:\n      - {name: n, gpus: 8, cpu_milli: 1, "
       "memory_mib: 1}\n",
       "c.yaml:4:9: clusters[0].nodes[0].model: is required with gpus"},
      {"clusters: [\n", "c.yaml:2:1: "},
      {"projects: []\n", "c.yaml:1:1: clusters: is required"},
  };
  for (const Case& c : cases) {
    auto r = ParseReplayCluster(c.text, "c.yaml");
    ASSERT_FALSE(r.ok()) << c.text;
    // Every error is reported, one per line.
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << "got: " << r.status().message() << "\nwant: " << c.want;
  }
}

TEST(ReplayInput, JobErrorsNameLineAndColumn) {
  const std::string header = "id,submit_time,duration,gpus_per_task,gpu_milli\n";
  struct Case {
    std::string rows;
    std::string want;
  };
  const Case cases[] = {
      {"1,0,10,1,1000\n1,5,10,1,1000\n", "j.csv:3:1: id: duplicate job id"},
      {"1,soon,10,1,1000\n", "j.csv:2:3: submit_time: expected a number"},
      {"1,0,10,2,500\n", "j.csv:2:10: gpu_milli: a task with several GPUs"},
      {"1,0,-4,1,1000\n", "j.csv:2:5: duration: -4 is outside"},
  };
  for (const Case& c : cases) {
    auto r = ParseReplayJobs(header + c.rows, "j.csv");
    ASSERT_FALSE(r.ok()) << c.rows;
    // Every error is reported, one per line.
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << "got: " << r.status().message() << "\nwant: " << c.want;
  }
}

TEST(Replay, FifoWaitsBehindItsHeadAndSjfDoesNot) {
  // Both nodes busy until 100 with job 1 (16 GPUs). Then job 2 (16 GPUs, 1000 s) and job 3
  // (1 GPU, 10 s) wait; FIFO runs 2 then 3, SJF runs 3 at once.
  std::vector<ReplayJob> jobs = Jobs(
      "1,0,100,2,8,a,0,100\n"
      "2,1,1000,2,8,a,0,1000\n"
      "3,2,10,1,1,b,0,10\n");
  ReplayOptions o;
  o.policy = "fifo";
  auto fifo = RunReplay(Cluster(), jobs, o);
  ASSERT_TRUE(fifo.ok()) << fifo.status().message();
  o.policy = "sjf";
  auto sjf = RunReplay(Cluster(), jobs, o);
  ASSERT_TRUE(sjf.ok());
  EXPECT_EQ(fifo->completed, 3);
  EXPECT_EQ(sjf->completed, 3);
  // FIFO: job 3 starts at 1100 after job 2, a wait of 1098 s. SJF: job 3 starts at 100 and job
  // 2 after it at 110, so the longest wait is job 2's 109 s.
  EXPECT_DOUBLE_EQ(fifo->queueing_delay.p99, 1098);
  EXPECT_DOUBLE_EQ(sjf->queueing_delay.p99, 109);
  EXPECT_DOUBLE_EQ(fifo->jct.mean, (100 + 1099 + 1108) / 3.0);
  EXPECT_DOUBLE_EQ(sjf->jct.mean, (100 + 1109 + 108) / 3.0);
  EXPECT_DOUBLE_EQ(fifo->makespan, 1110);
  EXPECT_GT(fifo->utilization, 0.9);
  EXPECT_LE(fifo->utilization, 1.0);
}

// The estate above, plus a cloud pool of two 8-GPU nodes that boot in 60 s, idle out after 300 s
// and cost 4 per GPU-hour.
ReplayCluster BurstCluster() {
  const std::string text = std::string(kCluster).replace(
      std::string(kCluster).find("projects:"), 0,
      "  - name: cloud\n    kind: cloud\n    prices: {H100-80GB: 4.0}\n    nodes:\n"
      "      - {name: burst, count: 2, gpus: 8, model: H100-80GB, cpu_milli: 128000, "
      "memory_mib: 1048576, elastic: {boot_delay: 60s, idle_timeout: 5m}}\n");
  auto c = ParseReplayCluster(text, "cluster.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : ReplayCluster{};
}

TEST(ReplayInput, AnElasticGroupIsAPoolOfNodesThatStartOff) {
  const ReplayCluster c = BurstCluster();
  ASSERT_EQ(c.elastic.size(), 1u);
  EXPECT_EQ(c.elastic[0].name, "burst");
  EXPECT_EQ(c.elastic[0].cluster, "cloud");
  EXPECT_EQ(c.elastic[0].nodes, (std::vector<std::string>{"burst-0", "burst-1"}));
  EXPECT_EQ(c.elastic[0].boot_delay, 60);
  EXPECT_EQ(c.elastic[0].idle_timeout, 300);
  auto bad = ParseReplayCluster(
      "clusters:\n  - name: x\n    nodes:\n      - {name: n, cpu_milli: 1, memory_mib: 1, "
      "pool: p, declared: true, elastic: {boot_delay: 1h, spin: 3}}\n",
      "c.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("clusters[0].nodes[0].elastic.spin: unknown field"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("declared or elastic, not both"), std::string::npos)
      << bad.status().message();
}

// Four 16-GPU jobs of an hour at once on 16 on-prem GPUs: on-prem only they run one after
// another; bursting, the pool's two nodes (16 GPUs) run half of them after the boot delay,
// billed from the request to their release after the idle timeout; a block-cloud budget smaller
// than one node-hour lets the first burst through and then holds the nodes out until they idle
// away.
TEST(Replay, ElasticPoolsBurstForWaitingWorkAndABudgetCapsTheSpend) {
  const std::vector<ReplayJob> jobs = Jobs(
      "1,0,3600,2,8,a,0,3600\n"
      "2,0,3600,2,8,b,0,3600\n"
      "3,0,3600,2,8,a,0,3600\n"
      "4,0,3600,2,8,b,0,3600\n");
  const ReplayCluster cluster = BurstCluster();
  ReplayOptions o;
  auto onprem = RunReplay(cluster, jobs, o);
  ASSERT_TRUE(onprem.ok()) << onprem.status().message();
  EXPECT_EQ(onprem->completed, 4);
  EXPECT_EQ(onprem->nodes_grown, 0);
  EXPECT_EQ(onprem->cloud_cost, 0);
  EXPECT_NEAR(onprem->makespan, 4 * 3600, 1);
  EXPECT_EQ(onprem->total_gpus, 16) << "the pool's nodes are not the estate's until grown";

  o.burst = true;
  auto burst = RunReplay(cluster, jobs, o);
  ASSERT_TRUE(burst.ok()) << burst.status().message();
  EXPECT_EQ(burst->completed, 4);
  EXPECT_EQ(burst->nodes_grown, 2);
  EXPECT_LT(burst->jct.mean, onprem->jct.mean);
  EXPECT_LT(burst->makespan, onprem->makespan);
  // The two nodes hold one 16-GPU job at a time: asked for at 0, up at 60 s, jobs 2 and 4 one
  // after the other (to 7,260 s), then released 300 s idle later; billed from the request.
  EXPECT_NEAR(burst->cloud_node_hours, 2 * (60 + 2 * 3600 + 300) / 3600.0, 0.01);
  EXPECT_NEAR(burst->peak_period_spend, burst->cloud_cost, 1e-6) << "one period";
  EXPECT_NEAR(burst->cloud_cost, burst->cloud_node_hours * 8 * 4.0, 1e-6);

  o.burst_budget = 10;  // less than a node-hour (32)
  o.burst_block_cloud = true;
  auto capped = RunReplay(cluster, jobs, o);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  EXPECT_EQ(capped->completed, 4);
  EXPECT_LT(capped->cloud_cost, burst->cloud_cost);
  EXPECT_GT(capped->jct.mean, burst->jct.mean);
  EXPECT_LE(capped->jct.mean, onprem->jct.mean);

  // Side by side, labelled, and the frontier table has every run.
  auto runs = RunBurstReplays(cluster, jobs, "meridian", {10}, 50, nullptr, true);
  ASSERT_EQ(runs.size(), 3u);
  std::vector<ReplayResult> ok;
  for (auto& r : runs) {
    ASSERT_TRUE(r.ok()) << r.status().message();
    ok.push_back(*r);
  }
  EXPECT_EQ(ok[0].policy, "on-prem only");
  EXPECT_EQ(ok[1].policy, "burst <= 10.00");
  EXPECT_EQ(ok[2].policy, "burst");
  std::ostringstream table;
  PrintBurstFrontier(ok, table);
  EXPECT_NE(table.str().find("block-cloud"), std::string::npos) << table.str();
  EXPECT_NE(BurstFrontierHtml(ok).find("<svg"), std::string::npos);
}

TEST(Replay, MetricsHoldTogetherAndRepeat) {
  std::string rows;
  for (int i = 0; i < 60; ++i) {
    rows += std::to_string(i + 1) + "," + std::to_string(i * 30) + "," +
            std::to_string(100 + (i * 37) % 900) + ",1," + std::to_string(1 << (i % 4)) + "," +
            (i % 2 ? "a" : "b") + "," + (i % 10 == 0 ? "100" : "0") + "," +
            std::to_string(100 + (i * 37) % 900) + "\n";
  }
  std::vector<ReplayJob> jobs = Jobs(rows);
  for (const std::string& policy : ReplayPolicyNames()) {
    ReplayOptions o;
    o.policy = policy;
    auto r = RunReplay(Cluster(), jobs, o);
    ASSERT_TRUE(r.ok()) << policy;
    EXPECT_EQ(r->completed, 60) << policy;
    EXPECT_GE(r->jct.p50, 100) << policy << ": no job finishes faster than it runs";
    EXPECT_LE(r->jct.p50, r->jct.p95);
    EXPECT_LE(r->jct.p95, r->jct.p99);
    EXPECT_GE(r->queueing_delay.mean, 0);
    // Time not running counts the wait to the first start and every wait after a preemption.
    if (r->preemptions == 0) {
      EXPECT_NEAR(r->not_running.mean, r->queueing_delay.mean, 1e-6) << policy;
    } else {
      EXPECT_GT(r->not_running.mean, r->queueing_delay.mean) << policy;
    }
    EXPECT_GT(r->utilization, 0);
    EXPECT_LE(r->utilization, 1.0 + 1e-9);
    EXPECT_GT(r->jain_fairness, 0);
    EXPECT_LE(r->jain_fairness, 1.0 + 1e-9);
    double share = 0;
    for (const ProjectStats& p : r->projects) share += p.share;
    EXPECT_NEAR(share, 1.0, 1e-9);
    EXPECT_GT(r->cost, 0);
    auto again = RunReplay(Cluster(), jobs, o);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->jct.mean, r->jct.mean) << policy << " is deterministic";
    EXPECT_EQ(again->preemptions, r->preemptions);
    if (policy == "fifo" || policy == "sjf") {
      EXPECT_EQ(r->preemptions, 0) << policy;
    }
  }
  ReplayOptions bad;
  bad.policy = "lottery";
  EXPECT_FALSE(RunReplay(Cluster(), jobs, bad).ok());
}

// A job cut at its runtime limit did less than its duration's work: its time not running is its
// wait, not its wait less what the limit cut off.
TEST(Replay, TimeNotRunningCountsTheWorkDoneNotTheDuration) {
  auto parsed = ParseReplayJobs(
      "id,submit_time,duration,tasks,gpus_per_task,project,priority,runtime_estimate,"
      "runtime_limit\n"
      "1,0,1000,2,8,a,0,1000,0\n"
      "2,0,5000,2,8,b,0,5000,600\n",
      "<test>");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ReplayOptions o;
  o.policy = "fifo";
  auto r = RunReplay(Cluster(), *parsed, o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->completed, 2);
  // Each takes the whole estate: job 2 waits for job 1 (1,000 s), then runs 600 s of its 5,000
  // (JCT less duration would say it waited -3,400 s).
  EXPECT_NEAR(r->not_running.mean, 500, 1e-6);
  EXPECT_NEAR(r->not_running.mean, r->queueing_delay.mean, 1e-6);
}

TEST(Replay, ReportsCarryEveryPolicy) {
  std::vector<ReplayJob> jobs = Jobs("1,0,100,1,8,a,0,100\n2,10,50,1,4,b,0,50\n");
  std::vector<ReplayResult> results;
  for (const char* p : {"fifo", "meridian"}) {
    ReplayOptions o;
    o.policy = p;
    results.push_back(*RunReplay(Cluster(), jobs, o));
  }
  nlohmann::json j = ReplayJson(results);
  ASSERT_EQ(j["policies"].size(), 2u);
  for (const char* k : {"jct", "queueing_delay", "not_running"}) {
    for (const char* q : {"mean", "p50", "p95", "p99"}) {
      EXPECT_TRUE(j["policies"][1][k].contains(q)) << k << "." << q;
    }
  }
  for (const char* k : {"makespan", "utilization", "jain_fairness", "preemptions"}) {
    EXPECT_TRUE(j["policies"][0].contains(k)) << k;
  }
  std::string html = ReplayHtml(results, "t <test>");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("t &lt;test&gt;"), std::string::npos);
  EXPECT_NE(html.find("meridian"), std::string::npos);
  char dir[] = "/tmp/meridian-replay-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_TRUE(WriteReplayCsv(results, dir).ok());
  std::ifstream csv(std::string(dir) + "/replay-meridian.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "time,utilization,pending,running,gpus_a,gpus_b");
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_GT(rows, 0);
  std::system((std::string("rm -rf ") + dir).c_str());
}

// Idle phases (docs/adr/0019-idle-reclamation.md): a job that holds all 16 GPUs busy for an hour
// and idle for three more blocks a second one; reclaiming it an hour into its idleness starts
// the second two hours sooner and gives back the two idle hours it would still have held.
TEST(Replay, ReclaimingAnIdleJobFreesItsGpusForTheQueue) {
  auto jobs = ParseReplayJobs(
      "id,submit_time,duration,tasks,gpus_per_task,project,idle_from\n"
      "1,0,14400,2,8,a,3600\n"
      "2,60,3600,2,8,b,\n",
      "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  EXPECT_EQ((*jobs)[0].idle_from, 3600);
  EXPECT_EQ((*jobs)[1].idle_from, -1) << "an empty cell: busy throughout";
  ReplayOptions o;
  o.policy = "fifo";
  auto plain = RunReplay(Cluster(), *jobs, o);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  o.reclaim_idle_after = 3600;
  auto reclaiming = RunReplay(Cluster(), *jobs, o);
  ASSERT_TRUE(reclaiming.ok()) << reclaiming.status().message();
  EXPECT_EQ(plain->reclaimed, 0);
  EXPECT_NEAR(plain->idle_held_gpu_hours, 16 * 3.0, 1e-6);
  EXPECT_NEAR(plain->queueing_delay.p99, 14400 - 60, 1e-6);
  EXPECT_EQ(reclaiming->reclaimed, 1);
  EXPECT_NEAR(reclaiming->idle_held_gpu_hours, 16 * 1.0, 1e-6);
  EXPECT_NEAR(reclaiming->reclaimed_gpu_hours, 16 * 2.0, 1e-6);
  EXPECT_NEAR(reclaiming->queueing_delay.p99, 7200 - 60, 1e-6);
  EXPECT_EQ(reclaiming->completed, 2);
  // Both side by side, as `sim replay --reclaim-idle-after` reports them.
  auto both = RunReplays(Cluster(), *jobs, {"fifo"}, 50, nullptr, 3600);
  ASSERT_EQ(both.size(), 2u);
  ASSERT_TRUE(both[1].ok());
  EXPECT_EQ(both[1]->policy, "fifo+reclaim");
  std::ostringstream table;
  PrintReplayTable({*both[0], *both[1]}, table);
  EXPECT_NE(table.str().find("GPU-h reclaimed"), std::string::npos) << table.str();
  EXPECT_NE(ReplayHtml({*both[0], *both[1]}, "t").find("Idle reclamation"), std::string::npos);
}

TEST(Replay, IdlePhasesAreModelledForAShareOfTheJobs) {
  std::vector<ReplayJob> jobs(1000);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].id = static_cast<int64_t>(i);
    jobs[i].duration = 1000;
  }
  jobs[0].idle_from = 10;     // its own phase is kept
  jobs[1].gpus_per_task = 0;  // CPU only: nothing to reclaim
  ModelIdlePhases(&jobs, 0.3, 0.25, 7);
  int idle = 0;
  for (const ReplayJob& j : jobs) {
    if (j.idle_from < 0 || j.id == 0) continue;
    ++idle;
    EXPECT_EQ(j.idle_from, 750);
  }
  EXPECT_EQ(jobs[0].idle_from, 10);
  EXPECT_EQ(jobs[1].idle_from, -1);
  EXPECT_NEAR(idle, 300, 50);
  auto bad =
      ParseReplayJobs("id,submit_time,duration,gpus_per_task,idle_from\n1,0,10,1,20\n", "jobs.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("jobs.csv:2:"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("idle_from: must not exceed duration"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace meridian::sim

namespace meridian::sim {
namespace {

// Two sites of one 8-GPU node each, 10 Gbit/s apart; a 1,000 GiB dataset at site-a, whose egress
// costs 0.02 a GiB; site-b caches at most 1,500 GiB.
const char* kTwoSites = R"(clusters:
  - name: site-a
    egress_per_gib: 0.02
    bandwidth_gbps: {site-b: 10}
    nodes:
      - {name: a, count: 1, gpus: 8, model: H100-80GB, cpu_milli: 128000, memory_mib: 1048576}
  - name: site-b
    cache_gib: 1500
    nodes:
      - {name: b, count: 1, gpus: 8, model: H100-80GB, cpu_milli: 128000, memory_mib: 1048576}
datasets:
  - {name: big, size_gib: 1000, clusters: [site-a]}
  - {name: other, size_gib: 600, clusters: [site-a]}
)";

std::vector<ReplayJob> DataJobs(const std::string& rows) {
  auto j = ParseReplayJobs("id,submit_time,duration,gpus_per_task,datasets\n" + rows, "jobs.csv");
  EXPECT_TRUE(j.ok()) << j.status().message();
  return j.ok() ? *j : std::vector<ReplayJob>{};
}

// The first job runs where its data is; the second, with site-a full, waits on site-b's GPUs for
// a copy (1,000 GiB at 10 Gbit/s: 859 s, egress 20); the third finds the copy cached at site-b.
TEST(ReplayData, AJobAwayFromItsDataWaitsForTheCopyAndTheNextFindsItCached) {
  auto cluster = ParseReplayCluster(kTwoSites, "sites.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  EXPECT_EQ(cluster->clusters[0].datasets, (std::vector<std::string>{"big", "other"}));
  const auto jobs = DataJobs("1,0,1000,8,big\n2,1,1000,8,big\n3,3000,1000,8,big\n4,3000,100,8,\n");
  ReplayOptions o;
  o.policy = "fifo";
  auto r = RunReplay(*cluster, jobs, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->completed, 4);
  EXPECT_EQ(r->stagings, 1);
  EXPECT_DOUBLE_EQ(r->staged_gib, 1000);
  EXPECT_NEAR(r->egress, 20, 1e-9);
  EXPECT_NEAR(r->staging_hours, 858.99 / 3600, 1e-4);
  EXPECT_NEAR(r->jct.p99, 1000 + 858.99, 0.1) << "job 2: the copy, then its work";
  // A dataset that does not exist is an error that names the job.
  auto bad = RunReplay(*cluster, DataJobs("7,0,10,1,coco\n"), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job 7: dataset \"coco\""), std::string::npos);
}

// A capped cache evicts its least recently used copy for a new one, and data-blind placement moves
// at least as much as data-aware.
TEST(ReplayData, ACappedCacheEvictsAndBlindPlacementMovesMore) {
  auto cluster = ParseReplayCluster(kTwoSites, "sites.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  // site-a is kept full by job 1; big then other go to site-b, 1,600 GiB in a 1,500 GiB cache.
  const auto jobs = DataJobs("1,0,10000,8,\n2,1,100,8,big\n3,2000,100,8,other\n");
  ReplayOptions o;
  o.policy = "fifo";
  auto r = RunReplay(*cluster, jobs, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->stagings, 2);
  EXPECT_EQ(r->evictions, 1);
  // site-b's 16-GPU node holds a long 12-GPU job (site-a's 8 cannot): best fit alone puts a
  // 4-GPU job in the 4 left there, away from its data; the data score keeps it at site-a.
  std::string text = kTwoSites;
  const std::string b = "{name: b, count: 1, gpus: 8,";
  text.replace(text.find(b), b.size(), "{name: b, count: 1, gpus: 16,");
  auto packed = ParseReplayCluster(text, "sites.yaml");
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  const auto fit = DataJobs("1,0,100000,12,\n2,10,500,4,big\n");
  auto results = RunReplays(*packed, fit, {"fifo"}, 50, nullptr, 0, /*data_blind_too=*/true);
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].ok() && results[1].ok());
  EXPECT_EQ(results[1]->policy, "fifo data-blind");
  EXPECT_DOUBLE_EQ(results[0]->staged_gib, 0) << "site-a has room, and the data";
  EXPECT_DOUBLE_EQ(results[1]->staged_gib, 1000) << "packed beside job 1 at site-b";
}

// MIG: one node partitioned (3g.40gb + 2g.20gb + 1g.10gb on each of its two GPUs), one whole.
const char* kMigEstate = R"(clusters:
  - name: onprem
    nodes:
      - {name: mig, count: 1, gpus: 2, model: H100-80GB, cpu_milli: 64000, memory_mib: 262144, mig_gpus: 2, mig_layout: "3g.40gb@0,2g.20gb@4,1g.10gb@6"}
      - {name: whole, count: 1, gpus: 2, model: H100-80GB, cpu_milli: 64000, memory_mib: 262144}
)";

// Four 1g.10gb jobs at once: the static layout has two 1g instances, so two wait; shaped by
// demand, the idle whole node is partitioned for them (a layout change) and none waits. A
// 2-GPU job afterwards: static, only the whole node takes it; by demand, the partitioned node
// too may go back whole, once its layout has kept the interval.
TEST(ReplayMig, ALayoutShapedByDemandServesWhatAStaticOneMakesWait) {
  auto cluster = ParseReplayCluster(kMigEstate, "mig.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  EXPECT_TRUE(cluster->nodes[0].gpus[1].mig_enabled);
  EXPECT_EQ(cluster->nodes[0].gpus[1].mig_instances.size(), 3u);
  auto jobs = ParseReplayJobs(
      "id,submit_time,duration,gpus_per_task,mig\n1,0,1000,1,1g.10gb\n2,0,1000,1,1g.10gb\n"
      "3,0,1000,1,1g.10gb\n4,0,1000,1,1g.10gb\n5,10,500,2,\n",
      "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  auto results = RunReplays(*cluster, *jobs, {"fifo"}, 50, nullptr, 0, false,
                            /*mig_static_too=*/true);
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].ok() && results[1].ok());
  const ReplayResult& shaped = *results[0];
  const ReplayResult& fixed = *results[1];
  EXPECT_EQ(fixed.policy, "fifo static-MIG");
  EXPECT_EQ(shaped.completed, 5);
  EXPECT_EQ(fixed.completed, 5);
  EXPECT_EQ(fixed.mig_jobs, 4);
  EXPECT_EQ(fixed.layout_changes, 0);
  EXPECT_NEAR(fixed.mig_queueing_delay.mean, 500, 1e-6) << "two of four waited 1,000 s";
  EXPECT_GT(shaped.layout_changes, 0);
  EXPECT_LT(shaped.mig_queueing_delay.mean, fixed.mig_queueing_delay.mean);
  // Static: two of the sixteen slices of the two MIG GPUs (a 1g instance each) held throughout.
  EXPECT_NEAR(fixed.slice_utilization, 2.0 / 16, 1e-9);
}

TEST(ReplayMig, BadLayoutsAndProfilesSayWhere) {
  std::string text = kMigEstate;
  const std::string layout = "3g.40gb@0,2g.20gb@4,1g.10gb@6";
  for (const auto& [bad, want] : std::vector<std::pair<std::string, std::string>>{
           {"3g.40gb@2", "\"3g.40gb@2\" is not a MIG instance of H100-80GB"},
           {"3g.40gb@0,2g.20gb@2", "\"2g.20gb@2\" overlaps an instance before it"}}) {
    std::string t = text;
    t.replace(t.find(layout), layout.size(), bad);
    auto c = ParseReplayCluster(t, "mig.yaml");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("mig.yaml:4:"), std::string::npos) << c.status().message();
  }
  auto jobs =
      ParseReplayJobs("id,submit_time,duration,gpus_per_task,mig\n1,0,10,1,5g.50gb\n", "jobs.csv");
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(jobs.status().message().find("jobs.csv:2:"), std::string::npos)
      << jobs.status().message();
  EXPECT_NE(jobs.status().message().find("\"5g.50gb\" is not a MIG profile"), std::string::npos);
}

}  // namespace
}  // namespace meridian::sim
