#include "sched/elastic.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

using testing::MakeNode;
using testing::NodeSpec;
using testing::Whole;

class ElasticTest : public ::testing::Test {
 protected:
  ElasticTest()
      : estate_(Build()),
        profile_(testing::MakeProfile({{"best-fit", 1.0}}, DeviceChoice::kBestFit)) {}

  static Snapshot Build() {
    // On-prem H100s only: no node of the cloud's A100 and H200 models exists yet.
    auto s = Snapshot::Build(testing::TwoClusters(),
                             {MakeNode({"onprem-0", "H100-80GB", 8, 64000, 256 * 1024})},
                             domain::GpuCatalog::Builtin(), {"A100-80GB", "H200-141GB"});
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(*s);
  }

  ElasticPool Pool(const std::string& name, double price, int32_t headroom,
                   const std::string& model = "A100-80GB", int gpus = 8) {
    ElasticPool p;
    p.name = name;
    p.shape = MakeNode({name, model, gpus, 96000, 512 * 1024, "cloud", "cloud-r0"});
    p.shape.pool = name;
    p.headroom = headroom;
    p.boot_seconds = 60;
    p.price_per_gpu_hour = price;
    return p;
  }

  JobSpec& Job(int64_t id, std::vector<TaskSpec> tasks, const std::string& model = "") {
    JobSpec j;
    j.id = id;
    j.tenant = 0;
    for (TaskSpec& t : tasks) {
      if (!model.empty()) t.allowed_models = Bit(estate_.FindModel(model));
      t.group = tasks.size() > 1 ? static_cast<int32_t>(id) : -1;
    }
    j.tasks = std::move(tasks);
    jobs_.push_back(std::make_unique<JobSpec>(std::move(j)));
    return *jobs_.back();
  }

  std::vector<WaitingJob> Waiting(double estimated_start = kNever) const {
    std::vector<WaitingJob> w;
    for (const auto& j : jobs_) w.push_back({j.get(), estimated_start});
    return w;
  }

  BurstPlan Plan(const std::vector<ElasticPool>& pools, double estimated_start = kNever) {
    return PlanBurst(estate_, profile_, Waiting(estimated_start), pools, 1000, 7);
  }

  Snapshot estate_;
  Profile profile_;
  std::vector<std::unique_ptr<JobSpec>> jobs_;
};

TEST_F(ElasticTest, AsksForOneNodePerJobThatFillsOne) {
  for (int i = 1; i <= 3; ++i) Job(i, {Whole(8)}, "A100-80GB");
  BurstPlan plan = Plan({Pool("a100", 3.5, 5)});
  EXPECT_EQ(plan.grow, std::vector<int32_t>({3}));
  EXPECT_EQ(plan.pool_of_job.size(), 3u);
}

TEST_F(ElasticTest, PacksSmallJobsOntoFewNodes) {
  for (int i = 1; i <= 4; ++i) Job(i, {Whole(2)}, "A100-80GB");
  EXPECT_EQ(Plan({Pool("a100", 3.5, 5)}).grow, std::vector<int32_t>({1}));
}

TEST_F(ElasticTest, NodesAlreadyBootingAreUsedFirst) {
  Job(1, {Whole(8)}, "A100-80GB");
  Job(2, {Whole(8)}, "A100-80GB");
  ElasticPool p = Pool("a100", 3.5, 3);
  p.booting = 1;
  BurstPlan plan = Plan({p});
  EXPECT_EQ(plan.grow, std::vector<int32_t>({1}));
  EXPECT_EQ(plan.pool_of_job.count(1) + plan.pool_of_job.count(2), 2u);
}

// A gang that waits for its last node: the nodes that joined and wait idle count, so the pool
// asks for the one missing, not for a whole gang's worth again.
TEST_F(ElasticTest, IdleNodesThatJoinedCountTowardsAGang) {
  Job(1, {Whole(8), Whole(8), Whole(8)}, "A100-80GB");
  ElasticPool p = Pool("a100", 3.5, 3);
  p.idle = 2;
  EXPECT_EQ(Plan({p}).grow, std::vector<int32_t>({1}));
}

TEST_F(ElasticTest, NeverAsksBeyondTheHeadroom) {
  for (int i = 1; i <= 5; ++i) Job(i, {Whole(8)}, "A100-80GB");
  BurstPlan plan = Plan({Pool("a100", 3.5, 2)});
  EXPECT_EQ(plan.grow, std::vector<int32_t>({2}));
  EXPECT_EQ(plan.pool_of_job.size(), 2u);  // the others wait for the pool's room
  EXPECT_EQ(Plan({Pool("a100", 3.5, 0)}).grow, std::vector<int32_t>({0}));
}

TEST_F(ElasticTest, TheCheaperPoolGrowsAndAnUnavailableOneIsPassedOver) {
  Job(1, {Whole(4)}, "A100-80GB");
  ElasticPool dear = Pool("a100-dear", 4.0, 5), cheap = Pool("a100-spot", 1.2, 5);
  EXPECT_EQ(Plan({dear, cheap}).grow, std::vector<int32_t>({0, 1}));
  cheap.available = false;  // backed off after its provisioner failed
  EXPECT_EQ(Plan({dear, cheap}).grow, std::vector<int32_t>({1, 0}));
}

// A job's cost, not a GPU-hour's price: H200s at 6 that run it three times as fast as A100s at
// 3.5 cost less for the job (2 an hour-of-A100-work against 3.5), and win.
TEST_F(ElasticTest, ThePoolWhereTheJobCostsLeastWinsNotTheCheapestHour) {
  Job(1, {Whole(4)});  // any model
  ElasticPool a100 = Pool("a100", 3.5, 5), h200 = Pool("h200", 6.0, 5, "H200-141GB");
  EXPECT_EQ(Plan({a100, h200}).grow, std::vector<int32_t>({1, 0})) << "the same speed: by price";
  h200.speed = 3;
  EXPECT_EQ(Plan({a100, h200}).grow, std::vector<int32_t>({0, 1}));
}

// A 4-GPU job estimated at two hours costs 28 on an A100 at 3.5. With 100 left, three fit (84);
// with 60 left, two (56), and the third, which would cost 28 of the 4 left, asks for nothing.
TEST_F(ElasticTest, APlanAsksForNoMoreThanItsBudgetHasLeft) {
  for (int i = 1; i <= 3; ++i) {
    Job(i, {Whole(4)}, "A100-80GB").runtime_estimate = 2 * 3600;
  }
  std::vector<WaitingJob> waiting = Waiting();
  for (WaitingJob& w : waiting) w.budget = 0;
  BurstPlan plan = PlanBurst(estate_, profile_, waiting, {Pool("a100", 3.5, 5)}, 1000, 7, {100});
  EXPECT_EQ(plan.pool_of_job.size(), 3u) << "28 each: 84 fits in 100";
  plan = PlanBurst(estate_, profile_, waiting, {Pool("a100", 3.5, 5)}, 1000, 7, {60});
  EXPECT_EQ(plan.pool_of_job.size(), 2u);
  ASSERT_EQ(plan.over_budget.size(), 1u);
  EXPECT_NEAR(plan.over_budget.begin()->second, 28, 1e-9);
  EXPECT_EQ(plan.grow, std::vector<int32_t>({1})) << "two 4-GPU jobs share one 8-GPU node";
  for (WaitingJob& w : waiting) w.budget = -1;
  EXPECT_EQ(PlanBurst(estate_, profile_, waiting, {Pool("a100", 3.5, 5)}, 1000, 7, {60})
                .pool_of_job.size(),
            3u)
      << "jobs of no budget are not held back";
}

TEST_F(ElasticTest, AJobThePoolCannotHoldAsksForNothing) {
  Job(1, {Whole(8)}, "H100-80GB");   // another model
  Job(2, {Whole(16)}, "A100-80GB");  // more GPUs than an instance has
  BurstPlan plan = Plan({Pool("a100", 3.5, 5)});
  EXPECT_EQ(plan.grow, std::vector<int32_t>({0}));
  EXPECT_TRUE(plan.pool_of_job.empty());
}

TEST_F(ElasticTest, AGangGetsAllItsNodesFromOnePool) {
  Job(1, {Whole(8), Whole(8), Whole(8)}, "A100-80GB");
  BurstPlan plan = Plan({Pool("a100", 3.5, 2), Pool("a100-b", 3.5, 5)});
  EXPECT_EQ(plan.grow, std::vector<int32_t>({0, 3}));  // the first could add only two
}

TEST_F(ElasticTest, WorkThatStartsOnTheEstateBeforeANodeBootsAsksForNothing) {
  Job(1, {Whole(8)}, "A100-80GB");
  EXPECT_EQ(Plan({Pool("a100", 3.5, 5)}, 1000 + 30).grow, std::vector<int32_t>({0}));
  EXPECT_EQ(Plan({Pool("a100", 3.5, 5)}, 1000 + 600).grow, std::vector<int32_t>({1}));
}

}  // namespace
}  // namespace meridian::sched
