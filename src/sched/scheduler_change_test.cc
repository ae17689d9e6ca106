// The scheduler's in-place changes (scheduler_change.cc): what each keeps, and what each frees.
#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

testing::NodeSpec H100(const std::string& name) {
  return {name, "H100-80GB", 8, 128000, 1024 * 1024, "onprem", "r0"};
}

// Two teams under one organization, `nodes` 8-GPU H100 nodes.
struct ChangeEstate {
  QuotaTree quotas;
  int32_t a = -1, b = -1;
  std::unique_ptr<Scheduler> sched;

  explicit ChangeEstate(int nodes, SchedulerOptions options = {}) {
    const int32_t org = quotas.AddNode("org", -1);
    a = quotas.AddNode("team-a", org);
    b = quotas.AddNode("team-b", org);
    std::vector<testing::NodeSpec> specs;
    for (int i = 0; i < nodes; ++i) specs.push_back(H100("n" + std::to_string(i)));
    sched = std::make_unique<Scheduler>(
        testing::Build(specs), testing::MakeProfile({{"best-fit", 1}}), quotas, options, 1);
  }
};

JobSpec ChangeJob(int64_t id, int32_t tenant, int gpus, int priority = 0) {
  JobSpec j;
  j.id = id;
  j.tenant = tenant;
  j.priority = priority;
  j.tasks.push_back(testing::Whole(gpus, 1000, 1024));
  return j;
}

bool WasStarted(const CycleResult& r, int64_t id) {
  for (const StartDecision& s : r.started) {
    if (s.job == id) return true;
  }
  return false;
}

int64_t FreeGpuMilli(const Scheduler& s) {
  int64_t free = 0;
  const Snapshot& snap = s.snapshot();
  for (size_t n = 0; n < snap.nodes.size(); ++n) {
    const NodeState& node = snap.nodes[n];
    for (int32_t g = node.gpu_begin; g < node.gpu_begin + node.gpu_count; ++g) {
      free += snap.GpuFreeMilli(static_cast<int32_t>(n), g);
    }
  }
  return free;
}

TEST(SchedulerChange, AStartTakenBackFreesWhatItTookAndKeepsItsReservation) {
  SchedulerOptions o;
  o.reserve_after = 0;
  ChangeEstate e(1, o);
  JobSpec first = ChangeJob(1, e.a, 8);
  first.runtime_estimate = 100;
  ASSERT_TRUE(e.sched->Submit(first).ok());
  ASSERT_TRUE(WasStarted(e.sched->Cycle(0), 1));
  ASSERT_TRUE(e.sched->Submit(ChangeJob(2, e.b, 8)).ok());
  e.sched->Cycle(1);
  ASSERT_EQ(e.sched->reserved_job(), 2);
  e.sched->Finish(1, 100);
  ASSERT_TRUE(WasStarted(e.sched->Cycle(100), 2));
  EXPECT_EQ(e.sched->reserved_job(), -1) << "used up by its start";
  e.sched->Unstart(2, 100);
  EXPECT_EQ(e.sched->reserved_job(), 2);
  EXPECT_EQ(FreeGpuMilli(*e.sched), 8000);
  EXPECT_EQ(e.sched->quotas().Used(e.b, kNoModel), 0);
  EXPECT_EQ(e.sched->pending(), 1u);
  EXPECT_TRUE(WasStarted(e.sched->Cycle(101), 2)) << "it waits again, and starts";
}

TEST(SchedulerChange, AWithdrawnPreemptionLeavesTheVictimRunning) {
  SchedulerOptions o;
  o.await_stop_reports = true;
  ChangeEstate e(1, o);
  ASSERT_TRUE(e.sched->Submit(ChangeJob(1, e.a, 8)).ok());
  ASSERT_TRUE(WasStarted(e.sched->Cycle(0), 1));
  ASSERT_TRUE(e.sched->Submit(ChangeJob(2, e.b, 8, 100)).ok());
  CycleResult r = e.sched->Cycle(10);
  ASSERT_EQ(r.preempted.size(), 1u);
  e.sched->Unevict(1);
  r = e.sched->Cycle(11);
  ASSERT_EQ(r.preempted.size(), 1u) << "running again, it is a victim again";
  EXPECT_EQ(r.preempted[0].job, 1);
  EXPECT_EQ(FreeGpuMilli(*e.sched), 0) << "a victim holds its GPUs until it has stopped";
}

TEST(SchedulerChange, ANewQuotaTreeKeepsUsageByNameAndChargesWhatRuns) {
  ChangeEstate e(2);
  ASSERT_TRUE(e.sched->Submit(ChangeJob(1, e.a, 8)).ok());
  ASSERT_TRUE(WasStarted(e.sched->Cycle(0), 1));
  e.sched->Cycle(600);
  const double share = e.sched->FairShare(e.a);
  ASSERT_GT(share, 0);
  // The new tree lists the teams the other way round, and caps team-a at what it runs.
  QuotaTree next;
  const int32_t org = next.AddNode("org", -1);
  const int32_t b = next.AddNode("team-b", org);
  const int32_t a = next.AddNode("team-a", org);
  next.SetQuota(a, kNoModel, 0, 8000);
  std::unordered_map<int64_t, int32_t> tenants = {{1, a}};
  ASSERT_FALSE(e.sched->ReplaceQuotas(next, {0, 2, 1}, {}, 600).ok()) << "job 1 has no tenant";
  EXPECT_EQ(e.sched->quotas().Limit(e.a, kNoModel), kUnlimited) << "and nothing changed";
  ASSERT_TRUE(e.sched->ReplaceQuotas(next, {0, 2, 1}, tenants, 600).ok());
  EXPECT_DOUBLE_EQ(e.sched->FairShare(a), share);
  EXPECT_EQ(e.sched->FairShare(b), 0);
  EXPECT_EQ(e.sched->quotas().Used(a, kNoModel), 8000);
  EXPECT_EQ(e.sched->AllocatedMilli(a), 8000);
  ASSERT_TRUE(e.sched->Submit(ChangeJob(2, a, 1)).ok());
  CycleResult r = e.sched->Cycle(601);
  EXPECT_FALSE(WasStarted(r, 2)) << "the new limit holds at once";
  e.sched->Finish(1, 602);
  EXPECT_EQ(e.sched->quotas().Used(a, kNoModel), 0) << "released from the new tree";
}

TEST(SchedulerChange, AGpuTurnedUnhealthyStaysWithItsJobAndIsNeverChosen) {
  ChangeEstate e(1);
  ASSERT_TRUE(e.sched->Submit(ChangeJob(1, e.a, 8)).ok());
  ASSERT_TRUE(WasStarted(e.sched->Cycle(0), 1));
  domain::Node n = testing::MakeNode(H100("n0"));
  n.gpus[0].healthy = false;
  ASSERT_TRUE(e.sched->UpdateNode(0, n).ok());
  EXPECT_EQ(e.sched->quotas().Used(e.a, kNoModel), 8000) << "what it holds stays held";
  e.sched->Finish(1, 10);
  EXPECT_EQ(FreeGpuMilli(*e.sched), 7000);
  ASSERT_TRUE(e.sched->Submit(ChangeJob(2, e.a, 8)).ok());
  ASSERT_TRUE(e.sched->Submit(ChangeJob(3, e.b, 7)).ok());
  CycleResult r = e.sched->Cycle(11);
  EXPECT_FALSE(WasStarted(r, 2));
  ASSERT_TRUE(WasStarted(r, 3));
  for (const StartDecision& s : r.started) {
    for (const DeviceGrant& d : s.placements[0].devices) EXPECT_NE(d.gpu, 0);
  }
  e.sched->Finish(3, 12);
  n.gpus[0].healthy = true;
  ASSERT_TRUE(e.sched->UpdateNode(0, n).ok());
  EXPECT_TRUE(WasStarted(e.sched->Cycle(13), 2)) << "healthy again, it is whole again";
  n.gpus.pop_back();
  EXPECT_EQ(e.sched->UpdateNode(0, n).code(), base::StatusCode::kFailedPrecondition)
      << "a node cannot shrink in place: GPUs are indexed estate-wide";
}

TEST(SchedulerChange, AJobAdoptedAsStoppingHoldsWhatIsLeftOfItsPlacement) {
  SchedulerOptions o;
  o.await_stop_reports = true;
  ChangeEstate e(2, o);
  domain::Node n = testing::MakeNode(H100("n0"));
  n.gpus[7].healthy = false;
  ASSERT_TRUE(e.sched->UpdateNode(0, n).ok());
  JobSpec gang = ChangeJob(1, e.a, 8);
  gang.tasks.push_back(testing::Whole(8, 1000, 1024));
  std::vector<Placement> where(2);
  where[0].node = 0;
  for (int g = 0; g < 8; ++g) where[0].devices.push_back({g, 1000, 0, -1, -1, MigChange::kNone});
  where[1].node = -1;  // its node left the estate
  e.sched->AdoptStopping(gang, where, 0, 7);
  EXPECT_EQ(FreeGpuMilli(*e.sched), 8000) << "n0's seven healthy GPUs stay held; n1 is free";
  EXPECT_EQ(e.sched->quotas().Used(e.a, kNoModel), 7000);
  ASSERT_TRUE(e.sched->Submit(ChangeJob(2, e.b, 8)).ok());
  ASSERT_TRUE(e.sched->Submit(ChangeJob(3, e.b, 1)).ok());
  CycleResult r = e.sched->Cycle(1);
  EXPECT_TRUE(WasStarted(r, 2)) << "on n1";
  EXPECT_FALSE(WasStarted(r, 3)) << "nothing is free on n0 while the job stops";
  e.sched->Evicted(1, 2);
  EXPECT_EQ(e.sched->quotas().Used(e.a, kNoModel), 0);
  EXPECT_TRUE(WasStarted(e.sched->Cycle(3), 3));
}

TEST(QuotaTree, ModelsRenumberedKeepTheirQuotas) {
  QuotaTree q;
  const int32_t a = q.AddNode("a", -1);
  q.SetQuota(a, 0, 1000, 2000);
  q.SetQuota(a, 1, 3000, 4000);
  q.SetQuota(a, kNoModel, 5000, 6000);
  q.RemapModels({1, kNoModel});  // model 0 is 1 now; model 1 is no longer known
  EXPECT_EQ(q.Limit(a, 1), 2000);
  EXPECT_EQ(q.Guaranteed(a, 1), 1000);
  EXPECT_EQ(q.Limit(a, 0), kUnlimited);
  EXPECT_EQ(q.Limit(a, kNoModel), 6000);
}

}  // namespace
}  // namespace meridian::sched
