// Elastic node pools end to end (docs/adr/0039-elastic-pools.md): a real `meridian server` whose
// cloud pool starts with no node and grows through `meridian dev-cloud`, a provisioner named as
// a fake cloud (no cloud can be reached from here): its instances are real `meridian agent`
// processes with simulated GPUs (a fake: no NVIDIA GPU here) that boot after the pool's boot
// delay and register with the bootstrap token the server gave. The pool's idleTimeout is 8 s so
// that a test sees a node released; every other setting is the default (a 2 s heartbeat).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <set>
#include <thread>

#include "base/command.h"
#include "base/testing/temp_dir.h"
#include "tests/server_process.h"
#include "tests/webhook_receiver.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

const char* kTenancy = R"(kind: Organization
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
metadata: {name: cloud}
spec: {type: cloud, region: us-east, prices: {A100-80GB: 3.5}}
)";

// An elastic pool of 4-GPU A100 nodes that boot in 2 s, with what else its test wants.
std::string Pool(const std::string& name, const std::string& provisioner,
                 const std::string& extra = "") {
  return "---\nkind: NodePool\nmetadata: {name: " + name +
         "}\nspec:\n  cluster: cloud\n  gpusPerNode: 4\n  gpuModel: A100-80GB\n  cpuMilli: "
         "16000\n  memoryMib: 65536\n  provisioner: " +
         provisioner + "\n  maxNodes: 3\n  bootDelay: 2s\n  idleTimeout: 8s\n" + extra;
}

const std::string kEstate = kTenancy + Pool("a100", "fake-cloud");

class ElasticPoolTest : public ::testing::Test {
 protected:
  // A server whose provisioners are fake clouds, each with its state in a folder of its own:
  // name -> the flags of its `meridian dev-cloud`.
  void Start(const std::string& estate,
             std::map<std::string, std::vector<std::string>> clouds = {{"fake-cloud", {}}}) {
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    std::vector<std::string> flags;
    for (auto& [name, extra] : clouds) {
      std::vector<std::string> argv = {kBinary, "dev-cloud", "--state", dir_.File(name)};
      argv.insert(argv.end(), extra.begin(), extra.end());
      std::string command;
      for (const std::string& w : argv) command += (command.empty() ? "" : " ") + w;
      flags.insert(flags.end(), {"--provisioner", name + "=" + command});
      clouds_[name] = argv;
    }
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"), flags);
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Cli(kBinary, "apply -f " + WriteTestFile(dir_.File("estate.yaml"), estate),
                      server_->url(), admin_);
    ASSERT_EQ(r.code, 0) << r.output;
  }
  void TearDown() override {
    // Whatever a failed test left: the fake clouds' instances are daemons of their own.
    for (const auto& [name, argv] : clouds_) {
      Json ids = Json::array();
      for (const Json& i : Cloud(name, "list", Json::object()).value("instances", Json::array())) {
        ids.push_back(i.value("id", ""));
      }
      if (!ids.empty()) Cloud(name, "delete", Json{{"pool", ""}, {"instances", ids}});
    }
  }

  Json Cloud(const std::string& name, const std::string& verb, const Json& request) {
    std::vector<std::string> argv = clouds_.at(name);
    argv.push_back(verb);
    auto r = base::RunCommand(argv, {}, request.dump(), 60);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return Json::object();
    EXPECT_EQ(r->exit_code, 0) << verb << ": " << r->out << r->err;
    Json out = Json::parse(r->out, nullptr, false);
    return out.is_discarded() ? Json::object() : out;
  }
  size_t Instances(const std::string& name) {
    return Cloud(name, "list", Json::object()).value("instances", Json::array()).size();
  }

  int64_t Submit(const std::string& name, const std::string& command,
                 const Json& more = Json::object()) {
    Json spec = {{"gpus", 4},
                 {"gpuModels", {"A100-80GB"}},
                 {"cpuMilli", 4000},
                 {"memoryMib", 8192},
                 {"command", {"sh", "-c", command}}};
    spec.update(more);
    Json job = {{"metadata", {{"name", name}, {"project", "research"}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  // The provisioning-failed alert of `pool` as /api/v1/alerts shows it to an admin (null: none).
  Json PoolAlert(const std::string& pool) {
    const Json a = Http(*server_, "GET", "/api/v1/alerts", admin_).body;
    for (const Json& x : a.value("items", Json::array())) {
      const Json labels = x.value("labels", Json::object());
      if (labels.value("alertname", "") == "MeridianProvisioningFailed" &&
          labels.value("pool", "") == pool) {
        return x;
      }
    }
    return nullptr;
  }

  std::vector<Json> PoolEvents(const std::string& reason, const std::string& pool = "a100") {
    std::vector<Json> out;
    const Json e = Http(*server_, "GET",
                        "/api/v1/events?objectKind=NodePool&object=" + pool + "&limit=1000", admin_)
                       .body;
    for (const Json& x : e.value("items", Json::array())) {
      if (x.value("reason", "") == reason) out.push_back(x);
    }
    return out;
  }
  // The registered nodes of the pool.
  std::set<std::string> PoolNodes(const std::string& pool = "a100") {
    std::set<std::string> out;
    const Json nodes = Http(*server_, "GET", "/api/v1/nodes", admin_).body;
    for (const Json& n : nodes.value("items", Json::array())) {
      if (n.value("pool", "") == pool && n.value("source", "") == "registered") {
        out.insert(n.value("name", ""));
      }
    }
    return out;
  }
  std::string Logs() { return ReadFile(dir_.File("data.log")); }

  base::testing::TempDir dir_;
  std::map<std::string, std::vector<std::string>> clouds_;  // name -> its dev-cloud command
  std::unique_ptr<ServerProcess> server_;
  std::string admin_;
};

// The issue's first test: with no cloud node, work for the cloud makes the pool grow within its
// boot delay and a few cycles; the jobs run there; nodes idle past idleTimeout are released,
// never one with work on it, until the pool is back at zero and the fake cloud holds nothing.
TEST_F(ElasticPoolTest, GrowsFromZeroForWaitingWorkAndShrinksBackWhenIdle) {
  Start(kEstate);
  EXPECT_TRUE(PoolNodes().empty());
  const int64_t a = Submit("short-a", "echo on $MERIDIAN_NODE; sleep 3");
  const int64_t b = Submit("short-b", "echo on $MERIDIAN_NODE; sleep 3");
  const int64_t keep = Submit("long", "sleep 600");
  // While the nodes boot, the jobs say what they wait for.
  std::string reason;
  ASSERT_TRUE(Eventually(
      [&] {
        reason = GetJob(*server_, admin_, keep)["status"].value("reason", "");
        return reason.find("elastic pool a100") != std::string::npos;
      },
      15))
      << reason << "\n"
      << Logs();
  EXPECT_NE(reason.find("waits for a new node of elastic pool a100 (cluster cloud)"),
            std::string::npos)
      << reason;
  // Boot delay 2 s, a heartbeat, a cycle: well within a minute on a loaded machine.
  for (int64_t id : {a, b}) {
    ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, id) == "Succeeded"; }, 60))
        << JobPhase(*server_, admin_, id) << "\n"
        << Logs();
  }
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, keep) == "Running"; }, 30));
  // Three jobs of 4 GPUs, nodes of 4: three nodes asked for, and no more. Usually in one
  // request; in two when the third job arrives after the round that planned for the first two.
  int asked = 0;
  const size_t requests = PoolEvents("ScaleUp").size();
  for (const Json& up : PoolEvents("ScaleUp")) {
    const std::string m = up.value("message", "");  // "asked provisioner P for N node(s): ..."
    const size_t at = m.find(" for ");
    ASSERT_NE(at, std::string::npos) << m;
    asked += std::stoi(m.substr(at + 5));
  }
  EXPECT_EQ(asked, 3) << Logs();
  const std::string busy =
      GetJob(*server_, admin_, keep)["status"]["allocation"][0].value("node", "");
  ASSERT_FALSE(busy.empty());

  // The two idle nodes go after 8 s; the one running the long job stays.
  ASSERT_TRUE(Eventually([&] { return PoolNodes() == std::set<std::string>{busy}; }, 60)) << Logs();
  EXPECT_EQ(JobPhase(*server_, admin_, keep), "Running");
  ASSERT_TRUE(Eventually([&] { return Instances("fake-cloud") == 1; }, 30));
  // Still there well past the idle timeout, as long as it has work.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  EXPECT_EQ(PoolNodes(), std::set<std::string>{busy});
  EXPECT_EQ(JobPhase(*server_, admin_, keep), "Running");

  ASSERT_EQ(
      Http(*server_, "POST", "/api/v1/jobs/" + std::to_string(keep) + "/cancel", admin_).status,
      200);
  ASSERT_TRUE(Eventually([&] { return PoolNodes().empty(); }, 60)) << Logs();
  ASSERT_TRUE(Eventually([&] { return Instances("fake-cloud") == 0; }, 30));
  // The fake cloud billed three instances, each from its creation to its deletion.
  const Json bill = Cloud("fake-cloud", "bill", Json::object());
  EXPECT_EQ(bill["instances"].size(), 3u) << bill.dump();
  EXPECT_GT(bill.value("total", 0.0), 0.0);
  // Each of the three nodes released once (the first two as they fell idle, then the third).
  std::multiset<std::string> released;
  for (const Json& e : PoolEvents("ScaleDown")) {
    std::string m = e.value("message", "");  // "releasing a100-x, a100-y: idle for 8 s"
    m = m.substr(10, m.find(':') - 10);
    for (size_t at = 0; at != std::string::npos;) {
      const size_t comma = m.find(", ", at);
      released.insert(m.substr(at, comma == std::string::npos ? comma : comma - at));
      at = comma == std::string::npos ? comma : comma + 2;
    }
  }
  EXPECT_EQ(released.size(), 3u);
  EXPECT_EQ(std::set<std::string>(released.begin(), released.end()).size(), 3u);
  // Each request's bootstrap token (one for the instances it asked for) was revoked once they
  // had joined.
  HttpResult tokens = Http(*server_, "GET", "/api/v1/tokens?user=meridian-elastic-pools", admin_);
  ASSERT_EQ(tokens.status, 200) << tokens.text;
  ASSERT_EQ(tokens.body.value("items", Json::array()).size(), requests) << tokens.text;
  for (const Json& t : tokens.body["items"]) EXPECT_TRUE(t.value("revoked", false)) << tokens.text;
}

// Two pools of one shape: the first's provisioner has no capacity. The refusal is a warning
// event that backs the pool off, and the job is served by the second pool; nothing is left in
// the first's cloud.
TEST_F(ElasticPoolTest, APoolThatIsRefusedIsBackedOffAndTheNextOneServes) {
  const std::string estate = kEstate + Pool("a100-b", "fake-cloud-b");
  Start(estate, {{"fake-cloud", {"--capacity", "a100=0"}}, {"fake-cloud-b", {}}});
  const int64_t id = Submit("refused-then-served", "sleep 1");
  ASSERT_TRUE(Eventually([&] { return !PoolEvents("ProvisioningFailed").empty(); }, 15)) << Logs();
  const std::string m = PoolEvents("ProvisioningFailed")[0].value("message", "");
  EXPECT_NE(m.find("capacity"), std::string::npos) << m;
  EXPECT_NE(m.find("no new node is asked of it for 15 s (failure 1 in a row)"), std::string::npos)
      << m;
  // An alert says so, about this pool alone, for as long as the pool is refused.
  ASSERT_TRUE(Eventually([&] { return PoolAlert("a100").is_object(); }, 10)) << Logs();
  const Json alert = PoolAlert("a100");
  EXPECT_EQ(alert.value("state", ""), "firing") << alert.dump();
  EXPECT_NE(alert["annotations"].value("summary", "").find("capacity"), std::string::npos)
      << alert.dump();
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, id) == "Succeeded"; }, 60))
      << Logs();
  const std::string node =
      GetJob(*server_, admin_, id)["status"]["allocation"][0].value("node", "");
  EXPECT_EQ(node.rfind("a100-b-", 0), 0u) << node;
  EXPECT_TRUE(PoolAlert("a100-b").is_null()) << PoolAlert("a100-b").dump();
  EXPECT_EQ(Instances("fake-cloud"), 0u);
  EXPECT_TRUE(PoolNodes("a100").empty());
}

// An instance that boots nothing (the fake cloud's --never-boot) is deleted once the pool's
// joinTimeout has passed, and the pool is backed off; the fake cloud holds nothing at the end.
TEST_F(ElasticPoolTest, AnInstanceThatNeverRegistersIsDeletedAndThePoolBackedOff) {
  const std::string estate = kTenancy + Pool("a100", "fake-cloud", "  joinTimeout: 4s\n");
  Start(estate, {{"fake-cloud", {"--never-boot"}}});
  const int64_t id = Submit("never-served", "sleep 1");
  ASSERT_TRUE(Eventually([&] { return !PoolEvents("ScaleUp").empty(); }, 15)) << Logs();
  EXPECT_TRUE(Eventually([&] { return Instances("fake-cloud") == 1; }, 15));
  ASSERT_TRUE(Eventually([&] { return !PoolEvents("ProvisioningFailed").empty(); }, 30)) << Logs();
  const std::string m = PoolEvents("ProvisioningFailed")[0].value("message", "");
  EXPECT_NE(m.find("never registered within 4 s"), std::string::npos) << m;
  ASSERT_TRUE(Eventually([&] { return Instances("fake-cloud") == 0; }, 30)) << Logs();
  EXPECT_TRUE(Eventually([&] { return !PoolEvents("NodesReleased").empty(); }, 15));
  EXPECT_EQ(JobPhase(*server_, admin_, id), "Pending");
  // The alert names what failed.
  ASSERT_TRUE(Eventually([&] { return PoolAlert("a100").is_object(); }, 10)) << Logs();
  EXPECT_NE(PoolAlert("a100")["annotations"].value("summary", "").find("never registered"),
            std::string::npos)
      << PoolAlert("a100").dump();
}

// Spot: a preemptible job goes to the cheaper spot pool, a job that may not be preempted to the
// on-demand pool. When the cloud takes a spot node back (the fake's `interrupt`, with a short
// notice), the job is told as a preemption tells it, requeued, and runs again; after its second
// interruption it goes to on-demand.
TEST_F(ElasticPoolTest, ASpotInterruptionRequeuesTheJobAndTheSecondSendsItToOnDemand) {
  const std::string estate =
      kEstate + Pool("a100-spot", "fake-cloud", "  spot: true\n  price: {spot: 1.1}\n");
  Start(estate);
  Json spec = {{"gpus", 4},
               {"gpuModels", {"A100-80GB"}},
               {"cpuMilli", 4000},
               {"memoryMib", 8192},
               {"gracePeriod", 2},
               {"noticeSignal", "SIGUSR1"},
               {"command",
                {"sh", "-c",
                 "trap 'echo notice: $(cat \"$MERIDIAN_NOTICE_FILE\")' USR1; "
                 "trap 'exit 143' TERM; while true; do sleep 0.2; done"}}};
  auto submit = [&](const std::string& name, const Json& spec) {
    Json job = {{"metadata", {{"name", name}, {"project", "research"}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  };
  const int64_t id = submit("spot-able", spec);
  auto node_of = [&](int64_t job) {
    const Json j = GetJob(*server_, admin_, job);
    if (j["status"].value("phase", "") != "Running") return std::string();
    return j["status"]["allocation"][0].value("node", "");
  };
  auto instance_of = [&](const std::string& node) {
    for (const Json& i :
         Cloud("fake-cloud", "list", Json::object()).value("instances", Json::array())) {
      if (i.value("node", "") == node) return i.value("id", "");
    }
    return std::string();
  };
  std::string node;
  ASSERT_TRUE(Eventually([&] { return !(node = node_of(id)).empty(); }, 60)) << Logs();
  EXPECT_EQ(node.rfind("a100-spot-", 0), 0u) << node;
  // One at a time: a job may take whichever fitting node joins first, not the one planned for it.
  spec["preemptible"] = false;
  const int64_t firm = submit("not-preemptible", spec);
  std::string firm_node;
  ASSERT_TRUE(Eventually([&] { return !(firm_node = node_of(firm)).empty(); }, 60)) << Logs();
  EXPECT_EQ(firm_node.rfind("a100-spot-", 0), std::string::npos) << firm_node;

  for (int round = 1; round <= 2; ++round) {
    const std::string instance = instance_of(node);
    ASSERT_FALSE(instance.empty()) << node;
    // A notice the server sees in time: spot pools are listed every 5 s, and under a loaded
    // ASan run a list came 6 s after the interruption. With none left, the cloud takes the node
    // before the task is seen to stop, and the job waits for the node's lost timeout (300 s).
    const Json interrupted =
        Cloud("fake-cloud", "interrupt", Json{{"instances", {instance}}, {"noticeSeconds", 20}});
    ASSERT_EQ(interrupted["interrupted"].size(), 1u) << interrupted.dump();
    // Requeued and running again, elsewhere.
    std::string next;
    ASSERT_TRUE(Eventually(
        [&] {
          next = node_of(id);
          return !next.empty() && next != node;
        },
        90))
        << "round " << round << "\n"
        << Logs();
    // The first time back to spot; after the second interruption, on-demand.
    EXPECT_EQ(next.rfind("a100-spot-", 0) == 0, round == 1) << "round " << round << ": " << next;
    node = next;
  }
  int told = 0;
  for (const Json& e : JobEvents(*server_, admin_, id)) {
    told += e.value("message", "").find("spot interruption") != std::string::npos;
  }
  EXPECT_GE(told, 2);
  EXPECT_EQ(PoolEvents("SpotInterruption", "a100-spot").size(), 2u);
  EXPECT_EQ(node_of(firm), firm_node);  // never disturbed
}

// A hard budget reached (docs/adr/0041-budgets.md): the pool's price makes a running 4-GPU job
// spend 4 a second, so a budget of 60 is spent within 15 s of its start. Then no new instance is
// asked for the project's next job, whose pending reason names the budget; the soft thresholds
// and the 100% one reach a webhook receiver once each; the status has the forecast.
TEST_F(ElasticPoolTest, ASpentBudgetAsksForNoNewNodeAndTheThresholdsAlertOnceEach) {
  WebhookReceiver hook;
  Start(kTenancy + Pool("a100", "fake-cloud", "  price: {onDemand: 3600}\n") +
        "---\nkind: Budget\nmetadata: {name: research-monthly}\n"
        "spec: {project: research, amount: 60, thresholds: [50, 80, 100]}\n"
        "---\nkind: Project\nmetadata: {name: vision}\nspec: {team: lab}\n"
        "---\nkind: Budget\nmetadata: {name: lab-monthly}\n"
        "spec: {team: lab, amount: 1000000, action: alert}\n"
        "---\nkind: AlertReceiver\nmetadata: {name: hook}\n"
        "spec: {type: webhook, url: \"" +
        hook.Url("/budget") + "\"}\n");
  // A job expected to run an hour would cost 14,400 on a new node: more than the budget has.
  const int64_t dear = Submit("too-dear", "sleep 600", {{"runtimeEstimate", "1h"}});
  std::string dear_reason;
  ASSERT_TRUE(Eventually(
      [&] {
        dear_reason = GetJob(*server_, admin_, dear)["status"].value("reason", "");
        return dear_reason.find("less than this job would cost") != std::string::npos;
      },
      30))
      << dear_reason << "\n"
      << Logs();
  EXPECT_NE(dear_reason.find("budget research-monthly has 60.00 left, less than this job would "
                             "cost on a new node (14400.00)"),
            std::string::npos)
      << dear_reason;
  EXPECT_EQ(Instances("fake-cloud"), 0u);
  ASSERT_EQ(
      Http(*server_, "POST", "/api/v1/jobs/" + std::to_string(dear) + "/cancel", admin_).status,
      200);
  // Estimated at 10 s (40), it fits; it runs on, past its estimate, and spends the budget.
  const int64_t first = Submit("spender", "sleep 600", {{"runtimeEstimate", "10s"}});
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, first) == "Running"; }, 60))
      << Logs();
  EXPECT_EQ(Instances("fake-cloud"), 1u);
  // Spent: evaluated every 10 s, within 15 s of the start plus one evaluation.
  Json status;
  ASSERT_TRUE(Eventually(
      [&] {
        status = Http(*server_, "GET", "/api/v1/budgets/research-monthly", admin_)
                     .body.value("status", Json());
        return status.is_object() && status.value("exhausted", false);
      },
      60))
      << status.dump() << "\n"
      << Logs();
  EXPECT_GE(status["spent"].value("cost", 0.0), 60.0) << status.dump();
  EXPECT_EQ(status.value("blocking", ""), "bursts") << status.dump();
  // Running on: the rate is about 4 a second over the last day's first seconds, and the month's
  // end is days away.
  EXPECT_GT(status["rate"].value("costPerHour", 0.0), 0.0) << status.dump();
  EXPECT_GT(status["forecast"].value("cost", 0.0), status["spent"].value("cost", 0.0))
      << status.dump();
  const std::string summary = status.value("summary", "");
  EXPECT_NE(summary.find(" of 60.00 ("), std::string::npos) << summary;

  const int64_t second = Submit("held-back", "sleep 1");
  std::string reason;
  ASSERT_TRUE(Eventually(
      [&] {
        reason = GetJob(*server_, admin_, second)["status"].value("reason", "");
        return reason.find("budget research-monthly") != std::string::npos;
      },
      30))
      << reason << "\n"
      << Logs();
  EXPECT_NE(reason.find("budget research-monthly (project research) is spent: cost "),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("no new cloud node is asked for it"), std::string::npos) << reason;
  // Rounds go by, and the pool does not grow: one instance, asked for once.
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_EQ(Instances("fake-cloud"), 1u);
  EXPECT_EQ(PoolEvents("ScaleUp").size(), 1u);
  EXPECT_EQ(JobPhase(*server_, admin_, second), "Pending");
  // Each threshold alerted once, to the receiver (evaluated every 2 s, told on each change).
  for (const char* t : {"50", "80", "100"}) {
    ASSERT_TRUE(Eventually(
        [&] {
          return hook.Count("/budget", "MeridianBudgetThreshold", "firing", {{"threshold", t}}) >=
                 1;
        },
        30))
        << t << "\n"
        << hook.Dump();
  }
  std::this_thread::sleep_for(std::chrono::seconds(5));  // evaluations later: still once each
  for (const char* t : {"50", "80", "100"}) {
    EXPECT_EQ(hook.Count("/budget", "MeridianBudgetThreshold", "firing",
                         {{"budget", "research-monthly"}, {"scope", "research"}, {"threshold", t}}),
              1)
        << t << "\n"
        << hook.Dump();
  }
  // A member of research reads its project's budget with the spend; the team's budget, which
  // counts vision too, without: what the team spent would say what vision did.
  const Json member = {{"spec", {{"roles", {{{"role", "member"}, {"project", "research"}}}}}}};
  ASSERT_EQ(Http(*server_, "PUT", "/api/v1/users/ann", admin_, member.dump()).status, 201);
  HttpResult issued =
      Http(*server_, "POST", "/api/v1/tokens", admin_, Json{{"user", "ann"}}.dump());
  ASSERT_EQ(issued.status, 201) << issued.text;
  const std::string ann = issued.body.value("token", "");
  HttpResult own = Http(*server_, "GET", "/api/v1/budgets/research-monthly", ann);
  ASSERT_EQ(own.status, 200) << own.text;
  EXPECT_TRUE(own.body.contains("status")) << own.text;
  HttpResult team = Http(*server_, "GET", "/api/v1/budgets/lab-monthly", ann);
  ASSERT_EQ(team.status, 200) << team.text;
  EXPECT_FALSE(team.body.contains("status")) << team.text;
  EXPECT_TRUE(Http(*server_, "GET", "/api/v1/budgets/lab-monthly", admin_).body.contains("status"));

  // The budget's table: what is spent, of what, and what it blocks.
  CliResult table = Cli(kBinary, "get budgets", server_->url(), admin_);
  ASSERT_EQ(table.code, 0) << table.output;
  EXPECT_NE(table.output.find("research-monthly"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("bursts"), std::string::npos) << table.output;

  // The running job ends; the held-back one takes its node (a budget stops new capacity, not
  // the use of what is there), and then the pool empties.
  ASSERT_EQ(
      Http(*server_, "POST", "/api/v1/jobs/" + std::to_string(first) + "/cancel", admin_).status,
      200);
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, second) == "Succeeded"; }, 60))
      << Logs();
  EXPECT_EQ(PoolEvents("ScaleUp").size(), 1u);
  ASSERT_TRUE(Eventually([&] { return Instances("fake-cloud") == 0; }, 60)) << Logs();
}

}  // namespace
}  // namespace meridian::testing
