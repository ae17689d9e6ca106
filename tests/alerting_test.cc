// Alerting end to end (docs/adr/0017-alerting.md): a real `meridian server` and real agents on
// simulated GPUs (a fake: no NVIDIA GPU here), a REAL Alertmanager (Debian's
// `prometheus-alertmanager`, installed by scripts/install-deps.sh) on loopback, and a webhook
// receiver that the test itself runs (an httplib server). The server's alert for a lost node
// reaches the webhook directly and through Alertmanager's routing, and so does its resolution.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"
#include "tests/webhook_receiver.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;
const std::string kSource = MERIDIAN_SOURCE_DIR;

std::string Installed(const char* env, std::initializer_list<const char*> paths) {
  if (const char* p = std::getenv(env)) return p;
  for (const char* p : paths) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
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
kind: Project
metadata: {name: vision}
spec: {team: lab}
---
kind: Cluster
metadata: {name: east}
spec: {type: on-prem, region: eu-east}
---
kind: NodePool
metadata: {name: east-h100}
spec: {cluster: east, gpusPerNode: 2, gpuModel: H100-80GB}
---
kind: Policy
metadata: {name: default}
spec: {heartbeatInterval: 0.2, nodeLostTimeout: 3}
)";

double Seconds(std::chrono::steady_clock::time_point from,
               std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

class AlertingTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& extra_documents) {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Cli(kBinary,
                      "apply -f " + WriteTestFile(dir_.File("estate.yaml"),
                                                  std::string(kEstate) + extra_documents),
                      server_->url(), admin_);
    ASSERT_EQ(r.code, 0) << r.output;
    agent_token_ = AgentToken(*server_, admin_);
    ASSERT_FALSE(agent_token_.empty());
  }

  std::unique_ptr<AgentProcess> StartAgent(const std::string& node) {
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    EXPECT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    auto a = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "east", "--pool", "east-h100", "--node", node,
                                 "--simulate-gpus", "2xH100-80GB", "--work-dir",
                                 dir_.File("agent-" + node), "--cpu-milli", "16000", "--memory-mib",
                                 "65536"},
        dir_.File("agent-" + node + ".log"));
    a->Start(server_->url(), agent_token_);
    return a;
  }

  bool NodeReporting(const std::string& node) {
    const HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    for (const Json& n : nodes.body.value("items", Json::array())) {
      if (n.value("name", "") != node) continue;
      for (const Json& g : n["gpus"]) {
        if (g.contains("utilization")) return true;
      }
    }
    return false;
  }

  // The alerts `token` sees: alertname -> labels, one entry per alert.
  std::multimap<std::string, Json> Alerts(const std::string& token) {
    std::multimap<std::string, Json> out;
    HttpResult r = Http(*server_, "GET", "/api/v1/alerts", token);
    EXPECT_EQ(r.status, 200) << r.text;
    for (const Json& a : r.body.value("items", Json::array())) {
      out.emplace(a["labels"].value("alertname", ""), a["labels"]);
    }
    return out;
  }

  std::string MemberToken(const std::string& user, const std::string& project) {
    Json spec = {{"spec", {{"roles", Json::array({{{"role", "member"}, {"project", project}}})}}}};
    EXPECT_EQ(Http(*server_, "PUT", "/api/v1/users/" + user, admin_, spec.dump()).status, 201);
    HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_, Json{{"user", user}}.dump());
    EXPECT_EQ(t.status, 201) << t.text;
    return t.body.value("token", "");
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::string admin_, agent_token_;
};

TEST_F(AlertingTest, ALostNodeReachesAlertmanagerAndAWebhookAndSoDoesItsResolution) {
  const std::string alertmanager = Installed(
      "ALERTMANAGER", {"/usr/bin/prometheus-alertmanager", "/usr/local/bin/alertmanager"});
  // `make test` installs it (scripts/install-deps.sh): a missing one is a failure, not a skip.
  ASSERT_FALSE(alertmanager.empty())
      << "Alertmanager is not installed: run scripts/install-deps.sh (prometheus-alertmanager)";
  WebhookReceiver hook;
  const int am_port = FreePort();
  ASSERT_GT(am_port, 0);
  // Alertmanager routes everything to the test's receiver at once, resolutions included.
  const std::string am_config =
      WriteTestFile(dir_.File("alertmanager.yml"),
                    "route:\n"
                    "  receiver: test\n"
                    "  group_by: [alertname, node]\n"
                    "  group_wait: 0s\n"
                    "  group_interval: 1s\n"
                    "  repeat_interval: 1h\n"
                    "receivers:\n"
                    "  - name: test\n"
                    "    webhook_configs: [{url: '" +
                        hook.Url("/from-alertmanager") + "', send_resolved: true}]\n");
  // --cluster.listen-address= (empty) turns clustering off: it would bind 0.0.0.0:9094.
  ChildProcess am(
      {alertmanager, "--config.file=" + am_config, "--storage.path=" + dir_.File("alertmanager"),
       "--web.listen-address=127.0.0.1:" + std::to_string(am_port), "--cluster.listen-address="},
      dir_.File("alertmanager.log"));
  ASSERT_TRUE(Eventually(
      [&] {
        httplib::Client c("127.0.0.1", am_port);
        auto r = c.Get("/-/ready");
        return r && r->status == 200;
      },
      30))
      << ReadFile(dir_.File("alertmanager.log"));

  StartServer(
      "---\nkind: AlertReceiver\nmetadata: {name: alertmanager}\n"
      "spec: {type: alertmanager, url: 'http://127.0.0.1:" +
      std::to_string(am_port) +
      "', resendInterval: 5}\n"
      "---\nkind: AlertReceiver\nmetadata: {name: direct}\n"
      "spec: {type: webhook, url: '" +
      hook.Url("/direct") + "'}\n");
  auto agent = StartAgent("n1");
  ASSERT_TRUE(Eventually([&] { return NodeReporting("n1"); }, 30))
      << ReadFile(dir_.File("agent-n1.log")) << Http(*server_, "GET", "/api/v1/nodes", admin_).text
      << ReadFile(dir_.File("data.log"));

  // The agent vanishes: after nodeLostTimeout (3 s) the node is Lost, and the built-in
  // node-lost rule (critical, no further wait) fires.
  const auto killed = std::chrono::steady_clock::now();
  agent->Stop(SIGKILL);
  const std::map<std::string, std::string> n1 = {
      {"node", "n1"}, {"cluster", "east"}, {"severity", "critical"}, {"rule", "node-lost"}};
  std::optional<WebhookReceiver::Delivery> direct, routed;
  ASSERT_TRUE(Eventually(
      [&] {
        direct = hook.Find("/direct", "MeridianNodeLost", "firing", n1);
        routed = hook.Find("/from-alertmanager", "MeridianNodeLost", "firing", n1);
        return direct && routed;
      },
      30))
      << hook.Dump() << ReadFile(dir_.File("data.log")) << ReadFile(dir_.File("alertmanager.log"));
  std::printf("alerting: agent killed -> webhook %.2f s, -> Alertmanager's webhook %.2f s\n",
              Seconds(killed, direct->at), Seconds(killed, routed->at));
  std::fflush(stdout);  // before the next fork: a child would write the buffer again
  // Alertmanager's own view: the alert, with the server's annotations and link.
  {
    httplib::Client c("127.0.0.1", am_port);
    auto r = c.Get("/api/v2/alerts");
    ASSERT_TRUE(r && r->status == 200);
    const Json alerts = Json::parse(r->body);
    ASSERT_EQ(alerts.size(), 1u) << alerts.dump();
    EXPECT_EQ(alerts[0]["labels"].value("alertname", ""), "MeridianNodeLost");
    EXPECT_NE(alerts[0]["annotations"].value("summary", "").find("n1"), std::string::npos);
    EXPECT_EQ(alerts[0].value("generatorURL", ""), server_->url() + "/api/v1/alerts");
    EXPECT_EQ(alerts[0]["status"].value("state", ""), "active");
  }
  // The API and the CLI show it firing.
  HttpResult listed = Http(*server_, "GET", "/api/v1/alerts?state=firing", admin_);
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.body["items"].size(), 1u) << listed.text;
  EXPECT_EQ(listed.body["items"][0]["labels"].value("node", ""), "n1");
  CliResult cli = Cli(kBinary, "get alerts", server_->url(), admin_);
  ASSERT_EQ(cli.code, 0) << cli.output;
  EXPECT_NE(cli.output.find("MeridianNodeLost"), std::string::npos) << cli.output;
  EXPECT_NE(cli.output.find("node=n1"), std::string::npos) << cli.output;

  // The agent comes back: the node is Ready, and the alert is resolved at both receivers.
  const auto restarted = std::chrono::steady_clock::now();
  agent = StartAgent("n1");
  ASSERT_TRUE(Eventually(
      [&] {
        direct = hook.Find("/direct", "MeridianNodeLost", "resolved", n1);
        routed = hook.Find("/from-alertmanager", "MeridianNodeLost", "resolved", n1);
        return direct && routed;
      },
      30))
      << hook.Dump() << ReadFile(dir_.File("data.log"));
  std::printf("alerting: agent restarted -> resolved at webhook %.2f s, via Alertmanager %.2f s\n",
              Seconds(restarted, direct->at), Seconds(restarted, routed->at));
  std::fflush(stdout);
  EXPECT_TRUE(Alerts(admin_).empty());
  EXPECT_NE(ReadFile(dir_.File("data.log")).find("meridian: alert resolved: MeridianNodeLost"),
            std::string::npos);
}

// Item 4: a member sees the alerts of its projects and the estate's nodes, not other projects'
// or the scheduler's own; an override's threshold and a rule of its own apply.
TEST_F(AlertingTest, AMemberSeesTheAlertsOfItsProjectsOnly) {
  StartServer(
      "---\nkind: AlertRule\nmetadata: {name: pending-job-too-old}\nspec: {threshold: 1}\n"
      "---\nkind: AlertRule\nmetadata: {name: node-lost}\nspec: {severity: warning}\n"
      "---\nkind: AlertRule\nmetadata: {name: gpu-held-idle}\nspec: {for: 0}\n"
      "---\nkind: AlertReceiver\nmetadata: {name: hook}\n"
      "spec: {type: webhook, url: 'http://127.0.0.1:9/secret-token'}\n");
  auto agent = StartAgent("n1");
  ASSERT_TRUE(Eventually([&] { return NodeReporting("n1"); }, 30))
      << ReadFile(dir_.File("agent-n1.log")) << Http(*server_, "GET", "/api/v1/nodes", admin_).text
      << ReadFile(dir_.File("data.log"));
  // A job of each project that no node can place (it stays pending: a label no node has; more
  // GPUs than any node has is refused at submission), and one of research that holds a GPU at
  // 1% use.
  for (const char* project : {"research", "vision"}) {
    Json job = {
        {"metadata", {{"name", "big"}, {"project", project}}},
        {"spec", {{"gpus", 1}, {"nodeSelector", {{"zone", "nowhere"}}}, {"command", {"true"}}}}};
    ASSERT_EQ(Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump()).status, 201);
  }
  Json idle = {
      {"metadata", {{"name", "idle"}, {"project", "research"}}},
      {"spec", {{"gpus", 1}, {"simulateUtilization", 0.01}, {"command", {"sleep", "600"}}}}};
  HttpResult submitted = Http(*server_, "POST", "/api/v1/jobs", admin_, idle.dump());
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const std::string idle_id = std::to_string(submitted.body.value("id", int64_t{0}));
  // And the node lost, for an estate-wide alert.
  ASSERT_TRUE(Eventually(
      [&] {
        auto a = Alerts(admin_);
        return a.count("MeridianPendingJobTooOld") == 2 && a.count("MeridianGpuHeldIdle") == 1;
      },
      30))
      << Http(*server_, "GET", "/api/v1/alerts", admin_).text << ReadFile(dir_.File("data.log"));
  {
    const auto all = Alerts(admin_);
    ASSERT_EQ(all.count("MeridianGpuHeldIdle"), 1u);
    EXPECT_EQ(all.find("MeridianGpuHeldIdle")->second.value("job_id", ""), idle_id);
    EXPECT_EQ(all.find("MeridianGpuHeldIdle")->second.value("project", ""), "research");
  }
  agent->Stop(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return Alerts(admin_).count("MeridianNodeLost") == 1; }, 30));
  {
    const auto all = Alerts(admin_);
    ASSERT_EQ(all.count("MeridianNodeLost"), 1u);
    EXPECT_EQ(all.find("MeridianNodeLost")->second.value("severity", ""), "warning");
  }

  const std::string vera = MemberToken("vera", "vision");
  const auto seen = Alerts(vera);
  std::multiset<std::string> what;
  for (const auto& [name, labels] : seen) what.insert(name + ":" + labels.value("project", ""));
  // The idle job's alert was research's and went with the node's loss (no telemetry); vision's
  // pending job and the node remain.
  EXPECT_EQ(what,
            (std::multiset<std::string>{"MeridianNodeLost:", "MeridianPendingJobTooOld:vision"}))
      << Http(*server_, "GET", "/api/v1/alerts", vera).text;
  // Rules are the estate's; receivers are admins' (a webhook's URL is often its secret).
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/alertrules", vera).body["items"].size(), 3u);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/alertreceivers", vera).body["items"].size(), 0u);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/alertreceivers/hook", vera).status, 404);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/alertreceivers/hook", admin_).status, 200);
  // Its failure is logged once, by name and origin, without the URL's path.
  const std::string log = ReadFile(dir_.File("data.log"));
  EXPECT_NE(log.find("meridian: alerts: receiver hook: http://127.0.0.1:9"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("secret-token"), std::string::npos) << log;
  const std::string rita = MemberToken("rita", "research");
  for (const auto& [name, labels] : Alerts(rita)) {
    EXPECT_NE(labels.value("project", ""), "vision") << name;
  }
}

// The rule documents' errors name file, line and field, through the real CLI, and nothing is
// applied; a valid override is planned as a change of its fields and can be rolled back.
TEST_F(AlertingTest, RuleDocumentsAreValidatedPlannedAppliedAndRolledBack) {
  StartServer("");
  const std::string bad = WriteTestFile(dir_.File("bad.yaml"),
                                        "kind: AlertRule\n"
                                        "metadata: {name: quota-near-limit}\n"
                                        "spec:\n"
                                        "  threshold: 1.5\n"
                                        "  window: 60\n"
                                        "---\n"
                                        "kind: AlertReceiver\n"
                                        "metadata: {name: pager}\n"
                                        "spec: {type: pager, url: 'http://x'}\n");
  CliResult r = Cli(kBinary, "apply -f " + bad, server_->url(), admin_);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("bad.yaml:4:3: spec.threshold: must be between 0.01 and 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("bad.yaml:5:3: spec.window: is not used by condition quota-near-limit"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("bad.yaml:9:8: spec.type: \"pager\" is not one of alertmanager, webhook"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/alertrules", admin_).body["items"].size(), 0u);

  const std::string good = WriteTestFile(dir_.File("good.yaml"),
                                         "kind: AlertRule\n"
                                         "metadata: {name: quota-near-limit}\n"
                                         "spec: {threshold: 0.8, for: 60}\n");
  CliResult plan = Cli(kBinary, "plan -f " + good, server_->url(), admin_);
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("AlertRule"), std::string::npos) << plan.output;
  ASSERT_EQ(Cli(kBinary, "apply -f " + good, server_->url(), admin_).code, 0);
  HttpResult rule = Http(*server_, "GET", "/api/v1/alertrules/quota-near-limit", admin_);
  ASSERT_EQ(rule.status, 200) << rule.text;
  EXPECT_EQ(rule.body["spec"].value("threshold", 0.0), 0.8);
  EXPECT_EQ(rule.body["spec"].value("condition", ""), "quota-near-limit");
  // The shipped example applies to this estate (it names project vision).
  CliResult example =
      Cli(kBinary, "plan -f " + kSource + "/examples/alerts.yaml", server_->url(), admin_);
  EXPECT_EQ(example.code, 0) << example.output;
  EXPECT_NE(example.output.find("vision-queue"), std::string::npos) << example.output;
  // Revision 1 is the estate without it: rolling back removes the override.
  CliResult back = Cli(kBinary, "rollback --to 1", server_->url(), admin_);
  ASSERT_EQ(back.code, 0) << back.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/alertrules/quota-near-limit", admin_).status, 404);
}

// The shipped Prometheus rules (14 of the 16 built-ins: gpu-held and job-idle watch state no series
// exports) are valid, and their own unit tests pass (promtool).
TEST(AlertingRules, PromtoolChecksAndTestsTheShippedRules) {
  const std::string promtool =
      Installed("PROMTOOL", {"/usr/bin/promtool", "/usr/local/bin/promtool"});
  ASSERT_FALSE(promtool.empty()) << "promtool is not installed: run scripts/install-deps.sh";
  base::testing::TempDir dir;
  const std::string rules = kSource + "/deploy/prometheus/meridian-alerts.rules.yml";
  CliResult checked = RunToExit(promtool, {"check", "rules", rules}, dir.File("check.log"), 30);
  EXPECT_EQ(checked.code, 0) << checked.output;
  EXPECT_NE(checked.output.find("SUCCESS: 14 rules found"), std::string::npos) << checked.output;
  CliResult tested = RunToExit(
      promtool, {"test", "rules", kSource + "/deploy/prometheus/meridian-alerts.test.yml"},
      dir.File("test.log"), 30);
  EXPECT_EQ(tested.code, 0) << tested.output;
}

}  // namespace
}  // namespace meridian::testing
