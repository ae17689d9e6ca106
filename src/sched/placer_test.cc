#include "sched/placer.h"

#include <gtest/gtest.h>

#include "sched/registry.h"
#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

using testing::Build;
using testing::MakeProfile;
using testing::NodeSpec;

// Placed, committed and settled, as a started job's placement is: a MIG layout it changed stays
// changed when it is given back.
PlaceOutcome PlaceAndCommit(Placer& p, const TaskSpec& t, CycleState* cycle) {
  PlaceOutcome o = p.Place(t, *cycle);
  if (o.placed) {
    p.Commit(t, o.placement, cycle);
    p.Settle(o.placement);
  }
  return o;
}

// Given back before it was settled (a gang placed in part, a trial, an explanation), a
// placement that switched an idle GPU to MIG mode takes the change back with it.
TEST(Placer, AnUnsettledLayoutChangeIsTakenBackWithItsPlacement) {
  Snapshot s = Build({{"n1", "H100-80GB", 1}});
  Profile prof = MakeProfile({{"best-fit", 1}}, DeviceChoice::kBestFit);
  Placer p(&s, &prof, 1);
  CycleState cycle;
  const TaskSpec small = testing::Mig("1g.10gb");
  PlaceOutcome a = p.Place(small, cycle);
  ASSERT_TRUE(a.placed);
  EXPECT_EQ(a.placement.devices[0].mig_change, MigChange::kEnableMig);
  p.Commit(small, a.placement, &cycle);
  EXPECT_TRUE(s.gpus[0].mig_enabled);
  p.Undo(small, a.placement);
  EXPECT_FALSE(s.gpus[0].mig_enabled);
  EXPECT_TRUE(s.gpus[0].mig.empty());
  EXPECT_TRUE(s.gpus[0].Idle());
  // Settled (started), it stays when the task ends.
  a = PlaceAndCommit(p, small, &cycle);
  p.Release(small, a.placement);
  EXPECT_TRUE(s.gpus[0].mig_enabled);
  EXPECT_EQ(s.gpus[0].mig.size(), 1u);
}

TEST(Placer, WholeGpusStayInOneNvlinkDomainWhenOneHoldsThem) {
  // Two NVLink domains of 4; domain 0 has one GPU taken, so a 3-GPU task fits domain 0 exactly
  // and a 4-GPU task must take domain 1 whole.
  Snapshot s = Build({{"n1", "H100-80GB", 8, 64000, 512 * 1024, "onprem", "r1", 4}});
  Profile prof = MakeProfile({{"best-fit", 1}, {"topology", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  ASSERT_TRUE(PlaceAndCommit(p, testing::Whole(1), &cycle).placed);
  PlaceOutcome o3 = PlaceAndCommit(p, testing::Whole(3), &cycle);
  ASSERT_TRUE(o3.placed);
  int16_t dom = s.gpus[o3.placement.devices[0].gpu].nvlink_domain;
  for (const DeviceGrant& d : o3.placement.devices) EXPECT_EQ(s.gpus[d.gpu].nvlink_domain, dom);
  PlaceOutcome o4 = PlaceAndCommit(p, testing::Whole(4), &cycle);
  ASSERT_TRUE(o4.placed);
  ASSERT_EQ(o4.placement.devices.size(), 4u);
  for (const DeviceGrant& d : o4.placement.devices) {
    EXPECT_NE(s.gpus[d.gpu].nvlink_domain, dom);
    EXPECT_EQ(d.milli, 1000);
  }
  // Nothing idle is left: a fifth whole GPU does not fit, and says why.
  PlaceOutcome none = p.Place(testing::Whole(1), cycle);
  EXPECT_FALSE(none.placed);
}

TEST(Placer, FractionsShareAGpuUpToItsCapacity) {
  Snapshot s = Build({{"n1", "A100-80GB", 1}});
  Profile prof = MakeProfile({{"best-fit", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  EXPECT_TRUE(PlaceAndCommit(p, testing::Fraction(600), &cycle).placed);
  EXPECT_TRUE(PlaceAndCommit(p, testing::Fraction(400), &cycle).placed);
  EXPECT_EQ(s.gpus[0].free_milli, 0);
  EXPECT_EQ(s.gpus[0].sharers, 2);
  EXPECT_FALSE(p.Place(testing::Fraction(1), cycle).placed);
}

TEST(Placer, GpuMemoryOfAFractionIsAccounted) {
  Snapshot s = Build({{"n1", "A100-80GB", 1}});
  Profile prof = MakeProfile({{"best-fit", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  // 60 GiB of 80 taken with little compute: a second 30 GiB fraction no longer fits.
  ASSERT_TRUE(PlaceAndCommit(p, testing::Fraction(100, 60 * 1024), &cycle).placed);
  EXPECT_FALSE(p.Place(testing::Fraction(100, 30 * 1024), cycle).placed);
  EXPECT_TRUE(p.Place(testing::Fraction(100, 20 * 1024), cycle).placed);
  // A memory-only request takes its share of compute in proportion: 40 GiB of 80 is 500 milli.
  Snapshot s2 = Build({{"n1", "A100-80GB", 1}});
  Placer p2(&s2, &prof, 1);
  PlaceOutcome o = PlaceAndCommit(p2, testing::Fraction(0, 40 * 1024), &cycle);
  ASSERT_TRUE(o.placed);
  EXPECT_EQ(o.placement.devices[0].milli, 500);
}

TEST(Placer, MigUsesExistingInstanceThenFreeSlicesThenEnablesMig) {
  Snapshot s = Build({{"n1", "H100-80GB", 2}});
  Profile prof = MakeProfile({{"best-fit", 1}}, DeviceChoice::kBestFit);
  Placer p(&s, &prof, 1);
  CycleState cycle;
  PlaceOutcome a = PlaceAndCommit(p, testing::Mig("3g.40gb"), &cycle);
  ASSERT_TRUE(a.placed);
  EXPECT_EQ(a.placement.devices[0].mig_change, MigChange::kEnableMig);
  EXPECT_EQ(a.placement.devices[0].mig_start, 0);
  // The second 3g.40gb goes into the free half of the same GPU: a new instance, not a new GPU.
  PlaceOutcome b = PlaceAndCommit(p, testing::Mig("3g.40gb"), &cycle);
  ASSERT_TRUE(b.placed);
  EXPECT_EQ(b.placement.devices[0].gpu, a.placement.devices[0].gpu);
  EXPECT_EQ(b.placement.devices[0].mig_change, MigChange::kCreateInstance);
  EXPECT_EQ(b.placement.devices[0].mig_start, 4);
  // Released, the instance stays and is reused as it is.
  p.Release(testing::Mig("3g.40gb"), b.placement);
  PlaceOutcome c = PlaceAndCommit(p, testing::Mig("3g.40gb"), &cycle);
  ASSERT_TRUE(c.placed);
  EXPECT_EQ(c.placement.devices[0].mig_change, MigChange::kNone);
  EXPECT_EQ(c.placement.devices[0].mig_start, 4);
  // A MIG GPU is no longer offered to whole or fractional requests.
  PlaceOutcome w = PlaceAndCommit(p, testing::Whole(1), &cycle);
  ASSERT_TRUE(w.placed);
  EXPECT_NE(w.placement.devices[0].gpu, a.placement.devices[0].gpu);
  EXPECT_FALSE(p.Place(testing::Fraction(100), cycle).placed);
  // A profile the model does not have never fits.
  EXPECT_FALSE(p.Place(testing::Mig("3g.20gb"), cycle).placed);
}

TEST(Placer, MigGpuWithNoInstanceInUseIsRepartitioned) {
  Snapshot s = Build({{"n1", "A100-40GB", 1}});
  Profile prof = MakeProfile({{"best-fit", 1}}, DeviceChoice::kBestFit);
  Placer p(&s, &prof, 1);
  CycleState cycle;
  TaskSpec small = testing::Mig("1g.5gb");
  PlaceOutcome a = PlaceAndCommit(p, small, &cycle);
  ASSERT_TRUE(a.placed);
  p.Release(small, a.placement);
  // A 7g.40gb needs all slices; the idle 1g instance is destroyed for it.
  PlaceOutcome b = PlaceAndCommit(p, testing::Mig("7g.40gb"), &cycle);
  ASSERT_TRUE(b.placed);
  EXPECT_EQ(b.placement.devices[0].mig_change, MigChange::kRepartition);
  EXPECT_EQ(s.gpus[0].mig.size(), 1u);
  EXPECT_EQ(s.gpus[0].mig_used, 0xFF);
}

// A GPU partitioned for a short MIG job goes back to a whole GPU once its instances are idle
// and whole-GPU work needs it; not while an instance is in use, and not while a GPU that is
// already whole would do.
TEST(Placer, AnIdleMigGpuGoesBackToWholeForWholeGpuWork) {
  Snapshot s = Build({{"n1", "H100-80GB", 2}});
  Profile prof = MakeProfile({{"best-fit", 1}}, DeviceChoice::kBestFit);
  Placer p(&s, &prof, 1);
  CycleState cycle;
  PlaceOutcome mig = PlaceAndCommit(p, testing::Mig("1g.10gb"), &cycle);
  ASSERT_TRUE(mig.placed);
  const int32_t partitioned = mig.placement.devices[0].gpu;
  EXPECT_FALSE(p.Place(testing::Whole(2), cycle).placed) << "its instance is in use";
  PlaceOutcome one = p.Place(testing::Whole(1), cycle);
  ASSERT_TRUE(one.placed);
  EXPECT_NE(one.placement.devices[0].gpu, partitioned);
  EXPECT_EQ(one.placement.devices[0].mig_change, MigChange::kNone);
  p.Release(testing::Mig("1g.10gb"), mig.placement);
  // One GPU is whole already: a one-GPU task takes it and leaves the partition alone.
  one = p.Place(testing::Whole(1), cycle);
  ASSERT_TRUE(one.placed);
  EXPECT_EQ(one.placement.devices[0].mig_change, MigChange::kNone);
  // A two-GPU task needs both: the idle partition is undone for it.
  PlaceOutcome both = PlaceAndCommit(p, testing::Whole(2), &cycle);
  ASSERT_TRUE(both.placed);
  int disabled = 0;
  for (const DeviceGrant& d : both.placement.devices) {
    if (d.mig_change != MigChange::kDisableMig) continue;
    ++disabled;
    EXPECT_EQ(d.gpu, partitioned);
  }
  EXPECT_EQ(disabled, 1);
  EXPECT_FALSE(s.gpus[partitioned].mig_enabled);
  EXPECT_TRUE(s.gpus[partitioned].mig.empty());
  EXPECT_EQ(s.GpuAllocatedMilli(partitioned), 1000);
  p.Release(testing::Whole(2), both.placement);
  EXPECT_TRUE(s.gpus[partitioned].Idle()) << "whole again, and free";
}

// One account of capacity: a MIG slice counts as its share, an unschedulable node as nothing
// free.
TEST(Placer, CapacityIsCountedOneWay) {
  Snapshot s = Build({{"n1", "H100-80GB", 1}, {"n2", "H100-80GB", 1}});
  Profile prof = MakeProfile({{"best-fit", 1}}, DeviceChoice::kBestFit);
  Placer p(&s, &prof, 1);
  CycleState cycle;
  PlaceOutcome mig = PlaceAndCommit(p, testing::Mig("3g.40gb"), &cycle);
  ASSERT_TRUE(mig.placed);
  const int32_t g = mig.placement.devices[0].gpu;
  const int32_t node = mig.placement.node;
  EXPECT_EQ(s.GpuAllocatedMilli(g), 500) << "4 of 8 memory slices";
  EXPECT_EQ(s.GpuFreeMilli(node, g), 500);
  s.nodes[static_cast<size_t>(node)].schedulable = false;
  EXPECT_EQ(s.GpuFreeMilli(node, g), 0) << "a lost or cordoned node has nothing free";
  EXPECT_EQ(s.AllocatedGpuMilli(), 500);
}

TEST(Placer, ConstraintsAreFiltersWithReasons) {
  Snapshot s = Build({{"a", "H100-80GB", 8, 64000, 512 * 1024, "onprem"},
                      {"b", "A100-80GB", 8, 64000, 512 * 1024, "cloud"}});
  s.nodes[0].labels = {{"tier", "gold"}};
  s.nodes[1].taints = {{"spot", "true"}};
  Profile prof = MakeProfile({{"best-fit", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  struct Case {
    const char* name;
    TaskSpec task;
    int want_node;  // -1: unschedulable
    const char* reason;
  };
  TaskSpec on_prem = testing::Whole(1);
  on_prem.allowed_clusters = Bit(0);
  TaskSpec a100 = testing::Whole(1);
  a100.allowed_models = Bit(s.FindModel("A100-80GB"));
  TaskSpec a100_tolerating = a100;
  a100_tolerating.tolerations = {{"spot", ""}};
  TaskSpec silver = testing::Whole(1);
  silver.node_selector = {{"tier", "silver"}};
  TaskSpec huge_cpu = testing::Whole(1, 1000000);
  TaskSpec no_model = testing::Whole(1);
  no_model.allowed_models = 0;
  const Case cases[] = {
      {"cluster constraint", on_prem, 0, nullptr},
      {"untolerated taint", a100, -1, "1 node with untolerated taint spot=true"},
      {"tolerated taint", a100_tolerating, 1, nullptr},
      {"label selector", silver, -1, "2 nodes without label tier=silver"},
      {"too much cpu", huge_cpu, -1, "node-resources"},
      {"no allowed model", no_model, -1, nullptr},
  };
  for (const Case& c : cases) {
    PlaceOutcome o = p.Place(c.task, cycle);
    if (c.want_node < 0) {
      EXPECT_FALSE(o.placed) << c.name;
      if (c.reason) {
        EXPECT_NE(o.why.Summary().find(c.reason), std::string::npos)
            << c.name << ": " << o.why.Summary();
      }
    } else {
      ASSERT_TRUE(o.placed) << c.name;
      EXPECT_EQ(o.placement.node, c.want_node) << c.name;
    }
  }
}

TEST(Placer, RemembersInfeasibleShapesUntilCapacityIsReleased) {
  Snapshot s = Build({{"n1", "H100-80GB", 2}});
  Profile prof = MakeProfile({{"best-fit", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  PlaceOutcome held = PlaceAndCommit(p, testing::Whole(2), &cycle);
  ASSERT_TRUE(held.placed);
  PlaceOutcome first = p.Place(testing::Whole(1), cycle);
  EXPECT_FALSE(first.placed);
  PlaceOutcome again = p.Place(testing::Whole(1), cycle);
  EXPECT_FALSE(again.placed);
  EXPECT_TRUE(again.why.cached);
  EXPECT_EQ(p.cache_hits(), 1);
  // The remembered answer still says why, as the first one did.
  EXPECT_EQ(again.why.Summary(), first.why.Summary());
  p.Release(testing::Whole(2), held.placement);
  EXPECT_TRUE(p.Place(testing::Whole(1), cycle).placed);
}

// A gang that fits in part is placed and taken back: that is no release, so what was known to
// fit nowhere still is, and nothing is learnt while the trial holds capacity.
TEST(Placer, AnUndoneTrialReleasesNothingAndTeachesNothing) {
  Snapshot s = Build({{"n1", "H100-80GB", 2}, {"n2", "H100-80GB", 2}});
  Profile prof = MakeProfile({{"best-fit", 1}});
  Placer p(&s, &prof, 1);
  CycleState cycle;
  ASSERT_TRUE(PlaceAndCommit(p, testing::Whole(2), &cycle).placed);
  EXPECT_FALSE(p.Place(testing::Whole(3), cycle).placed);
  const uint64_t before = p.version();

  p.BeginTrial();
  PlaceOutcome part = PlaceAndCommit(p, testing::Whole(1), &cycle);
  ASSERT_TRUE(part.placed);
  EXPECT_NE(p.version(), before);
  // With one GPU of n2 held by the trial, two whole GPUs fit nowhere: not to be remembered.
  EXPECT_FALSE(p.Place(testing::Whole(2), cycle).placed);
  p.Undo(testing::Whole(1), part.placement);
  p.EndTrial();

  EXPECT_EQ(p.version(), before) << "the snapshot is as it was";
  const int64_t hits = p.cache_hits();
  PlaceOutcome again = p.Place(testing::Whole(3), cycle);
  EXPECT_FALSE(again.placed);
  EXPECT_TRUE(again.why.cached) << "the undone trial released nothing";
  EXPECT_EQ(p.cache_hits(), hits + 1);
  PlaceOutcome two = p.Place(testing::Whole(2), cycle);
  EXPECT_TRUE(two.placed) << "what failed inside the trial was not remembered";

  // Outside a trial, the same placement taken back is a release: the answer is asked afresh.
  PlaceOutcome one = PlaceAndCommit(p, testing::Whole(1), &cycle);
  ASSERT_TRUE(one.placed);
  p.Release(testing::Whole(1), one.placement);
  EXPECT_NE(p.version(), before);
  EXPECT_FALSE(p.Place(testing::Whole(3), cycle).why.cached);
}

// What was learnt keeping off the reserved nodes holds only for that reservation; what was
// learnt with the reservation ignored holds through its changes.
TEST(Placer, AnswersKeepingOffAReservationAreForgottenWhenItChanges) {
  Snapshot s = Build({{"n1", "H100-80GB", 2}, {"n2", "H100-80GB", 2}});
  ProfileSpec spec;
  spec.name = "reserving";
  spec.filters = {"node-resources", "reservation"};
  spec.scores = {{"best-fit", 1}};
  auto built = BuiltinRegistry().Build(spec, PluginArgs{});
  ASSERT_TRUE(built.ok()) << built.status().message();
  Profile prof = std::move(*built);
  Placer p(&s, &prof, 1);
  CycleState cycle;
  cycle.reserved_nodes = {1, 1};
  cycle.avoid_reserved = true;
  EXPECT_FALSE(p.Place(testing::Whole(1), cycle).placed) << "both nodes are reserved";
  cycle.avoid_reserved = false;
  EXPECT_FALSE(p.Place(testing::Whole(3), cycle).placed) << "no node has three GPUs";
  EXPECT_TRUE(p.Place(testing::Whole(1), cycle).placed) << "the other answer is not this one's";
  cycle.avoid_reserved = true;
  EXPECT_TRUE(p.Place(testing::Whole(1), cycle).why.cached);
  cycle.reserved_nodes = {1, 0};
  p.ReservationChanged();
  EXPECT_TRUE(p.Place(testing::Whole(1), cycle).placed) << "n2 is no longer reserved";
  cycle.avoid_reserved = false;
  EXPECT_TRUE(p.Place(testing::Whole(3), cycle).why.cached);
}

TEST(Placer, CostAndLocalityChooseTheCluster) {
  Snapshot s = Build({{"cheap", "H100-80GB", 8, 64000, 512 * 1024, "onprem"},
                      {"dear", "H100-80GB", 8, 64000, 512 * 1024, "cloud"}});
  Profile cost = MakeProfile({{"cost", 1}});
  Placer p(&s, &cost, 1);
  CycleState cycle;
  EXPECT_EQ(p.Place(testing::Whole(1), cycle).placement.node, 0);
  // The dataset lives on-prem too; a task that names it goes there even when cost does not count.
  Profile local = MakeProfile({{"data-locality", 1}});
  Placer q(&s, &local, 1);
  TaskSpec t = testing::Whole(1);
  t.datasets = {s.FindDataset("imagenet")};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.Place(t, cycle).placement.node, 0);
}

TEST(Placer, GroupsStayOnTheirRack) {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 8; ++i) {
    nodes.push_back({"n" + std::to_string(i), "H100-80GB", 8, 64000, 512 * 1024, "onprem",
                     "rack" + std::to_string(i % 4)});
  }
  Snapshot s = Build(nodes);
  Profile prof = MakeProfile({{"topology", 1}});
  Placer p(&s, &prof, 7);
  CycleState cycle;
  TaskSpec t = testing::Whole(8);
  t.group = 1;
  PlaceOutcome first = PlaceAndCommit(p, t, &cycle);
  ASSERT_TRUE(first.placed);
  PlaceOutcome second = PlaceAndCommit(p, t, &cycle);
  ASSERT_TRUE(second.placed);
  EXPECT_EQ(s.nodes[first.placement.node].rack, s.nodes[second.placement.node].rack);
}

TEST(Placer, IndexedSearchStopsEarlyButStillFindsRareFits) {
  // 200 nodes with one idle GPU each and a single node with 8: an 8-GPU task must find it even
  // though the search stops after 4 feasible nodes.
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 200; ++i) nodes.push_back({"s" + std::to_string(i), "T4", 1});
  nodes.push_back({"big", "H100-80GB", 8});
  Snapshot s = Build(nodes);
  Profile prof = MakeProfile({{"best-fit", 1}}, DeviceChoice::kBestFit, nullptr, 4);
  Placer p(&s, &prof, 1);
  CycleState cycle;
  PlaceOutcome big = p.Place(testing::Whole(8), cycle);
  ASSERT_TRUE(big.placed);
  EXPECT_EQ(big.placement.node, 200);
  EXPECT_EQ(big.why.nodes_considered, 1);  // the index offered the one node with 8 idle GPUs
  PlaceOutcome small = p.Place(testing::Whole(1), cycle);
  ASSERT_TRUE(small.placed);
  EXPECT_LE(small.why.nodes_considered, 4);
}

}  // namespace
}  // namespace meridian::sched
