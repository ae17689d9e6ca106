#include "domain/gpu_health.h"

#include <gtest/gtest.h>

#include "domain/node_ops.h"

namespace meridian::domain {
namespace {

// NVIDIA's resolution per XID class: the application's errors touch only the job, reset-class
// errors the GPU, NVLink errors the NVLink domain, a GPU fallen off the bus the node.
TEST(XidTable, EachClassHasItsScope) {
  const struct {
    int32_t xid;
    XidScope scope;
  } cases[] = {
      {13, XidScope::kJob},
      {31, XidScope::kJob},
      {43, XidScope::kJob},
      {45, XidScope::kJob},
      {48, XidScope::kGpu},
      {63, XidScope::kGpu},
      {64, XidScope::kGpu},
      {92, XidScope::kGpu},
      {94, XidScope::kGpu},
      {95, XidScope::kGpu},
      {119, XidScope::kGpu},
      {74, XidScope::kNvlinkDomain},
      {79, XidScope::kNode},
      {154, XidScope::kNode},
      // Not in the table: a critical XID of unknown meaning waits for a reset.
      {500, XidScope::kGpu},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ClassifyXid(c.xid).scope, c.scope) << c.xid;
    EXPECT_EQ(ClassifyXid(c.xid).xid, c.xid);
  }
  EXPECT_EQ(DescribeXid(79), "XID 79 (GPU has fallen off the bus)");
  EXPECT_EQ(DescribeXid(500), "XID 500 (critical XID)");
  EXPECT_EQ(ScopeName(XidScope::kNvlinkDomain), "nvlink-domain");
}

TEST(GpuHealth, AFaultCordonsAndTheThirdInTheWindowHoldsTheGpu) {
  GpuHealthPolicy policy;  // 3 faults in 24 h
  std::vector<GpuHealth> gpus;
  FaultRecorded first = RecordGpuFault(&gpus, 2, 48, "GPU 2: XID 48", policy, 1000);
  EXPECT_TRUE(first.cordoned);
  EXPECT_FALSE(first.held);
  EXPECT_EQ(first.recent, 1);
  ASSERT_TRUE(GpuCordoned(gpus, 2));
  EXPECT_FALSE(GpuCordoned(gpus, 1));
  EXPECT_EQ(FindGpu(gpus, 2)->xid, 48);
  EXPECT_EQ(FindGpu(gpus, 2)->since, 1000);
  // Remediated: back in service, the fault remembered.
  EXPECT_TRUE(UncordonGpu(&gpus, 2, Uncordon::kRemediated));
  EXPECT_FALSE(GpuCordoned(gpus, 2));
  EXPECT_EQ(FindGpu(gpus, 2)->faults.size(), 1u);
  EXPECT_FALSE(RecordGpuFault(&gpus, 2, 94, "again", policy, 2000).held);
  EXPECT_TRUE(UncordonGpu(&gpus, 2, Uncordon::kRemediated));
  FaultRecorded third = RecordGpuFault(&gpus, 2, 48, "third", policy, 3000);
  EXPECT_TRUE(third.held);
  EXPECT_EQ(third.recent, 3);
  EXPECT_TRUE(FindGpu(gpus, 2)->held);
  // An operator's uncordon forgets it all.
  EXPECT_TRUE(UncordonGpu(&gpus, 2, Uncordon::kOperator));
  EXPECT_EQ(FindGpu(gpus, 2), nullptr);
  EXPECT_FALSE(UncordonGpu(&gpus, 2, Uncordon::kOperator));
}

TEST(GpuHealth, FaultsOlderThanTheWindowAreForgotten) {
  GpuHealthPolicy policy;
  policy.max_faults = 2;
  policy.fault_window = 3600;
  std::vector<GpuHealth> gpus;
  RecordGpuFault(&gpus, 0, 48, "a", policy, 0);
  UncordonGpu(&gpus, 0, Uncordon::kRemediated);
  const FaultRecorded late = RecordGpuFault(&gpus, 0, 48, "b", policy, 3601);
  EXPECT_EQ(late.recent, 1);
  EXPECT_FALSE(late.held);
  EXPECT_TRUE(RecordGpuFault(&gpus, 0, 48, "c", policy, 3700).held);
}

TEST(GpuHealth, RecordsRoundTripThroughTheNodeSpecAndSurviveOtherOps) {
  NodeOps ops;
  ops.cordoned = true;
  RecordGpuFault(&ops.gpus, 3, 74, "GPU 1: XID 74 (GPU 3 shares its NVLink domain)",
                 GpuHealthPolicy{}, 50);
  RecordGpuFault(&ops.gpus, 1, 74, "GPU 1: XID 74", GpuHealthPolicy{}, 50);
  Json spec = {{"cluster", "onprem"}};
  EncodeNodeOps(ops, &spec);
  const NodeOps back = DecodeNodeOps(spec);
  ASSERT_EQ(back.gpus.size(), 2u);
  EXPECT_EQ(back.gpus[0].index, 1) << "kept in index order";
  EXPECT_EQ(back.gpus[1].reason, "GPU 1: XID 74 (GPU 3 shares its NVLink domain)");
  EXPECT_TRUE(back.cordoned);
  // Records of the wrong shape read as absent; nothing else is lost.
  spec["gpuHealth"].push_back({{"index", "x"}});
  spec["gpuHealth"].push_back(7);
  EXPECT_EQ(DecodeNodeOps(spec).gpus.size(), 2u);
  EncodeNodeOps(NodeOps{}, &spec);
  EXPECT_FALSE(spec.contains("gpuHealth"));
  EXPECT_EQ(spec["cluster"], "onprem");
}

// A MIG mode change waiting for a reset cordons the GPU without counting a fault, so that a GPU
// whose layout changes often is never held for it; the remediation's uncordon clears it.
TEST(GpuHealth, AMigModeWaitingForAResetCordonsWithoutAFault) {
  GpuHealthPolicy policy;
  policy.max_faults = 1;
  std::vector<GpuHealth> gpus;
  EXPECT_TRUE(CordonForMigMode(&gpus, 1, "GPU 1: MIG mode", 10));
  EXPECT_FALSE(CordonForMigMode(&gpus, 1, "again", 11));
  ASSERT_TRUE(GpuCordoned(gpus, 1));
  EXPECT_TRUE(FindGpu(gpus, 1)->mig_mode_pending);
  EXPECT_EQ(FindGpu(gpus, 1)->reason, "GPU 1: MIG mode");
  EXPECT_TRUE(FindGpu(gpus, 1)->faults.empty());
  EXPECT_FALSE(FindGpu(gpus, 1)->held);
  // Stored and read back, in index order beside a fault's record.
  RecordGpuFault(&gpus, 0, 48, "GPU 0: XID 48", policy, 12);
  NodeOps ops;
  ops.gpus = gpus;
  Json spec = Json::object();
  EncodeNodeOps(ops, &spec);
  const NodeOps back = DecodeNodeOps(spec);
  ASSERT_EQ(back.gpus.size(), 2u);
  EXPECT_EQ(back.gpus[0].index, 0);
  EXPECT_FALSE(back.gpus[0].mig_mode_pending);
  EXPECT_TRUE(back.gpus[1].mig_mode_pending);
  // A fault's cordon is not overwritten by a pending mode; both wait for the same reset.
  EXPECT_FALSE(CordonForMigMode(&gpus, 0, "GPU 0: MIG mode", 13));
  EXPECT_EQ(FindGpu(gpus, 0)->reason, "GPU 0: XID 48");
  EXPECT_TRUE(UncordonGpu(&gpus, 1, Uncordon::kRemediated));
  EXPECT_FALSE(FindGpu(gpus, 1)->mig_mode_pending);
  EXPECT_FALSE(GpuCordoned(gpus, 1));
  // The mode in effect (reset by hand): back in service when nothing else cordons it; a fault's
  // cordon stays, the flag goes.
  EXPECT_TRUE(CordonForMigMode(&gpus, 1, "GPU 1: MIG mode", 14));
  EXPECT_TRUE(MigModeInEffect(&gpus, 1));
  EXPECT_FALSE(GpuCordoned(gpus, 1));
  EXPECT_FALSE(MigModeInEffect(&gpus, 0));
  EXPECT_TRUE(GpuCordoned(gpus, 0));
  EXPECT_FALSE(FindGpu(gpus, 0)->mig_mode_pending);
}

TEST(GpuHealth, ThePolicyHasNvidiasResetByDefault) {
  const GpuHealthPolicy defaults = GpuHealthPolicyOf(Json::object());
  EXPECT_EQ(defaults.remediation,
            (std::vector<std::string>{"nvidia-smi", "--gpu-reset", "-i", "{gpu}"}));
  EXPECT_EQ(defaults.max_faults, 3);
  EXPECT_EQ(defaults.fault_window, 24 * 3600.0);
  const GpuHealthPolicy none = GpuHealthPolicyOf(
      {{"gpuHealth", {{"remediation", Json::array()}, {"maxFaults", 5}, {"faultWindow", 600}}}});
  EXPECT_FALSE(none.remediates());
  EXPECT_EQ(none.max_faults, 5);
  EXPECT_EQ(none.fault_window, 600);
}

TEST(FaultInjection, BadBodiesNameTheField) {
  EXPECT_EQ(DecodeFaultInjection({{"xid", 79}})->xid, 79);
  const struct {
    Json body;
    std::string error;
  } bad[] = {
      {Json::object(), "xid: is required"},
      {{{"xid", 0}}, "xid:"},
      {{{"xid", 1000}}, "xid:"},
      {{{"xid", "79"}}, "xid:"},
      {{{"xid", 79}, {"gpu", 1}}, "gpu"},
      {Json::array(), "body: must be a JSON object"},
  };
  for (const auto& c : bad) {
    auto r = DecodeFaultInjection(c.body);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace meridian::domain
