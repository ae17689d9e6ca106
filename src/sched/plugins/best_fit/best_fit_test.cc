#include "sched/plugins/best_fit/best_fit.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(BestFit, RanksByWhatIsLeft) {
  Snapshot s = testing::Build({{"big", "H100-80GB", 8, 128000}, {"small", "H100-80GB", 2, 16000}});
  CycleState cycle;
  TaskSpec t = testing::Whole(1, 8000);
  PluginContext ctx{s, t, cycle};
  DeviceGrant big_gpu{0, 1000, 0, -1, -1, MigChange::kNone};
  DeviceGrant small_gpu{8, 1000, 0, -1, -1, MigChange::kNone};
  Candidate on_big{0, std::span<const DeviceGrant>(&big_gpu, 1)};
  Candidate on_small{1, std::span<const DeviceGrant>(&small_gpu, 1)};
  BestFit share(BestFit::Normalization::kNodeCapacity);
  BestFit absolute(BestFit::Normalization::kAbsolute);
  // Small node after: 8000/16000 CPU, 1/2 GPU left -> 50% left -> best-fit 50.
  EXPECT_DOUBLE_EQ(share.Score(ctx, on_small), 50.0);
  // Big node after: 120000/128000 CPU, 7/8 GPU -> 90.625% left.
  EXPECT_DOUBLE_EQ(share.Score(ctx, on_big), 100.0 * (1 - 0.5 * 120.0 / 128 - 0.5 * 7.0 / 8));
  EXPECT_GT(share.Score(ctx, on_small), share.Score(ctx, on_big));
  EXPECT_GT(absolute.Score(ctx, on_small), absolute.Score(ctx, on_big));
}

}  // namespace
}  // namespace meridian::sched::plugins
