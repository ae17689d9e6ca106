// Job arrays' %N limit and dependencies under the controller (controller_gate.cc), over the
// control plane without processes (server/testing/control_plane.h).
#include <gtest/gtest.h>

#include "api/job_life.h"
#include "server/controller.h"
#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using testing::ControlPlane;
using testing::Estate;

class Gates : public ControlPlane {
 protected:
  // The one task listed for `node` is given back by its runner, never started (as the Slurm
  // connector gives back a job Slurm keeps pending for a limit placement cannot see).
  void Refuse(const std::string& node) {
    Json reports = Json::array();
    for (const Json& a : Heartbeat(node)) {
      reports.push_back({{"job", a["job"]},
                         {"task", a["task"]},
                         {"generation", a["generation"]},
                         {"state", "Exited"},
                         {"refused", true},
                         {"message", "Slurm kept it pending (QOSMaxGRESPerUser)"}});
    }
    ASSERT_EQ(reports.size(), 1u);
    Heartbeat(node, reports);
  }
  // As the API submits an array: every element in one transaction, the first one's id the
  // array's. Returns the elements' ids by index.
  std::vector<int64_t> SubmitArray(const std::string& project, Json spec, int64_t count) {
    std::vector<int64_t> ids;
    EXPECT_TRUE(store_
                    ->Write([&](store::Tx& tx) {
                      for (int64_t i = 0; i < count; ++i) {
                        store::JobRecord j;
                        j.name = "array";
                        j.project = project;
                        j.user = "alice";
                        j.spec = spec;
                        j.submitted_at = j.updated_at = clock_.Now();
                        j.version = 1;
                        j.array_id = i == 0 ? store::kNewArray : ids.front();
                        j.array_index = i;
                        auto id = tx.InsertJob(j);
                        if (!id.ok()) return id.status();
                        ids.push_back(*id);
                        auto e = tx.AppendEvent({0, clock_.Now(), "Job", std::to_string(*id),
                                                 project, "Normal", "Submitted", "submitted"});
                        if (!e.ok()) return e.status();
                      }
                      return base::Status::Ok();
                    })
                    .ok());
    return ids;
  }
  int64_t Holding(const std::vector<int64_t>& ids) {
    int64_t n = 0;
    for (int64_t id : ids) {
      const std::string p = Phase(id);
      n += p == "Placed" || p == "Running" || p == "Stopping";
    }
    return n;
  }
};

// An array of ten one-GPU elements with %2 on a node with eight free GPUs: never more than two
// hold GPUs, the lowest indices first, each knowing its index, until every element has run.
TEST_F(Gates, AnArraysLimitHoldsUnderTheScheduler) {
  Open(Estate(0));
  Register("n1");
  Round();
  const std::vector<int64_t> ids =
      SubmitArray("p1", {{"gpus", 1}, {"command", {"true"}}, {"array", "0-9%2"}}, 10);
  ASSERT_EQ(ids.size(), 10u);
  EXPECT_EQ(Get(ids[3]).array_id, ids[0]);
  Rounds();
  EXPECT_EQ(Holding(ids), 2);
  EXPECT_EQ(Phase(ids[0]), "Placed");
  EXPECT_EQ(Phase(ids[1]), "Placed");
  EXPECT_NE(controller_->PendingReason(ids[2]).find("limit %2"), std::string::npos)
      << controller_->PendingReason(ids[2]);
  // The agent is told each element's array and index (MERIDIAN_ARRAY_INDEX).
  for (const Json& a : Heartbeat("n1")) {
    EXPECT_EQ(a.value("arrayId", int64_t{0}), ids[0]);
    EXPECT_EQ(a.value("arrayIndex", int64_t{-1}), a["job"].get<int64_t>() - ids[0]);
  }
  int64_t most = 0;
  for (int round = 0; round < 20; ++round) {
    Report("n1", "Running");
    most = std::max(most, Holding(ids));
    Report("n1", "Exited", 0);
    Rounds();
    most = std::max(most, Holding(ids));
  }
  EXPECT_EQ(most, 2);
  for (int64_t id : ids) EXPECT_EQ(Phase(id), "Succeeded") << id;
}

// Each element is charged to its project's quota like any job: an array without a limit of its
// own gets no more than the quota lets through, and the others wait for the quota.
TEST_F(Gates, ElementsAreChargedToTheirProjectsQuota) {
  std::vector<store::Object> docs = Estate(0);
  docs.push_back(testing::Doc("Quota", "p1-cap", {{"project", "p1"}, {"limitGpus", 3}}));
  Open(docs);
  Register("n1");
  Round();
  const std::vector<int64_t> ids =
      SubmitArray("p1", {{"gpus", 1}, {"command", {"true"}}, {"array", "0-9"}}, 10);
  Rounds();
  EXPECT_EQ(Holding(ids), 3);
  EXPECT_NE(controller_->PendingReason(ids[9]).find("quota of p1"), std::string::npos)
      << controller_->PendingReason(ids[9]);
}

// A preempted element goes back to the queue keeping its place under %N: the array's next
// element does not start on the GPUs that another node frees meanwhile.
TEST_F(Gates, APreemptedElementKeepsItsPlaceUnderTheLimit) {
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  const std::vector<int64_t> ids = SubmitArray(
      "p1", {{"gpus", 8}, {"priorityClass", "low"}, {"command", {"true"}}, {"array", "0-2%1"}}, 3);
  const int64_t other = Submit("p1", {{"gpus", 8}, {"priorityClass", "low"}});
  Rounds();
  ASSERT_EQ(Phase(ids[0]), "Placed");
  ASSERT_EQ(Phase(other), "Placed");
  Report("n1", "Running");
  Report("n2", "Running");
  Pass(60, {"n1", "n2"});
  const int64_t high = Submit("p2", {{"gpus", 8}, {"priorityClass", "high"}});
  const int64_t victim = [&] {
    for (int i = 0; i < 10; ++i) {
      Round();
      clock_.Advance(2);
      if (Phase(ids[0]) == "Stopping") return ids[0];
      if (Phase(other) == "Stopping") return other;
    }
    return int64_t{0};
  }();
  ASSERT_NE(victim, 0);
  Report(NodeOf(victim), "Exited", 143);
  Rounds();
  EXPECT_EQ(Phase(high), "Placed");
  if (victim == ids[0]) {
    EXPECT_EQ(Phase(ids[0]), "Pending") << "requeued";
  } else {
    EXPECT_EQ(Phase(ids[0]), "Running") << "the other job was the victim";
  }
  EXPECT_EQ(Phase(ids[1]), "Pending");
  EXPECT_EQ(Phase(ids[2]), "Pending");
  // Both nodes free now: one element, and only one, holds GPUs.
  Report("n1", "Exited", 143);
  Report("n2", "Exited", 143);
  Rounds();
  EXPECT_EQ(Holding(ids), 1);
}

// afterok waits, then lets its job run; afternotok on a job that succeeded fails, with the
// reason in an event; both survive a restart of the server (they are in the stored spec).
TEST_F(Gates, DependenciesWaitThenRunOrFailAndSurviveARestart) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t first = Submit("p1", {{"gpus", 1}, {"command", {"true"}}});
  const std::string dep = std::to_string(first);
  const int64_t ok = Submit("p1", {{"gpus", 1}, {"dependencies", {"afterok:" + dep}}});
  const int64_t notok = Submit("p1", {{"gpus", 1}, {"dependencies", {"afternotok:" + dep}}});
  Rounds();
  EXPECT_EQ(Phase(first), "Placed");
  EXPECT_EQ(Phase(ok), "Pending") << "seven GPUs are free, but its dependency has not ended";
  EXPECT_NE(controller_->PendingReason(ok).find("waiting for dependency afterok:" + dep),
            std::string::npos)
      << controller_->PendingReason(ok);
  Restart();
  Rounds();
  EXPECT_EQ(Phase(ok), "Pending");
  EXPECT_EQ(Phase(notok), "Pending");
  EXPECT_NE(controller_->PendingReason(notok).find("afternotok:" + dep), std::string::npos);
  Report("n1", "Running");
  Report("n1", "Exited", 0);
  ASSERT_EQ(Phase(first), "Succeeded");
  Rounds();
  EXPECT_EQ(Phase(ok), "Placed");
  const store::JobRecord failed = Get(notok);
  EXPECT_EQ(failed.phase, "Failed");
  EXPECT_NE(failed.reason.find("can never be satisfied: the job succeeded"), std::string::npos)
      << failed.reason;
  EXPECT_EQ(failed.status.value("cause", ""), "dependency");
  EXPECT_EQ(Events(notok, "DependencyNeverSatisfied").size(), 1u);
}

// aftercorr: element i of the second array waits for element i of the first alone; an element
// whose partner failed fails, the others run.
TEST_F(Gates, AftercorrPairsElementsByIndex) {
  Open(Estate(0));
  Register("n1");
  Round();
  const std::vector<int64_t> a =
      SubmitArray("p1", {{"gpus", 1}, {"command", {"true"}}, {"array", "0-2"}}, 3);
  const std::vector<int64_t> b =
      SubmitArray("p1",
                  {{"gpus", 1},
                   {"command", {"true"}},
                   {"array", "0-2"},
                   {"dependencies", {"aftercorr:" + std::to_string(a[0])}}},
                  3);
  Rounds();
  for (int64_t id : b) EXPECT_EQ(Phase(id), "Pending");
  ReportJob("n1", a[0], "Exited", 0);
  ReportJob("n1", a[1], "Exited", 1);
  Rounds();
  EXPECT_EQ(Phase(b[0]), "Placed");
  EXPECT_EQ(Phase(b[1]), "Failed");
  EXPECT_EQ(Phase(b[2]), "Pending") << "element 2 of the first array still runs";
}

// Cancelling one element leaves the others; the limit lets the next one in.
TEST_F(Gates, CancellingOneElementLetsTheNextIn) {
  Open(Estate(0));
  Register("n1");
  Round();
  const std::vector<int64_t> ids =
      SubmitArray("p1", {{"gpus", 1}, {"command", {"true"}}, {"array", "0-3%1"}}, 4);
  Rounds();
  ASSERT_EQ(Phase(ids[0]), "Placed");
  Cancel(ids[1]);  // pending: ends at once
  Cancel(ids[0]);  // placed: stops first
  Rounds();
  EXPECT_EQ(Phase(ids[1]), "Cancelled");
  EXPECT_EQ(Phase(ids[0]), "Stopping");
  EXPECT_EQ(Holding(ids), 1) << "the stopping element still holds its GPU";
  Report("n1", "Exited", 143);
  Rounds();
  EXPECT_EQ(Phase(ids[0]), "Cancelled");
  EXPECT_EQ(Phase(ids[2]), "Placed");
  EXPECT_EQ(Phase(ids[3]), "Pending");
}

// A job its runner gives back again and again (a Slurm limit placement cannot see) is held out of
// the queue for its back-off, saying until when, and placed again once it is over; a server
// restarted meanwhile (a rebuild) keeps holding it.
TEST_F(Gates, AJobGivenBackAgainAndAgainWaitsOutItsBackOff) {
  Open(Estate(0));
  Register("n1");
  Round();
  const int64_t id = Submit("p1", {{"gpus", 8}});
  auto refuse = [&] { Refuse("n1"); };
  Rounds();
  ASSERT_EQ(Phase(id), "Placed");
  refuse();
  ASSERT_EQ(Phase(id), "Pending");
  Rounds();
  ASSERT_EQ(Phase(id), "Placed") << "the first is placed again at once";
  refuse();
  ASSERT_EQ(Phase(id), "Pending");
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(5);
    Heartbeat("n1");
    Round();
    EXPECT_EQ(Phase(id), "Pending") << "within its 30 s";
  }
  EXPECT_NE(controller_->PendingReason(id).find(
                "given back 2 times in a row: not placed again for 30 s (until "),
            std::string::npos)
      << controller_->PendingReason(id);
  // A server restarted meanwhile holds it too.
  Restart();
  Round();
  EXPECT_EQ(Phase(id), "Pending");
  clock_.Advance(6);
  Heartbeat("n1");
  Rounds();
  EXPECT_EQ(Phase(id), "Placed") << controller_->PendingReason(id);
  EXPECT_EQ(Events(id, "Requeued").size(), 2u);
  // Refused a third time (nothing of it ever started): 60 s now; cancelled while it waits, its
  // back-off ends with it.
  refuse();
  Round();
  ASSERT_EQ(Phase(id), "Pending");
  EXPECT_NE(controller_->PendingReason(id).find("given back 3 times in a row: not placed again "
                                                "for 60 s"),
            std::string::npos)
      << controller_->PendingReason(id);
  ASSERT_TRUE(store_
                  ->Write([&](store::Tx& tx) {
                    auto j = tx.GetJob(id);
                    auto life = api::LifeOf(*j);
                    auto t = domain::lifecycle::Cancel(*life, "alice", 30, clock_.Now());
                    return api::CommitTransition(tx, *t, clock_.Now(), &*j).status();
                  })
                  .ok());
  Round();
  ASSERT_EQ(Phase(id), "Cancelled");
  clock_.Advance(120);
  Heartbeat("n1");
  Rounds();
  EXPECT_EQ(Phase(id), "Cancelled");
  const int64_t next = Submit("p1", {{"gpus", 8}});
  Rounds();
  EXPECT_EQ(Phase(next), "Placed") << "the node is free: nothing of the cancelled job holds it";
}

// A job given back by its runner was placed: when its back-off ends it waits in the ordinary
// order, and stops nobody for a first start, however long ago it was submitted (else a job that
// Slurm keeps refusing would stop a running job at every back-off).
TEST_F(Gates, AJobBackFromItsBackOffStopsNobodyForAFirstStart) {
  Open(Estate(0));
  Register("n1");
  Register("n2");
  Round();
  const int64_t first = Submit("p1", {{"gpus", 8}});
  Rounds();
  const std::string first_node = NodeOf(first);
  ASSERT_FALSE(first_node.empty());
  Report(first_node, "Running");
  const std::string other = first_node == "n1" ? "n2" : "n1";
  const int64_t refused = Submit("p1", {{"gpus", 8}});
  auto refuse = [&] { Refuse(other); };
  for (int i = 0; i < 2; ++i) {
    Rounds();
    ASSERT_EQ(NodeOf(refused), other);
    refuse();
    ASSERT_EQ(Phase(refused), "Pending");
  }
  // In its back-off, another job takes the node it left.
  const int64_t taker = Submit("p1", {{"gpus", 8}});
  Round();
  ASSERT_EQ(Phase(refused), "Pending") << "backing off";
  ASSERT_EQ(NodeOf(taker), other);
  Report(other, "Running");
  Pass(3600, {"n1", "n2"});
  Rounds();
  EXPECT_EQ(Phase(refused), "Pending");
  EXPECT_TRUE(Events(first, "Preempted").empty());
  EXPECT_TRUE(Events(taker, "Preempted").empty());
}

}  // namespace
}  // namespace meridian::server
