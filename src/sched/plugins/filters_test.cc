// The five filter plugins against one table of cases: a row per task, a column per filter.
#include <gtest/gtest.h>

#include "sched/plugins/cluster_constraint/cluster_constraint.h"
#include "sched/plugins/node_resources/node_resources.h"
#include "sched/plugins/node_selector/node_selector.h"
#include "sched/plugins/pool_purpose/pool_purpose.h"
#include "sched/plugins/taint_toleration/taint_toleration.h"
#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(Filters, TableOfCases) {
  Snapshot s = testing::Build({{"n", "H100-80GB", 8, 16000, 65536, "cloud"}});
  NodeState& node = s.nodes[0];
  node.labels = {{"pool", "train"}, {"zone", "b"}};
  node.taints = {{"dedicated", "ml"}};
  node.purpose = domain::PoolPurpose::kTraining;
  CycleState cycle;
  struct Case {
    const char* name;
    TaskSpec task;
    bool resources, cluster, purpose, selector, taints;
    const char* reason;  // of the filter that rejects first; "" when none does or it has none
  };
  TaskSpec base = testing::Whole(1, 1000, 1024);
  base.tolerations = {{"dedicated", "ml"}};
  TaskSpec big = base;
  big.cpu_milli = 17000;
  TaskSpec mem = base;
  mem.memory_mib = 70000;
  TaskSpec onprem = base;
  onprem.allowed_clusters = Bit(0);
  TaskSpec sel_ok = base;
  sel_ok.node_selector = {{"pool", "train"}, {"zone", "b"}};
  TaskSpec sel_bad = base;
  sel_bad.node_selector = {{"pool", "infer"}};
  TaskSpec sel_missing = base;
  sel_missing.node_selector = {{"gpu", "h100"}};
  TaskSpec untolerated = base;
  untolerated.tolerations = {};
  TaskSpec any_value = base;
  any_value.tolerations = {{"dedicated", ""}};
  TaskSpec inference = base;
  inference.kind = domain::JobKind::kInference;
  TaskSpec training = base;
  training.kind = domain::JobKind::kTraining;
  const Case cases[] = {
      {"fits", base, true, true, true, true, true, ""},
      {"too much cpu", big, false, true, true, true, true, ""},
      {"too much memory", mem, false, true, true, true, true, ""},
      {"wrong cluster", onprem, true, false, true, true, true, ""},
      {"pool for training, job for inference", inference, true, true, false, true, true,
       "in pools for training, not inference"},
      {"pool for training, job for training", training, true, true, true, true, true, ""},
      {"labels match", sel_ok, true, true, true, true, true, ""},
      {"label value differs", sel_bad, true, true, true, false, true, "without label pool=infer"},
      {"label missing", sel_missing, true, true, true, false, true, "without label gpu=h100"},
      {"taint not tolerated", untolerated, true, true, true, true, false,
       "with untolerated taint dedicated=ml"},
      {"toleration of any value", any_value, true, true, true, true, true, ""},
  };
  NodeResources resources;
  ClusterConstraint cluster;
  PoolPurposeMatch purpose;
  NodeSelector selector;
  TaintToleration taints;
  for (const Case& c : cases) {
    PluginContext ctx{s, c.task, cycle};
    EXPECT_EQ(resources.Filter(ctx, node), c.resources) << c.name;
    EXPECT_EQ(cluster.Filter(ctx, node), c.cluster) << c.name;
    EXPECT_EQ(purpose.Filter(ctx, node), c.purpose) << c.name;
    EXPECT_EQ(selector.Filter(ctx, node), c.selector) << c.name;
    EXPECT_EQ(taints.Filter(ctx, node), c.taints) << c.name;
    std::string reason;
    if (!c.purpose) reason = purpose.Reason(ctx, node);
    if (!c.selector) reason = selector.Reason(ctx, node);
    if (!c.taints) reason = taints.Reason(ctx, node);
    EXPECT_EQ(reason, c.reason) << c.name;
  }
}

}  // namespace
}  // namespace meridian::sched::plugins
