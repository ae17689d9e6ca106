#include <gtest/gtest.h>

#include "sched/registry.h"
#include "sim/alibaba_trace.h"
#include "sim/fgd_protocol.h"
#include "sim/fgd_report.h"

namespace meridian::sim {
namespace {

const char* kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,32000,131072,2,P100\n"
    "n1,96000,393216,8,G2\n"
    "n2,32000,131072,0,\n";

const char* kTasks =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "t0,4000,8192,1,500,,LS,Running,0,100,0\n"
    "t1,8000,16384,2,1000,G2|T4,LS,Running,10,,\n"
    "t2,2000,4096,0,0,,BE,Pending,20,,\n";

TEST(AlibabaTrace, ParsesNodesAndTasks) {
  auto nodes = ParseAlibabaNodes(kNodes, "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[1].model, "G2");
  EXPECT_EQ((*nodes)[1].gpus, 8);
  EXPECT_EQ((*nodes)[2].gpus, 0);
  auto tasks = ParseAlibabaTasks(kTasks, "tasks.csv");
  ASSERT_TRUE(tasks.ok()) << tasks.status().message();
  ASSERT_EQ(tasks->size(), 3u);
  EXPECT_EQ((*tasks)[0].gpu_milli, 500);
  EXPECT_EQ((*tasks)[1].gpu_spec, (std::vector<std::string>{"G2", "T4"}));
  EXPECT_EQ((*tasks)[1].deletion_time, -1);

  auto snap = SnapshotFromTrace(*nodes);
  ASSERT_TRUE(snap.ok());
  auto specs = TasksFromTrace(*tasks, *snap);
  EXPECT_EQ(specs[0].gpu_kind, sched::GpuKind::kFraction);
  EXPECT_EQ(specs[1].gpu_kind, sched::GpuKind::kWhole);
  // T4 is not in this estate: only G2 is allowed.
  EXPECT_EQ(specs[1].allowed_models, sched::Bit(snap->FindModel("G2")));
  EXPECT_EQ(specs[2].gpu_kind, sched::GpuKind::kNone);
}

// The short schema of the same family: the first five columns only. The rest take their
// defaults (any model, no QoS, no times), and the FGD protocol runs on it.
TEST(AlibabaTrace, ReadsTheFiveColumnSchema) {
  const char* short_tasks =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
      "t0,4000,8192,1,500\n"
      "t1,8000,16384,2,1000\n"
      "t2,2000,4096,0,0\n";
  auto tasks = ParseAlibabaTasks(short_tasks, "short.csv");
  ASSERT_TRUE(tasks.ok()) << tasks.status().message();
  ASSERT_EQ(tasks->size(), 3u);
  EXPECT_TRUE((*tasks)[1].gpu_spec.empty());
  EXPECT_EQ((*tasks)[1].num_gpu, 2);
  EXPECT_EQ((*tasks)[0].creation_time, 0);
  EXPECT_EQ((*tasks)[0].deletion_time, -1);
  EXPECT_EQ((*tasks)[2].qos, "");
  auto nodes = ParseAlibabaNodes(kNodes, "nodes.csv");
  ASSERT_TRUE(nodes.ok());
  auto snap = SnapshotFromTrace(*nodes);
  ASSERT_TRUE(snap.ok());
  auto specs = TasksFromTrace(*tasks, *snap);
  EXPECT_EQ(specs[1].gpu_kind, sched::GpuKind::kWhole);
  EXPECT_EQ(specs[1].allowed_models, sched::kAll);
  // Errors still name file, line and column, in either schema.
  auto bad = ParseAlibabaTasks("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt0,4000,8192,x,0\n",
                               "short.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "short.csv:2:14: num_gpu: expected an integer, found \"x\"");
  auto missing = ParseAlibabaTasks("name,cpu_milli,memory_mib,num_gpu\nt0,4000,8192,1\n", "x.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "x.csv:1:1: missing column \"gpu_milli\"");
}

TEST(AlibabaTrace, ErrorsNameFileLineAndColumn) {
  struct Case {
    const char* text;
    const char* want;
  };
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  const Case cases[] = {
      {"t0,4000,8192,1,abc,,LS,Running,0,,\n", "t.csv:2:16: gpu_milli: expected an integer"},
      {"t0,4000,8192,1,1500,,LS,Running,0,,\n", "t.csv:2:16: gpu_milli: 1500 is outside"},
      {"t0,4000,8192,2,500,,LS,Running,0,,\n", "t.csv:2:16: gpu_milli: a task with several GPUs"},
      {"t0,4000,8192,1\n", "t.csv:2:1: expected 11 fields, found 4"},
      {"t0,-5,8192,1,500,,LS,Running,0,,\n", "t.csv:2:4: cpu_milli: -5 is outside"},
      {"t0,4000,8192,0,300,,LS,Running,0,,\n", "t.csv:2:16: gpu_milli: a task without GPUs"},
  };
  for (const Case& c : cases) {
    auto r = ParseAlibabaTasks(header + c.text, "t.csv");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().message().rfind(c.want, 0), 0u)
        << "got: " << r.status().message() << "\nwant prefix: " << c.want;
  }
  auto missing = ParseAlibabaNodes("sn,cpu_milli,gpu,model\nn,1,1,T4\n", "n.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "n.csv:1:1: missing column \"memory_mib\"");
  EXPECT_FALSE(ParseAlibabaNodes("", "n.csv").ok());
  EXPECT_FALSE(ParseAlibabaNodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n", "n.csv").ok());
  EXPECT_FALSE(ReadAlibabaNodes("/nonexistent/nodes.csv").ok());
}

// A small estate where every policy's figures can be checked by reasoning.
TEST(FgdProtocol, ArrivesToTheInflatedTargetAndNeverAllocatesMoreThanArrived) {
  std::string nodes = "sn,cpu_milli,memory_mib,gpu,model\n";
  for (int i = 0; i < 20; ++i) {
    nodes += "n" + std::to_string(i) + ",64000,262144," + (i % 2 ? "8,G2\n" : "2,T4\n");
  }
  std::string tasks =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  for (int i = 0; i < 60; ++i) {
    int kind = i % 4;
    std::string gpu = kind == 0 ? "1,300" : kind == 1 ? "1,1000" : kind == 2 ? "2,1000" : "0,0";
    tasks += "t" + std::to_string(i) + ",4000,8192," + gpu + ",,LS,Running,0,,\n";
  }
  auto n = ParseAlibabaNodes(nodes, "n");
  auto t = ParseAlibabaTasks(tasks, "t");
  ASSERT_TRUE(n.ok() && t.ok());
  auto snap = SnapshotFromTrace(*n);
  ASSERT_TRUE(snap.ok());
  auto specs = TasksFromTrace(*t, *snap);
  for (const std::string& policy : sched::PolicyNames()) {
    FgdOptions o;
    o.policy = policy;
    o.seeds = {1, 2, 3};
    o.threads = 2;
    auto r = RunFgd(*snap, specs, o, nullptr);
    ASSERT_TRUE(r.ok()) << policy << ": " << r.status().message();
    ASSERT_EQ(r->points.size(), 7u) << policy;
    double previous = 0;
    for (const FgdPointSummary& p : r->points) {
      EXPECT_LE(p.allocation.max, p.arrived + 100.0 * 8000 / 100000) << policy;
      EXPECT_GE(p.allocation.mean, previous) << policy;
      EXPECT_LE(p.allocation.min, p.allocation.mean);
      EXPECT_GE(p.allocation.max, p.allocation.mean);
      EXPECT_GE(p.frag_amount.min, 0);
      previous = p.allocation.mean;
    }
    // At half the capacity arrived, a cluster this roomy holds everything.
    EXPECT_GT(r->points[0].allocation.mean, 45.0) << policy;
    // Same seeds, same figures.
    auto again = RunFgd(*snap, specs, o, nullptr);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->points.back().allocation.mean, r->points.back().allocation.mean) << policy;
  }
  FgdOptions bad;
  bad.policy = "nope";
  EXPECT_FALSE(RunFgd(*snap, specs, bad, nullptr).ok());
}

TEST(FgdReport, JsonCarriesThePointsOfEachPolicy) {
  FgdResult r;
  r.policy = "fgd";
  r.points.push_back({100, {95.2, 95.0, 95.4}, {4.8, 4.7, 4.9}, {99.0, 98.0, 99.5}});
  nlohmann::json j = FgdJson({r}, "default");
  EXPECT_EQ(j["points"][0]["arrived"], 100);
  EXPECT_DOUBLE_EQ(j["points"][0]["allocation"]["mean"].get<double>(), 95.2);
  EXPECT_DOUBLE_EQ(j["points"][0]["fragmentation_ratio"]["max"].get<double>(), 99.5);
  EXPECT_EQ(j["policies"][0]["policy"], "fgd");
}

}  // namespace
}  // namespace meridian::sim
