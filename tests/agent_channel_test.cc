// One WebSocket per agent (docs/adr/0047-one-connection-per-agent.md), against a real server:
// heartbeats go as messages and come back answered as POST .../heartbeat answers them, and the
// node's doorbell rings on the same connection when its orders change.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/testing/temp_dir.h"
#include "net/websocket_client.h"
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
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: a100}
spec: {cluster: onprem, gpusPerNode: 1, gpuModel: A100-80GB}
)";

class AgentChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    const Json files = {{"files", {{{"name", "estate.yaml"}, {"content", kEstate}}}}};
    HttpResult applied = Http(*server_, "POST", "/api/v1/config/apply", admin_, files.dump());
    ASSERT_EQ(applied.status, 200) << applied.text;
    for (const char* node : {"n1", "n2"}) {
      const Json body = {
          {"node", node},
          {"cluster", "onprem"},
          {"pool", "a100"},
          {"simulated", true},
          {"cpuMilli", 16000},
          {"memoryMib", 65536},
          {"gpus", {{{"uuid", std::string("GPU-") + node}, {"model", "A100-80GB"}}}}};
      HttpResult r = Http(*server_, "POST", "/api/v1/agents/register", admin_, body.dump());
      ASSERT_EQ(r.status, 200) << r.text;
      credentials_.push_back(r.body.value("credential", ""));
    }
    // Work goes to n1, the node on the channel.
    HttpResult cordoned = Http(*server_, "POST", "/api/v1/nodes/n2/cordon", admin_, "{}");
    ASSERT_EQ(cordoned.status, 200) << cordoned.text;
  }

  net::WebSocketTarget Channel(const std::string& node, const std::string& credential) {
    net::WebSocketTarget t;
    t.server = server_->url();
    t.path = "/api/v1/agents/" + node + "/channel";
    t.headers["Authorization"] = "Bearer " + credential;
    return t;
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::string admin_;
  std::vector<std::string> credentials_;  // n1's, n2's
};

const char* kBeat = R"({"telemetry":[{"index":0,"utilization":0.1}],"tasks":[]})";

TEST_F(AgentChannelTest, CarriesHeartbeatsTheirAnswersAndTheDoorbellOnOneConnection) {
  net::WebSocketOpen open = net::WebSocketClient::Connect(Channel("n1", credentials_[0]));
  ASSERT_TRUE(open.socket) << open.error << " " << open.body;
  net::WebSocketClient& ws = *open.socket;
  // Each step waits for one kind of message, then sends what comes next.
  enum Step { kFirstAnswer, kRing, kAssigned, kRefused, kLast, kDone };
  Step step = kFirstAnswer;
  std::vector<std::string> seen;
  int64_t job = 0;
  // A heartbeat a second, as an agent keeps its node live; the steps send more of their own.
  std::function<void()> beat = [&] {
    ws.Send(kBeat);
    ws.After(1, beat);
  };
  beat();
  ws.After(60, [&] { ws.Close(); });  // a step that never comes fails below, not by a hang
  const std::string why = ws.Run([&](std::string_view message) {
    const std::string m(message);
    seen.push_back(m);
    const bool ring = m.rfind("ring ", 0) == 0;
    const Json answer = ring ? Json() : Json::parse(m.substr(m.find(' ') + 1), nullptr, false);
    switch (step) {
      case kFirstAnswer:
        if (m.rfind("200 ", 0) != 0) return;
        EXPECT_TRUE(answer.value("tasks", Json::array()).empty()) << m;
        {
          const Json spec = {{"metadata", {{"name", "one"}, {"project", "research"}}},
                             {"spec", {{"gpus", 1}, {"command", {"sleep", "600"}}}}};
          HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, spec.dump());
          EXPECT_EQ(r.status, 201) << r.text;
          job = r.body.value("id", int64_t{0});
        }
        step = kRing;
        return;
      case kRing:
        // Placed on n1: the doorbell rings on the channel; the agent heartbeats at once.
        if (!ring) return;
        ws.Send(kBeat);
        step = kAssigned;
        return;
      case kAssigned: {
        const Json tasks = ring ? Json::array() : answer.value("tasks", Json::array());
        if (tasks.empty()) return;  // a ring, or the answer of a beat sent before it
        EXPECT_EQ(m.rfind("200 ", 0), 0u) << m;
        EXPECT_EQ(tasks.size(), 1u) << m;
        if (!tasks.empty()) {
          EXPECT_EQ(tasks[0].value("job", int64_t{0}), job) << m;
        }
        ws.Send("{not json");
        step = kRefused;
        return;
      }
      case kRefused:
        if (ring || m.rfind("200 ", 0) == 0) return;  // the timer's beats go on meanwhile
        // A bad heartbeat is answered as POST .../heartbeat answers it, and the channel stays.
        EXPECT_EQ(m.rfind("400 ", 0), 0u) << m;
        EXPECT_EQ(answer["error"].value("code", ""), "invalid_argument") << m;
        ws.Send(kBeat);
        step = kLast;
        return;
      case kLast:
        if (m.rfind("200 ", 0) != 0) return;
        step = kDone;
        ws.Close();
        return;
      case kDone:
        return;
    }
  });
  EXPECT_EQ(why, "");
  std::string all;
  for (const std::string& m : seen) all += m.substr(0, 200) + "\n";
  EXPECT_EQ(step, kDone)
      << "messages:\n"
      << all << "job " << job << ": "
      << Http(*server_, "GET", "/api/v1/jobs/" + std::to_string(job) + "/explanation", admin_).text;
}

TEST_F(AgentChannelTest, IsRefusedToAnotherNodesCredentialAndToAPlainRequest) {
  // n2's credential speaks for n2 alone: refused at the upgrade, with the API's words.
  net::WebSocketOpen other = net::WebSocketClient::Connect(Channel("n1", credentials_[1]));
  EXPECT_FALSE(other.socket);
  EXPECT_EQ(other.status, 403) << other.body;
  EXPECT_NE(other.body.find("n2"), std::string::npos) << other.body;
  // No credential at all.
  net::WebSocketOpen nobody = net::WebSocketClient::Connect(Channel("n1", "mrd_nobody"));
  EXPECT_FALSE(nobody.socket);
  EXPECT_EQ(nobody.status, 401) << nobody.body;
  // A plain GET is told what the path wants.
  HttpResult plain = Http(*server_, "GET", "/api/v1/agents/n1/channel", credentials_[0]);
  EXPECT_EQ(plain.status, 400) << plain.text;
  EXPECT_NE(plain.text.find("WebSocket"), std::string::npos) << plain.text;
}

// A credential revoked after the upgrade: the next heartbeat is refused, as a POST would be,
// and the channel is closed (no more rings for it).
TEST_F(AgentChannelTest, ARevokedCredentialsNextHeartbeatIsRefusedAndItsChannelClosed) {
  net::WebSocketOpen open = net::WebSocketClient::Connect(Channel("n1", credentials_[0]));
  ASSERT_TRUE(open.socket) << open.error << " " << open.body;
  net::WebSocketClient& ws = *open.socket;
  std::vector<std::string> answers;
  ws.Send(kBeat);
  ws.After(30, [&] { ws.Close(); });
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = ws.Run([&](std::string_view m) {
    if (m.rfind("ring ", 0) == 0) return;
    answers.emplace_back(m);
    if (answers.size() == 1) {
      // The credential's id is its middle part: mrd_ID_SECRET.
      const std::string id = credentials_[0].substr(4, 16);
      HttpResult revoked = Http(*server_, "DELETE", "/api/v1/tokens/" + id, admin_);
      EXPECT_EQ(revoked.status, 200) << revoked.text;
      ws.Send(kBeat);
    }
  });
  EXPECT_EQ(why, "");  // closed by the server, not broken
  // ... and by the server, well before the test's own close at 30 s.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].rfind("200 ", 0), 0u) << answers[0];
  EXPECT_EQ(answers[1].rfind("401 ", 0), 0u) << answers[1];
}

// The count of API requests of `route` with `code` (all codes when empty), from /metrics.
double Requests(const ServerProcess& s, const std::string& admin, const std::string& route,
                const std::string& code = "") {
  HttpResult m = Http(s, "GET", "/metrics", admin);
  double n = 0;
  std::istringstream lines(m.text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("meridian_api_requests_total{", 0) != 0) continue;
    if (line.find("route=\"" + route + "\"") == std::string::npos) continue;
    if (!code.empty() && line.find("code=\"" + code + "\"") == std::string::npos) continue;
    n += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return n;
}

// `meridian agent` keeps one connection: its heartbeats go over its node's channel, it waits
// on no long poll, and a job placed on its node starts at the ring, not at the next heartbeat.
TEST_F(AgentChannelTest, AnAgentHeartbeatsOverItsChannelAndStartsWorkAtTheRing) {
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  AgentProcess agent(
      kBinary,
      {"--cluster", "onprem", "--pool", "a100", "--node", "n3", "--simulate-gpus", "1xA100-80GB",
       "--work-dir", dir_.File("agent-n3"), "--cpu-milli", "16000", "--memory-mib", "65536"},
      dir_.File("agent-n3.log"));
  agent.Start(server_->url(), AgentToken(*server_, admin_));
  ASSERT_TRUE(
      Eventually([&] { return Requests(*server_, admin_, "agents.heartbeat", "200") >= 3; }, 30))
      << ReadFile(dir_.File("agent-n3.log"));
  EXPECT_EQ(Requests(*server_, admin_, "agents.channel"), 1);
  EXPECT_EQ(Requests(*server_, admin_, "agents.wait"), 0);
  // n1, never heard (but not yet silent for long), and n2 are cordoned: the job goes to n3.
  HttpResult cordoned = Http(*server_, "POST", "/api/v1/nodes/n1/cordon", admin_, "{}");
  ASSERT_EQ(cordoned.status, 200) << cordoned.text;
  // The heartbeat interval is 2 s; a job that runs `true` is done well within it when the ring
  // brings the agent's heartbeat at once.
  const Json spec = {{"metadata", {{"name", "now"}, {"project", "research"}}},
                     {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
  const auto t0 = std::chrono::steady_clock::now();
  HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, spec.dump());
  ASSERT_EQ(r.status, 201) << r.text;
  const int64_t job = r.body.value("id", int64_t{0});
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, job) != "Pending"; }, 30));
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string phase = JobPhase(*server_, admin_, job);
        return phase == "Running" || phase == "Succeeded";
      },
      30))
      << JobPhase(*server_, admin_, job) << "\n"
      << ReadFile(dir_.File("agent-n3.log"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "submission to Running over the channel: " << seconds << " s\n";
  EXPECT_EQ(Requests(*server_, admin_, "agents.channel"), 1);
  EXPECT_EQ(Requests(*server_, admin_, "agents.wait"), 0);
}

}  // namespace
}  // namespace meridian::testing
