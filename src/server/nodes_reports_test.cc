// What the node service does with the tasks a heartbeat reports: a report that says what the
// job's record already says takes no store transaction (at 10,000 agents, most heartbeats say
// only that their tasks still run), and every report that changes something is still applied,
// also after many that changed nothing.
#include <gtest/gtest.h>

#include <string>

#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using testing::ControlPlane;
using testing::Estate;

class TaskReports : public ControlPlane {
 protected:
  // Registers n1, places a one-task job there and has it reported running.
  int64_t RunningJob() {
    Open(Estate(0));
    Register("n1");
    Round();
    const int64_t job = Submit("p1", {{"gpus", 8}});
    Rounds();
    EXPECT_EQ(NodeOf(job), "n1");
    Report("n1", "Running");
    Rounds();
    EXPECT_EQ(Phase(job), "Running");
    return job;
  }
  Json Said(int64_t job, const std::string& state, int64_t restarts = 0) {
    Json r = {{"job", job}, {"task", 0}, {"generation", Get(job).generation}, {"state", state}};
    if (restarts > 0) r["restarts"] = restarts;
    if (state == "Exited") r["exitCode"] = 0;
    return Json::array({r});
  }
  // Store transactions the node service began for one heartbeat.
  int WritesOf(const Json& tasks) {
    const int before = counted_->writes;
    Heartbeat("n1", tasks);
    return counted_->writes - before;
  }
};

TEST_F(TaskReports, ThatChangeNothingTakeNoTransaction) {
  const int64_t job = RunningJob();
  // The first says nothing new, which the service learns from the store.
  EXPECT_LE(WritesOf(Said(job, "Running")), 1);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(WritesOf(Said(job, "Running")), 0) << "heartbeat " << i;
  }
  EXPECT_EQ(Phase(job), "Running");
}

TEST_F(TaskReports, ThatChangeSomethingAreAppliedAfterManyThatDidNot) {
  const int64_t job = RunningJob();
  for (int i = 0; i < 3; ++i) Heartbeat("n1", Said(job, "Running"));
  EXPECT_EQ(WritesOf(Said(job, "Running", 1)), 1) << "a restart is news";
  Rounds();
  EXPECT_EQ(Events(job, "Restarted").size(), 1u);
  for (int i = 0; i < 3; ++i) Heartbeat("n1", Said(job, "Running", 1));
  Heartbeat("n1", Said(job, "Exited"));
  Rounds();
  EXPECT_EQ(Phase(job), "Succeeded");
}

TEST_F(TaskReports, ThatChangedNothingAreReadAgainOnceTheJobChanged) {
  const int64_t job = RunningJob();
  for (int i = 0; i < 3; ++i) Heartbeat("n1", Said(job, "Running"));
  Cancel(job);
  Rounds();
  ASSERT_EQ(Phase(job), "Stopping");
  // The job is another version now: what its task reports is read against that one.
  EXPECT_EQ(WritesOf(Said(job, "Running")), 1);
  EXPECT_EQ(WritesOf(Said(job, "Running")), 0);
  Heartbeat("n1", Said(job, "Exited"));
  Rounds();
  EXPECT_EQ(Phase(job), "Cancelled");
}

}  // namespace
}  // namespace meridian::server
