#include "sim/synthetic.h"

#include "base/rng.h"

namespace meridian::sim {

void SyntheticEstate(const SyntheticEstateOptions& o, std::vector<domain::Cluster>* clusters,
                     std::vector<domain::Node>* nodes) {
  clusters->clear();
  nodes->clear();
  clusters->push_back({"onprem-fra",
                       domain::SiteKind::kOnPrem,
                       "eu-central",
                       domain::Backend::kAgent,
                       {{"H100-80GB", 1.9}, {"H200-141GB", 2.6}, {"A100-40GB", 0.9}},
                       {"imagenet", "common-crawl"}});
  clusters->push_back({"cloud-use1",
                       domain::SiteKind::kCloud,
                       "us-east-1",
                       domain::Backend::kAgent,
                       {{"A100-80GB", 3.7}, {"L40S", 1.8}, {"T4", 0.5}},
                       {"common-crawl"}});
  base::Rng rng(o.seed);
  const char* onprem_models[] = {"H100-80GB", "H100-80GB", "H200-141GB", "A100-40GB"};
  const char* cloud_models[] = {"A100-80GB", "L40S", "T4"};
  for (int i = 0; i < o.nodes; ++i) {
    const bool onprem = i % 3 != 2;
    domain::Node n;
    n.cluster = onprem ? "onprem-fra" : "cloud-use1";
    n.name = (onprem ? "fra-" : "use1-") + std::to_string(i);
    n.rack = (onprem ? "fra-rack" : "use1-rack") + std::to_string(i / 8);
    const std::string model = onprem ? onprem_models[rng.Uniform(4)] : cloud_models[rng.Uniform(3)];
    n.cpu_milli = 16000LL * o.gpus_per_node;
    n.memory_mib = 128LL * 1024 * o.gpus_per_node;
    n.labels = {{"pool", onprem ? "training" : "burst"}};
    for (int g = 0; g < o.gpus_per_node; ++g) {
      domain::GpuDevice d;
      d.uuid = "GPU-" + n.name + "-" + std::to_string(g);
      d.model = model;
      d.nvlink_domain = g / 4;
      n.gpus.push_back(d);
    }
    nodes->push_back(std::move(n));
  }
}

std::vector<sched::TaskSpec> SyntheticTasks(const sched::Snapshot& snapshot, int count,
                                            uint64_t seed) {
  base::Rng rng(seed);
  const char* migs[] = {"1g.10gb", "3g.40gb", "2g.20gb", "1g.18gb"};
  const sched::ModelId h100 = snapshot.FindModel("H100-80GB");
  const sched::ModelId a100 = snapshot.FindModel("A100-80GB");
  std::vector<sched::TaskSpec> tasks;
  tasks.reserve(count);
  for (int i = 0; i < count; ++i) {
    sched::TaskSpec t;
    t.cpu_milli = 2000 + 2000 * static_cast<int64_t>(rng.Uniform(8));
    t.memory_mib = 8192 * (1 + static_cast<int64_t>(rng.Uniform(8)));
    uint64_t kind = rng.Uniform(100);
    if (kind < 40) {
      t.gpu_kind = sched::GpuKind::kWhole;
      t.gpu_count = 1;
      t.gpu_milli = 1000;
    } else if (kind < 50) {
      t.gpu_kind = sched::GpuKind::kWhole;
      t.gpu_count = 2 << rng.Uniform(3);  // 2, 4, 8
      t.gpu_milli = 1000;
      t.cpu_milli *= t.gpu_count / 2;
    } else if (kind < 75) {
      t.gpu_kind = sched::GpuKind::kFraction;
      t.gpu_count = 1;
      t.gpu_milli = 100 + 100 * static_cast<int32_t>(rng.Uniform(8));
    } else if (kind < 85) {
      t.gpu_kind = sched::GpuKind::kMig;
      t.gpu_count = 1;
      t.mig_profile = migs[rng.Uniform(4)];
    } else if (kind < 90) {
      t.cpu_milli = 4000;  // CPU-only
    } else {
      t.gpu_kind = sched::GpuKind::kWhole;
      t.gpu_count = 1;
      t.gpu_milli = 1000;
      t.allowed_models = 0;
      if (h100 != sched::kNoModel) t.allowed_models |= sched::Bit(h100);
      if (a100 != sched::kNoModel) t.allowed_models |= sched::Bit(a100);
    }
    if (rng.Uniform(10) == 0) t.dataset = "imagenet";
    if (rng.Uniform(20) == 0) t.allowed_clusters = sched::Bit(0);  // on-prem only
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace meridian::sim
