#include "domain/admission.h"

#include <gtest/gtest.h>

namespace meridian::domain {
namespace {

Node MakeNode(const std::string& cluster, const std::string& model, int gpus, int64_t cpu = 64000,
              int64_t memory = 512 * 1024) {
  Node n;
  n.name = cluster + "-" + model;
  n.cluster = cluster;
  n.cpu_milli = cpu;
  n.memory_mib = memory;
  for (int i = 0; i < gpus; ++i) {
    GpuDevice d;
    d.uuid = "GPU-" + std::to_string(i);
    d.model = model;
    n.gpus.push_back(d);
  }
  return n;
}

std::vector<Cluster> Clusters(const std::vector<std::string>& names) {
  std::vector<Cluster> out;
  for (const std::string& n : names) {
    Cluster c;
    c.name = n;
    out.push_back(c);
  }
  return out;
}

JobSpec Gpus(int n) {
  JobSpec s;
  s.gpu = GpuRequest::Whole(n);
  return s;
}

TEST(Admission, NamesTheFieldNoNodeOrPoolCouldEverGive) {
  const std::vector<Cluster> clusters = Clusters({"onprem", "cloud"});
  // A registered 4-GPU H100 node on-prem; a cloud pool of 8-GPU A100 nodes, none yet.
  const std::vector<Node> nodes = {MakeNode("onprem", "H100-80GB", 4, 16000, 65536)};
  const std::vector<Node> pools = {MakeNode("cloud", "A100-80GB", 8, 96000)};
  auto with = [](JobSpec s, auto&& change) {
    change(s);
    return s;
  };
  struct Case {
    std::string name;
    JobSpec spec;
    std::string field;  // empty: could be held
    std::string says;
  };
  const std::vector<Case> cases = {
      {"fits the node", Gpus(4), "", ""},
      {"fits only a pool's shape: a node may still join", Gpus(8), "", ""},
      {"more GPUs than any node or pool", Gpus(16), "spec.gpus",
       "16 GPUs per task, but the most any node or node pool has is 8"},
      {"more than the allowed cluster's",
       with(Gpus(8), [](JobSpec& s) { s.clusters = {"onprem"}; }), "spec.gpus",
       "of cluster onprem has is 4"},
      {"a model nobody has", with(Gpus(1), [](JobSpec& s) { s.gpu_models = {"H200-141GB"}; }),
       "spec.gpuModels", "has GPUs of model H200-141GB (models there: A100-80GB, H100-80GB)"},
      {"a typo of a model", with(Gpus(1), [](JobSpec& s) { s.gpu_models = {"H100-80G"}; }),
       "spec.gpuModels", "model H100-80G"},
      {"one of two models is enough",
       with(Gpus(1),
            [](JobSpec& s) {
              s.gpu_models = {"H200-141GB", "A100-80GB"};
            }),
       "", ""},
      {"a cluster that does not exist",
       with(Gpus(1),
            [](JobSpec& s) {
              s.clusters = {"onprem", "onperm"};
            }),
       "spec.clusters[1]", "cluster \"onperm\" does not exist (clusters: cloud, onprem)"},
      {"a MIG profile of another model",
       with(JobSpec{}, [](JobSpec& s) { s.gpu = GpuRequest::Mig("1g.18gb"); }), "spec.migProfile",
       "\"1g.18gb\" is not a MIG profile of any GPU (models there: A100-80GB, H100-80GB)"},
      {"a MIG profile of a model here",
       with(JobSpec{}, [](JobSpec& s) { s.gpu = GpuRequest::Mig("1g.10gb"); }), "", ""},
      {"more GPU memory than a GPU has",
       with(JobSpec{}, [](JobSpec& s) { s.gpu = GpuRequest::Fraction(500, 90 * 1024); }),
       "spec.gpuMemoryMib", "92160 MiB of GPU memory, but the largest GPU"},
      {"more CPU than any node with such GPUs",
       with(Gpus(4), [](JobSpec& s) { s.cpu_milli = 100000; }), "spec.cpuMilli",
       "100000 CPU millicores per task, but the most any node or node pool with GPUs has is "
       "96000"},
      {"memory that only a pool without GPUs of the asked count has",
       with(Gpus(8), [](JobSpec& s) { s.memory_mib = 600 * 1024; }), "spec.memoryMib",
       "614400 MiB of memory per task"},
      {"a CPU job on any node", with(JobSpec{}, [](JobSpec& s) { s.cpu_milli = 90000; }), "", ""},
  };
  for (const Case& c : cases) {
    const std::optional<FieldError> e = NeverHeld(c.spec, clusters, nodes, pools);
    if (c.field.empty()) {
      EXPECT_FALSE(e.has_value()) << c.name << ": " << (e ? e->message : "");
      continue;
    }
    ASSERT_TRUE(e.has_value()) << c.name;
    EXPECT_EQ(e->field, c.field) << c.name << ": " << e->message;
    EXPECT_NE(e->message.find(c.says), std::string::npos) << c.name << ": " << e->message;
  }
}

TEST(Admission, AnEstateWithNothingInItHoldsNothing) {
  const std::vector<Cluster> clusters = Clusters({"onprem"});
  auto e = NeverHeld(JobSpec{}, clusters, {}, {});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "spec");
  EXPECT_EQ(e->message, "no node or node pool exists to run it");
  JobSpec onprem;
  onprem.clusters = {"onprem"};
  e = NeverHeld(onprem, clusters, {}, {});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "spec.clusters");
  EXPECT_EQ(e->message, "no node or node pool of cluster onprem exists to run it");
}

TEST(Admission, AModelOutsideTheCatalogueIsJudgedByWhatTheEstateHas) {
  // The Alibaba trace's anonymised models: unknown memory, no MIG.
  const std::vector<Cluster> clusters = Clusters({"trace"});
  const std::vector<Node> nodes = {MakeNode("trace", "G2", 8)};
  JobSpec s = Gpus(2);
  s.gpu_models = {"G2"};
  EXPECT_FALSE(NeverHeld(s, clusters, nodes, {}).has_value());
  s.gpu = GpuRequest::Fraction(300, 1 << 20);  // memory unknown: may hold it
  EXPECT_FALSE(NeverHeld(s, clusters, nodes, {}).has_value());
  s.gpu = GpuRequest::Mig("1g.10gb");
  auto e = NeverHeld(s, clusters, nodes, {});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "spec.migProfile");
}

}  // namespace
}  // namespace meridian::domain

namespace meridian::domain {
namespace {

TEST(Admission, ACheckpointFolderNeedsASiteThatKeepsThem) {
  std::vector<Cluster> clusters;
  for (const char* name : {"onprem", "cloud"}) {
    Cluster c;
    c.name = name;
    clusters.push_back(c);
  }
  const std::vector<Node> nodes = {MakeNode("onprem", "H100-80GB", 8),
                                   MakeNode("cloud", "A100-80GB", 8)};
  JobSpec s = Gpus(1);
  s.checkpoint = true;
  auto never = NeverHeld(s, clusters, nodes, {});
  ASSERT_TRUE(never);
  EXPECT_EQ(never->field, "spec.checkpoint");
  EXPECT_NE(never->message.find("no cluster keeps checkpoints"), std::string::npos);
  clusters[1].storage.checkpoints = "/ckpt";
  EXPECT_FALSE(NeverHeld(s, clusters, nodes, {}));
  // The cluster that keeps them has no H100: an H100 job with a checkpoint can never run.
  s.gpu_models = {"H100-80GB"};
  EXPECT_TRUE(NeverHeld(s, clusters, nodes, {}));
  s.gpu_models.clear();
  s.clusters = {"onprem"};
  never = NeverHeld(s, clusters, nodes, {});
  ASSERT_TRUE(never);
  EXPECT_NE(never->message.find("no cluster it may use keeps checkpoints"), std::string::npos);
}

}  // namespace
}  // namespace meridian::domain
