// GPU health in the control plane (docs/adr/0015-gpu-health.md), without processes: XIDs in
// heartbeat samples acted on by class, the cordon followed by the scheduler in place, the
// affected jobs stopped through the lifecycle, remediation and uncordon, a repeating fault held.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "domain/node_ops.h"
#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using testing::ControlPlane;
using testing::Estate;

class GpuHealthTest : public ControlPlane {
 protected:
  // A heartbeat whose samples count `xids` (GPU -> {count, last}) on the node's 8 GPUs, with
  // `extra` fields (remediation results); returns the answer.
  Json Beat(const std::string& node, const std::map<int, std::pair<int64_t, int32_t>>& xids,
            Json extra = Json::object()) {
    return BeatWith(
        node,
        [&](int i) {
          auto x = xids.find(i);
          return Json{{"index", i},
                      {"xidErrors", x == xids.end() ? 0 : x->second.first},
                      {"lastXid", x == xids.end() ? 0 : x->second.second}};
        },
        std::move(extra));
  }
  // A heartbeat whose sample of each of the node's 8 GPUs is `sample(index)`.
  Json BeatWith(const std::string& node, const std::function<Json(int)>& sample,
                Json extra = Json::object()) {
    Json telemetry = Json::array();
    for (int i = 0; i < 8; ++i) telemetry.push_back(sample(i));
    Json body = {{"telemetry", telemetry}};
    body.update(extra);
    auto r = nodes_->Heartbeat(node, body);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : Json::object();
  }
  domain::NodeOps Ops(const std::string& node) {
    auto o = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetObject("Node", node); });
    EXPECT_TRUE(o.ok());
    return o.ok() ? domain::DecodeNodeOps(o->spec) : domain::NodeOps{};
  }
  std::vector<std::string> NodeEvents(const std::string& node, const std::string& reason) {
    return EventsOf("Node", node, reason);
  }
  // Whether the scheduler's view of `uuid` is healthy.
  bool Healthy(const std::string& uuid) {
    for (const Json& n : controller_->Nodes()) {
      for (const Json& g : n["gpus"]) {
        if (g["uuid"] == uuid) return g["healthy"].get<bool>();
      }
    }
    ADD_FAILURE() << uuid << " not found";
    return false;
  }
  // Reports every task of `job` on each node as exited (killed by SIGTERM).
  void Stopped(int64_t job) {
    for (const char* n : {"n1", "n2"}) ReportJob(n, job, "Exited", 143);
  }
  // A running 2x4 gang on n1 and n2 (restartPolicy on-failure).
  int64_t RunningGang() {
    Register("n1");
    Register("n2");
    Round();
    const int64_t id = Submit(
        "p1", {{"tasks", 2}, {"gpus", 4}, {"restartPolicy", "on-failure"}, {"command", {"train"}}});
    Rounds();
    Report("n1", "Running");
    Report("n2", "Running");
    EXPECT_EQ(Phase(id), "Running");
    return id;
  }
};

// A reset-class XID (48) on a GPU of a running gang: the GPU is cordoned in the node's ops, the
// gang stopped whole and requeued by its restart policy with the XID in its events; nothing is
// placed on the GPU; once no task holds it the agent is asked to reset it, and a passed probe
// puts it back.
TEST_F(GpuHealthTest, AResetClassXidCordonsTheGpuRequeuesTheGangAndHealsAfterRemediation) {
  Open(Estate(0));
  const int64_t gang = RunningGang();
  const store::JobRecord placed = Get(gang);
  const std::string node = placed.allocation[0]["node"];
  const int gpu = placed.allocation[0]["devices"][0]["gpu"];
  const std::string uuid = placed.allocation[0]["devices"][0]["uuid"];
  Beat(node, {});
  Beat(node, {{gpu, {1, 48}}});
  const domain::NodeOps ops = Ops(node);
  ASSERT_TRUE(domain::GpuCordoned(ops.gpus, gpu));
  EXPECT_EQ(domain::FindGpu(ops.gpus, gpu)->xid, 48);
  EXPECT_FALSE(ops.cordoned) << "only the GPU";
  EXPECT_EQ(NodeEvents(node, "GpuCordoned").size(), 1u);
  EXPECT_EQ(Phase(gang), "Stopping") << "both tasks stop, the one on the healthy node too";
  const std::vector<std::string> faults = Events(gang, "GpuFault");
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_NE(faults[0].find("XID 48 (double-bit ECC error)"), std::string::npos) << faults[0];
  Round();
  EXPECT_FALSE(Healthy(uuid)) << "the scheduler followed the cordon in place";
  // Its tasks still hold the GPU: no remediation yet.
  EXPECT_FALSE(Beat(node, {{gpu, {1, 48}}}).contains("remediations"));
  Stopped(gang);
  EXPECT_EQ(Phase(gang), "Pending") << "requeued whole";
  Rounds();
  ASSERT_EQ(Phase(gang), "Placed");
  for (const std::string& u : Uuids(gang)) EXPECT_NE(u, uuid) << "nothing on a GPU pending reset";
  const Json answer = Beat(node, {{gpu, {1, 48}}});
  ASSERT_TRUE(answer.contains("remediations")) << answer.dump();
  EXPECT_EQ(answer["remediations"][0]["gpu"], gpu);
  EXPECT_EQ(answer["remediations"][0]["command"],
            Json({"nvidia-smi", "--gpu-reset", "-i", std::to_string(gpu)}));
  Beat(node, {{gpu, {1, 48}}},
       {{"remediations", {{{"gpu", gpu}, {"healthy", true}, {"message", "nvidia-smi"}}}}});
  EXPECT_FALSE(domain::GpuCordoned(Ops(node).gpus, gpu));
  EXPECT_EQ(NodeEvents(node, "GpuUncordoned").size(), 1u);
  Round();
  EXPECT_TRUE(Healthy(uuid));
  EXPECT_EQ(Rebuilds(), 1) << "cordon and uncordon are followed in place";
}

// A cordon is stored with the node: a restarted server's scheduler keeps the GPU out, and the
// agent registering again (which rewrites the rest of the Node's spec) does not clear it.
TEST_F(GpuHealthTest, ACordonOutlivesARestartAndTheAgentRegisteringAgain) {
  Open(Estate(0));
  Register("n1");
  Round();
  Beat("n1", {{6, {1, 63}}});
  Round();
  ASSERT_FALSE(Healthy("GPU-n1-6"));
  Restart();
  Register("n1");
  Round();
  EXPECT_TRUE(domain::GpuCordoned(Ops("n1").gpus, 6));
  EXPECT_FALSE(Healthy("GPU-n1-6"));
  EXPECT_TRUE(Healthy("GPU-n1-5"));
  const int64_t all = Submit("p1", {{"gpus", 8}, {"command", {"x"}}});
  Rounds();
  EXPECT_EQ(Phase(all), "Pending") << "seven healthy GPUs do not fit 8";
}

// A row remap pending in a sample (NVML's remapping state) cordons the GPU as its XID 63 would,
// once: it is not counted again while the GPU waits.
TEST_F(GpuHealthTest, ARowRemapPendingCordonsTheGpuLikeItsXid) {
  Open(Estate(0));
  Register("n1");
  Round();
  Json telemetry = Json::array();
  for (int i = 0; i < 8; ++i) telemetry.push_back({{"index", i}, {"rowRemapPending", i == 4}});
  for (int beat = 0; beat < 3; ++beat) {
    ASSERT_TRUE(nodes_->Heartbeat("n1", {{"telemetry", telemetry}}).ok());
  }
  const domain::NodeOps ops = Ops("n1");
  ASSERT_EQ(ops.gpus.size(), 1u);
  EXPECT_TRUE(domain::GpuCordoned(ops.gpus, 4));
  EXPECT_EQ(ops.gpus[0].xid, 63);
  EXPECT_EQ(ops.gpus[0].faults.size(), 1u);
  // Until its reset, an operator cannot put it back: work would land on memory pending a remap.
  auto refused = nodes_->UncordonGpu("n1", "admin", 4);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), base::StatusCode::kConflict);
  EXPECT_NE(refused.status().message().find("row remap pending"), std::string::npos);
}

// A MIG mode change pending a reset (NVML's pending mode differs from its current one) cordons
// its GPU without a fault, once however many samples say so; jobs on the GPU are drained; the
// remediation resets it (not while a task holds it); a reset by hand puts it back too; an
// operator cannot put it back before the reset; on a GPU cordoned for a fault already, the
// fault's cordon stays what it says.
TEST_F(GpuHealthTest, AMigModeWaitingForAResetCordonsTheGpuWithoutAFaultUntilItIsReset) {
  Open(Estate(0));
  const int64_t gang = RunningGang();
  const store::JobRecord placed = Get(gang);
  const std::string node = placed.allocation[0]["node"];
  const int gpu = placed.allocation[0]["devices"][0]["gpu"];
  auto beat = [&](const std::set<int>& pending, Json extra = Json::object()) {
    return BeatWith(
        node,
        [&](int i) {
          return Json{{"index", i}, {"migModePending", pending.count(i) > 0}};
        },
        std::move(extra));
  };
  const auto written = [&] { return Get(gang).version; };
  for (int i = 0; i < 3; ++i) beat({gpu});
  domain::NodeOps ops = Ops(node);
  ASSERT_EQ(ops.gpus.size(), 1u);
  EXPECT_TRUE(ops.gpus[0].cordoned);
  EXPECT_TRUE(ops.gpus[0].mig_mode_pending);
  EXPECT_EQ(ops.gpus[0].xid, 0);
  EXPECT_TRUE(ops.gpus[0].faults.empty()) << "not a fault";
  ASSERT_EQ(NodeEvents(node, "GpuCordoned").size(), 1u) << "once";
  EXPECT_NE(NodeEvents(node, "GpuCordoned")[0].find("its MIG mode change waits for a GPU reset"),
            std::string::npos);
  EXPECT_EQ(Phase(gang), "Stopping") << "drained through the lifecycle";
  ASSERT_EQ(Events(gang, "Drained").size(), 1u);
  EXPECT_NE(Events(gang, "Drained")[0].find("GPU " + std::to_string(gpu) + " of node " + node),
            std::string::npos);
  const int64_t version = written();
  beat({gpu});
  EXPECT_EQ(written(), version) << "nothing written again while it waits";
  // An operator cannot put it back before the reset.
  auto refused = nodes_->UncordonGpu(node, "admin", gpu);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("a MIG mode change pending"), std::string::npos);
  // Its tasks still hold it: no reset yet; once they stopped, the remediation is asked for.
  Round();
  EXPECT_FALSE(beat({gpu}).contains("remediations"));
  Stopped(gang);
  Round();
  const Json answer = beat({gpu});
  ASSERT_TRUE(answer.contains("remediations")) << answer.dump();
  EXPECT_EQ(answer["remediations"][0]["gpu"], gpu);
  beat({}, {{"remediations", {{{"gpu", gpu}, {"healthy", true}, {"message", "nvidia-smi"}}}}});
  ops = Ops(node);
  EXPECT_FALSE(domain::GpuCordoned(ops.gpus, gpu));
  EXPECT_FALSE(ops.gpus[0].mig_mode_pending);
  ASSERT_EQ(NodeEvents(node, "GpuUncordoned").size(), 1u);
  EXPECT_NE(NodeEvents(node, "GpuUncordoned")[0].find("remediated"), std::string::npos);
  // Reset by hand, with no remediation asked for: the sample showing the mode in effect puts it
  // back.
  const int other = (gpu + 1) % 8;
  beat({other});
  ASSERT_TRUE(domain::GpuCordoned(Ops(node).gpus, other));
  beat({});
  EXPECT_FALSE(domain::GpuCordoned(Ops(node).gpus, other));
  ASSERT_EQ(NodeEvents(node, "GpuUncordoned").size(), 2u);
  EXPECT_NE(NodeEvents(node, "GpuUncordoned")[1].find("its MIG mode change is in effect"),
            std::string::npos);
  // Cordoned for a fault already: that cordon stays, and says what it is.
  Beat(node, {{other, {1, 48}}});
  beat({other});
  ops = Ops(node);
  const domain::GpuHealth* faulty = domain::FindGpu(ops.gpus, other);
  ASSERT_NE(faulty, nullptr);
  EXPECT_EQ(faulty->xid, 48);
  EXPECT_TRUE(faulty->mig_mode_pending);
  EXPECT_EQ(NodeEvents(node, "GpuResetPending").size(), 1u);
  beat({});  // the mode in effect: the fault's cordon stays
  EXPECT_TRUE(domain::GpuCordoned(Ops(node).gpus, other));
  EXPECT_FALSE(domain::FindGpu(Ops(node).gpus, other)->mig_mode_pending);
}

// The third fault within 24 h keeps the GPU cordoned, without remediation, and says so; an
// operator's uncordon releases it.
TEST_F(GpuHealthTest, AGpuThatFaultsThreeTimesInADayStaysCordoned) {
  Open(Estate(0));
  Register("n1");
  Round();
  Beat("n1", {});
  for (int64_t n = 1; n <= 3; ++n) {
    clock_.Advance(600);
    Json answer = Beat("n1", {{5, {n, 94}}});
    ASSERT_TRUE(domain::GpuCordoned(Ops("n1").gpus, 5)) << n;
    if (n == 3) {
      EXPECT_FALSE(answer.contains("remediations")) << "held: no remediation";
      break;
    }
    ASSERT_TRUE(answer.contains("remediations")) << n;
    Beat("n1", {{5, {n, 94}}}, {{"remediations", {{{"gpu", 5}, {"healthy", true}}}}});
    EXPECT_FALSE(domain::GpuCordoned(Ops("n1").gpus, 5)) << n;
  }
  EXPECT_TRUE(domain::FindGpu(Ops("n1").gpus, 5)->held);
  const std::vector<std::string> held = NodeEvents("n1", "GpuHeld");
  ASSERT_EQ(held.size(), 1u);
  EXPECT_NE(held[0].find("faulted 3 times in 24 h"), std::string::npos) << held[0];
  clock_.Advance(3600);
  EXPECT_FALSE(Beat("n1", {{5, {3, 94}}}).contains("remediations"));
  auto released = nodes_->UncordonGpu("n1", "admin", 5);
  ASSERT_TRUE(released.ok()) << released.status().message();
  EXPECT_EQ(domain::FindGpu(Ops("n1").gpus, 5), nullptr) << "its faults forgotten";
  EXPECT_EQ((*released)["gpuHealth"], Json::array());
}

// An application's XID (13) stops only the job on that GPU; the GPU stays in service.
TEST_F(GpuHealthTest, AnApplicationXidStopsOnlyTheJobOnTheGpu) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t hit = Submit("p1", {{"gpus", 4}, {"command", {"a"}}});
  const int64_t spared = Submit("p2", {{"gpus", 4}, {"command", {"b"}}});
  Rounds();
  Report("n1", "Running");
  const int gpu = Get(hit).allocation[0]["devices"][1]["gpu"];
  Beat("n1", {{gpu, {1, 13}}});
  EXPECT_EQ(Phase(hit), "Stopping");
  EXPECT_EQ(Phase(spared), "Running");
  EXPECT_TRUE(Ops("n1").gpus.empty()) << "no cordon for an application's error";
  EXPECT_EQ(NodeEvents("n1", "GpuFault").size(), 1u);
  ReportJob("n1", hit, "Exited", 1);
  EXPECT_EQ(Phase(hit), "Failed") << "restartPolicy never";
  EXPECT_EQ(Get(hit).status["cause"], "gpu-fault");
}

// An NVLink error (74) cordons the GPU's NVLink domain; a GPU fallen off the bus (79) drains the
// node, whose jobs are requeued; uncordoning the node (it was rebooted) brings the GPU back.
TEST_F(GpuHealthTest, NvlinkErrorsCordonTheDomainAndAGpuOffTheBusDrainsTheNode) {
  Open(Estate(0));
  const int64_t gang = RunningGang();
  const std::string hit = Get(gang).allocation[0]["node"];
  const std::string other = hit == "n1" ? "n2" : "n1";
  // The fixture's GPUs share one NVLink domain per node.
  Beat(hit, {{3, {1, 74}}});
  EXPECT_EQ(Ops(hit).gpus.size(), 8u);
  for (const domain::GpuHealth& g : Ops(hit).gpus) EXPECT_TRUE(g.cordoned) << g.index;
  EXPECT_EQ(Phase(gang), "Stopping");
  Stopped(gang);
  Rounds();
  for (const Json& t : Get(gang).allocation)
    EXPECT_NE(t["node"], hit) << "its GPUs wait for a reset";
  // A GPU off the bus drains its node: every job there is stopped.
  Beat(other, {{0, {1, 79}}});
  const domain::NodeOps drained = Ops(other);
  ASSERT_TRUE(drained.drain.has_value());
  EXPECT_EQ(drained.drain->by, "gpu-health");
  EXPECT_NE(drained.drain->reason.find("XID 79"), std::string::npos) << drained.drain->reason;
  EXPECT_EQ(NodeEvents(other, "NodeDraining").size(), 1u);
  EXPECT_TRUE(Phase(gang) == "Pending" || Phase(gang) == "Stopping") << Phase(gang);
  // No remediation for a GPU off the bus: the node needs a reboot.
  EXPECT_FALSE(Beat(other, {{0, {1, 79}}}).contains("remediations"));
  ASSERT_TRUE(nodes_->Cordon(other, "admin", false).ok());
  EXPECT_TRUE(Ops(other).gpus.empty()) << "uncordoned after its reboot, its GPU is back";
}

// Fault injection reaches a simulated node's agent once, in a heartbeat's answer; a node with
// real GPUs refuses it, and a GPU the node lacks is named.
TEST_F(GpuHealthTest, FaultsAreInjectedOnlyIntoSimulatedGpus) {
  Open(Estate(0));
  Register("real");
  Json gpus = Json::array();
  for (int i = 0; i < 2; ++i)
    gpus.push_back({{"uuid", "GPU-sim-" + std::to_string(i)}, {"model", "H100-80GB"}});
  ASSERT_TRUE(
      nodes_
          ->Register("agents",
                     {{"node", "sim"}, {"cluster", "onprem"}, {"simulated", true}, {"gpus", gpus}})
          .ok());
  Round();
  auto refused = nodes_->InjectFault("real", "admin", 0, {79, ""});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), base::StatusCode::kConflict);
  EXPECT_NE(refused.status().message().find("simulated"), std::string::npos);
  auto missing = nodes_->InjectFault("sim", "admin", 2, {79, ""});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "index: node sim has no GPU 2 (it has 2)");
  EXPECT_EQ(nodes_->InjectFault("nowhere", "admin", 0, {79, ""}).status().code(),
            base::StatusCode::kNotFound);
  auto injected = nodes_->InjectFault("sim", "admin", 1, {48, ""});
  ASSERT_TRUE(injected.ok()) << injected.status().message();
  EXPECT_EQ((*injected)["scope"], "gpu");
  auto answer = nodes_->Heartbeat("sim", Json::object());
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ((*answer)["faults"], Json::parse(R"([{"gpu": 1, "xid": 48}])"));
  EXPECT_FALSE(nodes_->Heartbeat("sim", Json::object())->contains("faults")) << "sent once";
  EXPECT_EQ(NodeEvents("sim", "FaultInjected").size(), 1u);
}

}  // namespace
}  // namespace meridian::server
