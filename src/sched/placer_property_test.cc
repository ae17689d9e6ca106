// Property tests: over random estates and random mixes of tasks, no decision oversubscribes a
// GPU (whole, milli-GPU, memory or MIG slice) or a node, and the same input gives the same
// decisions.
#include <gtest/gtest.h>

#include <map>

#include "base/rng.h"
#include "sched/placer.h"
#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

Snapshot RandomEstate(base::Rng& rng) {
  const char* models[] = {"H100-80GB", "A100-40GB", "T4", "H200-141GB", "G2"};
  std::vector<testing::NodeSpec> nodes;
  int n = 5 + static_cast<int>(rng.Uniform(40));
  for (int i = 0; i < n; ++i) {
    testing::NodeSpec spec;
    spec.name = "n" + std::to_string(i);
    spec.model = models[rng.Uniform(5)];
    spec.gpus = 1 << rng.Uniform(4);  // 1, 2, 4 or 8
    spec.cpu_milli = 8000 + 8000 * static_cast<int64_t>(rng.Uniform(12));
    spec.memory_mib = 32768 * (1 + static_cast<int64_t>(rng.Uniform(8)));
    spec.cluster = rng.Uniform(2) ? "onprem" : "cloud";
    spec.rack = "r" + std::to_string(rng.Uniform(4));
    spec.gpus_per_nvlink_domain = rng.Uniform(2) ? 4 : 0;
    nodes.push_back(spec);
  }
  return testing::Build(nodes);
}

TaskSpec RandomTask(base::Rng& rng) {
  const char* profiles[] = {"1g.10gb", "3g.40gb", "1g.5gb", "2g.35gb", "7g.80gb"};
  TaskSpec t;
  switch (rng.Uniform(4)) {
    case 0:
      t = testing::CpuOnly(1000 + 1000 * static_cast<int64_t>(rng.Uniform(16)));
      break;
    case 1:
      t = testing::Whole(1 << rng.Uniform(4), 1000 * (1 + static_cast<int64_t>(rng.Uniform(16))));
      break;
    case 2:
      t = testing::Fraction(50 + 50 * static_cast<int>(rng.Uniform(19)),
                            rng.Uniform(2) ? 1024 * static_cast<int64_t>(rng.Uniform(20)) : 0);
      break;
    default:
      t = testing::Mig(profiles[rng.Uniform(5)]);
  }
  t.memory_mib = 1024 * (1 + static_cast<int64_t>(rng.Uniform(64)));
  return t;
}

struct Held {
  TaskSpec task;
  Placement placement;
};

// Recomputes every GPU's and node's use from the placements held and checks it against capacity.
void CheckNoOversubscription(const Snapshot& s, const std::vector<Held>& held) {
  std::vector<int64_t> cpu(s.nodes.size()), mem(s.nodes.size());
  std::vector<int64_t> milli(s.gpus.size()), gpu_mem(s.gpus.size());
  std::vector<int> whole(s.gpus.size()), sharers(s.gpus.size());
  std::vector<uint8_t> slices(s.gpus.size());
  for (const Held& h : held) {
    cpu[h.placement.node] += h.task.cpu_milli;
    mem[h.placement.node] += h.task.memory_mib;
    for (const DeviceGrant& d : h.placement.devices) {
      const GpuState& g = s.gpus[d.gpu];
      ASSERT_GE(d.gpu, s.nodes[h.placement.node].gpu_begin);
      ASSERT_LT(d.gpu, s.nodes[h.placement.node].gpu_begin + s.nodes[h.placement.node].gpu_count);
      ++sharers[d.gpu];
      if (d.mig_profile >= 0) {
        const domain::MigProfile& p = s.model(g.model).mig_profiles[d.mig_profile];
        ASSERT_EQ(p.name, h.task.mig_profile);
        ASSERT_LE(d.mig_start + p.memory_slices, domain::kMigMemorySlices);
        uint8_t bits = static_cast<uint8_t>(((1u << p.memory_slices) - 1) << d.mig_start);
        ASSERT_EQ(slices[d.gpu] & bits, 0) << "two MIG instances share a slice";
        slices[d.gpu] |= bits;
      } else {
        milli[d.gpu] += d.milli;
        gpu_mem[d.gpu] += d.memory_mib;
        if (h.task.gpu_kind == GpuKind::kWhole) ++whole[d.gpu];
      }
    }
  }
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    ASSERT_LE(cpu[i], s.nodes[i].cpu_capacity) << s.nodes[i].name;
    ASSERT_LE(mem[i], s.nodes[i].memory_capacity) << s.nodes[i].name;
    ASSERT_EQ(s.nodes[i].cpu_free, s.nodes[i].cpu_capacity - cpu[i]);
  }
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    ASSERT_LE(milli[i], 1000) << "gpu " << i;
    ASSERT_LE(gpu_mem[i], s.gpus[i].memory_mib) << "gpu " << i;
    if (whole[i] > 0) {
      ASSERT_EQ(sharers[i], 1) << "a whole GPU is shared";
    }
    if (slices[i] != 0) {
      ASSERT_EQ(milli[i], 0) << "a MIG GPU also holds shares";
    }
    ASSERT_EQ(sharers[i], s.gpus[i].sharers);
  }
}

std::vector<std::pair<int32_t, std::vector<int32_t>>> RunRandom(uint64_t seed, bool release) {
  base::Rng rng(seed);
  Snapshot s = RandomEstate(rng);
  std::vector<TaskSpec> sample;
  for (int i = 0; i < 50; ++i) sample.push_back(RandomTask(rng));
  auto frag = std::make_shared<FragmentationModel>(FragmentationModel::FromTasks(sample, 0.95));
  const DeviceChoice choices[] = {DeviceChoice::kEnumerate, DeviceChoice::kBestFit,
                                  DeviceChoice::kRandom};
  Profile prof =
      testing::MakeProfile({{"fragmentation", 1000}, {"best-fit", 1}, {"topology", 1}},
                           choices[seed % 3], frag, static_cast<int32_t>(seed % 2 ? 0 : 3));
  Placer p(&s, &prof, seed);
  CycleState cycle;
  std::vector<Held> held;
  std::vector<std::pair<int32_t, std::vector<int32_t>>> decisions;
  for (int i = 0; i < 400; ++i) {
    if (release && !held.empty() && rng.Uniform(4) == 0) {
      size_t k = rng.Uniform(held.size());
      p.Release(held[k].task, held[k].placement);
      held.erase(held.begin() + static_cast<long>(k));
      continue;
    }
    TaskSpec t = RandomTask(rng);
    PlaceOutcome o = p.Place(t, cycle);
    std::vector<int32_t> gpus;
    for (const DeviceGrant& d : o.placement.devices) gpus.push_back(d.gpu);
    decisions.emplace_back(o.placed ? o.placement.node : -1, gpus);
    if (!o.placed) continue;
    p.Commit(t, o.placement, &cycle);
    held.push_back({t, o.placement});
    CheckNoOversubscription(s, held);
    if (::testing::Test::HasFatalFailure()) return decisions;
  }
  return decisions;
}

TEST(PlacerProperty, NoDecisionOversubscribesAGpuOrANode) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto d = RunRandom(seed, seed % 2 == 0);
    ASSERT_FALSE(HasFatalFailure());
    int placed = 0;
    for (const auto& [node, gpus] : d) placed += node >= 0 ? 1 : 0;
    EXPECT_GT(placed, 10) << "the random estates should hold some tasks";
  }
}

TEST(PlacerProperty, SameInputSameDecisions) {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    EXPECT_EQ(RunRandom(seed, true), RunRandom(seed, true)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace meridian::sched
