// The estate's families on /metrics as the text Prometheus reads: names, labels, the series at
// zero, and the outcomes counted from job events. Hand-built inputs; no server, no store.
#include "server/telemetry_metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace meridian::server {
namespace {

// Two nodes of cluster "onprem": n1 registered, with two GPUs (GPU 0 held by job 7 of project
// vision and job 9 of project nlp, each a fraction; GPU 1 idle); n2 declared by a pool, with one.
Json Nodes() {
  return Json::array(
      {{{"name", "n1"},
        {"cluster", "onprem"},
        {"model", "H100-80GB"},
        {"cpuMilli", 16000},
        {"cpuFreeMilli", 12000},
        {"memoryMib", 65536},
        {"memoryFreeMib", 32768},
        {"schedulable", true},
        {"source", "registered"},
        {"lastHeartbeat", 1700000000.5},
        {"gpus",
         {{{"index", 0}, {"uuid", "GPU-a"}, {"allocatedMilli", 750}, {"healthy", true}},
          {{"index", 1}, {"uuid", "GPU-b"}, {"allocatedMilli", 0}, {"healthy", false}}}}},
       {{"name", "n2"},
        {"cluster", "onprem"},
        {"model", "A100-80GB"},
        {"cpuMilli", 8000},
        {"cpuFreeMilli", 8000},
        {"memoryMib", 1024},
        {"memoryFreeMib", 1024},
        {"schedulable", true},
        {"source", "declared"},
        {"gpus", {{{"index", 0}, {"uuid", "GPU-c"}, {"allocatedMilli", 1000}}}}}});
}

std::map<std::string, NodeService::NodeReport> Reports(const std::string& state = "Ready") {
  NodeService::NodeReport r;
  r.state = state;
  r.held = true;
  protocol::GpuSample busy;
  busy.index = 0;
  busy.utilization = 0.5;
  busy.memory_used_mib = 40960;
  busy.memory_total_mib = 81920;
  busy.temperature_c = 61;
  busy.power_w = 420.5;
  busy.sm_clock_mhz = 1755;
  busy.ecc_single_bit = 3;
  busy.ecc_double_bit = 0;
  busy.remapped_rows_correctable = 1;
  busy.remapped_rows_uncorrectable = 0;
  busy.row_remap_pending = false;
  busy.row_remap_failed = false;
  busy.mig_mode_pending = true;
  busy.xid_errors = 2;
  busy.last_xid = 48;
  busy.mig_instances = {"3g.40gb@0", "1g.10gb@6"};
  protocol::GpuSample idle;  // an agent whose NVML reads no clock and no ECC
  idle.index = 1;
  r.gpus = {busy, idle};
  r.holders[0] = {{7, "vision"}, {9, "nlp"}};
  return {{"n1", r}};
}

std::string Render(const Json& nodes, const std::map<std::string, NodeService::NodeReport>& r) {
  api::MetricsText m;
  RenderEstateMetrics(nodes, r, &m);
  return m.Render();
}

bool Has(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

const std::string kGpu0 =
    R"({gpu="0",UUID="GPU-a",device="nvidia0",modelName="H100-80GB",Hostname="n1",node="n1",)"
    R"(cluster="onprem",job_id="7,9",project="vision,nlp"})";
const std::string kGpu1 =
    R"({gpu="1",UUID="GPU-b",device="nvidia1",modelName="H100-80GB",Hostname="n1",node="n1",)"
    R"(cluster="onprem",job_id="",project=""})";
const std::string kDeclared =
    R"({gpu="0",UUID="GPU-c",device="nvidia0",modelName="A100-80GB",Hostname="n2",node="n2",)"
    R"(cluster="onprem",job_id="",project=""})";

// A GPU that a Slurm user's own job holds is occupied, not broken: a dashboard of healthy GPUs
// does not count it as failed, and the unmanaged series says who has it.
TEST(TelemetryMetrics, AGpuHeldOutsideMeridianIsUnmanagedAndHealthy) {
  Json nodes = Nodes();
  nodes[0]["gpus"][1]["healthy"] = true;  // as /api/v1/nodes says it
  nodes[0]["gpus"][1]["unmanaged"] = "held by a Slurm job submitted outside Meridian";
  const std::string text = Render(nodes, Reports());
  for (const std::string& want : std::vector<std::string>{
           "meridian_gpu_unmanaged" + kGpu1 + " 1", "meridian_gpu_healthy" + kGpu1 + " 1",
           "meridian_gpu_unmanaged" + kGpu0 + " 0", "# TYPE meridian_gpu_unmanaged gauge"}) {
    EXPECT_TRUE(Has(text, want)) << want << "\n" << text;
  }
}

TEST(TelemetryMetrics, EveryGpuHasItsSeriesWithDcgmLabelsInBaseUnits) {
  const std::string text = Render(Nodes(), Reports());
  const std::string l0 = kGpu0.substr(0, kGpu0.size() - 1);
  for (const std::string& want : std::vector<std::string>{
           "meridian_gpu_utilization_ratio" + kGpu0 + " 0.5",
           "meridian_gpu_memory_used_bytes" + kGpu0 + " 42949672960",
           "meridian_gpu_memory_total_bytes" + kGpu0 + " 85899345920",
           "meridian_gpu_temperature_celsius" + kGpu0 + " 61",
           "meridian_gpu_power_watts" + kGpu0 + " 420.5",
           "meridian_gpu_sm_clock_hertz" + kGpu0 + " 1755000000",
           "meridian_gpu_ecc_single_bit_errors_total" + kGpu0 + " 3",
           "meridian_gpu_ecc_double_bit_errors_total" + kGpu0 + " 0",
           "meridian_gpu_remapped_rows" + l0 + ",cause=\"correctable\"} 1",
           "meridian_gpu_remapped_rows" + l0 + ",cause=\"uncorrectable\"} 0",
           "meridian_gpu_row_remap_pending" + kGpu0 + " 0",
           "meridian_gpu_row_remap_failed" + kGpu0 + " 0",
           "meridian_gpu_mig_mode_pending" + kGpu0 + " 1",
           "meridian_gpu_xid_errors_total" + kGpu0 + " 2",
           "meridian_gpu_last_xid" + kGpu0 + " 48",
           "meridian_gpu_mig_instances" + kGpu0 + " 2",
           "meridian_gpu_mig_instance_info" + l0 + ",GPU_I_PROFILE=\"1g.10gb\",mig_start=\"6\"} 1",
           "meridian_gpu_healthy" + kGpu0 + " 1",
           "meridian_gpu_unmanaged" + kGpu0 + " 0",
           "meridian_gpu_allocated_ratio" + kGpu0 + " 0.75",
           // The idle GPU: what is counted is there at zero; the unhealthy one says so.
           "meridian_gpu_utilization_ratio" + kGpu1 + " 0",
           "meridian_gpu_xid_errors_total" + kGpu1 + " 0",
           "meridian_gpu_mig_instances" + kGpu1 + " 0",
           "meridian_gpu_healthy" + kGpu1 + " 0",
           // A GPU no agent reports on still has its inventory series.
           "meridian_gpu_healthy" + kDeclared + " 1",
           "meridian_gpu_allocated_ratio" + kDeclared + " 1",
           "# TYPE meridian_gpu_xid_errors_total counter",
           "# TYPE meridian_gpu_utilization_ratio gauge",
       }) {
    EXPECT_TRUE(Has(text, want)) << want << "\n" << text;
  }
  // What a device does not read is absent, not a made-up zero; a pre-Ampere counter likewise.
  for (const std::string& absent :
       {"meridian_gpu_sm_clock_hertz" + kGpu1, "meridian_gpu_ecc_double_bit_errors_total" + kGpu1,
        "meridian_gpu_utilization_ratio" + kDeclared, std::string("meridian_gpu_retired_pages{")}) {
    EXPECT_EQ(text.find(absent), std::string::npos) << absent;
  }
}

TEST(TelemetryMetrics, NodesHaveOneStateSeriesPerStateAndTheirAllocation) {
  const std::string text = Render(Nodes(), Reports());
  const std::string n1 = R"({node="n1",cluster="onprem"})";
  for (const std::string& want : std::vector<std::string>{
           R"(meridian_node_state{node="n1",cluster="onprem",state="ready"} 1)",
           R"(meridian_node_state{node="n1",cluster="onprem",state="cordoned"} 0)",
           R"(meridian_node_state{node="n1",cluster="onprem",state="draining"} 0)",
           R"(meridian_node_state{node="n1",cluster="onprem",state="drained"} 0)",
           R"(meridian_node_state{node="n1",cluster="onprem",state="lost"} 0)",
           R"(meridian_node_state{node="n2",cluster="onprem",state="ready"} 1)",
           R"(meridian_node_cpu_capacity_cores{node="n1",cluster="onprem"} 16)",
           R"(meridian_node_cpu_allocated_cores{node="n1",cluster="onprem"} 4)",
           R"(meridian_node_memory_capacity_bytes{node="n1",cluster="onprem"} 68719476736)",
           R"(meridian_node_memory_allocated_bytes{node="n1",cluster="onprem"} 34359738368)",
           R"(meridian_node_memory_allocated_bytes{node="n2",cluster="onprem"} 0)",
           "meridian_node_last_heartbeat_timestamp_seconds" + n1 + " 1700000000.5",
           "meridian_node_telemetry_rejected_samples_total" + n1 + " 0",
       }) {
    EXPECT_TRUE(Has(text, want)) << want << "\n" << text;
  }
  struct Case {
    std::string state;
    bool cordoned;
    bool drain;
    bool held;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"Ready", true, false, true, "cordoned"}, {"Ready", true, true, true, "draining"},
      {"Ready", true, true, false, "drained"},  {"Lost", true, true, true, "lost"},
      {"Lost", false, false, false, "lost"},    {"Ready", false, false, true, "ready"},
  };
  for (const Case& c : cases) {
    auto reports = Reports(c.state);
    reports["n1"].ops.cordoned = c.cordoned;
    if (c.drain) reports["n1"].ops.drain = domain::NodeDrain{};
    reports["n1"].held = c.held;
    const std::string out = Render(Nodes(), reports);
    for (const char* s : {"ready", "cordoned", "draining", "drained", "lost"}) {
      const std::string line =
          std::string(R"(meridian_node_state{node="n1",cluster="onprem",state=")") + s + "\"} " +
          (c.want == s ? "1" : "0");
      EXPECT_TRUE(Has(out, line)) << c.want << ": " << line;
    }
  }
}

TEST(TelemetryMetrics, ALostNodesLastSampleIsNotExported) {
  const std::string text = Render(Nodes(), Reports("Lost"));
  EXPECT_EQ(text.find("meridian_gpu_utilization_ratio" + kGpu0), std::string::npos);
  EXPECT_TRUE(Has(text, "meridian_gpu_healthy" + kGpu0 + " 1"));
}

store::Event JobEvent(int64_t seq, const std::string& job, const std::string& project,
                      const std::string& reason, const std::string& message = "") {
  return {seq, 0, "Job", job, project, "Normal", reason, message};
}

TEST(TelemetryMetrics, JobOutcomesAreCountedFromEventsWithEverySeriesAtZeroFirst) {
  JobOutcomes o;
  api::MetricsText before;
  o.Render({"vision"}, &before);
  const std::string zero = before.Render();
  for (const std::string& want : std::vector<std::string>{
           R"(meridian_jobs_succeeded_total{project="vision"} 0)",
           R"(meridian_jobs_cancelled_total{project="vision"} 0)",
           R"(meridian_jobs_preempted_total{project="vision"} 0)",
           R"(meridian_jobs_failed_total{project="vision",cause="exit_code"} 0)",
           R"(meridian_jobs_failed_total{project="vision",cause="other"} 0)",
           R"(meridian_jobs_requeued_total{project="vision",reason="drained"} 0)",
           "# TYPE meridian_jobs_failed_total counter",
       }) {
    EXPECT_TRUE(Has(zero, want)) << want << "\n" << zero;
  }
  const std::vector<store::Event> events = {
      JobEvent(1, "1", "vision", "Submitted"),
      JobEvent(2, "1", "vision", "Succeeded", "every task exited with code 0"),
      JobEvent(3, "2", "vision", "Failed", "task 0 exited with code 3"),
      JobEvent(4, "3", "vision", "Failed", "task 1 exited with code 143 (runtime limit reached)"),
      JobEvent(5, "4", "vision", "Failed", "node n3 lost (restartPolicy never)"),
      JobEvent(6, "5", "vision", "Preempted", "preempted for job 9"),
      JobEvent(7, "5", "vision", "Stopped", "every task stopped; back in the queue"),
      JobEvent(8, "6", "nlp", "Drained", "node n1 is drained"),
      JobEvent(9, "6", "nlp", "Stopped", "every task stopped; back in the queue"),
      JobEvent(10, "7", "nlp", "Requeued", "requeued: node n2 lost"),
      JobEvent(11, "8", "nlp", "Cancelled", "cancelled by admin"),
      JobEvent(12, "8", "nlp", "Stopped", "every task stopped; cancelled"),
      {13, 0, "Node", "n1", "", "Normal", "Failed", "not a job"},
  };
  for (const store::Event& e : events) o.Count(e);
  api::MetricsText after;
  o.Render({"vision"}, &after);
  const std::string text = after.Render();
  for (const std::string& want : std::vector<std::string>{
           R"(meridian_jobs_succeeded_total{project="vision"} 1)",
           R"(meridian_jobs_failed_total{project="vision",cause="exit_code"} 1)",
           R"(meridian_jobs_failed_total{project="vision",cause="runtime_limit"} 1)",
           R"(meridian_jobs_failed_total{project="vision",cause="node_lost"} 1)",
           R"(meridian_jobs_failed_total{project="vision",cause="lease_lost"} 0)",
           R"(meridian_jobs_preempted_total{project="vision"} 1)",
           R"(meridian_jobs_requeued_total{project="vision",reason="preempted"} 1)",
           R"(meridian_jobs_requeued_total{project="nlp",reason="drained"} 1)",
           R"(meridian_jobs_requeued_total{project="nlp",reason="node_lost"} 1)",
           R"(meridian_jobs_requeued_total{project="nlp",reason="other"} 0)",
           R"(meridian_jobs_cancelled_total{project="nlp"} 1)",
           R"(meridian_jobs_succeeded_total{project="nlp"} 0)",
       }) {
    EXPECT_TRUE(Has(text, want)) << want << "\n" << text;
  }
}

// The registry's own families first, then what its collectors render at scrape time.
TEST(TelemetryMetrics, CollectorsAreRenderedAfterTheRegistrysFamilies) {
  api::Metrics m;
  m.Describe("meridian_build_info", "gauge", "1, with the version.");
  m.Set("meridian_build_info", {{"version", "0.1.0"}}, 1);
  int scrapes = 0;
  m.AddCollector([&] {
    ++scrapes;
    api::MetricsText estate;
    RenderEstateMetrics(Nodes(), Reports(), &estate);
    return estate.Render();
  });
  const std::string text = m.Render();
  EXPECT_EQ(scrapes, 1);
  EXPECT_TRUE(Has(text, R"(meridian_build_info{version="0.1.0"} 1)"));
  EXPECT_TRUE(Has(text, "meridian_gpu_healthy" + kGpu0 + " 1"));
  EXPECT_LT(text.find("meridian_build_info"), text.find("meridian_gpu_healthy"));
}

// A scrape names each series once, even where an agent's sample names a MIG instance twice or
// a node's list names a GPU twice: Prometheus refuses a scrape with a series twice.
TEST(TelemetryMetrics, EachSeriesOnceWhenASampleRepeatsItself) {
  Json nodes = Nodes();
  nodes[0]["gpus"].push_back(nodes[0]["gpus"][0]);
  auto reports = Reports();
  auto& mig = reports["n1"].gpus[0].mig_instances;
  mig.push_back(mig[0]);
  const std::string text = Render(nodes, reports);
  auto count = [&](const std::string& part) {
    size_t n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("meridian_gpu_healthy" + kGpu0 + " "), 1u) << text;
  EXPECT_EQ(count("meridian_gpu_mig_instance_info{gpu=\"0\",UUID=\"GPU-a\""), 2u)
      << "3g.40gb and 1g.10gb, once each\n"
      << text;
}

TEST(TelemetryMetrics, FailureCausesFromTheirMessages) {
  EXPECT_EQ(JobOutcomes::FailureCause("task 0 exited with code 1"), "exit_code");
  EXPECT_EQ(JobOutcomes::FailureCause("task 0 exited with code 137 (runtime limit reached)"),
            "runtime_limit");
  EXPECT_EQ(
      JobOutcomes::FailureCause("task 0: the agent lost the server for longer than its lease"),
      "lease_lost");
  EXPECT_EQ(JobOutcomes::FailureCause("node n1 lost (no restarts left)"), "node_lost");
  EXPECT_EQ(JobOutcomes::FailureCause("task 0: ended without an exit code"), "other");
}

}  // namespace
}  // namespace meridian::server

namespace meridian::server {
namespace {

// Node conditions: every GPU of a registered node has each GPU condition's series, 1 where it
// holds and 0 elsewhere; the node has FailingJobs; a declared node has none.
TEST(TelemetryMetrics, NodeConditionsAreExportedAtZeroAndOne) {
  auto reports = Reports();
  reports["n1"].conditions = {{domain::kTemperatureNearSlowdown, 1, "GPU 1 at 84 °C", 0, 84},
                              {domain::kFailingJobs, -1, "5 runs failed", 0, 5}};
  const std::string text = Render(Nodes(), reports);
  const std::string l0 = kGpu0.substr(0, kGpu0.size() - 1);
  const std::string l1 = kGpu1.substr(0, kGpu1.size() - 1);
  for (const std::string& want : std::vector<std::string>{
           "meridian_node_condition" + l1 + ",condition=\"TemperatureNearSlowdown\"} 1",
           "meridian_node_condition" + l0 + ",condition=\"TemperatureNearSlowdown\"} 0",
           "meridian_node_condition" + l1 + ",condition=\"EccCorrectedRate\"} 0",
           "meridian_node_condition" + l0 + ",condition=\"NvlinkCrcErrors\"} 0",
           "meridian_node_condition" + l0 + ",condition=\"PowerCapped\"} 0",
           R"(meridian_node_condition{node="n1",cluster="onprem",condition="FailingJobs"} 1)"}) {
    EXPECT_TRUE(Has(text, want)) << want << "\n" << text;
  }
  EXPECT_EQ(text.find("meridian_node_condition{node=\"n2\""), std::string::npos);
}

}  // namespace
}  // namespace meridian::server
