// End-to-end tests of the `meridian` binary: each runs it as a real child process and checks what
// a user would see (output, JSON, exit code, error messages).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct CliRun {
  int code = -1;
  std::string out;  // stdout and stderr together
};

CliRun Meridian(const std::string& args, bool merge_stderr = true) {
  std::string cmd = std::string(MERIDIAN_BINARY) + " " + args + (merge_stderr ? " 2>&1" : "");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meridian-cli-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Write("nodes.csv",
          "sn,cpu_milli,memory_mib,gpu,model\n"
          "n0,64000,262144,8,G2\nn1,64000,262144,8,G2\nn2,32000,131072,2,T4\n");
    std::string tasks =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n";
    for (int i = 0; i < 30; ++i) {
      tasks += "t" + std::to_string(i) + ",2000,4096," +
               (i % 3 == 0   ? "1,500"
                : i % 3 == 1 ? "1,1000"
                             : "0,0") +
               ",,LS,Running,0,,\n";
    }
    Write("tasks.csv", tasks);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

TEST_F(CliTest, SimFgdJsonCarriesEveryPointAsBands) {
  CliRun r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
                          " --policy fgd --seeds 42-44 --inflate 1.3 --json",
                      false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["points"].size(), 7u);
  int arrived[] = {50, 80, 90, 100, 110, 120, 130};
  for (size_t i = 0; i < 7; ++i) {
    const auto& p = j["points"][i];
    EXPECT_EQ(p["arrived"], arrived[i]);
    for (const char* k : {"allocation", "fragmentation_amount", "fragmentation_ratio"}) {
      double mean = p[k]["mean"], lo = p[k]["min"], hi = p[k]["max"];
      EXPECT_LE(lo, mean);
      EXPECT_LE(mean, hi);
      EXPECT_GE(lo, 0.0);
    }
    EXPECT_LE(p["allocation"]["max"].get<double>(), 100.0);
  }
  EXPECT_EQ(j["policies"][0]["seeds"].size(), 3u);
}

TEST_F(CliTest, SimFgdTableComparesSeveralPolicies) {
  CliRun r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
                      " --policy best-fit --policy meridian --seeds 1-2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("policy best-fit"), std::string::npos);
  EXPECT_NE(r.out.find("policy meridian"), std::string::npos);
  EXPECT_NE(r.out.find("130%"), std::string::npos);
}

TEST_F(CliTest, BadInputGetsAClearErrorAndExitCode2) {
  Write("bad.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\nt0,4000,8192,1,lots,,LS,Running,0,,\n");
  CliRun r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("bad.csv"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(Path("bad.csv") + ":2:16: gpu_milli: expected an integer"),
            std::string::npos)
      << r.out;

  r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
               " --policy tetris");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown policy \"tetris\""), std::string::npos) << r.out;

  r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
               " --seeds 9-3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--seeds"), std::string::npos) << r.out;

  r = Meridian("sim fgd --nodes " + Path("missing.csv") + " --tasks " + Path("tasks.csv"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;

  // The generator's shape flags name themselves when out of range.
  for (const auto& [flags, named] : std::vector<std::pair<std::string, std::string>>{
           {"--shape deep --max-gang-gpus 96", "--max-gang-gpus"},
           {"--shape deep --gpus 64 --max-gang-gpus 128", "--max-gang-gpus"},
           {"--shape deep --max-gang-gpus 1", "--max-gang-gpus"},
           {"--shape deep --estimate-noise -1", "--estimate-noise"},
           {"--estimate-noise 1", "--shape deep"},
           {"--tenants 0", "--tenants"},
           {"--shape deep --sweep-share 1.5", "--sweep-share"},
           {"--sweep-share 0.3", "--shape deep"},
           {"--shape wide", "--shape"}}) {
    r = Meridian("sim generate --out " + Path("g") + " " + flags);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.out;
    EXPECT_NE(r.out.find(named), std::string::npos) << flags << ": " << r.out;
  }
}

// A variant of the task list, its report and its margins; a share out of range or a comparison
// with published figures of another list is refused with the flag named.
TEST_F(CliTest, SimFgdVariantsWriteTheListTheReportAndTheMargins) {
  CliRun r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
                          " --policy meridian --policy fgd --seeds 1-2 --constrained 0.5"
                          " --write-tasks " +
                          Path("variant.csv") + " --html " + Path("report.html") + " --json",
                      false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["workload"], "tasks+constrained50");
  ASSERT_EQ(j["policies"][0]["curve"].size(), 131u);  // 0..130% arrived
  ASSERT_EQ(j["margins"].size(), 1u);
  EXPECT_EQ(j["margins"][0]["policy"], "meridian");
  EXPECT_EQ(j["margins"][0]["against"], "fgd");
  EXPECT_GE(j["margins"][0]["arrived"].get<int>(), 50);
  std::ifstream variant(Path("variant.csv"));
  std::string line;
  int constrained = 0, gpu = 0;
  std::getline(variant, line);  // the header
  while (std::getline(variant, line)) {
    std::vector<std::string> cells;
    std::stringstream in(line);
    for (std::string c; std::getline(in, c, ',');) cells.push_back(c);
    ASSERT_GE(cells.size(), 6u) << line;
    if (cells[3] == "0") continue;
    ++gpu;
    constrained += cells[5].empty() ? 0 : 1;
  }
  EXPECT_EQ(gpu, 20);
  EXPECT_EQ(constrained, 10);
  std::ifstream html(Path("report.html"));
  std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("Margin over FGD"), std::string::npos);

  r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
               " --constrained 1.5");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--constrained: a share in [0, 1]"), std::string::npos) << r.out;
  r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
               " --multi-gpu 0.2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--multi-gpu: the task list has no multi-GPU task to draw from"),
            std::string::npos)
      << r.out;
  r = Meridian("sim fgd --nodes " + Path("nodes.csv") + " --tasks " + Path("tasks.csv") +
               " --fractional 0.9 --compare " + Path("tasks.csv"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("not of a variant"), std::string::npos) << r.out;
}

TEST_F(CliTest, DemoPlacesOnBothClusters) {
  CliRun r = Meridian("sim demo");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("onprem-fra/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cloud-use1/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MIG 3g.40gb"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pending:"), std::string::npos) << r.out;  // the 16-GPU job cannot fit
}

TEST_F(CliTest, BenchScheduleReportsItsFigures) {
  CliRun r = Meridian("bench schedule --nodes 200 --gpus-per-node 8 --pending 2000 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tasks"], 2000);
  EXPECT_GT(j["placed"].get<int>(), 0);
  EXPECT_EQ(j["placed"].get<int>() + j["unschedulable"].get<int>(), 2000);
  EXPECT_GT(j["placements_per_second"].get<double>(), 0.0);
  EXPECT_GT(j["peak_rss_mib"].get<double>(), 0.0);
  EXPECT_GT(j["cycle_seconds"].get<double>(), 0.0);
}

// A real server with simulated agents that keep their waits for orders open: every heartbeat
// answered, and jobs submitted meanwhile Running well before a heartbeat interval (2 s) passes.
TEST_F(CliTest, BenchAgentsHeartbeatsAndStartsJobsAtOnce) {
  CliRun r = Meridian(
      "bench agents --agents 20 --seconds 6 --jobs 20 --probes 5 --dashboards 1 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["heartbeats"].get<int>(), 40);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["nodes_lost"], 0);
  EXPECT_GE(j["tasks_running"].get<int>(), 20);
  EXPECT_GE(j["probes"].get<int>(), 3) << r.out;
  EXPECT_EQ(j["probes_late"], 0);
  EXPECT_LT(j["probe_max_ms"].get<double>(), 1500) << "pushed, not at a heartbeat 2 s later";
}

// bench server, small: every busy node filled, the queue behind it, the probes on the spare node.
TEST_F(CliTest, BenchServerFillsTheEstateQueuesBehindItAndStartsProbesOnTheSpareNode) {
  CliRun r = Meridian(
      "bench server --nodes 12 --pending 150 --seconds 3 --probes 3 --interval 1 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["spare_nodes"], 1);
  EXPECT_EQ(j["running"], 11) << "one whole-node job on each H100 node";
  EXPECT_EQ(j["pending"], 150) << "and none of the queue on the spare A100 node";
  EXPECT_EQ(j["probes"], 3) << r.out;
  EXPECT_EQ(j["probes_late"], 0);
  EXPECT_GT(j["heartbeats"].get<int>(), 12);
  EXPECT_EQ(j["heartbeat_errors"], 0);
  EXPECT_GT(j["cycles"].get<int>(), 0);
  EXPECT_GT(j["server_rss_mib"].get<double>(), 0);
  CliRun bad = Meridian("bench server --nodes 12 --probes 9");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--probes: 0 to the spare nodes' GPUs (8)"), std::string::npos) << bad.out;
}

TEST_F(CliTest, ReplayComparesPoliciesAndWritesItsReports) {
  CliRun g = Meridian("sim generate --jobs 300 --gpus 32 --load 0.9 --seed 3 --out " + Path("w"));
  ASSERT_EQ(g.code, 0) << g.out;
  CliRun r =
      Meridian("sim replay --cluster " + Path("w/cluster.yaml") + " --jobs " + Path("w/jobs.csv") +
                   " --json --csv " + Path("csv") + " --html " + Path("report.html"),
               false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["policies"].size(), 4u);
  for (const auto& p : j["policies"]) {
    for (const char* k : {"jct", "queueing_delay"}) {
      for (const char* q : {"mean", "p50", "p95", "p99"}) {
        ASSERT_TRUE(p[k].contains(q)) << p["policy"] << " " << k << "." << q;
      }
      EXPECT_LE(p[k]["p50"].get<double>(), p[k]["p99"].get<double>());
    }
    EXPECT_EQ(p["completed"], 300) << p["policy"];
    EXPECT_GT(p["makespan"].get<double>(), 0);
    EXPECT_GT(p["utilization"].get<double>(), 0);
    EXPECT_LE(p["utilization"].get<double>(), 1.0);
    EXPECT_GT(p["jain_fairness"].get<double>(), 0);
    EXPECT_GE(p["preemptions"].get<int>(), 0);
  }
  std::ifstream html(Path("report.html"));
  std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("GPU utilisation over time"), std::string::npos);
  EXPECT_NE(page.find("<polyline"), std::string::npos);
  std::ifstream csv(Path("csv/replay-las.csv"));
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("time,utilization,pending,running,gpus_", 0), 0u) << header;

  Write("bad.yaml", "clusters:\n  - name: x\n    nodes:\n      - {name: n, gpus: 8}\n");
  CliRun bad =
      Meridian("sim replay --cluster " + Path("bad.yaml") + " --jobs " + Path("w/jobs.csv"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find(Path("bad.yaml") + ":4:9: clusters[0].nodes[0]"), std::string::npos)
      << bad.out;
}

}  // namespace
