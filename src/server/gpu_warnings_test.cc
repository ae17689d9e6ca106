// Warnings before failures and failing nodes in the control plane, without processes and on a
// fake clock (docs/adr/0020-gpu-warnings-and-failing-nodes.md): heartbeat samples become node
// conditions with an event, and nothing is cordoned for them; failed runs whose cause points at
// the node flag it once they span enough projects, and the flag ages out with its window.
#include <gtest/gtest.h>

#include "domain/node_ops.h"
#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using testing::ControlPlane;
using testing::Doc;
using testing::Estate;

class GpuWarningsTest : public ControlPlane {
 protected:
  Json Conditions(const std::string& node) {
    return nodes_->NodeStatus(node).value("conditions", Json::array());
  }
  std::vector<std::string> Types(const std::string& node) {
    std::vector<std::string> out;
    for (const Json& c : Conditions(node)) {
      out.push_back(c.value("type", "") + "/" + std::to_string(c.value("gpu", -1)));
    }
    return out;
  }
  domain::NodeOps Ops(const std::string& node) {
    auto o = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetObject("Node", node); });
    EXPECT_TRUE(o.ok());
    return o.ok() ? domain::DecodeNodeOps(o->spec) : domain::NodeOps{};
  }
  void Samples(const std::string& node, Json telemetry) {
    auto r = nodes_->Heartbeat(node, {{"telemetry", std::move(telemetry)}});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  // A running 1-GPU job of `project` on n1, which then fails with `code` and `cause`.
  int64_t FailOne(const std::string& project, int code, const std::string& cause) {
    const int64_t id = Submit(project, {{"gpus", 1}, {"command", {"train"}}});
    Rounds();
    ReportJob("n1", id, "Running");
    Json reports = Json::array();
    for (const Json& a : Heartbeat("n1")) {
      if (a["job"].get<int64_t>() != id) continue;
      reports.push_back({{"job", id},
                         {"task", a["task"]},
                         {"generation", a["generation"]},
                         {"state", "Exited"},
                         {"exitCode", code},
                         {"cause", cause}});
    }
    EXPECT_EQ(reports.size(), 1u);
    Heartbeat("n1", reports);
    EXPECT_EQ(Phase(id), "Failed");
    return id;
  }
};

// Samples near slowdown and a burst of corrected ECC errors: conditions on their GPUs, one
// event each as they begin, the GPUs healthy and uncordoned.
TEST_F(GpuWarningsTest, SamplesBecomeConditionsAndNothingIsCordoned) {
  Open(Estate(0));
  Register("n1");
  Round();
  Samples("n1", {{{"index", 0}, {"temperatureC", 70}, {"slowdownTemperatureC", 87}},
                 {{"index", 1}, {"eccSingleBit", 10}}});
  EXPECT_TRUE(Types("n1").empty());
  clock_.Advance(60);
  Samples("n1", {{{"index", 0}, {"temperatureC", 83}, {"slowdownTemperatureC", 87}},
                 {{"index", 1}, {"eccSingleBit", 110}, {"throttleReasons", 4}}});
  EXPECT_EQ(Types("n1"), (std::vector<std::string>{"TemperatureNearSlowdown/0", "PowerCapped/1",
                                                   "EccCorrectedRate/1"}));
  const double began = clock_.Now();
  EXPECT_EQ(EventsOf("Node", "n1", "GpuWarning").size(), 3u);
  clock_.Advance(2);
  Samples("n1", {{{"index", 0}, {"temperatureC", 84}, {"slowdownTemperatureC", 87}},
                 {{"index", 1}, {"eccSingleBit", 110}}});
  EXPECT_EQ(Types("n1"),
            (std::vector<std::string>{"TemperatureNearSlowdown/0", "EccCorrectedRate/1"}));
  EXPECT_EQ(Conditions("n1")[0].value("since", 0.0), began);   // it went on holding
  EXPECT_EQ(EventsOf("Node", "n1", "GpuWarning").size(), 3u);  // nothing began again
  EXPECT_TRUE(Ops("n1").gpus.empty());
  EXPECT_FALSE(Ops("n1").cordoned);
  for (const Json& n : controller_->Nodes()) {
    EXPECT_TRUE(n["schedulable"].get<bool>());
    for (const Json& g : n["gpus"]) EXPECT_TRUE(g["healthy"].get<bool>());
    EXPECT_EQ(n["conditions"].size(), 2u);
  }
}

// With failingNodes {minFailures: 3, minProjects: 2, window: 600} and no cordon: a job's own
// exit code does not count, two node-pointing failures of one project do not flag it, a third
// of another project does (a condition and an event, the node still schedulable), and ten
// minutes later the flag has aged out.
TEST_F(GpuWarningsTest, AFailingNodeIsFlaggedAcrossProjectsAndNotCordonedUnlessThePolicySays) {
  std::vector<store::Object> docs = Estate(0);
  docs.push_back(
      Doc("Policy", "default",
          {{"failingNodes", {{"minFailures", 3}, {"minProjects", 2}, {"window", 600}}}}));
  Open(docs);
  Register("n1");
  Round();
  FailOne("p1", 1, "exit-code");
  FailOne("p1", 1, "nccl-error");
  FailOne("p1", 137, "lease-lost");
  EXPECT_TRUE(Types("n1").empty());
  FailOne("p2", 1, "not-started");
  ASSERT_EQ(Types("n1"), std::vector<std::string>{"FailingJobs/-1"});
  EXPECT_EQ(Conditions("n1")[0].value("value", 0.0), 3);
  ASSERT_EQ(EventsOf("Node", "n1", "NodeFailingJobs").size(), 1u);
  EXPECT_NE(EventsOf("Node", "n1", "NodeFailingJobs")[0].find("failingNodes.cordon is off"),
            std::string::npos);
  EXPECT_FALSE(Ops("n1").cordoned);
  // Another failure while flagged says nothing new.
  FailOne("p2", 1, "gpu-fault");
  EXPECT_EQ(EventsOf("Node", "n1", "NodeFailingJobs").size(), 1u);
  clock_.Advance(601);
  EXPECT_TRUE(Types("n1").empty());
  Heartbeat("n1");  // ten minutes on, its agent is still there
  // Flagged again from fresh failures: said again.
  FailOne("p1", 1, "nccl-error");
  FailOne("p2", 1, "lease-lost");
  EXPECT_EQ(EventsOf("Node", "n1", "NodeFailingJobs").size(), 1u);
  const double rising = clock_.Now();
  FailOne("p1", 1, "gpu-fault");
  EXPECT_EQ(Types("n1"), std::vector<std::string>{"FailingJobs/-1"});
  EXPECT_EQ(EventsOf("Node", "n1", "NodeFailingJobs").size(), 2u);
  EXPECT_GE(Conditions("n1")[0].value("since", 0.0), rising);  // since it rose again
}

TEST_F(GpuWarningsTest, ThePolicysCordonCordonsTheFlaggedNode) {
  std::vector<store::Object> docs = Estate(0);
  docs.push_back(
      Doc("Policy", "default",
          {{"failingNodes", {{"minFailures", 2}, {"minProjects", 2}, {"cordon", true}}}}));
  Open(docs);
  Register("n1");
  Round();
  FailOne("p1", 1, "gpu-fault");
  EXPECT_FALSE(Ops("n1").cordoned);
  FailOne("p2", 1, "gpu-fault");
  EXPECT_TRUE(Ops("n1").cordoned);
  ASSERT_EQ(EventsOf("Node", "n1", "NodeCordoned").size(), 1u);
  EXPECT_NE(EventsOf("Node", "n1", "NodeCordoned")[0].find("failing-nodes"), std::string::npos);
}

}  // namespace
}  // namespace meridian::server
