#include "sched/plugins/reservation/reservation.h"

#include <gtest/gtest.h>

#include "sched/testing/estate.h"

namespace meridian::sched::plugins {
namespace {

TEST(Reservation, KeepsLongTasksOffReservedNodes) {
  Snapshot s = testing::Build({{"a", "H100-80GB", 8}, {"b", "H100-80GB", 8}});
  CycleState cycle;
  TaskSpec t = testing::Whole(1);
  PluginContext ctx{s, t, cycle};
  Reservation r;
  EXPECT_TRUE(r.Filter(ctx, s.nodes[0]));  // no reservation
  cycle.reserved_nodes = {1, 0};
  EXPECT_TRUE(r.Filter(ctx, s.nodes[0])) << "a task that ends in time may use reserved nodes";
  cycle.avoid_reserved = true;
  EXPECT_FALSE(r.Filter(ctx, s.nodes[0]));
  EXPECT_TRUE(r.Filter(ctx, s.nodes[1]));
}

}  // namespace
}  // namespace meridian::sched::plugins
