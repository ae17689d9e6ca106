#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

// Two tenants under one organization; `nodes` 8-GPU H100 nodes in the on-prem cluster.
struct Fixture {
  QuotaTree quotas;
  int32_t a = -1, b = -1;
  std::unique_ptr<Scheduler> sched;

  explicit Fixture(int nodes, SchedulerOptions options = {}, bool two_clusters = false) {
    int32_t org = quotas.AddNode("org", -1);
    a = quotas.AddNode("team-a", org);
    b = quotas.AddNode("team-b", org);
    Init(nodes, options, two_clusters);
  }
  void Init(int nodes, SchedulerOptions options, bool two_clusters = false) {
    std::vector<testing::NodeSpec> specs;
    for (int i = 0; i < nodes; ++i) {
      specs.push_back({"n" + std::to_string(i), "H100-80GB", 8, 128000, 1024 * 1024,
                       two_clusters && i % 2 ? "cloud" : "onprem", "r" + std::to_string(i / 2)});
    }
    sched = std::make_unique<Scheduler>(testing::Build(specs),
                                        testing::MakeProfile({{"best-fit", 1}, {"topology", 1}}),
                                        quotas, options, 1);
  }
};

JobSpec Job(int64_t id, int32_t tenant, int gpus, int tasks = 1, int priority = 0) {
  JobSpec j;
  j.id = id;
  j.tenant = tenant;
  j.priority = priority;
  for (int t = 0; t < tasks; ++t) j.tasks.push_back(testing::Whole(gpus, 1000, 1024));
  return j;
}

// A job of `gpus` whole GPUs with a runtime estimate, submitted at `submit`.
JobSpec Estimated(int64_t id, int32_t tenant, int gpus, double estimate, double submit = 0) {
  JobSpec j = Job(id, tenant, gpus);
  j.runtime_estimate = estimate;
  j.submit_time = submit;
  return j;
}

// A plain order, without preemption or backfill.
SchedulerOptions Plain(QueueOrder order) {
  SchedulerOptions o;
  o.order = order;
  o.preemption = false;
  o.backfill = false;
  return o;
}

bool Started(const CycleResult& r, int64_t id) {
  for (const StartDecision& s : r.started) {
    if (s.job == id) return true;
  }
  return false;
}

std::string Reason(const CycleResult& r, int64_t id) {
  for (const auto& [job, why] : r.pending) {
    if (job == id) return why;
  }
  return "";
}

// Two nodes with backfill (reserving at once) and no preemption; job 1 of team a, submitted and
// not yet started, takes a node for an estimated 1,000 s.
Fixture OneNodeHeldUntil1000() {
  SchedulerOptions o;
  o.preemption = false;
  o.reserve_after = 0;
  Fixture f(2, o);
  JobSpec running = Job(1, f.a, 8);
  running.runtime_estimate = 1000;
  EXPECT_TRUE(f.sched->Submit(running).ok());
  return f;
}

// The same, with job 1 started and job 2 (two nodes' worth, submitted at 1) waiting for it.
Fixture TwoNodeJobBehindOneHeldUntil1000() {
  Fixture f = OneNodeHeldUntil1000();
  EXPECT_TRUE(Started(f.sched->Cycle(0), 1));
  JobSpec big = Job(2, f.a, 8, 2);
  big.submit_time = 1;
  EXPECT_TRUE(f.sched->Submit(big).ok());
  return f;
}

TEST(Scheduler, HigherPriorityGoesFirst) {
  Fixture f(1);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8, 1, 0)).ok());
  ASSERT_TRUE(f.sched->Submit(Job(2, f.a, 8, 1, 10)).ok());
  CycleResult r = f.sched->Cycle(0);
  EXPECT_TRUE(Started(r, 2));
  EXPECT_FALSE(Started(r, 1));
  EXPECT_FALSE(f.sched->Submit(Job(2, f.a, 8)).ok()) << "ids are unique";
}

TEST(Scheduler, RefusesJobsNoNodeCouldEverHold) {
  Fixture f(1);
  base::Status s = f.sched->Submit(Job(1, f.a, 16));  // nodes have 8 GPUs
  EXPECT_EQ(s.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("task 0"), std::string::npos) << s.message();
  JobSpec t4 = Job(2, f.a, 1);
  t4.tasks[0].allowed_models = 0;  // a model the estate lacks
  EXPECT_EQ(f.sched->Submit(t4).code(), base::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(f.sched->Submit(Job(3, f.a, 8)).ok());
  EXPECT_EQ(f.sched->pending(), 1u);
}

TEST(Scheduler, FairShareFavoursTheTenantThatHadLess) {
  // Job 2 has waited since 0: its first start would be due by 1800 and put it first (tested on
  // its own: AJobWhoseFirstStartIsDue...).
  SchedulerOptions o;
  o.first_start_within = 0;
  Fixture f(1, o);
  // Team A runs 8 GPUs for an hour; then both want the node: B goes first.
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  f.sched->Finish(1, 1800);
  ASSERT_TRUE(f.sched->Submit(Job(2, f.a, 8)).ok());
  JobSpec later = Job(3, f.b, 8);
  later.submit_time = 10;  // submitted after A's job: age alone would pick A
  ASSERT_TRUE(f.sched->Submit(later).ok());
  CycleResult r = f.sched->Cycle(1800);
  EXPECT_TRUE(Started(r, 3));
  EXPECT_FALSE(Started(r, 2));
  EXPECT_GT(f.sched->FairShare(f.a), f.sched->FairShare(f.b));
}

TEST(Scheduler, QuotaLimitStopsAJobAndSaysWhich) {
  Fixture f(2);
  f.quotas.SetQuota(f.a, kNoModel, 8000, 8000);
  f.Init(2, {});
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  JobSpec second = Job(2, f.a, 8);
  second.submit_time = 1;
  ASSERT_TRUE(f.sched->Submit(second).ok());
  CycleResult r = f.sched->Cycle(5);
  EXPECT_TRUE(Started(r, 1));
  EXPECT_FALSE(Started(r, 2));
  EXPECT_NE(Reason(r, 2).find("quota of team-a"), std::string::npos) << Reason(r, 2);
  EXPECT_EQ(f.sched->quotas().Used(f.a, kNoModel), 8000);
}

TEST(Scheduler, BorrowedCapacityIsReclaimedForItsOwner) {
  Fixture f(2);
  f.quotas.SetQuota(f.a, kNoModel, 8000, 16000);
  f.quotas.SetQuota(f.b, kNoModel, 8000, 16000);
  f.Init(2, {});
  // A takes both nodes: the second job borrows B's idle guarantee.
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  ASSERT_TRUE(f.sched->Submit(Job(2, f.a, 8)).ok());
  CycleResult r = f.sched->Cycle(0);
  ASSERT_EQ(r.started.size(), 2u);
  EXPECT_NE(r.started[0].borrowed, r.started[1].borrowed);
  const int64_t borrowed = r.started[0].borrowed ? r.started[0].job : r.started[1].job;
  // B wants its guarantee back: the borrowed job is the one preempted.
  JobSpec owner = Job(3, f.b, 8);
  owner.submit_time = 10;
  ASSERT_TRUE(f.sched->Submit(owner).ok());
  r = f.sched->Cycle(10);
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].job, borrowed);
  EXPECT_EQ(r.preempted[0].reason, "quota reclaim");
  EXPECT_TRUE(Started(r, 3));
  EXPECT_EQ(f.sched->pending(), 1u);  // the reclaimed job went back to the queue
}

TEST(Scheduler, PreemptionByPriorityRespectsMinimumRuntimeAndGrace) {
  Fixture f(1);
  JobSpec low = Job(1, f.a, 8, 1, 0);
  low.min_runtime = 100;
  low.grace_period = 30;
  ASSERT_TRUE(f.sched->Submit(low).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  ASSERT_TRUE(f.sched->Submit(Job(2, f.b, 8, 1, 100)).ok());
  CycleResult r = f.sched->Cycle(50);  // too young to preempt
  EXPECT_TRUE(r.preempted.empty());
  r = f.sched->Cycle(150);
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].job, 1);
  EXPECT_EQ(r.preempted[0].reason, "priority");
  EXPECT_DOUBLE_EQ(r.preempted[0].stop_at, 180);
  EXPECT_FALSE(Started(r, 2)) << "the victim keeps its GPUs through its grace period";
  f.sched->Evicted(1, 180);
  r = f.sched->Cycle(180);
  EXPECT_TRUE(Started(r, 2));
  EXPECT_EQ(f.sched->pending(), 1u);  // job 1 waits again
  // A job of lower priority never preempts a higher one.
  ASSERT_TRUE(f.sched->Submit(Job(3, f.a, 8, 1, 50)).ok());
  r = f.sched->Cycle(400);
  EXPECT_TRUE(r.preempted.empty());
}

TEST(Scheduler, PreemptionTakesTheFewestVictims) {
  Fixture f(2);
  // Four 4-GPU low jobs; a high 8-GPU job needs exactly one node: two victims, not four.
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(f.sched->Submit(Job(i, f.a, 4)).ok());
  ASSERT_EQ(f.sched->Cycle(0).started.size(), 4u);
  ASSERT_TRUE(f.sched->Submit(Job(9, f.b, 8, 1, 10)).ok());
  CycleResult r = f.sched->Cycle(10);
  EXPECT_EQ(r.preempted.size(), 2u);
  EXPECT_TRUE(Started(r, 9));
}

// Of victims alike in rank, jobs that resume from checkpoints go first, and of those the job its
// estimate says will run longest, not the one about to end, even if that one lost less work; but
// not one whose run has come further than it has left; and time left counts per GPU, so a small
// job goes before a large one. A job without an estimate counts as having as long left as it has
// run. Of jobs that do not resume, the least work lost goes, as before.
TEST(Scheduler, PreemptionStopsTheJobWithTheMostTimeLeft) {
  struct Case {
    const char* what;
    double estimate1, estimate2;  // 0: none
    double start2, now;           // job 1 starts at 0
    int64_t victim;
    int gpus2 = 4;  // job 1 takes 4 of the node's 8 GPUs
    bool resumes1 = true, resumes2 = true;
  };
  for (const Case& c : {
           Case{"job 2 about to end", 36000, 1200, 600, 1200, 1},
           Case{"job 1 has come far", 360000, 7200, 215400, 216000, 2},
           // 8,400 s a GPU against 10,200: job 2 has less time left, but on half the GPUs.
           Case{"job 2 is smaller", 36000, 21600, 600, 1200, 2, 2},
           // Both past half way: the smaller job, which loses less, goes (-44,000 against
           // -96,000), not the one whose shortfall is less per GPU.
           Case{"both past half way", 36000, 36000, 1000, 30000, 2, 2},
           Case{"no estimates", 0, 0, 600, 1200, 2},
           // Job 1 counts as having 1,200 s left, job 2 6,600.
           Case{"job 1 has no estimate", 0, 7200, 600, 1200, 2},
           Case{"neither resumes", 36000, 1200, 600, 1200, 2, 4, false, false},
           Case{"only job 1 resumes", 36000, 36000, 600, 1200, 1, 4, true, false},
       }) {
    SCOPED_TRACE(c.what);
    Fixture f(1);
    auto job = [&](int64_t id, int gpus, double estimate, bool resumes) {
      JobSpec j = estimate > 0 ? Estimated(id, f.a, gpus, estimate) : Job(id, f.a, gpus);
      j.resumes = resumes;
      return j;
    };
    ASSERT_TRUE(f.sched->Submit(job(1, 4, c.estimate1, c.resumes1)).ok());
    ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
    ASSERT_TRUE(f.sched->Submit(job(2, c.gpus2, c.estimate2, c.resumes2)).ok());
    ASSERT_TRUE(Started(f.sched->Cycle(c.start2), 2));
    ASSERT_TRUE(f.sched->Submit(Job(9, f.b, 4, 1, 10)).ok());
    CycleResult r = f.sched->Cycle(c.now);
    ASSERT_EQ(r.preempted.size(), 1u);
    EXPECT_EQ(r.preempted[0].job, c.victim);
  }
}

// The preemption cascade: while a victim stops (the default 30 s grace), the job it was taken
// for counts what the victim will free, and takes nobody else, cycle after cycle.
TEST(Scheduler, AJobWaitingForItsVictimsTakesNoMore) {
  for (bool await : {false, true}) {
    SCOPED_TRACE(await ? "control plane" : "simulator");
    SchedulerOptions o;
    o.await_stop_reports = await;
    Fixture f(6, o);
    for (int i = 1; i <= 6; ++i) {
      JobSpec low = Job(i, f.a, 8);
      low.grace_period = 30;
      ASSERT_TRUE(f.sched->Submit(low).ok());
    }
    ASSERT_EQ(f.sched->Cycle(0).started.size(), 6u);
    ASSERT_TRUE(f.sched->Submit(Job(9, f.b, 8, 1, 10)).ok());
    std::vector<int64_t> victims;
    for (double t = 10; t < 40; t += 1) {  // a cycle a second while the victim stops
      CycleResult r = f.sched->Cycle(t);
      for (const PreemptDecision& p : r.preempted) victims.push_back(p.job);
      EXPECT_FALSE(Started(r, 9));
      EXPECT_EQ(Reason(r, 9), "waits for 1 preempted job(s) to stop");
    }
    ASSERT_EQ(victims.size(), 1u) << "one 8-GPU job frees what an 8-GPU job needs";
    f.sched->Evicted(victims[0], 40);
    CycleResult r = f.sched->Cycle(40);
    EXPECT_TRUE(Started(r, 9));
    EXPECT_TRUE(r.preempted.empty());
    // A 2x8 gang with one node to free takes exactly two victims, once.
    ASSERT_TRUE(f.sched
                    ->Submit([&] {
                      JobSpec g = Job(10, f.b, 8, 2, 20);
                      g.gang = true;
                      return g;
                    }())
                    .ok());
    victims.clear();
    for (double t = 41; t < 70; t += 1) {
      for (const PreemptDecision& p : f.sched->Cycle(t).preempted) victims.push_back(p.job);
    }
    EXPECT_EQ(victims.size(), 2u);
  }
}

// After a rebuild, a victim still stopping is told whom it stops for: the preemptor takes no
// second victim.
TEST(Scheduler, AVictimAdoptedAsStoppingStillCountsForItsPreemptor) {
  SchedulerOptions o;
  o.await_stop_reports = true;
  Fixture g(2, o);
  ASSERT_TRUE(g.sched->Submit(Job(1, g.a, 8)).ok());
  ASSERT_TRUE(g.sched->Submit(Job(2, g.a, 8)).ok());
  ASSERT_EQ(g.sched->Cycle(0).started.size(), 2u);
  g.sched->Evicting(1, 9);  // as a rebuild adopts job 1, preempted for job 9
  ASSERT_TRUE(g.sched->Submit(Job(9, g.b, 8, 1, 10)).ok());
  for (double t = 10; t < 20; t += 1) {
    CycleResult r = g.sched->Cycle(t);
    EXPECT_TRUE(r.preempted.empty()) << "job 9 waits for job 1";
    EXPECT_EQ(Reason(r, 9), "waits for 1 preempted job(s) to stop");
  }
  g.sched->Evicted(1, 20);
  EXPECT_TRUE(Started(g.sched->Cycle(20), 9));
}

// A restart builds the snapshot from agents that register GPUs without their MIG layout: running
// MIG jobs are adopted with the layout made again, instead of being requeued (which freed their
// slices while they ran).
TEST(Scheduler, RunningMigJobsAreAdoptedOnAFreshSnapshot) {
  Fixture f(1);
  JobSpec a = Job(1, f.a, 0);
  a.tasks = {testing::Mig("3g.40gb")};
  JobSpec b = Job(2, f.a, 0);
  b.tasks = {testing::Mig("3g.40gb")};
  ASSERT_TRUE(f.sched->Submit(a).ok());
  ASSERT_TRUE(f.sched->Submit(b).ok());
  CycleResult r = f.sched->Cycle(0);
  ASSERT_EQ(r.started.size(), 2u);
  // As stored: the changes were settled to "none" once made.
  std::vector<std::vector<Placement>> stored;
  for (StartDecision d : r.started) {
    for (Placement& p : d.placements) {
      for (DeviceGrant& g : p.devices) g.mig_change = MigChange::kNone;
    }
    stored.push_back(d.placements);
  }
  Fixture fresh(1);
  for (size_t i = 0; i < r.started.size(); ++i) {
    JobSpec spec = r.started[i].job == 1 ? a : b;
    base::Status s = fresh.sched->Adopt(spec, stored[i], 0);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  const int32_t gpu = stored[0][0].devices[0].gpu;
  EXPECT_TRUE(fresh.sched->snapshot().gpus[gpu].mig_enabled);
  EXPECT_EQ(fresh.sched->snapshot().AllocatedGpuMilli(), 1000) << "two 3g.40gb: 8 of 8 slices";
  EXPECT_EQ(fresh.sched->running(), 2u);
}

TEST(Scheduler, TheControlPlaneWaitsForAStopEvenWithNoGrace) {
  SchedulerOptions o;
  o.await_stop_reports = true;
  Fixture f(1, o);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());  // grace 0
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  ASSERT_TRUE(f.sched->Submit(Job(2, f.b, 8, 1, 10)).ok());
  CycleResult r = f.sched->Cycle(10);
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_FALSE(Started(r, 2)) << "job 1's task may still run until its runner says it stopped";
  EXPECT_TRUE(f.sched->Cycle(11).preempted.empty());
  f.sched->Evicted(1, 12);
  EXPECT_TRUE(Started(f.sched->Cycle(12), 2));
}

// Fair share counts at every level: a team whose projects together had more waits behind a team
// that had less, even when one of its own projects had nothing.
TEST(Scheduler, FairShareComparesTeamsBeforeTheirProjects) {
  QuotaTree q;
  const int32_t org = q.AddNode("org", -1);
  const int32_t x = q.AddNode("team-x", org), y = q.AddNode("team-y", org);
  const int32_t x1 = q.AddNode("x1", x), y1 = q.AddNode("y1", y), y2 = q.AddNode("y2", y);
  Scheduler s(testing::Build({{"n0", "H100-80GB", 8, 128000, 1024 * 1024, "onprem", "r0"}}),
              testing::MakeProfile({{"best-fit", 1}}), q, {}, 1);
  ASSERT_TRUE(s.Submit(Job(1, y1, 8)).ok());
  ASSERT_TRUE(Started(s.Cycle(0), 1));
  s.Finish(1, 100);  // y1: 800 GPU-seconds
  ASSERT_TRUE(s.Submit(Job(2, x1, 8)).ok());
  ASSERT_TRUE(Started(s.Cycle(100), 2));
  s.Finish(2, 150);  // x1: 400 GPU-seconds; team-x has had half of team-y
  EXPECT_LT(s.FairShare(x), s.FairShare(y));
  EXPECT_GT(s.FairShare(x1), s.FairShare(y2));
  EXPECT_NEAR(s.FairShare(y), s.FairShare(y1) + s.FairShare(y2), 1e-12);
  JobSpec from_y2 = Job(3, y2, 8);
  from_y2.submit_time = 150;
  JobSpec from_x1 = Job(4, x1, 8);
  from_x1.submit_time = 151;  // later, so that age alone would favour y2
  ASSERT_TRUE(s.Submit(from_y2).ok());
  ASSERT_TRUE(s.Submit(from_x1).ok());
  CycleResult r = s.Cycle(151);
  EXPECT_TRUE(Started(r, 4)) << "team-x had less than team-y";
  EXPECT_FALSE(Started(r, 3));
}

// Across tenants the shortest estimate goes first, stretched by what each tenant has received:
// a heavy user's short job goes before a light user's long one, but one of comparable length
// goes after it.
TEST(Scheduler, TheShortestEstimateGoesFirstStretchedByWhatItsTenantReceived) {
  struct Case {
    double stretch;
    double a_estimate;
    bool a_first;
  };
  // The default stretch, then none: the shortest estimate first whatever a received.
  for (const Case& c : {Case{0.36, 600, true}, Case{0.36, 30000, false}, Case{0, 30000, true}}) {
    const auto& [stretch, a_estimate, a_first] = c;
    SCOPED_TRACE("stretch " + std::to_string(stretch) + ", a's estimate " +
                 std::to_string(a_estimate));
    SchedulerOptions o;
    o.usage_stretch = stretch;
    Fixture f(1, o);
    ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
    ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
    f.sched->Finish(1, 7200);  // a has had the whole estate for two hours; b nothing
    ASSERT_TRUE(f.sched->Submit(Estimated(2, f.a, 8, a_estimate, 7200)).ok());
    ASSERT_TRUE(f.sched->Submit(Estimated(3, f.b, 8, 36000, 7200)).ok());
    CycleResult r = f.sched->Cycle(7200);
    EXPECT_EQ(Started(r, 2), a_first);
    EXPECT_EQ(Started(r, 3), !a_first);
  }
}

// A job is stopped at its runtime limit, so an estimate beyond the limit is not believed.
TEST(Scheduler, AnEstimateCountsForNoMoreThanTheRuntimeLimit) {
  Fixture f(1);
  JobSpec overstated = Estimated(2, f.a, 8, 10000, 1);  // submitted later
  overstated.runtime_limit = 100;
  ASSERT_TRUE(f.sched->Submit(Estimated(1, f.b, 8, 500)).ok());
  ASSERT_TRUE(f.sched->Submit(overstated).ok());
  EXPECT_TRUE(Started(f.sched->Cycle(1), 2)) << "it ends within 100 s, before the other";
}

// SJF keeps its queue sorted as jobs join it: a start taken back puts the job back in its place,
// and a change of order is followed at the next cycle.
TEST(Scheduler, AKeptQueueTakesBackAStartAndFollowsAChangeOfOrder) {
  SchedulerOptions o = Plain(QueueOrder::kShortestJobFirst);
  Fixture f(1, o);
  ASSERT_TRUE(f.sched->Submit(Estimated(1, f.a, 8, 200)).ok());
  ASSERT_TRUE(f.sched->Submit(Estimated(2, f.a, 8, 100, 1)).ok());  // shorter, later
  ASSERT_TRUE(Started(f.sched->Cycle(1), 2));
  f.sched->Unstart(2, 1);  // the control plane could not write the start
  EXPECT_TRUE(Started(f.sched->Cycle(2), 2)) << "back in its place, ahead of the longer job";
  f.sched->Unstart(2, 2);
  o.order = QueueOrder::kFifo;
  f.sched->SetOptions(o, 2);
  EXPECT_TRUE(Started(f.sched->Cycle(3), 1)) << "FIFO: the first submitted";
}

// What a tenant received outlives the scheduler: exported, restored into a new one (a restart,
// or a rebuild after a configuration change), decayed by the time between.
TEST(Scheduler, UsageRestoredIntoANewSchedulerKeepsTheOrder) {
  Fixture f(1);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  f.sched->Finish(1, 3600);
  const auto saved = f.sched->ExportUsage(3600);
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].tenant, f.a);
  const double before = f.sched->FairShare(f.a);
  Fixture g(1);
  g.sched->RestoreUsage(saved, 3600, 3600 + 3600);  // one half-life later
  EXPECT_NEAR(g.sched->FairShare(f.a), before / 2, before * 1e-9);
  JobSpec from_a = Job(2, g.a, 8);
  JobSpec from_b = Job(3, g.b, 8);
  from_b.submit_time = 10;  // later: age alone would favour a
  ASSERT_TRUE(g.sched->Submit(from_a).ok());
  ASSERT_TRUE(g.sched->Submit(from_b).ok());
  CycleResult r = g.sched->Cycle(7200);
  EXPECT_TRUE(Started(r, 3)) << "team-a's use before the restart still counts";
}

// Nodes join and leave a running scheduler in place: its queue, its running jobs and its usage
// stay as they are.
TEST(Scheduler, NodesJoinAndBecomeUnschedulableInPlace) {
  Fixture f(1);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  ASSERT_TRUE(f.sched->Submit(Job(2, f.a, 8)).ok());
  EXPECT_FALSE(Started(f.sched->Cycle(1), 2));
  auto added = f.sched->AddNode(testing::MakeNode({"n9", "H100-80GB", 8, 128000, 1024 * 1024}));
  ASSERT_TRUE(added.ok()) << added.status().message();
  EXPECT_EQ(*added, 1);
  CycleResult r = f.sched->Cycle(2);
  ASSERT_TRUE(Started(r, 2));
  EXPECT_EQ(r.started[0].placements[0].node, 1);
  EXPECT_EQ(f.sched->running(), 2u);
  // Lost: nothing new goes there, and what ran there is released when the caller says so.
  f.sched->SetSchedulable(1, false);
  f.sched->Evicting(2);
  f.sched->Evicted(2, 3);
  EXPECT_FALSE(Started(f.sched->Cycle(3), 2)) << "the only free node is unschedulable";
  f.sched->SetSchedulable(1, true);
  EXPECT_TRUE(Started(f.sched->Cycle(4), 2));
  // A model the scheduler has never seen needs a new snapshot.
  auto other = f.sched->AddNode(testing::MakeNode({"a0", "A100-80GB", 8}));
  EXPECT_EQ(other.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.sched->snapshot().nodes.size(), 2u);
  EXPECT_EQ(f.sched->snapshot().gpus.size(), 16u) << "a failed add leaves nothing behind";
}

TEST(Scheduler, GangsArePlacedWholeInOneCluster) {
  Fixture f(2, {}, /*two_clusters=*/true);  // n0 on-prem, n1 cloud
  JobSpec gang = Job(1, f.a, 8, 2);
  gang.gang = true;
  ASSERT_TRUE(f.sched->Submit(gang).ok());
  CycleResult r = f.sched->Cycle(0);
  EXPECT_FALSE(Started(r, 1)) << "one free node per cluster cannot hold a 2-node gang";
  Fixture g(4, {}, /*two_clusters=*/true);
  ASSERT_TRUE(g.sched->Submit(gang).ok());
  r = g.sched->Cycle(0);
  ASSERT_TRUE(Started(r, 1));
  const auto& p = r.started[0].placements;
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(g.sched->snapshot().nodes[p[0].node].cluster,
            g.sched->snapshot().nodes[p[1].node].cluster);
  EXPECT_NE(p[0].node, p[1].node);
}

// A Slurm cluster runs as many tasks of a job on each node it uses (--ntasks-per-node), so a job
// of several tasks is laid out so there: three 2-GPU tasks on 4-GPU nodes go one to a node, where
// packing would put two on one node and the third on another.
struct SlurmEstate {
  QuotaTree quotas;
  int32_t a = -1;
  std::unique_ptr<Scheduler> sched;

  // `slurm` 4-GPU nodes in Slurm cluster hpc, `agent` nodes of `agent_gpus` in the agents'
  // cluster onprem.
  SlurmEstate(int slurm, int agent, int agent_gpus = 4) {
    a = quotas.AddNode("team-a", quotas.AddNode("org", -1));
    std::vector<domain::Cluster> clusters = testing::TwoClusters();
    clusters[1].name = "hpc";
    clusters[1].backend = domain::Backend::kSlurm;
    std::vector<testing::NodeSpec> specs;
    for (int i = 0; i < slurm + agent; ++i) {
      specs.push_back({"n" + std::to_string(i), "H100-80GB", i < slurm ? 4 : agent_gpus, 64000,
                       512 * 1024, i < slurm ? "hpc" : "onprem"});
    }
    sched = std::make_unique<Scheduler>(testing::Build(specs, clusters),
                                        testing::MakeProfile({{"best-fit", 1}, {"topology", 1}}),
                                        quotas, Plain(QueueOrder::kMeridian), 1);
  }
  // Tasks on each node the job's placements use.
  std::map<int32_t, int> Layout(const CycleResult& r, int64_t id) const {
    std::map<int32_t, int> on;
    for (const StartDecision& s : r.started) {
      if (s.job != id) continue;
      for (const Placement& p : s.placements) ++on[p.node];
    }
    return on;
  }
  std::string Cluster(int32_t node) const {
    return sched->snapshot().clusters[sched->snapshot().nodes[node].cluster].name;
  }
  // A job of one task of `gpus`, started: what takes part of the estate.
  void Take(int64_t id, int gpus) {
    ASSERT_TRUE(sched->Submit(Job(id, a, gpus)).ok());
    ASSERT_TRUE(Started(sched->Cycle(0), id));
  }
  void SubmitGang(int64_t id, int gpus, int tasks) {
    JobSpec gang = Job(id, a, gpus, tasks);
    gang.gang = true;
    ASSERT_TRUE(sched->Submit(gang).ok());
  }
};

TEST(Scheduler, OnASlurmClusterAJobsTasksAreLaidOutAsManyOnEachNode) {
  SlurmEstate f(4, 0);
  f.SubmitGang(1, 2, 3);
  CycleResult r = f.sched->Cycle(0);
  ASSERT_TRUE(Started(r, 1)) << Reason(r, 1);
  std::map<int32_t, int> on = f.Layout(r, 1);
  EXPECT_EQ(on.size(), 3u) << "one task on each of three nodes";
  for (const auto& [node, tasks] : on) EXPECT_EQ(tasks, 1) << f.Cluster(node);
  // Where the tasks can pair up, they do. With one node half taken, packing would put four
  // 2-GPU tasks one, two and one on three nodes; laid out evenly, they go two to each of two
  // whole nodes, not one to each of four.
  SlurmEstate g(4, 0);
  g.Take(2, 2);
  g.SubmitGang(3, 2, 4);
  r = g.sched->Cycle(1);
  ASSERT_TRUE(Started(r, 3)) << Reason(r, 3);
  on = g.Layout(r, 3);
  EXPECT_EQ(on.size(), 2u);
  for (const auto& [node, tasks] : on) EXPECT_EQ(tasks, 2);
  // The GPUs dealt out to the tasks of one node are theirs alone.
  std::set<int32_t> gpus;
  for (const StartDecision& s : r.started) {
    for (const Placement& p : s.placements) {
      EXPECT_EQ(p.devices.size(), 2u);
      for (const DeviceGrant& d : p.devices) EXPECT_TRUE(gpus.insert(d.gpu).second) << d.gpu;
    }
  }
}

TEST(Scheduler, AJobWithNoEvenLayoutOnASlurmClusterGoesElsewhereOrWaitsSayingWhy) {
  // Two Slurm nodes left (a job of one task, never held to the rule, takes the third): three
  // 2-GPU tasks fit only as two and one.
  SlurmEstate f(3, 0);
  f.Take(9, 4);
  f.SubmitGang(1, 2, 3);
  CycleResult r = f.sched->Cycle(0);
  EXPECT_FALSE(Started(r, 1));
  EXPECT_NE(Reason(r, 1).find("as many on each node of a Slurm cluster"), std::string::npos)
      << Reason(r, 1);
  // Remembered: the next pass neither places it unevenly again nor searches for a layout.
  const int64_t searched = f.sched->placements_searched();
  r = f.sched->Cycle(1);
  EXPECT_FALSE(Started(r, 1));
  EXPECT_EQ(f.sched->placements_searched(), searched);
  EXPECT_NE(Reason(r, 1).find("as many on each node of a Slurm cluster"), std::string::npos)
      << Reason(r, 1);
  // A job whose tasks land evenly is not held to it: two 2-GPU tasks on one node.
  f.SubmitGang(2, 2, 2);
  r = f.sched->Cycle(2);
  ASSERT_TRUE(Started(r, 2)) << Reason(r, 2);
  EXPECT_EQ(f.Layout(r, 2).size(), 1u);
}

// With the agents' cluster beside it (8-GPU nodes, which best-fit likes less than the Slurm
// nodes' 4), the job is packed unevenly on Slurm first, then goes to the agents' cluster.
TEST(Scheduler, AJobWithNoEvenLayoutOnASlurmClusterGoesToAnotherCluster) {
  SlurmEstate g(2, 2, 8);
  g.SubmitGang(1, 2, 3);
  CycleResult r = g.sched->Cycle(0);
  ASSERT_TRUE(Started(r, 1)) << Reason(r, 1);
  for (const auto& [node, tasks] : g.Layout(r, 1)) EXPECT_EQ(g.Cluster(node), "onprem");
}

// A job with an image runs only where the back end runs images: never on a Slurm cluster, whose
// connector runs commands (it failed there, as not-started, where the agents could have run it).
TEST(Scheduler, AJobWithAnImageIsNeverPlacedOnASlurmClusterAndSaysWhy) {
  auto image_job = [](int64_t id, int32_t tenant, const Snapshot& snapshot) {
    domain::Job job;
    job.name = "j" + std::to_string(id);
    job.constraints.image = true;
    domain::TaskGroup g;
    g.request.gpu = domain::GpuRequest::Whole(1);
    job.task_groups.push_back(g);
    JobSpec j;
    j.id = id;
    j.tenant = tenant;
    j.tasks = TasksForJob(job, snapshot, 0);
    return j;
  };
  // The Slurm nodes are the best fit (4 GPUs against the agents' 8): the job goes to the agents.
  SlurmEstate g(2, 1, 8);
  ASSERT_TRUE(g.sched->Submit(image_job(1, g.a, g.sched->snapshot())).ok());
  CycleResult r = g.sched->Cycle(0);
  ASSERT_TRUE(Started(r, 1)) << Reason(r, 1);
  for (const auto& [node, tasks] : g.Layout(r, 1)) EXPECT_EQ(g.Cluster(node), "onprem");
  // With only Slurm nodes it fits none, and says why (the server keeps it pending so).
  SlurmEstate f(2, 0);
  base::Status s = f.sched->Submit(image_job(1, f.a, f.sched->snapshot()));
  EXPECT_EQ(s.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("runs commands, not images"), std::string::npos) << s.message();
  // The same job without an image runs there.
  ASSERT_TRUE(f.sched->Submit(Job(2, f.a, 1)).ok());
  EXPECT_TRUE(Started(f.sched->Cycle(1), 2));
}

// A spent block-cloud budget (docs/adr/0041-budgets.md): its tenant's jobs are placed in no
// cloud cluster, gangs included; other tenants' are; what runs there stays.
TEST(Scheduler, ATenantExcludedFromAClusterIsPlacedOnlyElsewhere) {
  Fixture f(2, Plain(QueueOrder::kMeridian), /*two_clusters=*/true);  // n0 on-prem, n1 cloud
  const int32_t cloud = f.sched->snapshot().FindCluster("cloud");
  ASSERT_GE(cloud, 0);
  f.sched->ExcludeClusters({{f.a, Bit(cloud)}});
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  JobSpec gang = Job(2, f.a, 4, 2);
  gang.gang = true;
  ASSERT_TRUE(f.sched->Submit(gang).ok());
  CycleResult r = f.sched->Cycle(0);
  ASSERT_TRUE(Started(r, 1));
  EXPECT_NE(f.sched->snapshot().nodes[r.started[0].placements[0].node].cluster, cloud);
  EXPECT_FALSE(Started(r, 2)) << "the free cloud node could hold the gang, but not for tenant a";
  ASSERT_TRUE(f.sched->Submit(Job(3, f.b, 8)).ok());
  r = f.sched->Cycle(1);
  ASSERT_TRUE(Started(r, 3)) << "tenant b is not excluded";
  EXPECT_EQ(f.sched->snapshot().nodes[r.started[0].placements[0].node].cluster, cloud);
  EXPECT_FALSE(Started(r, 2));
  // The same gang in the same estate, with no exclusion, starts at once.
  Fixture g(2, Plain(QueueOrder::kMeridian), /*two_clusters=*/true);
  ASSERT_TRUE(g.sched->Submit(gang).ok());
  r = g.sched->Cycle(0);
  EXPECT_TRUE(Started(r, 2)) << "without the exclusion the gang fits";
}

// Kept out of the cloud, a job is not estimated to start (nor reserved for) on its free node,
// and its explanation says why the cloud is no place for it.
TEST(Scheduler, AnExcludedTenantsEstimateAndExplanationLeaveOutTheCluster) {
  Fixture f(2, {}, /*two_clusters=*/true);  // n0 on-prem, n1 cloud
  const int32_t cloud = f.sched->snapshot().FindCluster("cloud");
  ASSERT_TRUE(f.sched->Submit(Estimated(1, f.b, 8, 100)).ok());
  f.sched->ExcludeClusters({{f.b, Bit(cloud)}});
  CycleResult r = f.sched->Cycle(0);
  ASSERT_TRUE(Started(r, 1));
  ASSERT_TRUE(f.sched->Submit(Estimated(2, f.a, 8, 100)).ok());
  f.sched->ExcludeClusters({{f.a, Bit(cloud)}});
  r = f.sched->Cycle(1);
  EXPECT_FALSE(Started(r, 2));
  EXPECT_NEAR(f.sched->EstimatedStart(2, 1), 100, 1) << "when job 1 ends on-prem, not now";
  const Explanation e = f.sched->Explain(2, 1);
  ASSERT_EQ(e.clusters.size(), 2u);
  for (const auto& [cluster, why] : e.clusters) {
    if (cluster == "cloud") {
      EXPECT_NE(why.find("spent budget"), std::string::npos) << why;
    }
  }
  f.sched->ExcludeClusters({});
  EXPECT_NEAR(f.sched->EstimatedStart(2, 1), 1, 1e-9) << "the cloud node is free";
}

// A high-priority job takes the GPUs of the job running on borrowed quota, not those of a job
// within its guarantee, which would then take back its guarantee from the borrower in the same
// cycle: two preemptions for one, and a job both stopped and started by one cycle.
TEST(Scheduler, PreemptionTakesBorrowedWorkFirstAndNoJobIsStoppedAndStartedInOneCycle) {
  SchedulerOptions o;
  o.queue_depth = 1;  // a pass per start, so that a victim back in the queue is looked at again
  Fixture f(2, o);
  f.quotas.SetQuota(f.a, kNoModel, 8000, kUnlimited);  // a is guaranteed one node; b nothing
  f.Init(2, o);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  ASSERT_TRUE(f.sched->Submit(Job(2, f.b, 8)).ok());  // on borrowed quota
  ASSERT_TRUE(Started(f.sched->Cycle(0), 2));
  JobSpec urgent = Job(3, f.b, 8, 1, 100);
  urgent.submit_time = 100;
  JobSpec later = Job(4, f.b, 8);
  later.submit_time = 100;
  ASSERT_TRUE(f.sched->Submit(urgent).ok());
  ASSERT_TRUE(f.sched->Submit(later).ok());
  CycleResult r = f.sched->Cycle(100);
  EXPECT_TRUE(Started(r, 3));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].job, 2) << "the borrower, not the job within its guarantee";
  std::set<int64_t> stopped, started;
  for (const PreemptDecision& p : r.preempted) EXPECT_TRUE(stopped.insert(p.job).second);
  for (const StartDecision& d : r.started) {
    EXPECT_TRUE(started.insert(d.job).second);
    EXPECT_FALSE(stopped.count(d.job)) << "job " << d.job << " stopped and started in one cycle";
  }
  EXPECT_FALSE(Started(f.sched->Cycle(200), 2)) << "job 2 waits: job 1 keeps its guarantee";
}

// A gang that fits in part is placed in part and taken back; the next gang of its shape is
// known to fit nowhere until capacity is released, and the partial placement released nothing
// that a job behind them could not use.
TEST(Scheduler, AGangThatFitsInPartIsRememberedAndTakesNothingFromTheJobsBehind) {
  SchedulerOptions o = Plain(QueueOrder::kFifo);
  o.backfill = true;  // in submission order, past the gangs, without a reservation for them
  o.reserve_after = 1e9;
  Fixture f(2, o);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 4)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  for (int64_t id : {2, 3}) {
    JobSpec gang = Job(id, f.b, 8, 2);
    gang.gang = true;
    gang.submit_time = static_cast<double>(id);
    ASSERT_TRUE(f.sched->Submit(gang).ok());
  }
  JobSpec behind = Job(4, f.a, 8);  // fits only on n1, where each gang's first task went
  behind.submit_time = 4;
  ASSERT_TRUE(f.sched->Submit(behind).ok());
  CycleResult r = f.sched->Cycle(10);
  EXPECT_FALSE(Started(r, 2));
  EXPECT_FALSE(Started(r, 3));
  EXPECT_TRUE(Started(r, 4)) << "the gangs' first tasks took n1 only on trial";
  EXPECT_FALSE(Reason(r, 3).empty());
  EXPECT_EQ(Reason(r, 3), Reason(r, 2)) << "the remembered answer says why, as the first did";
  // Nothing changed since: the next pass searches no node for either gang.
  const int64_t searched = f.sched->placements_searched();
  const int64_t hits = f.sched->cache_hits();
  r = f.sched->Cycle(11);
  EXPECT_EQ(f.sched->placements_searched(), searched);
  EXPECT_GT(f.sched->cache_hits(), hits);
  EXPECT_EQ(Reason(r, 3), Reason(r, 2));
  // Capacity released: the gang is asked afresh and starts.
  f.sched->Finish(1, 20);
  f.sched->Finish(4, 20);
  r = f.sched->Cycle(20);
  EXPECT_TRUE(Started(r, 2));
}

// A gang of unlike tasks is placed one by one, and where its first task goes decides whether the
// others fit: a commit elsewhere may make it fit, so it is remembered only while nothing changes.
TEST(Scheduler, AGangOfUnlikeTasksIsRememberedOnlyWhileNothingChanges) {
  SchedulerOptions o = Plain(QueueOrder::kFifo);
  o.backfill = true;
  o.reserve_after = 1e9;
  Fixture f(2, o);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 4)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));  // n0: 4 free, n1: 8 free
  JobSpec gang = Job(2, f.b, 8, 2);
  gang.tasks[1] = testing::Whole(6, 1000, 1024);
  gang.gang = true;
  gang.submit_time = 1;
  ASSERT_TRUE(f.sched->Submit(gang).ok());
  EXPECT_FALSE(Started(f.sched->Cycle(10), 2));
  int64_t searched = f.sched->placements_searched();
  EXPECT_FALSE(Started(f.sched->Cycle(11), 2));
  EXPECT_EQ(f.sched->placements_searched(), searched) << "nothing changed";
  JobSpec one = Job(3, f.a, 1);
  one.submit_time = 12;
  ASSERT_TRUE(f.sched->Submit(one).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(12), 3));
  searched = f.sched->placements_searched();
  EXPECT_FALSE(Started(f.sched->Cycle(13), 2));
  EXPECT_GT(f.sched->placements_searched(), searched) << "job 3's start changed the snapshot";
}

// A pass behind a reservation that changed nothing since the last asks for the same estimate;
// a start that leaves it standing (a backfilled job that ends before it) keeps it too; it is
// worked out again once something ends.
TEST(Scheduler, AStartEstimateIsWorkedOutAgainOnlyWhenSomethingChanged) {
  Fixture f = TwoNodeJobBehindOneHeldUntil1000();
  CycleResult r = f.sched->Cycle(10);
  ASSERT_EQ(r.reserved_job, 2);
  EXPECT_DOUBLE_EQ(r.reserved_at, 1000);
  const int64_t computed = f.sched->estimates_computed();
  r = f.sched->Cycle(20);
  EXPECT_EQ(r.reserved_job, 2);
  EXPECT_DOUBLE_EQ(r.reserved_at, 1000);
  EXPECT_DOUBLE_EQ(f.sched->Explain(2, 30).estimated_start, 1000);
  EXPECT_EQ(f.sched->estimates_computed(), computed) << "nothing started or ended";
  // Later than the estimate, with job 1 still running: it ends now at the earliest.
  EXPECT_DOUBLE_EQ(f.sched->Explain(2, 1500).estimated_start, 1500);
  JobSpec other = Job(3, f.b, 4);
  other.submit_time = 40;
  other.runtime_limit = 100;  // ends before the reservation: backfilled
  ASSERT_TRUE(f.sched->Submit(other).ok());
  r = f.sched->Cycle(40);
  EXPECT_TRUE(Started(r, 3));
  r = f.sched->Cycle(50);
  EXPECT_EQ(f.sched->estimates_computed(), computed) << "job 3 ends before the reservation";
  EXPECT_DOUBLE_EQ(r.reserved_at, 1000);
  f.sched->Finish(3, 60);
  r = f.sched->Cycle(60);
  EXPECT_GT(f.sched->estimates_computed(), computed) << "job 3 ended since";
  EXPECT_DOUBLE_EQ(r.reserved_at, 1000);
}

// A job told to stop counts as given back now in an estimate, and as running again when the
// stop is taken back, though neither changes what it holds.
TEST(Scheduler, AnEstimateFollowsAJobToldToStopAndBack) {
  Fixture f = TwoNodeJobBehindOneHeldUntil1000();
  EXPECT_DOUBLE_EQ(f.sched->Explain(2, 10).estimated_start, 1000);
  f.sched->Evicting(1, 2);
  EXPECT_DOUBLE_EQ(f.sched->Explain(2, 20).estimated_start, 20);
  f.sched->Unevict(1);
  EXPECT_DOUBLE_EQ(f.sched->Explain(2, 30).estimated_start, 1000);
}

// The estimated start of a gang is when what has ended frees whole nodes for it, not when
// enough GPU is free in pieces: at 300, 16 GPUs are free but in halves of two nodes.
TEST(Scheduler, AGangIsEstimatedToStartWhenWholeNodesHaveFreed) {
  SchedulerOptions o;
  o.preemption = false;
  Fixture f(3, o);
  // Pairs of 4-GPU jobs share a node (best fit), the 8-GPU job has the third; they end at the
  // estimates below, in this order: 100 (n0), 200 (n1), 300 (n2), 400 (n0), 500 (n1).
  const std::vector<std::pair<int, double>> running = {
      {4, 100}, {4, 400}, {4, 200}, {4, 500}, {8, 300}};
  for (size_t i = 0; i < running.size(); ++i) {
    JobSpec j = Job(static_cast<int64_t>(i + 1), f.a, running[i].first);
    j.runtime_estimate = running[i].second;
    ASSERT_TRUE(f.sched->Submit(j).ok());
    ASSERT_TRUE(Started(f.sched->Cycle(0), j.id)) << "job " << j.id;
  }
  JobSpec gang = Job(6, f.b, 8, 2);
  ASSERT_TRUE(f.sched->Submit(gang).ok());
  EXPECT_FALSE(Started(f.sched->Cycle(1), 6));
  EXPECT_DOUBLE_EQ(f.sched->Explain(6, 1).estimated_start, 400);
  // One node's worth fits as soon as the 8-GPU job ends.
  JobSpec one = Job(7, f.b, 8);
  ASSERT_TRUE(f.sched->Submit(one).ok());
  EXPECT_DOUBLE_EQ(f.sched->Explain(7, 1).estimated_start, 300);
  // Four whole nodes never free on three: no estimate.
  ASSERT_TRUE(f.sched->Submit(Job(8, f.b, 8, 4)).ok());
  EXPECT_DOUBLE_EQ(f.sched->Explain(8, 1).estimated_start, -1);
}

TEST(Scheduler, BackfillRunsShortJobsBeforeTheReservation) {
  Fixture f = OneNodeHeldUntil1000();
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  JobSpec big = Job(2, f.a, 16, 1, 1);  // first in line; needs both nodes: waits until 1000
  big.tasks = {testing::Whole(8), testing::Whole(8)};
  big.submit_time = 1;
  JobSpec short_job = Job(3, f.a, 4);
  short_job.submit_time = 2;
  short_job.runtime_limit = 500;
  JobSpec long_job = Job(4, f.a, 4);
  long_job.submit_time = 3;
  long_job.runtime_limit = 5000;
  for (const JobSpec& j : {big, short_job, long_job}) ASSERT_TRUE(f.sched->Submit(j).ok());
  CycleResult r = f.sched->Cycle(10);
  EXPECT_EQ(r.reserved_job, 2);
  EXPECT_DOUBLE_EQ(r.reserved_at, 1000);
  EXPECT_TRUE(Started(r, 3));
  EXPECT_FALSE(Started(r, 4));
  EXPECT_NE(Reason(r, 4).find("reservation of job 2"), std::string::npos);
  // The reservation sticks to job 2 in later cycles, and job 2 takes it when job 1 ends.
  r = f.sched->Cycle(20);
  EXPECT_EQ(r.reserved_job, 2);
  Explanation e = f.sched->Explain(2, 10);
  ASSERT_TRUE(e.known);
  EXPECT_DOUBLE_EQ(e.estimated_start, 1000);
  ASSERT_EQ(e.clusters.size(), 2u);
  EXPECT_NE(e.clusters[0].second.find("no node has the free GPUs"), std::string::npos)
      << e.clusters[0].second;
  EXPECT_EQ(e.clusters[1].first, "cloud");
  f.sched->Finish(1, 1000);
  f.sched->Finish(3, 1000);
  r = f.sched->Cycle(1000);
  EXPECT_TRUE(Started(r, 2));
  EXPECT_EQ(r.reserved_job, -1);
}

TEST(Scheduler, ReservedNodesAreLentToPreemptibleJobsAndTakenBack) {
  SchedulerOptions o;
  o.reserve_after = 0;
  Fixture f(2, o);
  JobSpec running = Job(1, f.a, 8);
  running.runtime_estimate = 1000;
  ASSERT_TRUE(f.sched->Submit(running).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  JobSpec big = Job(2, f.a, 8, 2);  // first in line (shortest estimate); needs both nodes
  big.submit_time = 1;
  big.runtime_estimate = 100;
  JobSpec lendable = Job(3, f.a, 4);  // too long to backfill before the reservation
  lendable.submit_time = 2;
  lendable.runtime_limit = 5000;
  JobSpec pinned = lendable;  // the same, but may not be preempted: kept off the loan
  pinned.id = 4;
  pinned.submit_time = 3;
  pinned.preemptible = false;
  for (const JobSpec& j : {big, lendable, pinned}) ASSERT_TRUE(f.sched->Submit(j).ok());
  CycleResult r = f.sched->Cycle(10);
  EXPECT_EQ(r.reserved_job, 2);
  EXPECT_DOUBLE_EQ(r.reserved_at, 1000);
  ASSERT_EQ(r.started.size(), 1u);
  EXPECT_EQ(r.started[0].job, 3);
  EXPECT_EQ(r.started[0].on_loan_from, 2);
  EXPECT_NE(Reason(r, 4).find("reservation of job 2"), std::string::npos);
  // What is lent does not push the reservation back.
  EXPECT_DOUBLE_EQ(f.sched->Explain(2, 20).estimated_start, 1000);
  // When job 1 ends, job 2 takes its nodes back from job 3, which returns to the queue.
  f.sched->Finish(1, 1000);
  r = f.sched->Cycle(1000);
  EXPECT_TRUE(Started(r, 2));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].job, 3);
  EXPECT_EQ(r.preempted[0].for_job, 2);
  EXPECT_EQ(r.preempted[0].reason, "reservation");
  EXPECT_FALSE(Started(r, 3));
  EXPECT_FALSE(Started(r, 4));
  EXPECT_EQ(f.sched->pending(), 2u);
}

TEST(Scheduler, AnExplanationPerClusterSpeaksOfThatCluster) {
  Fixture f(2, {}, /*two_clusters=*/true);  // n0 on-prem, n1 cloud
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  CycleResult r = f.sched->Cycle(0);
  ASSERT_TRUE(Started(r, 1));
  ASSERT_TRUE(f.sched->Submit(Job(2, f.a, 8)).ok());
  Explanation e = f.sched->Explain(2, 1);
  ASSERT_EQ(e.clusters.size(), 2u);
  // Job 1 took one cluster's node; the other's is free. That free node is no reason why job 2
  // cannot run in the full cluster.
  int fits = 0;
  for (const auto& [cluster, why] : e.clusters) {
    if (why == "fits now") {
      ++fits;
      continue;
    }
    EXPECT_EQ(why.find("rejected by cluster"), std::string::npos) << cluster << ": " << why;
    EXPECT_NE(why.find("no node has the free GPUs"), std::string::npos) << cluster << ": " << why;
  }
  EXPECT_EQ(fits, 1);
}

TEST(Scheduler, AdoptsRunningJobsWhereTheyAreAndCancelsAnyJob) {
  // The control plane rebuilds its scheduler from the store: placed jobs come back in place.
  Fixture f(1);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  CycleResult r = f.sched->Cycle(0);
  ASSERT_EQ(r.started.size(), 1u);
  const std::vector<Placement> where = r.started[0].placements;
  Fixture g(1);
  ASSERT_TRUE(g.sched->Adopt(Job(1, g.a, 8), where, 0).ok());
  EXPECT_EQ(g.sched->running(), 1u);
  EXPECT_EQ(g.sched->AllocatedMilli(g.a), 8000);
  // The same GPUs cannot be adopted twice; the refusal changes nothing.
  base::Status twice = g.sched->Adopt(Job(2, g.a, 8), where, 0);
  EXPECT_EQ(twice.code(), base::StatusCode::kFailedPrecondition) << twice.message();
  EXPECT_EQ(g.sched->AllocatedMilli(g.a), 8000);
  // A pending job waits; cancelling the running one lets it start; cancelling a pending one
  // removes it from the queue.
  ASSERT_TRUE(g.sched->Submit(Job(3, g.a, 8)).ok());
  EXPECT_FALSE(Started(g.sched->Cycle(1), 3));
  g.sched->Cancel(1, 2);
  EXPECT_TRUE(Started(g.sched->Cycle(2), 3));
  ASSERT_TRUE(g.sched->Submit(Job(4, g.a, 8)).ok());
  EXPECT_EQ(g.sched->pending(), 1u);
  g.sched->Cancel(4, 3);
  EXPECT_EQ(g.sched->pending(), 0u);
  g.sched->Cancel(99, 3);  // unknown: ignored
}

TEST(Scheduler, ShortJobsFirstButALongWaitWins) {
  for (double horizon : {0.0, 24 * 3600.0}) {
    SchedulerOptions o;
    o.starvation_horizon = horizon;
    o.first_start_within = 0;  // it would put the long job first either way
    Fixture f(1, o);
    JobSpec long_job = Job(1, f.a, 8);
    long_job.runtime_estimate = 10000;
    long_job.submit_time = 0;
    JobSpec short_job = Job(2, f.a, 8);
    short_job.runtime_estimate = 5000;
    short_job.submit_time = 48 * 3600;
    ASSERT_TRUE(f.sched->Submit(long_job).ok());
    ASSERT_TRUE(f.sched->Submit(short_job).ok());
    // After 48 hours of waiting the long job's estimate counts as 10000 / 3 < 5000.
    CycleResult r = f.sched->Cycle(48 * 3600);
    EXPECT_EQ(Started(r, 1), horizon > 0) << "horizon " << horizon;
    EXPECT_EQ(Started(r, 2), horizon == 0) << "horizon " << horizon;
  }
}

// Two nodes; team a is guaranteed one. At 0 a and b each start a long job of 8 GPUs (b's on
// borrowed quota); at 100 a submits a third, which fits nowhere.
Fixture TwoLongRunnersAndAJobThatWaits(const SchedulerOptions& o) {
  Fixture f(2, o);
  f.quotas.SetQuota(f.a, kNoModel, 8000, kUnlimited);
  f.Init(2, o);
  for (auto [id, tenant] : {std::pair{1, f.a}, std::pair{2, f.b}}) {
    JobSpec j = Estimated(id, tenant, 8, 100000);
    j.resumes = true;
    EXPECT_TRUE(f.sched->Submit(j).ok());
  }
  EXPECT_EQ(f.sched->Cycle(0).started.size(), 2u);
  EXPECT_TRUE(f.sched->Submit(Estimated(3, f.a, 8, 1e6, 100)).ok());
  return f;
}

TEST(Scheduler, AJobWhoseFirstStartIsDueStopsBorrowedWorkOfItsClass) {
  {
    SCOPED_TRACE("the defaults: due after 30 minutes; victims that have run 10");
    Fixture f = TwoLongRunnersAndAJobThatWaits({});
    for (double t : {100.0, 1000.0, 1899.0}) {
      CycleResult r = f.sched->Cycle(t);
      EXPECT_TRUE(r.preempted.empty()) << "at " << t << ": waited " << t - 100;
      EXPECT_FALSE(Started(r, 3));
    }
    CycleResult r = f.sched->Cycle(1900);
    ASSERT_EQ(r.preempted.size(), 1u);
    EXPECT_EQ(r.preempted[0].job, 2) << "b's borrowed work, not a's own job";
    EXPECT_EQ(r.preempted[0].reason, "first start due");
    EXPECT_TRUE(Started(r, 3));
    // Job 2 ran before: its wait is no first start, and b holds nothing it could take back.
    for (double t : {1901.0, 10000.0, 100000.0}) {
      EXPECT_TRUE(f.sched->Cycle(t).preempted.empty()) << "at " << t;
    }
  }
  {
    SCOPED_TRACE("a victim must have run firstStartPreemptsAfter");
    SchedulerOptions o;
    o.first_start_preempts_after = 2000;
    Fixture f = TwoLongRunnersAndAJobThatWaits(o);
    EXPECT_TRUE(f.sched->Cycle(1900).preempted.empty());
    CycleResult r = f.sched->Cycle(2000);
    ASSERT_EQ(r.preempted.size(), 1u);
    EXPECT_EQ(r.preempted[0].job, 2);
  }
  // (LAS preempts by attained service, its own way.)
  for (QueueOrder order :
       {QueueOrder::kFifo, QueueOrder::kShortestJobFirst, QueueOrder::kMeridian}) {
    SCOPED_TRACE("off, or another order");
    SchedulerOptions o;
    o.order = order;
    if (order == QueueOrder::kMeridian) o.first_start_within = 0;
    Fixture f = TwoLongRunnersAndAJobThatWaits(o);
    for (double t : {1900.0, 10000.0, 100000.0}) {
      EXPECT_TRUE(f.sched->Cycle(t).preempted.empty()) << "at " << t;
    }
  }
  {
    SCOPED_TRACE("a job that ran before, here or before a restart");
    Fixture f(2);
    f.quotas.SetQuota(f.a, kNoModel, 8000, kUnlimited);
    f.Init(2, {});
    for (auto [id, tenant] : {std::pair{1, f.a}, std::pair{2, f.b}}) {
      ASSERT_TRUE(f.sched->Submit(Estimated(id, tenant, 8, 100000)).ok());
    }
    ASSERT_EQ(f.sched->Cycle(0).started.size(), 2u);
    JobSpec requeued = Estimated(3, f.a, 8, 1e6, 100);
    requeued.started_before = true;
    ASSERT_TRUE(f.sched->Submit(requeued).ok());
    for (double t : {1900.0, 100000.0}) {
      EXPECT_TRUE(f.sched->Cycle(t).preempted.empty()) << "at " << t;
    }
  }
}

TEST(Scheduler, AJobWhoseFirstStartIsDueTakesNoOtherProjectsGuaranteeNorAHigherClass) {
  for (bool higher : {false, true}) {
    SCOPED_TRACE(higher ? "b's own job of a higher class" : "a's jobs within its guarantee");
    Fixture f(2);
    // a is guaranteed the whole estate, or one node while b runs a job of a higher class.
    f.quotas.SetQuota(f.a, kNoModel, higher ? 8000 : 16000, kUnlimited);
    f.Init(2, {});
    ASSERT_TRUE(f.sched->Submit(Estimated(1, f.a, 8, 100000)).ok());
    JobSpec second = Estimated(2, higher ? f.b : f.a, 8, 100000);
    second.priority = higher ? 5 : 0;
    ASSERT_TRUE(f.sched->Submit(second).ok());
    ASSERT_EQ(f.sched->Cycle(0).started.size(), 2u);
    ASSERT_TRUE(f.sched->Submit(Estimated(3, f.b, 8, 1000, 100)).ok());
    for (double t : {1900.0, 10000.0, 100000.0}) {
      CycleResult r = f.sched->Cycle(t);
      EXPECT_TRUE(r.preempted.empty()) << "at " << t;
      EXPECT_FALSE(Started(r, 3));
    }
  }
}

// n0 holds H100s and n1 A100s; team a may use no H100 (a limit of 0). Its job of 8 GPUs of either
// model, due for its first start, finds both nodes held by b's borrowed jobs. Stopping the job
// on n1 lets it start on the A100s. With both released, the first node that fits is n0, whose
// H100s a may not use: that alone must not end the search (its quick first look).
TEST(Scheduler, AFirstStartSearchIsNotCutShortByAModelLimit) {
  QuotaTree quotas;
  const int32_t org = quotas.AddNode("org", -1);
  const int32_t a = quotas.AddNode("team-a", org);
  const int32_t b = quotas.AddNode("team-b", org);
  Snapshot snap = testing::Build({{"n0", "H100-80GB", 8, 128000, 1024 * 1024, "onprem", "r0"},
                                  {"n1", "A100-80GB", 8, 128000, 1024 * 1024, "onprem", "r0"}});
  const ModelId h100 = snap.FindModel("H100-80GB");
  const ModelId a100 = snap.FindModel("A100-80GB");
  ASSERT_GE(h100, 0);
  ASSERT_GE(a100, 0);
  quotas.SetQuota(a, h100, 0, 0);
  Scheduler s(std::move(snap), testing::MakeProfile({{"best-fit", 1}}), quotas, {}, 1);
  // b's job on the A100s has more left: it is the first victim either way.
  for (auto [id, model, estimate] : {std::tuple{1, h100, 10000.0}, std::tuple{2, a100, 100000.0}}) {
    JobSpec j = Estimated(id, b, 8, estimate);
    j.tasks[0].allowed_models = Bit(model);
    j.resumes = true;
    ASSERT_TRUE(s.Submit(j).ok());
  }
  ASSERT_EQ(s.Cycle(0).started.size(), 2u);
  ASSERT_TRUE(s.Submit(Estimated(3, a, 8, 1000, 100)).ok());
  CycleResult r = s.Cycle(1900);
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].job, 2);
  EXPECT_TRUE(Started(r, 3));
}

// Jobs that take no GPU gain no attained service: a job stopped for a first start is still
// known to have run, or two of them would take turns stopping each other every 10 minutes.
TEST(Scheduler, JobsWithoutGpusDoNotTakeTurnsStoppingEachOtherForAFirstStart) {
  Fixture f(1);
  auto cpu_only = [&](int64_t id, double submit) {
    JobSpec j = Job(id, f.a, 1);
    j.tasks[0].gpu_kind = GpuKind::kNone;
    j.tasks[0].gpu_count = 0;
    j.tasks[0].cpu_milli = 128000;  // the node's every CPU
    j.submit_time = submit;
    return j;
  };
  ASSERT_TRUE(f.sched->Submit(cpu_only(1, 0)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  ASSERT_TRUE(f.sched->Submit(cpu_only(2, 10)).ok());
  int preemptions = 0;
  for (double t = 20; t < 6 * 3600; t += 60) preemptions += f.sched->Cycle(t).preempted.size();
  EXPECT_EQ(preemptions, 1) << "job 2's first start stops job 1 once; job 1 waits after it";
}

TEST(Scheduler, AJobWhoseFirstStartIsDueGoesBeforeShorterJobsOfItsClassOldestFirst) {
  SchedulerOptions o = Plain(QueueOrder::kMeridian);  // the order alone
  Fixture f(1, o);
  ASSERT_TRUE(f.sched->Submit(Estimated(1, f.a, 8, 10000)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  ASSERT_TRUE(f.sched->Submit(Estimated(2, f.a, 8, 50000, 10)).ok());
  ASSERT_TRUE(f.sched->Submit(Estimated(3, f.a, 8, 40000, 20)).ok());
  ASSERT_TRUE(f.sched->Submit(Estimated(4, f.a, 8, 100, 4000)).ok());
  JobSpec requeued = Estimated(5, f.a, 8, 200, 5);
  requeued.started_before = true;
  ASSERT_TRUE(f.sched->Submit(requeued).ok());
  // Jobs 2 and 3 are due, 2 the older; job 4 is the shortest and not due yet (it waited 1,000 s
  // at most); job 5 is short and the oldest but ran before.
  std::vector<int64_t> started;
  double t = 5000;
  f.sched->Finish(1, t);
  for (int k = 0; k < 4; ++k) {
    CycleResult r = f.sched->Cycle(t);
    ASSERT_EQ(r.started.size(), 1u) << "at " << t;
    started.push_back(r.started[0].job);
    t += 1;
    f.sched->Finish(r.started[0].job, t);
  }
  EXPECT_EQ(started, (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST(Scheduler, FifoBlocksBehindItsHead) {
  SchedulerOptions o = Plain(QueueOrder::kFifo);
  Fixture f(1, o);
  JobSpec head = Job(1, f.a, 16);
  head.tasks = {testing::Whole(8), testing::Whole(8)};
  ASSERT_TRUE(f.sched->Submit(head).ok());
  JobSpec small = Job(2, f.a, 1);
  small.submit_time = 1;
  ASSERT_TRUE(f.sched->Submit(small).ok());
  CycleResult r = f.sched->Cycle(5);
  EXPECT_TRUE(r.started.empty());
}

TEST(Scheduler, LeastAttainedServiceGoesFirst) {
  SchedulerOptions o;
  o.order = QueueOrder::kLeastAttainedService;
  o.las_thresholds = {100};
  o.backfill = false;
  Fixture f(1, o);
  ASSERT_TRUE(f.sched->Submit(Job(1, f.a, 8)).ok());
  ASSERT_TRUE(Started(f.sched->Cycle(0), 1));
  // After 100 s on 8 GPUs job 1 has attained 800 GPU-seconds: a new job preempts it.
  ASSERT_TRUE(f.sched->Submit(Job(2, f.b, 8)).ok());
  CycleResult r = f.sched->Cycle(100);
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].job, 1);
  EXPECT_TRUE(Started(r, 2));
}

}  // namespace
}  // namespace meridian::sched
