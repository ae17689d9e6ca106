// GPU telemetry in a REAL Prometheus (Debian's `prometheus`, installed by
// scripts/install-deps.sh): a real `meridian server` with real agents on simulated GPUs (a fake:
// no NVIDIA GPU here) is scraped, and the test asks Prometheus's HTTP API what it stored. Every
// GPU of /api/v1/nodes must be there with its labels, and queries over the series must answer.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;
// dcgm-exporter's names recorded from Meridian's, shipped for dashboards written for it.
const std::string kRules =
    std::string(MERIDIAN_SOURCE_DIR) + "/deploy/prometheus/dcgm-compat.rules.yml";

// Where the Debian package puts it; PROMETHEUS overrides.
std::string PrometheusBinary() {
  if (const char* p = std::getenv("PROMETHEUS")) return p;
  for (const char* p : {"/usr/bin/prometheus", "/usr/local/bin/prometheus"}) {
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
kind: Cluster
metadata: {name: east}
spec: {type: on-prem, region: eu-east}
---
kind: Cluster
metadata: {name: west}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: east-h100}
spec: {cluster: east, gpusPerNode: 4, gpuModel: H100-80GB}
---
kind: NodePool
metadata: {name: west-a100}
spec: {cluster: west, gpusPerNode: 2, gpuModel: A100-80GB}
---
kind: Policy
metadata: {name: default}
spec: {heartbeatInterval: 0.2, nodeLostTimeout: 5}
)";

class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prometheus_ = PrometheusBinary();
    // `make test` installs it (scripts/install-deps.sh): a missing one is a failure, not a skip.
    ASSERT_FALSE(prometheus_.empty())
        << "Prometheus is not installed: run scripts/install-deps.sh (Debian's prometheus)";
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Cli(kBinary, "apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate),
                      server_->url(), admin_);
    ASSERT_EQ(r.code, 0) << r.output;
    agent_token_ = AgentToken(*server_, admin_);
    ASSERT_FALSE(agent_token_.empty());
  }

  void StartAgent(const std::string& node, const std::string& cluster, const std::string& pool,
                  const std::string& gpus) {
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    auto a = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", cluster, "--pool", pool, "--node", node,
                                 "--simulate-gpus", gpus, "--work-dir", dir_.File("agent-" + node),
                                 "--cpu-milli", "16000", "--memory-mib", "65536"},
        dir_.File("agent-" + node + ".log"));
    a->Start(server_->url(), agent_token_);
    agents_.push_back(std::move(a));
  }

  // Prometheus scraping the server's /metrics every second, its data in the test's folder.
  void StartPrometheus() {
    // The rules Prometheus loads are valid (promtool comes with Debian's package).
    const std::string promtool = prometheus_.substr(0, prometheus_.rfind('/') + 1) + "promtool";
    if (access(promtool.c_str(), X_OK) == 0) {
      const CliResult checked =
          RunToExit(promtool, {"check", "rules", kRules}, dir_.File("promtool.log"), 30);
      ASSERT_EQ(checked.code, 0) << checked.output;
    }
    port_ = FreePort();
    ASSERT_GT(port_, 0);
    // Prometheus scrapes as a user of the metrics role, as a site would: /metrics needs a token.
    Json scraper = {{"spec", {{"roles", Json::array({{{"role", "metrics"}}})}}}};
    ASSERT_EQ(Http(*server_, "PUT", "/api/v1/users/prometheus", admin_, scraper.dump()).status,
              201);
    HttpResult token =
        Http(*server_, "POST", "/api/v1/tokens", admin_, Json{{"user", "prometheus"}}.dump());
    ASSERT_EQ(token.status, 201) << token.text;
    const std::string token_file =
        WriteTestFile(dir_.File("scrape.token"), token.body.value("token", ""));
    const std::string config =
        WriteTestFile(dir_.File("prometheus.yml"),
                      "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                      "rule_files: ['" +
                          kRules +
                          "']\n"
                          "scrape_configs:\n"
                          "  - job_name: meridian\n"
                          "    authorization: {type: Bearer, credentials_file: '" +
                          token_file +
                          "'}\n"
                          "    static_configs: [{targets: ['127.0.0.1:" +
                          std::to_string(server_->port()) + "']}]\n");
    prom_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{prometheus_, "--config.file=" + config,
                                 "--storage.tsdb.path=" + dir_.File("tsdb"),
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port_)},
        dir_.File("prometheus.log"));
    ASSERT_TRUE(Eventually(
        [&] {
          httplib::Client c("127.0.0.1", port_);
          auto r = c.Get("/-/ready");
          return r && r->status == 200;
        },
        30))
        << ReadFile(dir_.File("prometheus.log"));
  }

  // The result vector of an instant query (empty on error).
  Json Query(const std::string& promql) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10);
    auto r = c.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!r || r->status != 200) return Json::array();
    const Json body = Json::parse(r->body, nullptr, false);
    if (!body.is_object() || body.value("status", "") != "success") return Json::array();
    return body["data"].value("result", Json::array());
  }

  // Whether Prometheus accepts and evaluates `promql` ("" when it does, else its error).
  std::string QueryError(const std::string& promql) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10);
    auto r = c.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!r) return "no answer";
    const Json body = Json::parse(r->body, nullptr, false);
    if (body.is_object() && body.value("status", "") == "success") return "";
    return r->body;
  }

  static double Value(const Json& sample) {
    return std::stod(sample["value"][1].get<std::string>());
  }

  Json Nodes() {
    return Http(*server_, "GET", "/api/v1/nodes", admin_).body.value("items", Json());
  }

  base::testing::TempDir dir_;
  std::string prometheus_;
  std::unique_ptr<ServerProcess> server_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
  std::unique_ptr<ChildProcess> prom_;
  std::string admin_, agent_token_;
  int port_ = 0;
};

TEST_F(PrometheusTest, EveryGpuOfTheNodeListIsInPrometheusWithItsLabelsAndQueriesAnswer) {
  StartAgent("e1", "east", "east-h100", "4xH100-80GB");
  StartAgent("w1", "west", "west-a100", "2xA100-80GB");
  // Both registered, with their telemetry: six GPUs in the node list.
  ASSERT_TRUE(Eventually(
      [&] {
        int reporting = 0;
        for (const Json& n : Nodes()) {
          for (const Json& g : n["gpus"]) reporting += g.contains("utilization");
        }
        return reporting == 6;
      },
      30))
      << ReadFile(dir_.File("agent-e1.log")) << ReadFile(dir_.File("data.log"));
  // A job on two of east's GPUs that says how busy it keeps them.
  const Json job = {{"metadata", {{"name", "train"}, {"project", "research"}}},
                    {"spec",
                     {{"gpus", 2},
                      {"clusters", {"east"}},
                      {"simulateUtilization", 0.6},
                      {"command", {"sleep", "600"}}}}};
  HttpResult submitted = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
  ASSERT_EQ(submitted.status, 201) << submitted.text;
  const int64_t id = submitted.body.value("id", int64_t{0});
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, id) == "Running"; }, 30));

  const auto started = std::chrono::steady_clock::now();
  StartPrometheus();
  // The first scrape comes a few seconds after Prometheus is ready: poll until the job's GPUs
  // show its load, so that every series below is from a scrape after the job started.
  ASSERT_TRUE(Eventually(
      [&] {
        Json r = Query("meridian_gpu_utilization_ratio{job_id=\"" + std::to_string(id) + "\"}");
        return r.size() == 2 && Value(r[0]) > 0.5;
      },
      60))
      << ReadFile(dir_.File("prometheus.log"));
  const double first =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("prometheus: ready and first sample with the job's load %.1f s after start\n", first);

  // Every GPU of /api/v1/nodes, with dcgm-exporter's labels and Meridian's.
  const Json series = Query("meridian_gpu_utilization_ratio");
  std::map<std::string, Json> by_uuid;
  for (const Json& s : series) by_uuid[s["metric"].value("UUID", "")] = s["metric"];
  int gpus = 0, held = 0;
  for (const Json& n : Nodes()) {
    for (const Json& g : n["gpus"]) {
      ++gpus;
      const std::string uuid = g.value("uuid", "");
      ASSERT_TRUE(by_uuid.count(uuid)) << uuid << " has no series: " << series.dump();
      const Json& m = by_uuid[uuid];
      EXPECT_EQ(m.value("gpu", ""), std::to_string(g.value("index", -1))) << uuid;
      EXPECT_EQ(m.value("device", ""), "nvidia" + std::to_string(g.value("index", -1)));
      EXPECT_EQ(m.value("modelName", ""), n.value("model", "")) << uuid;
      EXPECT_EQ(m.value("Hostname", ""), n.value("name", "")) << uuid;
      EXPECT_EQ(m.value("cluster", ""), n.value("cluster", "")) << uuid;
      const bool mine = g.value("allocatedMilli", 0) > 0;
      held += mine;
      EXPECT_EQ(m.value("job_id", ""), mine ? std::to_string(id) : "") << uuid;
      EXPECT_EQ(m.value("project", ""), mine ? "research" : "") << uuid;
      // `job` stays Prometheus's own (the scrape job's name): nothing of ours collides with it.
      EXPECT_EQ(m.value("job", ""), "meridian") << m.dump();
      EXPECT_FALSE(m.contains("exported_job")) << m.dump();
    }
  }
  EXPECT_EQ(gpus, 6);
  EXPECT_EQ(held, 2);
  EXPECT_EQ(series.size(), 6u);
  for (const char* family : {"meridian_gpu_memory_total_bytes", "meridian_gpu_temperature_celsius",
                             "meridian_gpu_power_watts", "meridian_gpu_sm_clock_hertz",
                             "meridian_gpu_ecc_double_bit_errors_total",
                             "meridian_gpu_xid_errors_total", "meridian_gpu_healthy"}) {
    EXPECT_EQ(Query(family).size(), 6u) << family;
  }

  // A query over them: mean utilisation per cluster (east: two of four GPUs at 0.6).
  std::map<std::string, double> mean;
  for (const Json& s : Query("avg by (cluster) (meridian_gpu_utilization_ratio)")) {
    mean[s["metric"].value("cluster", "")] = Value(s);
  }
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_NEAR(mean["east"], 0.3, 1e-9);
  EXPECT_NEAR(mean["west"], 0.0, 1e-9);
  // Joined with the node states: utilisation of GPUs on ready nodes only.
  const Json ready = Query(
      "meridian_gpu_utilization_ratio * on (node) group_left () "
      "(meridian_node_state{state=\"ready\"} == 1)");
  EXPECT_EQ(ready.size(), 6u);
  const Json states = Query("sum by (state) (meridian_node_state)");
  std::map<std::string, double> nodes_in;
  for (const Json& s : states) nodes_in[s["metric"].value("state", "")] = Value(s);
  EXPECT_EQ(nodes_in["ready"], 2);
  EXPECT_EQ(nodes_in["lost"], 0);  // the series at zero are there
  EXPECT_EQ(Query("meridian_build_info").size(), 1u);
  const Json level = Query("meridian_quota_used_gpus{level=\"project\",scope=\"research\"}");
  ASSERT_EQ(level.size(), 1u);
  EXPECT_EQ(Value(level[0]), 2);

  // The shipped Grafana dashboard's queries all evaluate, and those over GPUs find them.
  std::ifstream in(std::string(MERIDIAN_SOURCE_DIR) + "/deploy/grafana/meridian-gpus.json");
  const Json dashboard = Json::parse(in, nullptr, false);
  ASSERT_TRUE(dashboard.is_object());
  int queries = 0;
  for (const Json& panel : dashboard["panels"]) {
    for (const Json& target : panel["targets"]) {
      std::string expr = target.value("expr", "");
      for (const std::string var : {"$cluster", "$node"}) {
        for (size_t at; (at = expr.find(var)) != std::string::npos;)
          expr.replace(at, var.size(), ".*");
      }
      EXPECT_EQ(QueryError(expr), "") << panel.value("title", "") << ": " << expr;
      if (expr.find("meridian_gpu_") != std::string::npos &&
          expr.find("< 0.05") == std::string::npos && expr.find("== 0") == std::string::npos &&
          expr.find("increase(") == std::string::npos) {
        EXPECT_FALSE(Query(expr).empty()) << panel.value("title", "") << ": " << expr;
      }
      ++queries;
    }
  }
  EXPECT_GE(queries, 14);

  // Through the shipped recording rules, a dcgm-exporter query answers as it would there:
  // percent, MiB, MHz, with the same labels.
  const std::string dcgm_util = "DCGM_FI_DEV_GPU_UTIL{job_id=\"" + std::to_string(id) + "\"}";
  ASSERT_TRUE(Eventually([&] { return Query(dcgm_util).size() == 2; }, 30));
  const Json dcgm = Query(dcgm_util);
  EXPECT_NEAR(Value(dcgm[0]), 60, 1e-9);
  EXPECT_EQ(dcgm[0]["metric"].value("modelName", ""), "H100-80GB");
  // Each rule group is evaluated on its own tick: every recorded series is waited for.
  const std::string fb_total = "DCGM_FI_DEV_FB_TOTAL{Hostname=\"w1\",gpu=\"0\"}";
  ASSERT_TRUE(Eventually([&] { return Query(fb_total).size() == 1; }, 30)) << Query(fb_total);
  EXPECT_EQ(Value(Query(fb_total)[0]), 81920);
  EXPECT_TRUE(Eventually([&] { return Query("DCGM_FI_DEV_SM_CLOCK").size() == 6; }, 30))
      << Query("DCGM_FI_DEV_SM_CLOCK");

  // An outcome counted: the job cancelled, the counter moves from 0 to 1 in Prometheus.
  EXPECT_EQ(Query("meridian_jobs_cancelled_total{project=\"research\"}").size(), 1u);
  ASSERT_EQ(
      Http(*server_, "POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", admin_, "{}").status,
      200);
  EXPECT_TRUE(Eventually(
      [&] {
        Json r = Query("meridian_jobs_cancelled_total{project=\"research\"}");
        return r.size() == 1 && Value(r[0]) == 1;
      },
      30));
}

}  // namespace
}  // namespace meridian::testing
