// Accounting end to end: a real server and a real agent (simulated GPUs, a fake: nothing real can
// run here) run real tasks; `meridian report usage` must add up to what the jobs themselves say
// they ran, must keep it across a restart of the server, and must show a member only its own.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

const char* kEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Team
metadata: {name: product}
spec: {organization: acme}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Project
metadata: {name: vision}
spec: {team: product}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, prices: {H100-80GB: 2.5}}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, gpusPerNode: 4, gpuModel: H100-80GB}
---
kind: Policy
metadata: {name: default}
spec: {heartbeatInterval: 0.2, nodeLostTimeout: 5}
)";

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class AccountingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Run("apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate), admin_);
    ASSERT_EQ(r.code, 0) << r.output;
    agent_token_ = TokenOf("agents", Json::array({{{"role", "agent"}}}));
    agent_ = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "onprem", "--pool", "h100", "--node", "n1",
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir_.File("agent-n1"), "--cpu-milli", "16000", "--memory-mib",
                                 "65536"},
        dir_.File("agent-n1.log"));
    agent_->Start(server_->url(), agent_token_);
    ASSERT_TRUE(Eventually(
        [&] {
          const Json nodes = Http(*server_, "GET", "/api/v1/nodes", admin_).body;
          for (const Json& n : nodes.value("items", Json::array())) {
            if (n.value("name", "") == "n1") return n.value("state", "") == "Ready";
          }
          return false;
        },
        30))
        << ReadFile(dir_.File("agent-n1.log"));
  }

  std::string TokenOf(const std::string& user, const Json& roles) {
    Json spec = {{"spec", {{"roles", roles}}}};
    EXPECT_EQ(Http(*server_, "PUT", "/api/v1/users/" + user, admin_, spec.dump()).status, 201);
    HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_, Json{{"user", user}}.dump());
    EXPECT_EQ(t.status, 201) << t.text;
    return t.body.value("token", "");
  }
  CliResult Run(const std::string& args, const std::string& token) {
    return Cli(kBinary, args, server_->url(), token);
  }
  int64_t Submit(const std::string& project, int gpus, const std::string& seconds) {
    Json job = {{"metadata", {{"name", "acct"}, {"project", project}}},
                {"spec",
                 {{"gpus", gpus},
                  {"cpuMilli", 2000},
                  {"memoryMib", 2048},
                  {"command", {"sleep", seconds}}}}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  // What the job itself says it ran: GPUs × (finishedAt - startedAt).
  double GpuSecondsOf(int64_t id, int gpus) {
    const Json s = GetJob(*server_, admin_, id)["status"];
    return gpus * (s.value("finishedAt", 0.0) - s.value("startedAt", 0.0));
  }
  // `report usage --by BY -o json` over the test's window, as `token` sees it.
  Json Report(const std::string& by, const std::string& token) {
    CliResult r = Run("report usage --by " + by + " --from " + std::to_string(start_ - 60) +
                          " --to " + std::to_string(WallNow() + 60) + " -o json",
                      token);
    EXPECT_EQ(r.code, 0) << r.output;
    return Json::parse(r.output, nullptr, false);
  }
  static std::map<std::string, Json> Rows(const Json& report) {
    std::map<std::string, Json> out;
    for (const Json& row : report.value("rows", Json::array())) out[row.value("key", "")] = row;
    return out;
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<AgentProcess> agent_;
  std::string admin_;
  std::string agent_token_;
  double start_ = WallNow();
};

// Two jobs that end by themselves and one cancelled while it runs: the report by project, team
// and user adds up to each job's own GPUs × (finishedAt - startedAt), within a second per job,
// at the cluster's price; a run still going counts up to now; all of it is the same after the
// server restarts; a member of one project sees that project alone; CSV has a header and a row
// per project.
TEST_F(AccountingTest, ReportUsageAddsUpToWhatEachJobRanAndSurvivesARestart) {
  const int64_t a = Submit("research", 1, "2");
  const int64_t b = Submit("vision", 2, "3");
  const int64_t c = Submit("research", 1, "600");
  ASSERT_TRUE(Eventually([&] { return Phase(c) == "Running"; }, 30)) << Phase(c);
  ASSERT_TRUE(Eventually([&] { return Phase(a) == "Succeeded" && Phase(b) == "Succeeded"; }, 60))
      << Phase(a) << " " << Phase(b) << "\n"
      << ReadFile(dir_.File("agent-n1.log"));
  // While it runs, c counts up to now.
  const Json running = Rows(Report("project", admin_)).at("research");
  EXPECT_EQ(running.value("jobs", 0), 2) << running.dump();
  EXPECT_GT(running.value("gpuSeconds", 0.0), GpuSecondsOf(a, 1)) << running.dump();
  CliResult cancel = Run("cancel " + std::to_string(c), admin_);
  ASSERT_EQ(cancel.code, 0) << cancel.output;
  ASSERT_TRUE(Eventually([&] { return Phase(c) == "Cancelled"; }, 60)) << Phase(c);
  const double ga = GpuSecondsOf(a, 1), gb = GpuSecondsOf(b, 2), gc = GpuSecondsOf(c, 1);
  ASSERT_GT(ga, 1.5);
  ASSERT_GT(gb, 5.5);
  ASSERT_GT(gc, 0);
  auto check = [&](const Json& report, const std::string& when) {
    const auto rows = Rows(report);
    ASSERT_EQ(rows.count("research"), 1u) << when << ": " << report.dump();
    ASSERT_EQ(rows.count("vision"), 1u) << when << ": " << report.dump();
    EXPECT_NEAR(rows.at("research").value("gpuSeconds", 0.0), ga + gc, 2.0) << when;
    EXPECT_NEAR(rows.at("vision").value("gpuSeconds", 0.0), gb, 1.0) << when;
    EXPECT_EQ(rows.at("research").value("jobs", 0), 2) << when;
    EXPECT_EQ(rows.at("vision").value("runs", 0), 1) << when;
    const Json total = report.value("total", Json::object());
    EXPECT_NEAR(total.value("gpuSeconds", 0.0), ga + gb + gc, 3.0) << when;
    EXPECT_NEAR(total.value("cost", 0.0), (ga + gb + gc) / 3600 * 2.5, 3.0 / 3600 * 2.5) << when;
    // 2 cores and 2 GiB per task, for as long as each ran.
    EXPECT_NEAR(total.value("cpuCoreHours", 0.0), 2 * (ga + gb / 2 + gc) / 3600, 0.01) << when;
  };
  check(Report("project", admin_), "before the restart");
  const auto teams = Rows(Report("team", admin_));
  EXPECT_NEAR(teams.at("lab").value("gpuSeconds", 0.0), ga + gc, 2.0);
  EXPECT_NEAR(teams.at("product").value("gpuSeconds", 0.0), gb, 1.0);
  EXPECT_EQ(Rows(Report("cluster", admin_)).count("onprem"), 1u);
  EXPECT_EQ(Rows(Report("gpuModel", admin_)).count("H100-80GB"), 1u);

  // Acknowledged is durable: the records are the server's store's, not its memory's, and a
  // server killed outright keeps them.
  server_->Stop(SIGKILL);
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
  check(Report("project", admin_), "after the restart");

  // Over time, in steps of a minute: each project's steps add up to its row (the dashboard's
  // spend chart reads this).
  {
    const int64_t from = static_cast<int64_t>(start_ - 60);
    const int64_t to = static_cast<int64_t>(WallNow() + 60);
    HttpResult over = Http(*server_, "GET",
                           "/api/v1/reports/usage?from=" + std::to_string(from) +
                               "&to=" + std::to_string(to) + "&step=60",
                           admin_);
    ASSERT_EQ(over.status, 200) << over.text;
    const Json& series = over.body["series"];
    EXPECT_EQ(series["at"].size(), static_cast<size_t>((to - from + 59) / 60)) << over.text;
    const auto rows = Rows(over.body);
    for (const Json& k : series.value("keys", Json::array())) {
      double gpu_hours = 0, cost = 0;
      for (const Json& v : k["gpuHours"]) gpu_hours += v.get<double>();
      for (const Json& v : k["cost"]) cost += v.get<double>();
      const Json& row = rows.at(k.value("key", ""));
      EXPECT_NEAR(gpu_hours, row.value("gpuHours", 0.0), 0.001) << k.dump();
      EXPECT_NEAR(cost, row.value("cost", 0.0), 0.001) << k.dump();
    }
    EXPECT_EQ(series["keys"].size(), rows.size());
    HttpResult fine =
        Http(*server_, "GET", "/api/v1/reports/usage?from=0&to=86400&step=10", admin_);
    EXPECT_EQ(fine.status, 400);
    EXPECT_EQ(fine.body["error"].value("field", ""), "step") << fine.text;
  }

  // A member of research sees research alone.
  const std::string ann =
      TokenOf("ann", Json::array({{{"role", "member"}, {"project", "research"}}}));
  const auto seen = Rows(Report("project", ann));
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen.count("research"), 1u);

  // The table, as a person reads it: a row per project and the total.
  CliResult table =
      Run("report usage --by project --from " + std::to_string(static_cast<int64_t>(start_ - 60)),
          admin_);
  ASSERT_EQ(table.code, 0) << table.output;
  EXPECT_NE(table.output.find("PROJECT"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("\nTOTAL"), std::string::npos) << table.output;
  std::cout << table.output;

  // CSV: a header and a row per project.
  CliResult csv =
      Run("report usage --by project --from " + std::to_string(start_ - 60) + " -o csv", admin_);
  ASSERT_EQ(csv.code, 0) << csv.output;
  std::istringstream lines(csv.output);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  ASSERT_EQ(got.size(), 3u) << csv.output;
  EXPECT_EQ(got[0].rfind("project,jobs,runs,gpu-hours,", 0), 0u) << got[0];
  EXPECT_EQ(got[1].rfind("research,2,2,", 0), 0u) << got[1];

  // Bad input names the flag.
  CliResult bad = Run("report usage --from yesterday-ish", admin_);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--from"), std::string::npos) << bad.output;
  HttpResult wrong = Http(*server_, "GET", "/api/v1/reports/usage?by=galaxy", admin_);
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(wrong.body["error"].value("field", ""), "by") << wrong.text;
}

}  // namespace
}  // namespace meridian::testing
