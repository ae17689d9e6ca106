#include "sim/history.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace meridian::sim {
namespace {

// What GET /api/v1/nodes answers for one node (the fields the trace reads).
Json NodeJson(const std::string& name, const std::string& pool, bool declared, int gpus) {
  Json g = Json::array();
  for (int i = 0; i < gpus; ++i)
    g.push_back({{"index", i}, {"uuid", name + "-" + std::to_string(i)}});
  return {{"name", name},
          {"cluster", "onprem"},
          {"pool", pool},
          {"rack", "r0"},
          {"model", "H100-80GB"},
          {"cpuMilli", 128000},
          {"memoryMib", 1048576},
          {"source", declared ? "declared" : "registered"},
          {"labels", {{"zone", "a"}}},
          {"gpus", g}};
}

Json Doc(const std::string& kind, const std::string& name, Json spec) {
  return {{"kind", kind}, {"metadata", {{"name", name}}}, {"spec", std::move(spec)}};
}

// A job as GET /api/v1/jobs answers it; spec in canonical form is what the server stores, and
// DecodeJobSpec fills the defaults of what is left out.
Json JobJson(int64_t id, const std::string& project, Json spec, Json status) {
  return {{"id", id},
          {"kind", "Job"},
          {"metadata", {{"name", "j" + std::to_string(id)}, {"project", project}}},
          {"spec", std::move(spec)},
          {"status", std::move(status)}};
}

Json Command() { return Json::array({"true"}); }

LiveState Live() {
  LiveState live;
  live.nodes = {NodeJson("agent-0", "trainers", false, 8), NodeJson("spare-0", "spare", true, 8)};
  live.documents = {
      Doc("Cluster", "onprem", {{"type", "on-prem"}, {"prices", {{"H100-80GB", 2.5}}}}),
      Doc("NodePool", "spare",
          {{"cluster", "onprem"}, {"nodes", 1}, {"gpuModel", "H100-80GB"}, {"gpusPerNode", 8}}),
      Doc("Project", "vision", {{"team", "research"}, {"weight", 2}}),
      Doc("Project", "nlp", {{"team", "research"}, {"weight", 1}}),
      Doc("Quota", "vision-gpus",
          {{"project", "vision"}, {"guaranteedGpus", 4}, {"limitGpus", 12}}),
      Doc("PriorityClass", "urgent", {{"value", 100}}),
      Doc("Policy", "default", {{"queueOrder", "fifo"}, {"preemption", false}}),
  };
  const double t0 = 1'800'000'000;
  live.jobs = {
      // Ran 2 h, finished.
      JobJson(1, "vision", {{"command", Command()}, {"gpus", 4}, {"tasks", 2}},
              {{"phase", "Succeeded"},
               {"submittedAt", t0 + 10},
               {"startedAt", t0 + 70},
               {"finishedAt", t0 + 70 + 7200}}),
      // Still running since t0 + 600: its run so far.
      JobJson(2, "nlp", {{"command", Command()}, {"gpuMilli", 500}, {"priorityClass", "urgent"}},
              {{"phase", "Running"}, {"submittedAt", t0 + 500}, {"startedAt", t0 + 600}}),
      // Pending with a runtime limit: replayed with it.
      JobJson(3, "nlp", {{"command", Command()}, {"gpus", 1}, {"runtimeLimit", "1h"}},
              {{"phase", "Pending"}, {"submittedAt", t0 + 900}}),
      // Cancelled before it ran: nothing to replay.
      JobJson(4, "nlp", {{"command", Command()}, {"gpus", 1}, {"runtimeLimit", "1h"}},
              {{"phase", "Cancelled"}, {"submittedAt", t0 + 950}}),
      // Pending, and nothing says how long it would run.
      JobJson(5, "nlp", {{"command", Command()}, {"gpus", 1}},
              {{"phase", "Pending"}, {"submittedAt", t0 + 990}}),
      // Before the window.
      JobJson(6, "nlp", {{"command", Command()}, {"gpus", 1}},
              {{"phase", "Succeeded"},
               {"submittedAt", t0 - 10},
               {"startedAt", t0 - 5},
               {"finishedAt", t0 + 5}}),
  };
  return live;
}

constexpr double kT0 = 1'800'000'000;

TEST(History, JobsOfTheWindowBecomeReplayJobsWithWhatTheyRan) {
  auto trace = TraceOfHistory(Live(), kT0, 0, kT0 + 10000);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  ASSERT_EQ(trace->jobs.size(), 3u);
  const ReplayJob& done = trace->jobs[0];
  EXPECT_EQ(done.id, 1);
  EXPECT_DOUBLE_EQ(done.submit_time, 10);
  EXPECT_DOUBLE_EQ(done.duration, 7200);
  EXPECT_EQ(done.tasks, 2);
  EXPECT_EQ(done.gpus_per_task, 4);
  EXPECT_EQ(done.project, "vision");
  const ReplayJob& running = trace->jobs[1];
  EXPECT_DOUBLE_EQ(running.duration, 9400);  // until now
  EXPECT_EQ(running.gpu_milli, 500);
  EXPECT_EQ(running.priority, 100);
  const ReplayJob& pending = trace->jobs[2];
  EXPECT_EQ(pending.id, 3);
  EXPECT_DOUBLE_EQ(pending.duration, 3600);
  EXPECT_EQ(trace->left_out, 2);  // the cancelled one and the one nothing times

  ASSERT_EQ(trace->cluster.nodes.size(), 2u);
  EXPECT_EQ(trace->cluster.declared, std::set<std::string>{"spare-0"});
  ASSERT_EQ(trace->cluster.clusters.size(), 1u);
  EXPECT_EQ(trace->cluster.clusters[0].price_per_gpu_hour.at("H100-80GB"), 2.5);
  ASSERT_EQ(trace->cluster.projects.size(), 2u);
  const ReplayProject& vision = trace->cluster.projects[1];
  EXPECT_EQ(vision.name, "vision");
  EXPECT_EQ(vision.weight, 2);
  EXPECT_EQ(vision.guaranteed_gpus, 4);
  EXPECT_EQ(vision.limit_gpus, 12);
}

TEST(History, AWindowWithNothingThatRanIsAnErrorThatSaysSo) {
  auto trace = TraceOfHistory(Live(), kT0 + 5000, kT0 + 6000, kT0 + 7000);
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("no job submitted between --from and --to"),
            std::string::npos);
  auto backwards = TraceOfHistory(Live(), kT0, kT0 - 1, kT0 + 7000);
  ASSERT_FALSE(backwards.ok());
  EXPECT_NE(backwards.status().message().find("--to"), std::string::npos);
}

// What a store written by hand or by another version may hold: a null time, a spec that no longer
// reads, a job without one. Each is left out and said, never the end of the export.
TEST(History, JobsThatDoNotReadAreLeftOutAndCountedNotFatal) {
  LiveState live = Live();
  live.jobs.push_back(
      JobJson(7, "nlp", {{"command", Command()}, {"gpus", 1}},
              {{"phase", "Running"}, {"submittedAt", kT0 + 20}, {"startedAt", nullptr}}));
  live.jobs.push_back(JobJson(8, "nlp", {{"command", Command()}, {"gpus", "many"}},
                              {{"phase", "Succeeded"},
                               {"submittedAt", kT0 + 30},
                               {"startedAt", kT0 + 31},
                               {"finishedAt", kT0 + 40}}));
  live.jobs.push_back({{"id", 9}, {"status", {{"submittedAt", kT0 + 40}}}});
  auto trace = TraceOfHistory(live, kT0, 0, kT0 + 10000);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->jobs.size(), 3u);  // those of Live() that ran or have a limit
  const std::string notes = [&] {
    std::string all;
    for (const std::string& n : trace->notes) all += n + "\n";
    return all;
  }();
  EXPECT_NE(notes.find("2 job(s) left out: their stored spec no longer reads"), std::string::npos)
      << notes;
  // Job 7 has no start to read and nothing says how long it would run.
  EXPECT_EQ(trace->left_out, 3);
  EXPECT_NE(notes.find("1 job(s) submitted before the window still held GPUs"), std::string::npos)
      << notes;  // job 6 ran from before kT0 to after it
}

TEST(History, TheWrittenTraceIsReadBackAsItWasWritten) {
  auto trace = TraceOfHistory(Live(), kT0, 0, kT0 + 10000);
  ASSERT_TRUE(trace.ok());
  auto cluster = ParseReplayCluster(ReplayClusterYaml(trace->cluster), "cluster.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  auto jobs = ParseReplayJobs(ReplayJobsCsv(trace->jobs), "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(cluster->nodes.size(), 2u);
  EXPECT_EQ(cluster->nodes[1].name, "spare-0");
  EXPECT_EQ(cluster->nodes[1].pool, "spare");
  EXPECT_EQ(cluster->nodes[1].gpus.size(), 8u);
  EXPECT_EQ(cluster->nodes[0].labels.at("zone"), "a");
  EXPECT_EQ(cluster->declared, trace->cluster.declared);
  ASSERT_EQ(cluster->projects.size(), 2u);
  EXPECT_EQ(cluster->projects[1].limit_gpus, 12);
  ASSERT_EQ(jobs->size(), trace->jobs.size());
  for (size_t i = 0; i < jobs->size(); ++i) {
    const ReplayJob& a = trace->jobs[i];
    const ReplayJob& b = (*jobs)[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_DOUBLE_EQ(a.submit_time, b.submit_time);
    EXPECT_DOUBLE_EQ(a.duration, b.duration);
    EXPECT_EQ(a.tasks, b.tasks);
    EXPECT_EQ(a.gpus_per_task, b.gpus_per_task);
    EXPECT_EQ(a.gpu_milli, b.gpu_milli);
    EXPECT_EQ(a.priority, b.priority);
    EXPECT_EQ(a.project, b.project);
    EXPECT_DOUBLE_EQ(a.runtime_estimate, b.runtime_estimate);
    EXPECT_DOUBLE_EQ(a.runtime_limit, b.runtime_limit);
    EXPECT_EQ(a.gang, b.gang);
  }
}

TEST(History, ProposedDocumentsResizePoolsAndChangeTenantsAndPolicyButKeepAgentsNodes) {
  auto trace = TraceOfHistory(Live(), kT0, 0, kT0 + 10000);
  ASSERT_TRUE(trace.ok());
  const Json changes = Json::array({
      Doc("NodePool", "spare",
          {{"cluster", "onprem"}, {"nodes", 3}, {"gpuModel", "H100-80GB"}, {"gpusPerNode", 4}}),
      Doc("Quota", "nlp-gpus", {{"project", "nlp"}, {"guaranteedGpus", 2}}),
      Doc("Policy", "default",
          {{"queueOrder", "sjf"},
           {"backfill", false},
           {"usageStretch", 0},
           {"firstStartWithin", 0},
           {"firstStartPreemptsAfter", 900}}),
  });
  const Json proposed = ProposedDocuments(Live().documents, changes, false);
  const ReplaySetup now = SetupOfDocuments(trace->cluster, Live().documents);
  const ReplaySetup then = SetupOfDocuments(trace->cluster, proposed);
  EXPECT_EQ(now.options.policy, "fifo");
  EXPECT_EQ(now.options.preemption, false);
  EXPECT_EQ(then.options.policy, "sjf");
  EXPECT_EQ(then.options.backfill, false);
  EXPECT_FALSE(then.options.preemption.has_value());  // left out: the queue order's own
  EXPECT_FALSE(now.options.usage_stretch.has_value());
  EXPECT_EQ(then.options.usage_stretch, 0.0);
  EXPECT_EQ(then.options.first_start_within, 0.0);
  EXPECT_EQ(then.options.first_start_preempts_after, 900.0);
  ASSERT_EQ(now.cluster.nodes.size(), 2u);
  ASSERT_EQ(then.cluster.nodes.size(), 4u);  // agent-0 and three declared nodes of 4 GPUs
  EXPECT_EQ(then.cluster.nodes[0].name, "agent-0");
  EXPECT_EQ(then.cluster.nodes[3].name, "spare-2");
  EXPECT_EQ(then.cluster.nodes[3].gpus.size(), 4u);
  EXPECT_EQ(then.cluster.declared.size(), 3u);
  auto nlp = std::find_if(then.cluster.projects.begin(), then.cluster.projects.end(),
                          [](const ReplayProject& p) { return p.name == "nlp"; });
  ASSERT_NE(nlp, then.cluster.projects.end());
  EXPECT_EQ(nlp->guaranteed_gpus, 2);
  // With --prune the files are the whole state: no Project, no quota is left.
  const ReplaySetup pruned =
      SetupOfDocuments(trace->cluster, ProposedDocuments(Live().documents, changes, true));
  EXPECT_TRUE(pruned.cluster.projects.empty());
}

// Eight GPUs; "big" fills them with ten 1 h jobs at once, "small" then asks for ten 10-minute
// single-GPU jobs. First in, first out, small waits behind all of big; shortest first, it goes
// ahead of most of them.
TEST(History, AQueueOrderProposedForTheTraceShowsItsEffectPerProject) {
  ReplayCluster cluster;
  cluster.clusters.push_back({});
  cluster.clusters[0].name = "c";
  domain::Node n;
  n.name = "n";
  n.cluster = "c";
  n.cpu_milli = 1'000'000;
  n.memory_mib = 1'000'000;
  for (int i = 0; i < 8; ++i) {
    domain::GpuDevice d;
    d.uuid = "GPU-" + std::to_string(i);
    d.model = "H100-80GB";
    n.gpus.push_back(d);
  }
  cluster.nodes.push_back(n);
  std::vector<ReplayJob> jobs;
  for (int i = 0; i < 20; ++i) {
    ReplayJob j;
    j.id = i + 1;
    const bool big = i < 10;
    j.project = big ? "big" : "small";
    j.submit_time = big ? 0 : 60;
    j.duration = big ? 3600 : 600;
    j.runtime_estimate = j.duration;
    j.gpus_per_task = big ? 8 : 1;
    j.cpu_milli = 1000;
    j.memory_mib = 1000;
    jobs.push_back(j);
  }
  const Json live = Json::array({Doc("Policy", "default", {{"queueOrder", "fifo"}})});
  const Json proposed = ProposedDocuments(
      live, Json::array({Doc("Policy", "default", {{"queueOrder", "sjf"}})}), false);
  const ReplaySetup now = SetupOfDocuments(cluster, live);
  const ReplaySetup then = SetupOfDocuments(cluster, proposed);
  auto a = RunReplay(now.cluster, jobs, now.options);
  auto b = RunReplay(then.cluster, jobs, then.options);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  const Json report = WhatIfJson(*a, *b);
  ASSERT_EQ(report.at("projects").size(), 2u);
  const Json& small = report.at("projects")[1];
  EXPECT_EQ(small.at("project"), "small");
  EXPECT_EQ(small.at("current").at("jobs"), 10);
  const double wait_now = small.at("current").at("meanWaitSeconds");
  const double wait_then = small.at("proposed").at("meanWaitSeconds");
  EXPECT_GT(wait_now, 9 * 3600 - 60);  // behind all ten big jobs
  // Shortest first serves it after the big job that runs, and after the big jobs that waited
  // past the Policy's reserveAfter (an hour) and hold a reservation.
  EXPECT_LT(wait_then, wait_now / 2);
  const WhatIfText table = WhatIfTable(*a, *b);
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[1][0], "small");
  EXPECT_NE(table.estate.find("queue order fifo -> sjf"), std::string::npos) << table.estate;
}

}  // namespace
}  // namespace meridian::sim
