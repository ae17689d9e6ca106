#include "sim/trace_variants.h"

#include <gtest/gtest.h>

#include <set>

#include "sim/fgd_report.h"

namespace meridian::sim {
namespace {

// 100 tasks: 20 CPU-only, 10 with 8 GPUs, 40 whole single GPUs, 30 fractions.
std::vector<TraceTask> Mix() {
  std::vector<TraceTask> tasks;
  for (int i = 0; i < 100; ++i) {
    TraceTask t;
    t.name = "t" + std::to_string(i);
    t.cpu_milli = 4000 + i;
    t.memory_mib = 8192;
    if (i < 20) {
      t.num_gpu = 0;
      t.gpu_milli = 0;
    } else if (i < 30) {
      t.num_gpu = 8;
      t.gpu_milli = 1000;
      t.cpu_milli = 64000;
    } else if (i < 70) {
      t.num_gpu = 1;
      t.gpu_milli = 1000;
    } else {
      t.num_gpu = 1;
      t.gpu_milli = 250 + i;
    }
    tasks.push_back(t);
  }
  return tasks;
}

std::vector<TraceNode> Nodes() {
  return {{"big", 96000, 393216, 8, "G2"},
          {"v16", 32000, 131072, 4, "V100M16"},
          {"v32", 32000, 131072, 4, "V100M32"},
          {"cpu", 32000, 131072, 0, ""}};
}

int Count(const std::vector<TraceTask>& tasks, bool (*is)(const TraceTask&)) {
  int n = 0;
  for (const TraceTask& t : tasks) n += is(t) ? 1 : 0;
  return n;
}

TEST(TraceVariants, MovesEachShareAndKeepsTheRest) {
  TraceVariant v;
  v.multi_gpu = 0.25;  // of the 80 GPU tasks: 20
  v.fractional = 0.5;  // of the single-GPU tasks
  v.cpu_only = 0.5;    // as many CPU-only tasks as GPU tasks
  v.seed = 7;
  auto out = VaryTrace(Mix(), Nodes(), v);
  ASSERT_TRUE(out.ok()) << out.status().message();
  auto gpu = [](const TraceTask& t) { return t.num_gpu > 0; };
  auto cpu = [](const TraceTask& t) { return t.num_gpu == 0; };
  auto multi = [](const TraceTask& t) { return t.num_gpu > 1; };
  auto single = [](const TraceTask& t) { return t.num_gpu == 1; };
  auto fraction = [](const TraceTask& t) { return t.num_gpu == 1 && t.gpu_milli < 1000; };
  EXPECT_EQ(Count(*out, gpu), 80);
  EXPECT_EQ(Count(*out, cpu), 80);
  EXPECT_EQ(Count(*out, multi), 20);
  EXPECT_EQ(Count(*out, fraction), Count(*out, single) / 2);
  // A task that changed class took a whole request of that class: an 8-GPU task keeps 64 cores.
  for (const TraceTask& t : *out) {
    if (t.num_gpu == 8) {
      EXPECT_EQ(t.cpu_milli, 64000) << t.name;
    }
    if (t.num_gpu > 1) {
      EXPECT_EQ(t.gpu_milli, 1000) << t.name;
    }
  }
  // Names stay unique, and the same seed draws the same list.
  std::set<std::string> names;
  for (const TraceTask& t : *out) names.insert(t.name);
  EXPECT_EQ(names.size(), out->size());
  auto again = VaryTrace(Mix(), Nodes(), v);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(AlibabaTasksCsv(*again), AlibabaTasksCsv(*out));
}

TEST(TraceVariants, ConstrainsTasksToAFamilyThatCanHoldThem) {
  TraceVariant v;
  v.constrained = 0.5;
  auto out = VaryTrace(Mix(), Nodes(), v);
  ASSERT_TRUE(out.ok()) << out.status().message();
  int constrained = 0;
  for (const TraceTask& t : *out) {
    if (t.gpu_spec.empty()) continue;
    ++constrained;
    EXPECT_GT(t.num_gpu, 0) << t.name;
    // V100M16 and V100M32 are one family; an 8-GPU task fits only the G2 node.
    if (t.gpu_spec.size() == 2) {
      EXPECT_EQ(std::set<std::string>(t.gpu_spec.begin(), t.gpu_spec.end()),
                (std::set<std::string>{"V100M16", "V100M32"}));
    } else {
      ASSERT_EQ(t.gpu_spec.size(), 1u);
      EXPECT_EQ(t.gpu_spec[0], "G2");
    }
    if (t.num_gpu == 8) {
      EXPECT_EQ(t.gpu_spec, std::vector<std::string>{"G2"});
    }
  }
  EXPECT_EQ(constrained, 40);
  // Back to none.
  v.constrained = 0;
  auto none = VaryTrace(*out, Nodes(), v);
  ASSERT_TRUE(none.ok());
  for (const TraceTask& t : *none) EXPECT_TRUE(t.gpu_spec.empty()) << t.name;
}

TEST(TraceVariants, RefusesSharesOutOfRangeAndEmptyClasses) {
  TraceVariant v;
  v.multi_gpu = 1.5;
  auto bad = VaryTrace(Mix(), Nodes(), v);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--multi-gpu"), std::string::npos);
  v = {};
  v.cpu_only = 1;  // nothing but CPU-only tasks cannot keep the GPU tasks
  EXPECT_FALSE(VaryTrace(Mix(), Nodes(), v).ok());
  std::vector<TraceTask> singles;
  for (const TraceTask& t : Mix()) {
    if (t.num_gpu == 1) singles.push_back(t);
  }
  v = {};
  v.multi_gpu = 0.3;
  auto none = VaryTrace(singles, Nodes(), v);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(),
            "--multi-gpu: the task list has no multi-GPU task to draw from");
  EXPECT_EQ(TraceVariant{}.Name(), "");
  v.constrained = 0.25;
  EXPECT_EQ(v.Name(), "multigpu30-constrained25");
}

TEST(TraceVariants, CsvReadsBackAsTheSameTasks) {
  TraceVariant v;
  v.constrained = 0.3;
  auto out = VaryTrace(Mix(), Nodes(), v);
  ASSERT_TRUE(out.ok());
  auto back = ParseAlibabaTasks(AlibabaTasksCsv(*out), "variant.csv");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), out->size());
  for (size_t i = 0; i < out->size(); ++i) {
    EXPECT_EQ((*back)[i].name, (*out)[i].name);
    EXPECT_EQ((*back)[i].gpu_milli, (*out)[i].gpu_milli);
    EXPECT_EQ((*back)[i].gpu_spec, (*out)[i].gpu_spec);
  }
}

TEST(FgdReport, LowestMarginAndPublishedCurves) {
  std::vector<Band> ours, theirs;
  for (int k = 0; k <= 130; ++k) {
    ours.push_back({std::min(k, 95) + (k == 97 ? -3.0 : 0.0), 0, 0});
    theirs.push_back({static_cast<double>(std::min(k, 94)), 0, 0});
  }
  Margin m = LowestMargin(ours, theirs, 50, 130);
  EXPECT_EQ(m.arrived, 97);
  EXPECT_DOUBLE_EQ(m.gap, -2.0);
  EXPECT_EQ(LowestMargin(ours, theirs, 98, 130).gap, 1.0);
  EXPECT_EQ(LowestMargin(ours, {}, 50, 130).arrived, -1);

  std::string csv = "workload,sc_policy,tune,seed,total_gpus";
  for (int k = 0; k <= 3; ++k) csv += "," + std::to_string(k);
  csv +=
      "\nopenb_pod_list_default,06-FGD,1.3,42,6212,0,1,2,3\n"
      "openb_pod_list_default,06-FGD,1.3,43,6212,0,1,2,5\n"
      "openb_pod_list_cpu050,06-FGD,1.3,42,6212,9,9,9,9\n";
  const std::string path = ::testing::TempDir() + "/allo.csv";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(csv.c_str(), f);
  std::fclose(f);
  auto curves = ReadPublishedCurves(path, "default");
  ASSERT_TRUE(curves.ok()) << curves.status().message();
  ASSERT_EQ(curves->count("fgd"), 1u);
  const std::vector<Band>& fgd = curves->at("fgd");
  ASSERT_EQ(fgd.size(), 4u);
  EXPECT_DOUBLE_EQ(fgd[3].mean, 4.0);
  EXPECT_DOUBLE_EQ(fgd[3].min, 3.0);
  EXPECT_DOUBLE_EQ(fgd[3].max, 5.0);
  EXPECT_FALSE(ReadPublishedCurves(path, "gpushare40").ok());
  // The report draws both, and says where the margin is lowest.
  FgdResult r;
  r.policy = "meridian";
  r.curve = fgd;
  std::string html = FgdHtml({r}, *curves, "t");
  EXPECT_NE(html.find("fgd (published)"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace meridian::sim
