// The API document is true: a real `meridian server` on loopback with a representative estate
// (every kind of configuration document, a real agent on simulated GPUs running real tasks, a
// registered node without an agent, jobs pending, running, succeeded and cancelled, an idle
// job, alerts, tokens, users, revisions), every path and method of docs/openapi.yaml called,
// and every answer checked against the schema the document gives its path, method and status
// by a real JSON-schema validator (ajv, in tests/openapi/check.mjs). The document's schemas
// forbid what they do not list (additionalProperties: false), so a field the server adds
// without documenting it fails here. The checker also fails when a path and method of the
// document got no answer at all. Beside it: a malformed body answers one clear 400 on every path
// that takes a body, and every list pages with limit and continue (docs/adr/0024-api-document.md).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;
const std::string kSource = MERIDIAN_SOURCE_DIR;

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
kind: Quota
metadata: {name: research}
spec: {project: research, guaranteedGpus: 1, limitGpus: 4}
---
kind: PriorityClass
metadata: {name: high}
spec: {value: 100}
---
kind: Cluster
metadata: {name: east}
spec: {type: on-prem, region: eu-east, prices: {H100-80GB: 2.0}}
---
kind: NodePool
metadata: {name: east-h100}
spec: {cluster: east, gpusPerNode: 2, gpuModel: H100-80GB}
---
kind: AlertRule
metadata: {name: research-queue}
spec: {condition: pending-job-age, project: research, threshold: 1, for: 0, severity: warning}
---
kind: AlertReceiver
metadata: {name: chatops}
spec: {type: webhook, url: "http://127.0.0.1:9/meridian"}
---
kind: IdlePolicy
metadata: {name: training}
spec: {jobTypes: [training], action: alert, threshold: 0.05, idleFor: 4}
---
kind: Budget
metadata: {name: research}
spec: {project: research, amount: 100, gpuHours: 10}
)";

// One answer as the checker reads it: the document's path template, the URL called, status,
// content type and body (JSON, or the text).
struct Recorder {
  const ServerProcess* server;
  Json answers = Json::array();

  HttpResult Call(const std::string& method, const std::string& path, const std::string& url,
                  const std::string& token, const std::string& body = "",
                  const std::string& content_type = "application/json") {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(30);
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    httplib::Result r = method == "GET"      ? c.Get(url, h)
                        : method == "DELETE" ? c.Delete(url, h)
                        : method == "PUT"    ? c.Put(url, h, body, content_type.c_str())
                                             : c.Post(url, h, body, content_type.c_str());
    HttpResult out;
    EXPECT_TRUE(r) << method << " " << url;
    if (!r) return out;
    out.status = r->status;
    out.text = r->body;
    out.body = Json::parse(r->body, nullptr, false);
    Record(method, path, url, r->status, r->get_header_value("Content-Type"),
           out.body.is_discarded() ? Json(r->body) : out.body);
    return out;
  }

  // A stream: its status and content type, then the connection is dropped.
  void Stream(const std::string& path, const std::string& url, const std::string& token) {
    httplib::Client c("127.0.0.1", server->port());
    httplib::Headers h = {{"Authorization", "Bearer " + token}};
    int status = 0;
    std::string type;
    c.Get(
        url, h,
        [&](const httplib::Response& r) {
          status = r.status;
          type = r.get_header_value("Content-Type");
          return false;
        },
        [](const char*, size_t) { return false; });
    EXPECT_EQ(status, 200) << url;
    Record("GET", path, url, status, type, "");
  }

  void Record(const std::string& method, const std::string& path, const std::string& url,
              int status, const std::string& type, Json body) {
    answers.push_back({{"method", method},
                       {"path", path},
                       {"url", url},
                       {"status", status},
                       {"contentType", type},
                       {"body", std::move(body)}});
  }
};

class ApiDocumentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"),
                                              std::vector<std::string>{"--history-interval", "1"});
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    rec_.server = server_.get();
  }
  std::string Logs() {
    return ReadFile(dir_.File("data.log")) + "\n--- agent ---\n" +
           ReadFile(dir_.File("agent-n1.log"));
  }
  int64_t Submit(const std::string& name, const std::string& project, Json spec) {
    if (!spec.contains("command")) spec["command"] = {"sleep", "600"};
    Json job = {{"metadata", {{"name", name}, {"project", project}}}, {"spec", spec}};
    HttpResult r = rec_.Call("POST", "/api/v1/jobs", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }

  // The estate every path is called on (see the file's comment); its calls are recorded too.
  void BuildEstate() {
    Recorder& r = rec_;
    const std::string& a = admin_;
    // The configuration, planned and applied through the API.
    const Json files = {{"files", {{{"name", "estate.yaml"}, {"content", kEstate}}}},
                        {"message", "first"}};
    ASSERT_EQ(r.Call("POST", "/api/v1/config/plan", "/api/v1/config/plan", a, files.dump()).status,
              200);
    ASSERT_EQ(
        r.Call("POST", "/api/v1/config/apply", "/api/v1/config/apply", a, files.dump()).status,
        200);

    // A real agent on two simulated GPUs, with a bootstrap token of role agent.
    HttpResult put = r.Call("PUT", "/api/v1/users/{name}", "/api/v1/users/agents", a,
                            Json{{"spec", {{"roles", {{{"role", "agent"}}}}}}}.dump());
    ASSERT_EQ(put.status, 201) << put.text;
    HttpResult token = r.Call("POST", "/api/v1/tokens", "/api/v1/tokens", a,
                              Json{{"user", "agents"}, {"description", "agents"}}.dump());
    ASSERT_EQ(token.status, 201) << token.text;
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    agent_ = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "east", "--pool", "east-h100", "--node", "n1",
                                 "--simulate-gpus", "2xH100-80GB", "--work-dir",
                                 dir_.File("agent-n1"), "--cpu-milli", "16000", "--memory-mib",
                                 "65536"},
        dir_.File("agent-n1.log"));
    agent_->Start(server_->url(), token.body.value("token", ""));

    // A second node, registered by hand (no agent): it takes operators' calls and fault injection.
    const Json n2 = {{"node", "n2"},
                     {"cluster", "east"},
                     {"pool", "east-h100"},
                     {"simulated", true},
                     {"gpus", {{{"index", 0}, {"uuid", "GPU-n2-0"}, {"model", "H100-80GB"}}}}};
    HttpResult registered =
        r.Call("POST", "/api/v1/agents/register", "/api/v1/agents/register", a, n2.dump());
    ASSERT_EQ(registered.status, 200) << registered.text;
    n2_token_ = registered.body.value("credential", "");
    ASSERT_FALSE(n2_token_.empty()) << registered.text;
    beat_ = {{"telemetry", {{{"index", 0}, {"utilization", 0.5}, {"temperatureC", 40}}}},
             {"tasks", Json::array()}};
    ASSERT_EQ(r.Call("POST", "/api/v1/agents/{name}/heartbeat", "/api/v1/agents/n2/heartbeat",
                     n2_token_, beat_.dump())
                  .status,
              200);
    // n2 is cordoned before jobs come, so that they run on n1, the agent's node.
    ASSERT_EQ(r.Call("POST", "/api/v1/nodes/{name}/cordon", "/api/v1/nodes/n2/cordon", a).status,
              200);
    ASSERT_TRUE(Eventually(
        [&] {
          HttpResult n = Http(*server_, "GET", "/api/v1/nodes/n1", a);
          return n.status == 200 && n.body.value("state", "") == "Ready";
        },
        30))
        << Logs();

    // Jobs: one idle training job running on n1, one that succeeds with output, one that cannot
    // fit (pending, explained), one cancelled.
    idle_ = Submit("idle", "research",
                   {{"type", "training"},
                    {"gpus", 1},
                    {"command", {"sleep", "600"}},
                    {"gracePeriod", 2},
                    {"simulateUtilization", 0.01}});
    done_ = Submit("hello", "research", {{"gpus", 1}, {"command", {"sh", "-c", "echo hello"}}});
    waits_ = Submit("big", "research", {{"gpus", 2}, {"tasks", 4}});
    // Pending until cancelled: a label no node has (what no node could ever hold is refused).
    cancelled_ = Submit("cancel", "vision", {{"gpus", 0}, {"nodeSelector", {{"zone", "none"}}}});
    ASSERT_TRUE(Eventually([&] { return Phase(done_) == "Succeeded"; }, 60)) << Logs();
    ASSERT_TRUE(Eventually([&] { return Phase(idle_) == "Running"; }, 60)) << Logs();
    ASSERT_TRUE(Eventually(
        [&] { return !Http(*server_, "GET", "/api/v1/idle", a).body["items"].empty(); }, 60))
        << Logs();
    ASSERT_TRUE(Eventually(
        [&] { return !Http(*server_, "GET", "/api/v1/alerts", a).body["items"].empty(); }, 60))
        << Logs();
    ASSERT_TRUE(Eventually(
        [&] { return !Http(*server_, "GET", "/api/v1/history?since=0", a).body["at"].empty(); },
        10));
    // A budget's answer carries its status once the server has evaluated it (at once after a
    // configuration change): waited for, so that the document's BudgetStatus is checked.
    ASSERT_TRUE(Eventually(
        [&] {
          return Http(*server_, "GET", "/api/v1/budgets/research", a).body.contains("status");
        },
        30));
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<AgentProcess> agent_;
  std::string admin_;
  Recorder rec_;
  int64_t idle_ = 0, done_ = 0, waits_ = 0, cancelled_ = 0;
  std::string n2_token_;
  Json beat_;
};

TEST_F(ApiDocumentTest, EveryAnswerOfEveryPathMatchesItsSchema) {
  Recorder& r = rec_;
  const std::string a = admin_;
  ASSERT_NO_FATAL_FAILURE(BuildEstate());
  const std::string id = std::to_string(idle_);
  r.Call("GET", "/healthz", "/healthz", "");
  r.Call("GET", "/metrics", "/metrics", a);
  r.Call("GET", "/api/v1/whoami", "/api/v1/whoami", a);
  r.Call("GET", "/api/v1/whoami", "/api/v1/whoami", "mrd_0000000000000000_" + std::string(48, '0'));
  r.Call("GET", "/api/v1/version", "/api/v1/version", a);
  r.Call("GET", "/api/v1/version", "/api/v1/version", "");
  r.Call("GET", "/api/v1/auth/providers", "/api/v1/auth/providers", "");
  r.Call("POST", "/api/v1/auth/token", "/api/v1/auth/token", "",
         Json{{"provider", "none"},
              {"code", "c"},
              {"codeVerifier", "v"},
              {"redirectUri", "http://x/"},
              {"nonce", "n"}}
             .dump());
  r.Call("GET", "/api/v1/jobs", "/api/v1/jobs", a);
  r.Call("GET", "/api/v1/jobs", "/api/v1/jobs?limit=1&order=newest", a);
  r.Call("GET", "/api/v1/jobs", "/api/v1/jobs?phase=Sleeping", a);
  // The dashboard's search and filters: a part of the name in any case, and the cluster it ran
  // on (an unknown cluster is refused, as an unknown phase is).
  {
    HttpResult found = r.Call("GET", "/api/v1/jobs", "/api/v1/jobs?name=HEL&cluster=east", a);
    ASSERT_EQ(found.status, 200) << found.text;
    ASSERT_EQ(found.body["items"].size(), 1u) << found.text;
    EXPECT_EQ(found.body["items"][0].value("id", int64_t{0}), done_);
    // "big" waits: it ran on no cluster.
    HttpResult none = r.Call("GET", "/api/v1/jobs", "/api/v1/jobs?name=big&cluster=east", a);
    EXPECT_TRUE(none.body["items"].empty()) << none.text;
    HttpResult bad = r.Call("GET", "/api/v1/jobs", "/api/v1/jobs?cluster=nowhere", a);
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(bad.body["error"].value("field", ""), "cluster") << bad.text;
  }
  r.Call("GET", "/api/v1/jobs/{id}", "/api/v1/jobs/" + id, a);
  r.Call("GET", "/api/v1/jobs/{id}", "/api/v1/jobs/" + std::to_string(done_), a);
  r.Call("GET", "/api/v1/jobs/{id}", "/api/v1/jobs/99999999", a);
  r.Call("GET", "/api/v1/jobs/{id}/explanation",
         "/api/v1/jobs/" + std::to_string(waits_) + "/explanation", a);
  r.Call("GET", "/api/v1/jobs/{id}/explanation", "/api/v1/jobs/" + id + "/explanation", a);
  r.Call("GET", "/api/v1/jobs/{id}/events", "/api/v1/jobs/" + id + "/events", a);
  r.Call("GET", "/api/v1/jobs/{id}/logs", "/api/v1/jobs/" + std::to_string(done_) + "/logs", a);
  // Sessions are WebSockets (tests/agent_test.cc opens them); a plain request is told so, and a
  // job that does not run has no task to open one into.
  r.Call("GET", "/api/v1/jobs/{id}/exec", "/api/v1/jobs/" + id + "/exec?command=true", a);
  r.Call("GET", "/api/v1/jobs/{id}/exec",
         "/api/v1/jobs/" + std::to_string(done_) + "/exec?command=true", a);
  r.Call("GET", "/api/v1/jobs/{id}/portforward", "/api/v1/jobs/" + id + "/portforward?port=8888",
         a);
  r.Call("GET", "/api/v1/agents/{name}/sessions/{session}", "/api/v1/agents/n2/sessions/none",
         n2_token_);
  r.Call("POST", "/api/v1/jobs/{id}/cancel",
         "/api/v1/jobs/" + std::to_string(cancelled_) + "/cancel", a);
  r.Call("POST", "/api/v1/jobs/{id}/cancel", "/api/v1/jobs/" + std::to_string(done_) + "/cancel",
         a);
  r.Call(
      "POST", "/api/v1/jobs", "/api/v1/jobs", a,
      Json{{"metadata", {{"name", "x"}, {"project", "nowhere"}}}, {"spec", {{"gpus", 1}}}}.dump());
  r.Call("POST", "/api/v1/jobs", "/api/v1/jobs", a, R"({"metadata": {"name": "x",)");
  r.Call("POST", "/api/v1/agents/{name}/logs",
         "/api/v1/agents/n2/logs?job=" + id + "&task=0&generation=1&offset=0", n2_token_, "output",
         "application/octet-stream");
  r.Call("GET", "/api/v1/events", "/api/v1/events?limit=5", a);
  r.Call("GET", "/api/v1/events", "/api/v1/events?after=latest", a);
  r.Stream("/api/v1/watch", "/api/v1/watch?after=0", a);
  r.Call("GET", "/api/v1/nodes", "/api/v1/nodes", a);
  r.Call("GET", "/api/v1/nodes/{name}", "/api/v1/nodes/n1", a);
  r.Call("GET", "/api/v1/nodes/{name}", "/api/v1/nodes/nowhere", a);
  // n1's GPUs over time: both of them, sampled while the idle job runs on one.
  ASSERT_TRUE(Eventually(
      [&] {
        return Http(*server_, "GET", "/api/v1/nodes/n1/history?since=0", a).body["at"].size() >= 2;
      },
      10));
  {
    HttpResult h =
        r.Call("GET", "/api/v1/nodes/{name}/history", "/api/v1/nodes/n1/history?since=0", a);
    ASSERT_EQ(h.status, 200) << h.text;
    ASSERT_EQ(h.body["gpus"].size(), 2u) << h.text;
    EXPECT_EQ(h.body["gpus"][0]["utilization"].size(), h.body["at"].size());
    EXPECT_EQ(
        r.Call("GET", "/api/v1/nodes/{name}/history", "/api/v1/nodes/nowhere/history", a).status,
        404);
  }
  // The events of one node: n2 was cordoned.
  {
    HttpResult e = r.Call("GET", "/api/v1/events", "/api/v1/events?objectKind=Node&object=n2", a);
    ASSERT_EQ(e.status, 200) << e.text;
    ASSERT_FALSE(e.body["items"].empty()) << e.text;
    for (const Json& item : e.body["items"]) EXPECT_EQ(item.value("object", ""), "n2");
    EXPECT_EQ(r.Call("GET", "/api/v1/events", "/api/v1/events?object=n2", a).status, 400);
  }
  r.Call("POST", "/api/v1/nodes/{name}/uncordon", "/api/v1/nodes/n2/uncordon", a);
  r.Call("POST", "/api/v1/nodes/{name}/drain", "/api/v1/nodes/n2/drain", a,
         Json{{"reason", "maintenance"}}.dump());
  r.Call("POST", "/api/v1/nodes/{name}/gpus/{index}/faults", "/api/v1/nodes/n2/gpus/0/faults", a,
         Json{{"xid", 48}}.dump());
  r.Call("POST", "/api/v1/nodes/{name}/gpus/{index}/faults", "/api/v1/nodes/n2/gpus/0/faults", a,
         Json{{"warning", "temperature"}}.dump());
  r.Call("POST", "/api/v1/nodes/{name}/gpus/{index}/uncordon", "/api/v1/nodes/n2/gpus/0/uncordon",
         a);
  r.Call("GET", "/api/v1/nodes/{name}", "/api/v1/nodes/n2", a);
  r.Call("DELETE", "/api/v1/nodes/{name}", "/api/v1/nodes/n1", a);
  r.Call("GET", "/api/v1/usage", "/api/v1/usage", a);
  r.Call("GET", "/api/v1/history", "/api/v1/history?since=0", a);
  r.Call("GET", "/api/v1/alerts", "/api/v1/alerts", a);
  r.Call("GET", "/api/v1/alerts", "/api/v1/alerts?state=asleep", a);
  r.Call("GET", "/api/v1/idle", "/api/v1/idle", a);
  // Every kind of configuration document: listed, read, written, deleted.
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"organizations", "acme"},        {"teams", "lab"},
      {"projects", "research"},         {"quotas", "research"},
      {"priorityclasses", "high"},      {"clusters", "east"},
      {"nodepools", "east-h100"},       {"policies", "default"},
      {"alertrules", "research-queue"}, {"alertreceivers", "chatops"},
      {"identityproviders", "x"},       {"idlepolicies", "training"},
      {"budgets", "research"}};
  for (const auto& [kind, name] : kinds) {
    r.Call("GET", "/api/v1/{kind}", "/api/v1/" + kind, a);
    r.Call("GET", "/api/v1/{kind}/{name}", "/api/v1/" + kind + "/" + name, a);
  }
  const Json low = {{"kind", "PriorityClass"},
                    {"metadata", {{"name", "low"}}},
                    {"spec", {{"value", 1}, {"preempting", false}}}};
  r.Call("PUT", "/api/v1/{kind}/{name}", "/api/v1/priorityclasses/low", a, low.dump());
  r.Call("PUT", "/api/v1/{kind}/{name}", "/api/v1/priorityclasses/low", a, low.dump());
  r.Call("PUT", "/api/v1/{kind}/{name}", "/api/v1/priorityclasses/low", a, "{]");
  r.Call("DELETE", "/api/v1/{kind}/{name}", "/api/v1/priorityclasses/low", a);
  r.Call("DELETE", "/api/v1/{kind}/{name}", "/api/v1/clusters/east", a);
  r.Call("POST", "/api/v1/config/rollback", "/api/v1/config/rollback", a, Json{{"to", 1}}.dump());
  r.Call("POST", "/api/v1/config/plan", "/api/v1/config/plan", a,
         Json{{"files", {{{"name", "bad.yaml"}, {"content", "kind: Cluster\nmetadata: {}\n"}}}}}
             .dump());
  r.Call("GET", "/api/v1/config/revisions", "/api/v1/config/revisions", a);
  r.Call("GET", "/api/v1/config/revisions/{number}", "/api/v1/config/revisions/1", a);
  r.Call("GET", "/api/v1/users", "/api/v1/users", a);
  r.Call("PUT", "/api/v1/users/{name}", "/api/v1/users/agents", a,
         Json{{"spec", {{"roles", {{{"role", "agent"}}}}, {"description", "bootstrap"}}}}.dump());
  HttpResult mine = r.Call("POST", "/api/v1/tokens", "/api/v1/tokens", a,
                           Json{{"description", "test"}, {"expiresIn", 3600}}.dump());
  r.Call("GET", "/api/v1/tokens", "/api/v1/tokens", a);
  r.Call("DELETE", "/api/v1/tokens/{id}", "/api/v1/tokens/" + mine.body.value("id", ""), a);
  r.Call("GET", "/api/v1/audit", "/api/v1/audit?limit=20&order=newest", a);
  r.Call("GET", "/api/v1/reports/usage", "/api/v1/reports/usage?by=cluster", a);
  r.Call("GET", "/api/v1/reports/usage", "/api/v1/reports/usage?by=galaxy", a);
  r.Call("GET", "/api/v1/reports/usage", "/api/v1/reports/usage?by=project&step=3600", a);
  // n1's agent's wait for orders: `seen` 0 is answered at once with the node's version.
  HttpResult waited =
      r.Call("GET", "/api/v1/agents/{name}/wait", "/api/v1/agents/n1/wait?seen=0&timeout=5", a);
  EXPECT_EQ(waited.status, 200) << waited.text;
  EXPECT_GT(waited.body.value("version", uint64_t{0}), 0u) << waited.text;
  // The same for n1's whole cluster, as a Slurm connector waits; a scope of nothing known is 400.
  HttpResult cluster_waited = r.Call("GET", "/api/v1/agents/{name}/wait",
                                     "/api/v1/agents/n1/wait?seen=0&timeout=5&scope=cluster", a);
  EXPECT_EQ(cluster_waited.status, 200) << cluster_waited.text;
  EXPECT_GT(cluster_waited.body.value("version", uint64_t{0}), 0u) << cluster_waited.text;
  HttpResult bad_scope = r.Call("GET", "/api/v1/agents/{name}/wait",
                                "/api/v1/agents/n1/wait?seen=0&scope=galaxy", a);
  EXPECT_EQ(bad_scope.status, 400) << bad_scope.text;
  // Its channel is a WebSocket (tests/agent_channel_test.cc opens one); a plain request is told.
  HttpResult channel =
      r.Call("GET", "/api/v1/agents/{name}/channel", "/api/v1/agents/n1/channel", a);
  EXPECT_EQ(channel.status, 400) << channel.text;
  // Last, as n1's agent would heartbeat (an admin may speak for a node): the answer lists the
  // idle job's task, an assignment with its devices.
  HttpResult assigned = r.Call("POST", "/api/v1/agents/{name}/heartbeat",
                               "/api/v1/agents/n1/heartbeat", a, beat_.dump());
  EXPECT_EQ(assigned.status, 200) << assigned.text;
  EXPECT_FALSE(assigned.body.value("tasks", Json::array()).empty()) << assigned.text;

  // Kept beside the test's other artifacts: `node tests/openapi/check.mjs docs/openapi.yaml
  // build/test-artifacts/api-document/answers.json` checks them again after a document change.
  std::filesystem::create_directories("test-artifacts/api-document");
  const std::string answers =
      WriteTestFile("test-artifacts/api-document/answers.json", r.answers.dump(1));
  CliResult checked =
      RunToExit(std::string(NODE_BINARY),
                {kSource + "/tests/openapi/check.mjs", kSource + "/docs/openapi.yaml", answers},
                dir_.File("check.log"), 60);
  EXPECT_EQ(checked.code, 0) << checked.output;
  std::cout << checked.output << "\n";
}

// A body that is not JSON answers the same 400 on every path that takes one: our message with
// the place it breaks, the place in details, and nothing of the parser's exception text.
TEST_F(ApiDocumentTest, MalformedJsonIsOneClear400SayingWhereOnEveryPath) {
  const std::string expected = "malformed JSON at line 2, column 8 (byte 10): unexpected 'x'";
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"POST", "/api/v1/jobs"},
      {"PUT", "/api/v1/users/x"},
      {"POST", "/api/v1/tokens"},
      {"POST", "/api/v1/config/plan"},
      {"POST", "/api/v1/config/apply"},
      {"POST", "/api/v1/config/rollback"},
      {"PUT", "/api/v1/clusters/x"},
      {"POST", "/api/v1/agents/register"},
      {"POST", "/api/v1/agents/x/heartbeat"},
      {"POST", "/api/v1/auth/token"},
      {"POST", "/api/v1/nodes/x/drain"},
      {"POST", "/api/v1/nodes/x/gpus/0/faults"},
  };
  for (const auto& [method, path] : calls) {
    HttpResult r = Http(*server_, method, path, admin_, "{\n  \"a\": x}");
    EXPECT_EQ(r.status, 400) << method << " " << path << ": " << r.text;
    const Json& error = r.body["error"];
    EXPECT_EQ(error.value("code", ""), "invalid_argument") << path << ": " << r.text;
    EXPECT_EQ(error.value("message", ""), expected) << path << ": " << r.text;
    ASSERT_TRUE(error.contains("details") && error["details"].size() == 1) << path << r.text;
    EXPECT_EQ(error["details"][0].value("line", 0), 2) << path << ": " << r.text;
    EXPECT_EQ(error["details"][0].value("column", 0), 8) << path << ": " << r.text;
    EXPECT_EQ(r.text.find("json.exception"), std::string::npos) << path << ": " << r.text;
    EXPECT_EQ(r.text.find("parse_error"), std::string::npos) << path << ": " << r.text;
  }
  // A body cut short says so, with the byte after its end.
  HttpResult cut = Http(*server_, "POST", "/api/v1/jobs", admin_, R"({"metadata": {"name": "x")");
  EXPECT_EQ(cut.status, 400) << cut.text;
  EXPECT_EQ(cut.body["error"].value("message", ""),
            "malformed JSON at line 1, column 26 (byte 26): the body ends before the JSON value "
            "does")
      << cut.text;
}

// One pagination on every list: ?limit and ?continue, the answer's continue (null on the last
// page); ?after still works where it did.
TEST_F(ApiDocumentTest, EveryListPagesWithLimitAndContinue) {
  const Json files = {{"files", {{{"name", "estate.yaml"}, {"content", kEstate}}}}};
  ASSERT_EQ(Http(*server_, "POST", "/api/v1/config/apply", admin_, files.dump()).status, 200);
  // A list the server holds whole: the projects research and vision, one a page.
  HttpResult first = Http(*server_, "GET", "/api/v1/projects?limit=1", admin_);
  ASSERT_EQ(first.status, 200) << first.text;
  ASSERT_EQ(first.body["items"].size(), 1u) << first.text;
  EXPECT_EQ(first.body["items"][0]["metadata"]["name"], "research");
  ASSERT_TRUE(first.body["continue"].is_number_integer()) << first.text;
  HttpResult second =
      Http(*server_, "GET", "/api/v1/projects?limit=1&continue=" + first.body["continue"].dump(),
           admin_);
  ASSERT_EQ(second.body["items"].size(), 1u) << second.text;
  EXPECT_EQ(second.body["items"][0]["metadata"]["name"], "vision");
  EXPECT_TRUE(second.body["continue"].is_null()) << second.text;
  // Without a limit, all of it, as before.
  HttpResult all = Http(*server_, "GET", "/api/v1/projects", admin_);
  EXPECT_EQ(all.body["items"].size(), 2u) << all.text;
  EXPECT_TRUE(all.body["continue"].is_null()) << all.text;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects?continue=-1", admin_).status, 400);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/users?limit=0", admin_).status, 400);

  // The event feed: continue is the sequence number to continue from; after, its old name.
  HttpResult events = Http(*server_, "GET", "/api/v1/events?limit=2", admin_);
  ASSERT_EQ(events.body["items"].size(), 2u) << events.text;
  const Json next = events.body["continue"];
  EXPECT_EQ(next, events.body["items"][1]["seq"]) << events.text;
  EXPECT_EQ(next, events.body["last"]) << events.text;
  HttpResult by_continue =
      Http(*server_, "GET", "/api/v1/events?limit=2&continue=" + next.dump(), admin_);
  HttpResult by_after =
      Http(*server_, "GET", "/api/v1/events?limit=2&after=" + next.dump(), admin_);
  ASSERT_EQ(by_continue.body["items"].size(), 2u) << by_continue.text;
  EXPECT_EQ(by_continue.body["items"], by_after.body["items"]);
  EXPECT_GT(by_continue.body["items"][0]["seq"].get<int64_t>(), next.get<int64_t>());

  // The audit log, oldest first: a full page continues after its last entry.
  HttpResult audit = Http(*server_, "GET", "/api/v1/audit?limit=1", admin_);
  ASSERT_EQ(audit.body["items"].size(), 1u) << audit.text;
  EXPECT_EQ(audit.body["continue"], audit.body["items"][0]["seq"]) << audit.text;
  HttpResult audit2 = Http(
      *server_, "GET", "/api/v1/audit?limit=1&continue=" + audit.body["continue"].dump(), admin_);
  ASSERT_EQ(audit2.body["items"].size(), 1u) << audit2.text;
  EXPECT_GT(audit2.body["items"][0]["seq"].get<int64_t>(),
            audit.body["items"][0]["seq"].get<int64_t>());
}

}  // namespace
}  // namespace meridian::testing
