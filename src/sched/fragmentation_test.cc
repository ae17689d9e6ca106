#include "sched/fragmentation.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

TEST(Fragmentation, CountsWhatEachTypicalShapeCannotUse) {
  // Model 0 only. Shapes: a 500-milli fraction (weight .5), one whole GPU (.25), CPU-only (.25).
  FragmentationModel m(
      {{1000, 0, 500, 1, kAll, 0.5}, {1000, 0, 1000, 1, kAll, 0.25}, {1000, 0, 0, 0, kAll, 0.25}});
  const int32_t gpus[] = {1000, 300, 600, 0};
  // total free 1900. Fraction: fits, GPUs below 500 -> 300. Whole: fits, below 1000 -> 900.
  // CPU-only: all 1900. 0.5*300 + 0.25*900 + 0.25*1900 = 850.
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 64000, FragmentationModel::kIgnoreMemory, gpus), 850);
  // Without CPU nothing fits: everything free is fragment for every shape.
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 500, FragmentationModel::kIgnoreMemory, gpus), 1900);
  // A node with nothing free has no fragment.
  const int32_t full[] = {0, 0};
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 64000, FragmentationModel::kIgnoreMemory, full), 0);
}

TEST(Fragmentation, ModelsAShapeMayNotUseAreFragment) {
  FragmentationModel m({{1000, 0, 1000, 1, Bit(1), 1.0}});
  const int32_t gpus[] = {1000, 1000};
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 64000, FragmentationModel::kIgnoreMemory, gpus), 2000);
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(1, 64000, FragmentationModel::kIgnoreMemory, gpus), 0);
}

TEST(Fragmentation, MemoryCountsOnlyWhenAsked) {
  FragmentationModel m({{1000, 4096, 1000, 1, kAll, 1.0}});
  const int32_t gpus[] = {1000};
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 64000, FragmentationModel::kIgnoreMemory, gpus), 0);
  EXPECT_DOUBLE_EQ(m.NodeFragmentation(0, 64000, 1024, gpus), 1000);
}

TEST(Fragmentation, TypicalShapesCoverTheAskedShareMostPopularFirst) {
  std::vector<TaskSpec> tasks;
  for (int i = 0; i < 6; ++i) tasks.push_back(testing::Fraction(500));
  for (int i = 0; i < 3; ++i) tasks.push_back(testing::Whole(1));
  tasks.push_back(testing::CpuOnly(4000));
  FragmentationModel m = FragmentationModel::FromTasks(tasks, 0.85);
  ASSERT_EQ(m.shapes().size(), 2u);  // 6 + 3 of 10 tasks cover 90% >= 85%
  EXPECT_EQ(m.shapes()[0].gpu_milli, 500);
  EXPECT_DOUBLE_EQ(m.shapes()[0].weight, 6.0 / 9.0);
  EXPECT_DOUBLE_EQ(m.shapes()[1].weight, 3.0 / 9.0);
  EXPECT_EQ(FragmentationModel::FromTasks(tasks, 1.0).shapes().size(), 3u);
}

TEST(FragmentationModel, DistanceIsTheShareOfTheMixThatMoved) {
  FragmentationModel a({{1000, 0, 1000, 1, kAll, 0.5}, {2000, 0, 500, 1, kAll, 0.5}});
  FragmentationModel same({{1000, 0, 1000, 1, kAll, 0.5}, {2000, 0, 500, 1, kAll, 0.5}});
  FragmentationModel shifted({{1000, 0, 1000, 1, kAll, 0.8}, {2000, 0, 500, 1, kAll, 0.2}});
  FragmentationModel other({{4000, 0, 1000, 2, kAll, 1.0}});
  EXPECT_DOUBLE_EQ(a.Distance(same), 0.0);
  EXPECT_NEAR(a.Distance(shifted), 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(a.Distance(other), 1.0);
  EXPECT_DOUBLE_EQ(other.Distance(a), 1.0);
}

}  // namespace
}  // namespace meridian::sched
