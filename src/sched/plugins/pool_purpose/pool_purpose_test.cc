#include "sched/plugins/pool_purpose/pool_purpose.h"

#include <gtest/gtest.h>

#include "domain/workload.h"
#include "sched/placer.h"
#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

using domain::JobKind;
using domain::PoolPurpose;

// Every job type against every pool purpose: a row per type, a column per purpose.
TEST(PoolPurpose, EachTypeRunsInPoolsOfItsPurposeOrAny) {
  Snapshot s = testing::Build({{"any", "H100-80GB", 8},
                               {"training", "H100-80GB", 8},
                               {"inference", "H100-80GB", 8},
                               {"interactive", "H100-80GB", 8}});
  s.nodes[0].purpose = PoolPurpose::kAny;
  s.nodes[1].purpose = PoolPurpose::kTraining;
  s.nodes[2].purpose = PoolPurpose::kInference;
  s.nodes[3].purpose = PoolPurpose::kInteractive;
  CycleState cycle;
  struct Case {
    JobKind kind;
    bool any, training, inference, interactive;
  };
  const Case cases[] = {
      {JobKind::kTraining, true, true, false, false},
      {JobKind::kInference, true, false, true, false},
      {JobKind::kInteractive, true, false, false, true},
      // Batch work fills training pools between runs; it is kept off the pools people wait on.
      {JobKind::kBatch, true, true, false, false},
  };
  PoolPurposeMatch filter;
  for (const Case& c : cases) {
    TaskSpec t = testing::Whole(1);
    t.kind = c.kind;
    PluginContext ctx{s, t, cycle};
    const bool want[] = {c.any, c.training, c.inference, c.interactive};
    for (size_t n = 0; n < s.nodes.size(); ++n) {
      EXPECT_EQ(filter.Filter(ctx, s.nodes[n]), want[n])
          << domain::JobKindName(c.kind) << " on " << s.nodes[n].name;
    }
  }
}

TEST(PoolPurpose, ARejectedNodeIsExplainedByItsPoolsPurpose) {
  Snapshot s = testing::Build({{"t", "H100-80GB", 8}});
  s.nodes[0].purpose = PoolPurpose::kTraining;
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  t.kind = JobKind::kInference;
  PluginContext ctx{s, t, cycle};
  EXPECT_EQ(PoolPurposeMatch().Reason(ctx, s.nodes[0]), "in pools for training, not inference");
}

// Through the placement engine: the pending reason counts the nodes of each purpose that turned
// the job away, in words.
TEST(PoolPurpose, PendingReasonCountsNodesByPurpose) {
  Snapshot s = testing::Build({{"t0", "H100-80GB", 8},
                               {"t1", "H100-80GB", 8},
                               {"t2", "H100-80GB", 8},
                               {"i0", "H100-80GB", 8}});
  for (int n = 0; n < 3; ++n) s.nodes[n].purpose = PoolPurpose::kTraining;
  s.nodes[3].purpose = PoolPurpose::kInteractive;
  Profile prof = testing::MakeProfile({{"best-fit", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  t.kind = JobKind::kInference;
  PlaceOutcome o = p.Place(t, cycle);
  ASSERT_FALSE(o.placed);
  EXPECT_EQ(o.why.Summary(),
            "4 nodes considered: 3 nodes in pools for training, not inference; 1 node in pools "
            "for interactive, not inference");
  // The next cycle's answer comes from the infeasible-shape cache, and says the same.
  PlaceOutcome again = p.Place(t, cycle);
  EXPECT_TRUE(again.why.cached);
  EXPECT_EQ(again.why.Summary(), o.why.Summary());
  t.kind = JobKind::kTraining;
  o = p.Place(t, cycle);
  ASSERT_TRUE(o.placed);
  EXPECT_LT(o.placement.node, 3);
}

}  // namespace
}  // namespace meridian::sched::plugins
