// Several `meridian server` replicas on one real PostgreSQL (docs/adr/0028): the leader is
// killed with SIGKILL over and over while a client submits jobs through the real CLI (every
// replica's address, following redirects) and real agents run them. Every job acknowledged is
// run, none runs twice at once (counted from the tasks' own output), and a new leader accepts
// writes soon after each kill: the takeover times are printed.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "base/testing/temp_dir.h"
#include "store/testing/postgres_server.h"
#include "tests/postgres_fixtures.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* kEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, gpusPerNode: 4, gpuModel: H100-80GB}
)";

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// A run of a task: its job, generation, and first and last moment (from its own output).
struct TaskRun {
  double start = 0, end = 0;
  bool ended = false;
};

// With two replicas and with three (the parameter).
class KilledLeaders : public ::testing::TestWithParam<int> {};

TEST_P(KilledLeaders, KillNineOfTheLeaderLosesNoAcknowledgedJobAndRunsNoneTwiceAtOnce) {
  base::testing::TempDir dir;
  // Tasks run under uids of their own: they pass through the test's folder to the shared one.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);
  const std::string shared = dir.File("shared");
  ::mkdir(shared.c_str(), 0777);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  const std::string trace = shared + "/runs.log";
  { std::ofstream{trace}; }
  ASSERT_EQ(::chmod(trace.c_str(), 0666), 0);

  store::testing::PostgresServer pg;
  ASSERT_EQ(pg.Start(), "");
  std::string error;
  const std::string conninfo = pg.Database("meridian", &error);
  ASSERT_NE(conninfo, "") << error;
  const std::string url = "postgresql://postgres@/meridian?host=" + pg.socket_dir();

  const int kReplicas = GetParam();
  std::vector<std::unique_ptr<ServerProcess>> replicas;
  for (int i = 0; i < kReplicas; ++i) {
    replicas.push_back(std::make_unique<ServerProcess>(kBinary, dir.File("r" + std::to_string(i)),
                                                       std::vector<std::string>{"--store", url}));
    ASSERT_TRUE(replicas.back()->Start()) << ReadFile(dir.File("r" + std::to_string(i) + ".log"));
  }
  // The first leads (it bootstrapped the estate); the others follow.
  const std::string admin = replicas[0]->admin_token();
  ASSERT_FALSE(admin.empty());
  std::string all;
  for (auto& r : replicas) all += (all.empty() ? "" : ",") + r->url();
  ASSERT_EQ(Sql(conninfo, "SELECT url FROM leader"), replicas[0]->url());

  // A follower: reads from the database; the rest sent on to the leader, whose answer it gives
  // (tests/postgres_test.cc checks what is forwarded).
  EXPECT_EQ(Http(*replicas[1], "GET", "/api/v1/jobs", admin).status, 200);

  { std::ofstream(dir.File("estate.yaml")) << kEstate; }
  CliResult applied = Cli(kBinary, "apply -f " + dir.File("estate.yaml") + " -m first", all, admin);
  ASSERT_EQ(applied.code, 0) << applied.output;
  Json user = {{"spec", {{"roles", Json::array({{{"role", "agent"}}})}}}};
  ASSERT_EQ(Http(*replicas[0], "PUT", "/api/v1/users/agents", admin, user.dump()).status, 201);
  HttpResult t = Http(*replicas[0], "POST", "/api/v1/tokens", admin,
                      Json{{"user", "agents"}, {"description", "agents"}}.dump());
  ASSERT_EQ(t.status, 201) << t.text;
  const std::string agent_token = t.body.value("token", "");

  // Two agents of 4 simulated GPUs, each given every replica's address.
  std::vector<std::unique_ptr<AgentProcess>> agents;
  for (const std::string node : {"n1", "n2"}) {
    agents.push_back(std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "onprem", "--pool", "h100", "--node", node,
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir.File("agent-" + node), "--cpu-milli", "16000", "--memory-mib",
                                 "65536"},
        dir.File("agent-" + node + ".log")));
    agents.back()->Start(all, agent_token);
  }
  ASSERT_TRUE(Eventually([&] {
    HttpResult nodes = Http(*replicas[0], "GET", "/api/v1/nodes", admin);
    return nodes.body.is_object() && nodes.body.value("items", Json::array()).size() == 2;
  }));

  // Every run writes "<job> <generation> start|end <time>" to the trace.
  const std::string task =
      "echo \"$MERIDIAN_JOB_ID $MERIDIAN_GENERATION start $(date +%s.%N)\" >> " + trace +
      "; sleep 0.5; echo \"$MERIDIAN_JOB_ID $MERIDIAN_GENERATION end " + "$(date +%s.%N)\" >> " +
      trace;
  std::mutex acked_mu;
  std::set<int64_t> acked;
  auto ack = [&](int64_t id) {
    std::lock_guard<std::mutex> lock(acked_mu);
    acked.insert(id);
  };
  // The client: the real CLI with every replica's address, a submission every 0.3 s.
  std::atomic<bool> submitting{true};
  std::atomic<int> refused{0};
  std::thread client([&] {
    while (submitting) {
      CliResult r =
          Cli(kBinary, "submit -p research --gpus 1 --name c -- sh -c '" + task + "'", all, admin);
      int64_t id = 0;
      if (r.code == 0 && std::sscanf(r.output.c_str(), "job %ld submitted", &id) == 1) {
        ack(id);
      } else {
        ++refused;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });

  // Kill the leader, measure until a replica accepts a write (a job submitted straight to it),
  // restart the killed one as a follower; as many times as fit in about 60 s, at most 20.
  const Json probe = {{"metadata", {{"name", "probe"}, {"project", "research"}}},
                      {"spec", {{"gpus", 1}, {"command", {"sh", "-c", task}}}}};
  std::vector<double> takeovers;
  std::string revoked;  // a token the followers read, then revoked by the leader
  auto revoked_at = std::chrono::steady_clock::now();
  const auto phase_end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (takeovers.size() < 20 && std::chrono::steady_clock::now() < phase_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // work goes on meanwhile
    const std::string leader_url = Sql(conninfo, "SELECT url FROM leader");
    int leader = -1;
    for (int i = 0; i < kReplicas; ++i) {
      if (replicas[i]->url() == leader_url) leader = i;
    }
    ASSERT_GE(leader, 0) << leader_url;
    if (takeovers.empty()) {
      // Before the first kill, each follower reads a token (whoami: it answers that itself), and
      // the leader revokes it: the followers' own store generations do not move.
      HttpResult made =
          Http(*replicas[leader], "POST", "/api/v1/tokens", admin, Json{{"user", "agents"}}.dump());
      ASSERT_EQ(made.status, 201) << made.text;
      revoked = made.body.value("token", "");
      const std::string revoked_id = made.body.value("id", "");
      for (int i = 0; i < kReplicas; ++i) {
        if (i == leader) continue;
        ASSERT_EQ(Http(*replicas[i], "GET", "/api/v1/whoami", revoked).status, 200);
      }
      ASSERT_EQ(Http(*replicas[leader], "DELETE", "/api/v1/tokens/" + revoked_id, admin).status,
                200);
      revoked_at = std::chrono::steady_clock::now();
    }
    const double killed = WallNow();
    replicas[leader]->Stop(SIGKILL);
    double accepted = 0;
    int taker = -1;
    while (accepted == 0 && WallNow() - killed < 30) {
      for (int i = 0; i < kReplicas && accepted == 0; ++i) {
        if (i == leader) continue;
        HttpResult r = Http(*replicas[i], "POST", "/api/v1/jobs", admin, probe.dump());
        if (r.status == 201) {
          accepted = WallNow();
          taker = i;
          ack(r.body.value("id", int64_t{0}));
        }
      }
      if (accepted == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(accepted, 0) << "no replica took over within 30 s";
    if (takeovers.empty()) {
      // The new leader forgot what it read while following: the revoked token is refused at
      // once, well within the 10 s that would otherwise bound it.
      EXPECT_EQ(Http(*replicas[taker], "GET", "/api/v1/whoami", revoked).status, 401);
      EXPECT_LT(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - revoked_at).count(),
          9.0);
    }
    takeovers.push_back(accepted - killed);
    ASSERT_TRUE(replicas[leader]->Start())
        << ReadFile(dir.File("r" + std::to_string(leader) + ".log"));
  }
  submitting = false;
  client.join();

  // Every acknowledged job runs to its end.
  std::set<int64_t> jobs;
  {
    std::lock_guard<std::mutex> lock(acked_mu);
    jobs = acked;
  }
  const std::string leader_url = Sql(conninfo, "SELECT url FROM leader");
  ServerProcess* leader = nullptr;
  for (auto& r : replicas) {
    if (r->url() == leader_url) leader = r.get();
  }
  ASSERT_NE(leader, nullptr);
  std::vector<int64_t> lost;
  EXPECT_TRUE(Eventually(
      [&] {
        lost.clear();
        HttpResult list = Http(*leader, "GET", "/api/v1/jobs?limit=1000&phase=Succeeded", admin);
        std::set<int64_t> done;
        for (const Json& j : list.body.value("items", Json::array())) done.insert(j.value("id", 0));
        for (int64_t id : jobs) {
          if (!done.count(id)) lost.push_back(id);
        }
        return lost.empty();
      },
      180))
      << lost.size() << " of " << jobs.size() << " acknowledged jobs did not succeed, e.g. "
      << (lost.empty() ? 0 : lost[0]) << ": " << GetJob(*leader, admin, lost.empty() ? 0 : lost[0]);

  // From the tasks' own output: no two runs of one job at once.
  std::map<int64_t, std::map<int, TaskRun>> runs;
  std::istringstream lines(ReadFile(trace));
  for (std::string line; std::getline(lines, line);) {
    long long job = 0;
    int gen = 0;
    char what[8] = {};
    double at = 0;
    if (std::sscanf(line.c_str(), "%lld %d %7s %lf", &job, &gen, what, &at) != 4) continue;
    TaskRun& r = runs[job][gen];
    if (std::string(what) == "start") {
      r.start = at;
    } else {
      r.end = at;
      r.ended = true;
    }
  }
  int overlapping = 0, rerun = 0;
  for (const auto& [job, by_gen] : runs) {
    if (by_gen.size() > 1) ++rerun;
    const TaskRun* previous = nullptr;
    for (const auto& [gen, r] : by_gen) {
      if (previous && (!previous->ended || previous->end > r.start)) ++overlapping;
      previous = &r;
    }
  }
  for (int64_t id : jobs) EXPECT_TRUE(runs.count(id)) << "job " << id << " never ran";
  EXPECT_EQ(overlapping, 0);

  std::printf(
      "failover: %zu kills of the leader of %d replicas; takeover (kill to first accepted "
      "write) p50 %.3f s, p99 %.3f s, max %.3f s; %zu jobs acknowledged, %zu ran, 0 lost, %d run "
      "twice at once, %d re-run after a stop, %d submissions refused during takeovers\n",
      takeovers.size(), kReplicas, Percentile(takeovers, 0.5), Percentile(takeovers, 0.99),
      Percentile(takeovers, 1.0), jobs.size(), runs.size(), overlapping, rerun, refused.load());
  EXPECT_GE(takeovers.size(), 10u);
  EXPECT_LT(Percentile(takeovers, 0.5), 10.0);
}

INSTANTIATE_TEST_SUITE_P(ServerReplicas, KilledLeaders, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Replicas";
                         });

}  // namespace
}  // namespace meridian::testing
