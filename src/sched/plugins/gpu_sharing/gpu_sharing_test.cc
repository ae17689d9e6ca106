#include "sched/plugins/gpu_sharing/gpu_sharing.h"

#include <gtest/gtest.h>

#include "sched/placer.h"
#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

using domain::GpuSharing;

// A share of a GPU goes to pools that share GPUs; whole GPUs and MIG instances go anywhere.
TEST(GpuSharing, SharesGoOnlyToPoolsThatShareGpus) {
  Snapshot s = testing::Build(
      {{"mps", "H100-80GB", 8}, {"sliced", "H100-80GB", 8}, {"whole", "H100-80GB", 8}});
  s.nodes[0].gpu_sharing = GpuSharing::kMps;
  s.nodes[1].gpu_sharing = GpuSharing::kTimeSlicing;
  s.nodes[2].gpu_sharing = GpuSharing::kExclusive;
  CycleState cycle;
  GpuSharingMatch filter;
  struct Case {
    TaskSpec task;
    bool mps, sliced, whole;
  };
  const Case cases[] = {{testing::Fraction(250), true, true, false},
                        {testing::Whole(1), true, true, true},
                        {testing::Mig("1g.10gb"), true, true, true},
                        {testing::CpuOnly(1000), true, true, true}};
  for (const Case& c : cases) {
    PluginContext ctx{s, c.task, cycle};
    const bool want[] = {c.mps, c.sliced, c.whole};
    for (size_t n = 0; n < s.nodes.size(); ++n) {
      EXPECT_EQ(filter.Filter(ctx, s.nodes[n]), want[n]) << s.nodes[n].name;
    }
  }
}

// Through the placement engine: a share waits where every pool gives GPUs whole, and says why.
TEST(GpuSharing, PendingReasonNamesTheExclusivePools) {
  Snapshot s = testing::Build({{"w0", "H100-80GB", 8}, {"w1", "H100-80GB", 8}});
  for (NodeState& n : s.nodes) n.gpu_sharing = GpuSharing::kExclusive;
  Profile prof = testing::MakeProfile({{"best-fit", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  PlaceOutcome o = p.Place(testing::Fraction(500), cycle);
  ASSERT_FALSE(o.placed);
  EXPECT_EQ(o.why.Summary(),
            "2 nodes considered: 2 nodes whose pool gives GPUs whole (gpuSharing: exclusive), not "
            "in shares");
  EXPECT_TRUE(p.Place(testing::Whole(1), cycle).placed);
}

}  // namespace
}  // namespace meridian::sched::plugins
