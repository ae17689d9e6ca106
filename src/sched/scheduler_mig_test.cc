// MIG shaped by demand (issue 20): the scheduler's layout changes both ways, never on a GPU with
// running work, and no more often than the Policy's migReconfigureInterval.
#include <gtest/gtest.h>

#include "base/rng.h"
#include "sched/scheduler.h"
#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

struct MigFixture {
  QuotaTree quotas;
  int32_t tenant = -1;
  std::unique_ptr<Scheduler> sched;

  explicit MigFixture(int gpus, SchedulerOptions options = {}, bool preemption = false) {
    tenant = quotas.AddNode("team", quotas.AddNode("org", -1));
    options.preemption = preemption;
    sched =
        std::make_unique<Scheduler>(testing::Build({{"n0", "H100-80GB", gpus}}),
                                    testing::MakeProfile({{"best-fit", 1}}), quotas, options, 1);
  }
  void Submit(int64_t id, TaskSpec task, int priority = 0) {
    JobSpec j;
    j.id = id;
    j.tenant = tenant;
    j.priority = priority;
    j.tasks = {std::move(task)};
    ASSERT_TRUE(sched->Submit(j).ok());
  }
  const GpuState& Gpu(int i) const { return sched->snapshot().gpus[static_cast<size_t>(i)]; }
};

const StartDecision* StartOf(const CycleResult& r, int64_t job) {
  for (const StartDecision& d : r.started) {
    if (d.job == job) return &d;
  }
  return nullptr;
}

std::string WhyPending(const CycleResult& r, int64_t job) {
  for (const auto& [id, why] : r.pending) {
    if (id == job) return why;
  }
  return "";
}

TEST(SchedulerMig, AGpuGoesToMigForSmallSlicesAndBackWholeOnceItsLayoutHasKept) {
  MigFixture f(1);  // migReconfigureInterval: the default, 60 s
  // A 1g.10gb and a 3g.40gb share the one GPU: MIG mode on for the first, an instance in free
  // slices for the second, at valid placements that do not overlap.
  f.Submit(1, testing::Mig("1g.10gb"));
  f.Submit(2, testing::Mig("3g.40gb"));
  CycleResult r = f.sched->Cycle(0);
  const StartDecision* small = StartOf(r, 1);
  const StartDecision* big = StartOf(r, 2);
  ASSERT_TRUE(small && big);
  ASSERT_EQ(small->layout_changes.size(), 1u);
  EXPECT_EQ(small->layout_changes[0].mig_change, MigChange::kEnableMig);
  ASSERT_EQ(big->layout_changes.size(), 1u);
  EXPECT_EQ(big->layout_changes[0].mig_change, MigChange::kCreateInstance);
  const DeviceGrant& s = small->placements[0].devices[0];
  const DeviceGrant& b = big->placements[0].devices[0];
  EXPECT_EQ(s.gpu, b.gpu);
  const domain::GpuModel& model = f.sched->snapshot().model(f.Gpu(0).model);
  const auto bits = [&](const DeviceGrant& d) {
    const domain::MigProfile& p = model.mig_profiles[d.mig_profile];
    EXPECT_NE(std::find(p.starts.begin(), p.starts.end(), d.mig_start), p.starts.end());
    return ((1u << p.memory_slices) - 1) << d.mig_start;
  };
  EXPECT_EQ(bits(s) & bits(b), 0u) << "overlapping instances";
  EXPECT_TRUE(f.Gpu(0).mig_enabled);
  EXPECT_TRUE(f.Gpu(0).mig_frozen);
  // A whole-GPU job waits while they run: their GPU is never taken from them.
  f.Submit(3, testing::Whole(1));
  EXPECT_FALSE(StartOf(f.sched->Cycle(10), 3));
  f.sched->Finish(1, 20);
  f.sched->Finish(2, 20);
  // Both ended, but the layout was made 30 s ago: it keeps, and the job says why.
  r = f.sched->Cycle(30);
  EXPECT_FALSE(StartOf(r, 3));
  EXPECT_EQ(WhyPending(r, 3),
            "1 node considered: 1 node whose idle GPUs changed MIG layout too recently to change "
            "again (migReconfigureInterval)");
  // Once it has kept the interval, the GPU leaves MIG mode for the whole-GPU job.
  r = f.sched->Cycle(61);
  const StartDecision* whole = StartOf(r, 3);
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->layout_changes.size(), 1u);
  EXPECT_EQ(whole->layout_changes[0].mig_change, MigChange::kDisableMig);
  EXPECT_FALSE(f.Gpu(0).mig_enabled);
  EXPECT_TRUE(f.Gpu(0).mig_frozen);
  // And back to MIG when small slices wait again, after the interval again.
  f.sched->Finish(3, 70);
  f.Submit(4, testing::Mig("1g.10gb"));
  EXPECT_FALSE(StartOf(f.sched->Cycle(80), 4));
  r = f.sched->Cycle(122);
  ASSERT_TRUE(StartOf(r, 4));
  EXPECT_EQ(StartOf(r, 4)->layout_changes[0].mig_change, MigChange::kEnableMig);
}

// A fault cordons the GPU with its instances: nothing is placed on them. Healed, the GPU comes
// back with its layout (MIG mode survives a GPU reset; its free instances are made again as
// grants use them), so MIG work takes it without a mode change.
TEST(SchedulerMig, ACordonedMigGpuComesBackWithItsLayout) {
  MigFixture f(1);
  f.Submit(1, testing::Mig("3g.40gb"));
  ASSERT_TRUE(StartOf(f.sched->Cycle(0), 1));
  domain::Node node = testing::MakeNode({"n0", "H100-80GB", 1});
  node.gpus[0].healthy = false;
  ASSERT_TRUE(f.sched->UpdateNode(0, node).ok());
  f.sched->Finish(1, 10);
  f.Submit(2, testing::Mig("1g.10gb"));
  EXPECT_FALSE(StartOf(f.sched->Cycle(100), 2)) << "no instance of a cordoned GPU";
  node.gpus[0].healthy = true;
  ASSERT_TRUE(f.sched->UpdateNode(0, node).ok());
  EXPECT_TRUE(f.Gpu(0).mig_enabled);
  EXPECT_EQ(f.Gpu(0).mig.size(), 1u) << "its 3g.40gb, free";
  CycleResult r = f.sched->Cycle(110);
  ASSERT_TRUE(StartOf(r, 2));
  for (const DeviceGrant& c : StartOf(r, 2)->layout_changes) {
    EXPECT_FALSE(ReshapesGpu(c.mig_change)) << "placed in its layout, no mode change";
  }
}

// A restart: the agent registered the GPU in MIG mode and the scheduler took it out since (the
// registration is not updated for that). A job running whole there is adopted, not lost.
TEST(SchedulerMig, AWholeJobOnAGpuRegisteredInMigModeIsAdopted) {
  QuotaTree quotas;
  const int32_t tenant = quotas.AddNode("team", quotas.AddNode("org", -1));
  domain::Node node = testing::MakeNode({"n0", "H100-80GB", 1});
  node.gpus[0].mig_enabled = true;
  auto snap = Snapshot::Build(testing::TwoClusters(), {node}, domain::GpuCatalog::Builtin());
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  Scheduler sched(std::move(*snap), testing::MakeProfile({{"best-fit", 1}}), quotas, {}, 1);
  JobSpec j;
  j.id = 1;
  j.tenant = tenant;
  j.tasks = {testing::Whole(1)};
  Placement p;
  p.node = 0;
  p.devices = {{0, 1000, 0, -1, -1, MigChange::kNone}};
  base::Status s = sched.Adopt(j, {p}, 0);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(sched.snapshot().gpus[0].mig_enabled);
  EXPECT_EQ(sched.snapshot().AllocatedGpuMilli(), 1000);
}

TEST(SchedulerMig, WithoutAnIntervalLayoutsFollowDemandAtOnce) {
  SchedulerOptions o;
  o.mig_reconfigure_interval = 0;
  MigFixture f(1, o);
  f.Submit(1, testing::Mig("1g.10gb"));
  ASSERT_TRUE(StartOf(f.sched->Cycle(0), 1));
  EXPECT_FALSE(f.Gpu(0).mig_frozen);
  f.sched->Finish(1, 1);
  f.Submit(2, testing::Whole(1));
  ASSERT_TRUE(StartOf(f.sched->Cycle(1), 2));
}

// A property over random arrivals and departures of whole, fractional and MIG work on a small
// node: no layout change ever touches a GPU that holds running work, none comes sooner than the
// interval after the last on that GPU, and every MIG grant is a valid placement clear of the
// GPU's other instances; with preemption too (its searches try placements and give them back).
class SchedulerMigProperty : public ::testing::TestWithParam<bool> {};

TEST_P(SchedulerMigProperty, NoLayoutChangeTouchesRunningWorkOrComesTooSoon) {
  SchedulerOptions o;
  o.mig_reconfigure_interval = 60;
  o.await_stop_reports = true;  // as the server runs it: a victim holds its GPUs until it stops
  const bool preemption = GetParam();
  MigFixture f(4, o, preemption);
  base::Rng rng(7);
  const std::vector<TaskSpec> shapes = {testing::Mig("1g.10gb"), testing::Mig("2g.20gb"),
                                        testing::Mig("3g.40gb"), testing::Whole(1),
                                        testing::Whole(2),       testing::Fraction(300)};
  std::map<int64_t, std::vector<int32_t>> running;  // job -> its GPUs
  std::map<int32_t, double> last_change;
  int64_t next = 1;
  int changes = 0, preempted = 0;
  for (int step = 0; step < 600; ++step) {
    const double now = step * 5.0;
    for (int k = rng.Uniform(3); k > 0; --k) {
      f.Submit(next++, shapes[rng.Uniform(shapes.size())],
               preemption && rng.Uniform(4) == 0 ? 10 : 0);
    }
    // GPUs that held running work when this cycle began.
    std::set<int32_t> busy;
    for (const auto& [job, gpus] : running) busy.insert(gpus.begin(), gpus.end());
    const CycleResult r = f.sched->Cycle(now);
    for (const PreemptDecision& v : r.preempted) {
      ++preempted;
      f.sched->Evicted(v.job, now);
      running.erase(v.job);
    }
    for (const StartDecision& d : r.started) {
      for (const DeviceGrant& c : d.layout_changes) {
        if (!ReshapesGpu(c.mig_change)) continue;
        ++changes;
        EXPECT_FALSE(busy.count(c.gpu)) << "step " << step << ": GPU " << c.gpu << " held work";
        if (last_change.count(c.gpu)) {
          EXPECT_GE(now - last_change[c.gpu], 60.0) << "step " << step << ": GPU " << c.gpu;
        }
        last_change[c.gpu] = now;
      }
      for (const Placement& p : d.placements) {
        for (const DeviceGrant& g : p.devices) running[d.job].push_back(g.gpu);
      }
    }
    // MIG instances on each GPU are valid and disjoint.
    for (const GpuState& g : f.sched->snapshot().gpus) {
      uint32_t used = 0;
      for (const MigSlot& m : g.mig) {
        const uint32_t bits = ((1u << m.width) - 1) << m.start;
        EXPECT_EQ(used & bits, 0u) << "step " << step;
        used |= bits;
      }
    }
    // Some work ends.
    for (auto it = running.begin(); it != running.end();) {
      if (rng.Uniform(4) == 0) {
        f.sched->Finish(it->first, now + 1);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  EXPECT_GT(changes, 10) << "the workload should make the layout follow demand";
  if (preemption) EXPECT_GT(preempted, 5) << "high-priority work should preempt";
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutPreemption, SchedulerMigProperty, ::testing::Bool());

}  // namespace
}  // namespace meridian::sched
