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
    nodes_->OnOrders([this](const std::string& node, const std::string& cluster) {
      rung_.insert(node);
      clusters_.insert(cluster);
    });
  }
  std::set<std::string> Take() { return std::exchange(rung_, {}); }
  std::set<std::string> TakeClusters() { return std::exchange(clusters_, {}); }
  // A whole server restart: a node service and a controller afresh over the same store.
  void RestartServer() {
    controller_.reset();
    nodes_ = std::make_unique<NodeService>(counted_.get(), &clock_, &bus_);
    controller_ = std::make_unique<SchedulerController>(hooked_.get(), &clock_, &bus_, &metrics_,
                                                        nodes_.get());
    Listen();
  }
  std::set<std::string> rung_, clusters_;
};

// Each ring says the node's cluster, so that the cluster's bell rings with it (a Slurm connector
// waits on that one bell for all its nodes): from the registration, and after a restart from the
// stored node.
TEST_F(RungNodes, EachRingSaysItsNodesCluster) {
  Open(Estate(0));
  Listen();
  Register("n1");
  Round();
  const int64_t first = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(Phase(first), "Placed");
  EXPECT_EQ(Take(), std::set<std::string>{"n1"});
  EXPECT_EQ(TakeClusters(), std::set<std::string>{"onprem"});
  Cancel(first);
  Report("n1", "Exited", 143);
  Rounds();
  RestartServer();
  Round();
  Take();
  TakeClusters();
  const int64_t second = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(Phase(second), "Placed");
  EXPECT_EQ(Take(), std::set<std::string>{"n1"});
  EXPECT_EQ(TakeClusters(), std::set<std::string>{"onprem"}) << "from the node as stored";
}

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

// What a connector did on its own comes as notices in a heartbeat: each one an event of the node,
// a message cut at 1,024 bytes; a notice whose reason is not a word, or one past 32 in one
// heartbeat, is dropped, and the heartbeat is taken all the same.
class NodeNotices : public ControlPlane {};

TEST_F(NodeNotices, AreEventsOfTheNodeWithinBounds) {
  Open(Estate(0));
  Register("n1");
  Round();
  Json notices = Json::array();
  notices.push_back({{"reason", "BackendJobFenced"}, {"message", std::string(5000, 'x')}});
  // 1,023 bytes, then a 2-byte character across the cut: it goes whole.
  notices.push_back(
      {{"reason", "Cut"}, {"message", std::string(1023, 'y') + "\u00e9" + std::string(10, 'y')}});
  notices.push_back({{"reason", "Not a word!"}, {"message", "dropped"}});
  for (int i = 0; i < 40; ++i) {
    notices.push_back({{"reason", "Many"}, {"message", std::to_string(i)}});
  }
  auto r = nodes_->Heartbeat("n1", {{"notices", notices}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<std::string> fenced = EventsOf("Node", "n1", "BackendJobFenced");
  ASSERT_EQ(fenced.size(), 1u);
  EXPECT_EQ(fenced[0], std::string(1024, 'x'));
  EXPECT_EQ(EventsOf("Node", "n1", "Cut"), std::vector<std::string>{std::string(1023, 'y')});
  EXPECT_EQ(EventsOf("Node", "n1", "Many").size(), 30u);  // 32 in all
  EXPECT_TRUE(EventsOf("Node", "n1", "Not a word!").empty());
}

}  // namespace
}  // namespace meridian::server
