#include "domain/gpu_warnings.h"

#include <gtest/gtest.h>

#include "domain/documents.h"
#include "domain/gpu_health.h"

namespace meridian::domain {
namespace {

GpuReading Reading(int32_t index, double temperature) {
  GpuReading r;
  r.index = index;
  r.temperature_c = temperature;
  return r;
}

std::vector<std::string> Types(const std::vector<NodeCondition>& conditions) {
  std::vector<std::string> out;
  for (const NodeCondition& c : conditions) out.push_back(c.type + "/" + std::to_string(c.gpu));
  return out;
}

// Temperature: the slowdown NVML reports minus the margin, or the Policy's slowdown where NVML
// has none; a thermal throttle reason says it whatever the figure.
TEST(GpuWarnings, TemperatureNearSlowdownByTheGpusOwnThresholdOrThePolicys) {
  struct Case {
    double temperature;
    std::optional<double> slowdown;
    uint64_t throttle;
    bool warns;
  };
  const Case cases[] = {
      {81.9, 87.0, 0, false},          // 5.1 °C below 87
      {82.0, 87.0, 0, true},           // exactly the margin
      {79.9, std::nullopt, 0, false},  // the Policy's 85 - 5
      {80.0, std::nullopt, 0, true},
      {60.0, 87.0, kThrottleHwThermal, true},
      {60.0, 87.0, kThrottleSwThermal, true},
      {60.0, 87.0, 0x1, false},  // idle is not heat
  };
  for (const Case& c : cases) {
    GpuWarningTracker t;
    GpuReading r = Reading(2, c.temperature);
    r.slowdown_temperature_c = c.slowdown;
    r.throttle_reasons = c.throttle;
    const auto found = t.Observe({r}, GpuWarningPolicy{}, 100);
    EXPECT_EQ(!found.empty(), c.warns) << c.temperature << " throttle " << c.throttle;
    if (!found.empty()) {
      EXPECT_EQ(found[0].type, kTemperatureNearSlowdown);
      EXPECT_EQ(found[0].gpu, 2);
      EXPECT_DOUBLE_EQ(found[0].value, c.temperature);
    }
  }
}

TEST(GpuWarnings, PowerCapFromTheThrottleReasons) {
  for (uint64_t mask : {kThrottleSwPowerCap, kThrottleHwPowerBrake, kThrottleHwSlowdown}) {
    GpuWarningTracker t;
    GpuReading r = Reading(0, 50);
    r.throttle_reasons = mask | 0x1;
    const auto found = t.Observe({r}, GpuWarningPolicy{}, 10);
    ASSERT_EQ(Types(found), std::vector<std::string>{"PowerCapped/0"}) << mask;
    EXPECT_NE(found[0].message.find("throttle reasons"), std::string::npos);
  }
  GpuWarningTracker t;
  GpuReading r = Reading(0, 50);
  r.throttle_reasons = 0x1 | 0x2;  // idle, application clocks: nothing to warn of
  EXPECT_TRUE(t.Observe({r}, GpuWarningPolicy{}, 10).empty());
}

// Counters warn on their increase within the window (fake clock: `now` is passed), not on their
// total; a counter that went down (driver reload) starts again; old errors age out.
TEST(GpuWarnings, CorrectedEccAndNvlinkCrcCountedWithinTheWindow) {
  GpuWarningPolicy p;  // 100 corrected ECC, 10 CRC errors in 3600 s
  GpuWarningTracker t;
  auto at = [&](double now, int64_t ecc, int64_t crc) {
    GpuReading r = Reading(1, 40);
    r.ecc_corrected = ecc;
    r.nvlink_crc_errors = crc;
    return Types(t.Observe({r}, p, now));
  };
  // Seen first with thousands from before: the server was not watching then.
  EXPECT_TRUE(at(0, 5000, 500).empty());
  EXPECT_TRUE(at(600, 5099, 509).empty());  // 99 and 9 in the window
  EXPECT_EQ(at(1200, 5100, 510),
            (std::vector<std::string>{"EccCorrectedRate/1", "NvlinkCrcErrors/1"}));
  EXPECT_EQ(t.current()[0].since, 1200);
  EXPECT_EQ(t.current()[0].value, 100);
  // Still within the window of the rise: it holds, since when it began.
  EXPECT_EQ(at(3000, 5100, 510).size(), 2u);
  EXPECT_EQ(t.current()[0].since, 1200);
  // An hour after the 600 s sample only the 1 error since counts.
  EXPECT_TRUE(at(4300, 5100, 510).empty());
  // A reset counter starts again from its value.
  EXPECT_TRUE(at(4400, 3, 0).empty());
  EXPECT_EQ(at(4500, 200, 0), std::vector<std::string>{"EccCorrectedRate/1"});
  EXPECT_EQ(t.current()[0].since, 4500);
}

TEST(GpuWarnings, PolicyFromTheDocumentWithErrorsNamingTheField) {
  const Json spec = Json::parse(R"({"gpuWarnings": {"temperatureMargin": 3, "eccCorrected": 20},
                                    "failingNodes": {"minFailures": 2, "minProjects": 2,
                                                     "cordon": true}})");
  const GpuWarningPolicy w = GpuWarningPolicyOf(spec);
  EXPECT_EQ(w.temperature_margin, 3);
  EXPECT_EQ(w.ecc_corrected, 20);
  EXPECT_EQ(w.nvlink_crc_errors, 10);  // the default
  const FailingNodePolicy f = FailingNodePolicyOf(spec);
  EXPECT_EQ(f.min_failures, 2);
  EXPECT_TRUE(f.cordon);
  EXPECT_EQ(f.window, 3600);
  EXPECT_EQ(FailingNodePolicyOf(Json::object()), FailingNodePolicy{});

  auto errors = [](const std::string& yaml) {
    ErrorList e;
    std::vector<FieldError> syntax;
    auto docs = ParseYamlDocuments(yaml, "policy.yaml", &syntax);
    for (const FieldError& f : syntax) e.Add(f);
    if (docs.ok()) {
      for (const SourceDoc& d : *docs) (void)ValidateDocument(d, &e);
    }
    return e.ToString();
  };
  const std::string bad = errors(
      "kind: Policy\nmetadata: {name: default}\nspec:\n  gpuWarnings:\n    eccCorrected: 0\n"
      "  failingNodes:\n    cordon: maybe\n    minProjects: 2\n    windw: 60\n");
  EXPECT_NE(bad.find("policy.yaml:5"), std::string::npos) << bad;
  EXPECT_NE(bad.find("spec.gpuWarnings.eccCorrected"), std::string::npos) << bad;
  EXPECT_NE(bad.find("spec.failingNodes.cordon"), std::string::npos) << bad;
  EXPECT_NE(bad.find("spec.failingNodes.windw"), std::string::npos) << bad;
}

TEST(FailingNodes, FlaggedByFailuresAcrossProjectsWithinTheWindow) {
  FailingNodePolicy p;
  p.min_failures = 3;
  p.min_projects = 2;
  p.window = 600;
  std::vector<NodeFailure> f;
  EXPECT_TRUE(RecordNodeFailure(&f, {0, 1, 1, "vision", FailureCause::kGpuFault}, p, 0));
  EXPECT_TRUE(RecordNodeFailure(&f, {10, 2, 1, "vision", FailureCause::kGpuFault}, p, 10));
  // The same run reported again counts once.
  EXPECT_FALSE(RecordNodeFailure(&f, {11, 2, 1, "vision", FailureCause::kGpuFault}, p, 11));
  EXPECT_TRUE(RecordNodeFailure(&f, {20, 3, 1, "vision", FailureCause::kLeaseLost}, p, 20));
  // Three failures, one project: a project's own bug, not the node.
  FailingVerdict v = AssessNode(f, p, 20);
  EXPECT_EQ(v.failures, 3);
  EXPECT_EQ(v.projects, 1);
  EXPECT_FALSE(v.flagged);
  EXPECT_TRUE(RecordNodeFailure(&f, {30, 9, 2, "nlp", FailureCause::kNcclError}, p, 30));
  v = AssessNode(f, p, 30);
  EXPECT_EQ(v.failures, 4);
  EXPECT_EQ(v.projects, 2);
  EXPECT_TRUE(v.flagged);
  // Ten minutes on, the first two have aged out: 2 failures, below the bar.
  v = AssessNode(f, p, 610);
  EXPECT_EQ(v.failures, 2);
  EXPECT_FALSE(v.flagged);
}

TEST(FailingNodes, OnlyCausesThatPointAtTheNodeCount) {
  for (FailureCause c : {FailureCause::kGpuFault, FailureCause::kNodeLost, FailureCause::kLeaseLost,
                         FailureCause::kNotStarted, FailureCause::kNcclError}) {
    EXPECT_TRUE(PointsAtNode(c)) << CauseName(c);
  }
  for (FailureCause c :
       {FailureCause::kNone, FailureCause::kExitCode, FailureCause::kOomKilled,
        FailureCause::kSignal, FailureCause::kCommandNotFound, FailureCause::kPermissionDenied,
        FailureCause::kImageMissing, FailureCause::kRuntimeLimit, FailureCause::kCudaOutOfMemory}) {
    EXPECT_FALSE(PointsAtNode(c)) << CauseName(c);
  }
}

TEST(GpuWarnings, FaultInjectionTakesAWarningOrAnXidNotBoth) {
  auto w = DecodeFaultInjection(Json{{"warning", "temperature"}});
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->warning, "temperature");
  EXPECT_EQ(w->xid, 0);
  auto unknown = DecodeFaultInjection(Json{{"warning", "hot"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("warning: unknown warning \"hot\""), std::string::npos)
      << unknown.status().message();
  auto both = DecodeFaultInjection(Json{{"warning", "power-cap"}, {"xid", 48}});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("xid: give an xid or a warning"), std::string::npos);
  auto none = DecodeFaultInjection(Json::object());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("or give a warning"), std::string::npos);
}

}  // namespace
}  // namespace meridian::domain
