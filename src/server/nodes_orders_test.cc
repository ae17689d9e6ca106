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
