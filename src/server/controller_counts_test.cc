// The counts the controller shows of its jobs (/metrics' queue depth, oldest pending job and
// jobs by phase; the alert rules' oldest pending job) follow every change of every job: they
// are kept as jobs change rather than counted at each cycle.
#include <gtest/gtest.h>

#include <string>

#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using testing::ControlPlane;
using testing::Estate;

class JobCounts : public ControlPlane {
 protected:
  // A series' value on /metrics; -1 when it is not there.
  double Series(const std::string& series) {
    const std::string text = metrics_.Render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + 1 + series.size() + 1));
  }
  double Jobs(const std::string& phase) { return Series("meridian_jobs{phase=\"" + phase + "\"}"); }
  double Depth(const std::string& project) {
    return Series("meridian_queue_depth{project=\"" + project + "\"}");
  }
};

TEST_F(JobCounts, FollowEveryJobThroughItsLife) {
  Open(Estate(0));
  Register("n1");
  Round();
  // One node of 8 GPUs and three whole-node jobs of one project, 2 s apart (the node heartbeats
  // meanwhile): the first runs.
  const int64_t a = Submit("p1", {{"gpus", 8}});
  clock_.Advance(2);
  Heartbeat("n1");
  const int64_t b = Submit("p1", {{"gpus", 8}});
  clock_.Advance(2);
  Heartbeat("n1");
  const int64_t c = Submit("p1", {{"gpus", 8}});
  Rounds();
  ASSERT_EQ(Phase(a), "Placed");
  EXPECT_EQ(Jobs("Placed"), 1);
  EXPECT_EQ(Jobs("Pending"), 2);
  EXPECT_EQ(Depth("p1"), 2);

  clock_.Advance(1);
  Report("n1", "Running");
  Rounds();
  EXPECT_EQ(Jobs("Running"), 1);
  EXPECT_EQ(Jobs("Placed"), -1) << "no placed job left: its series goes";
  EXPECT_DOUBLE_EQ(controller_->OldestPending().at("p1"), 3) << "b, submitted 3 s ago";

  Cancel(a);
  Rounds();
  EXPECT_EQ(Jobs("Stopping"), 1);
  EXPECT_EQ(Jobs("Running"), -1);
  Report("n1", "Exited", 143);
  Rounds();
  ASSERT_EQ(Phase(a), "Cancelled");
  ASSERT_EQ(Phase(b), "Placed") << "the node is free again";
  EXPECT_EQ(Jobs("Stopping"), -1) << "cancelled: no longer a job the controller holds";
  EXPECT_EQ(Jobs("Placed"), 1);
  EXPECT_EQ(Jobs("Pending"), 1);
  EXPECT_EQ(Depth("p1"), 1);
  EXPECT_DOUBLE_EQ(controller_->OldestPending().at("p1"), 1) << "c, submitted 1 s ago";
  EXPECT_EQ(Phase(c), "Pending");
}

}  // namespace
}  // namespace meridian::server
