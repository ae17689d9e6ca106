// Which nodes the node service rings (api/doorbells.h): those whose orders changed, and only
// those, so that agents heartbeat at once for new work and stay quiet otherwise.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using testing::ControlPlane;
using testing::Estate;

class RungNodes : public ControlPlane {
 protected:
  void Listen() {
    nodes_->OnOrders([this](const std::string& node) { rung_.insert(node); });
  }
  std::set<std::string> Take() { return std::exchange(rung_, {}); }
  std::set<std::string> rung_;
};

TEST_F(RungNodes, ANodeIsRungWhenATaskIsPlacedOrToldToStopNotWhenItRuns) {
  Open(Estate(0));
  Listen();
  Register("n1");
  Register("n2");
  Round();
  Take();
  const int64_t job = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(Phase(job), "Placed");
  const std::string node = NodeOf(job);
  EXPECT_EQ(Take(), std::set<std::string>{node}) << "placed: its node only";

  Report(node, "Running");
  Rounds();
  ASSERT_EQ(Phase(job), "Running");
  EXPECT_EQ(Take(), std::set<std::string>{}) << "running changes no order";

  Cancel(job);
  Rounds();
  ASSERT_EQ(Phase(job), "Stopping");
  EXPECT_EQ(Take(), std::set<std::string>{node}) << "told to stop";
  clock_.Advance(1);
  Rounds();
  EXPECT_EQ(Take(), std::set<std::string>{}) << "a cycle while it stops changes nothing";

  Report(node, "Exited", 143);
  Rounds();
  ASSERT_EQ(Phase(job), "Cancelled");
  EXPECT_EQ(Take(), std::set<std::string>{node}) << "gone from its list";
}

TEST_F(RungNodes, ARebuildRingsOnlyTheNodesWhoseOrdersItChanged) {
  Open(Estate(0));
  Listen();
  Register("n1");
  Register("n2");
  Round();
  const int64_t job = Submit("p1", {{"gpus", 8}});
  Rounds();
  Report(NodeOf(job), "Running");
  Rounds();
  Take();
  Restart();  // a new controller rebuilds everything from the store
  Rounds();
  EXPECT_EQ(Take(), std::set<std::string>{}) << "the same orders as before";
}

}  // namespace
}  // namespace meridian::server
