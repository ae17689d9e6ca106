// Idle-GPU reclamation (docs/adr/0019-idle-reclamation.md) on a fake clock: the tracker's
// decisions table by table, then the reclaimer over the real control plane (SQLite store, node
// service, scheduler controller; agents played by heartbeats): an idle interactive job is
// noticed, stopped through the lifecycle after its grace and cancelled, with its GPU-hours in its
// events and on /metrics; a training job idle past its policy's idleFor raises an alert and runs
// on; inference, exempt jobs and dry runs are left alone.
#include "server/idle_reclaim.h"

#include <gtest/gtest.h>

#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using domain::IdleAction;
using domain::IdlePolicy;
using domain::JobKind;
using State = IdleFinding::State;

IdlePolicy Policy(const std::string& name, std::vector<JobKind> types, IdleAction action,
                  double idle_for, double grace = 600) {
  IdlePolicy p;
  p.name = name;
  p.job_types = std::move(types);
  p.action = action;
  p.idle_for = idle_for;
  p.grace = grace;
  p.exempt_label = "idle-exempt";
  return p;
}

IdleObservation Job(int64_t id, JobKind type, std::optional<double> utilization,
                    const std::string& project = "p1") {
  IdleObservation o;
  o.job = id;
  o.name = "j" + std::to_string(id);
  o.project = project;
  o.type = type;
  o.gpus = 1;
  o.utilization = utilization;
  return o;
}

// The example: interactive jobs under 5% for 30 minutes get a notice, then are stopped
// after a grace; training jobs idle an hour raise an alert; inference is never touched.
std::vector<IdlePolicy> Example() {
  return {Policy("interactive", {JobKind::kInteractive}, IdleAction::kReclaim, 1800, 600),
          Policy("training", {JobKind::kTraining}, IdleAction::kAlert, 3600),
          Policy("inference", {JobKind::kInference}, IdleAction::kNone, 0)};
}

State StateOf(const IdleTracker& t, int64_t job) {
  for (const IdleFinding& f : t.Findings()) {
    if (f.job.job == job) return f.state;
  }
  ADD_FAILURE() << "job " << job << " is not tracked";
  return State::kIdle;
}

bool Tracked(const IdleTracker& t, int64_t job) {
  for (const IdleFinding& f : t.Findings()) {
    if (f.job.job == job) return true;
  }
  return false;
}

TEST(IdleTracker, NoticeAfterIdleForThenStopAfterGraceAlertForTrainingNothingForInference) {
  base::FakeClock clock;
  IdleTracker t;
  const std::vector<IdleObservation> jobs = {Job(1, JobKind::kInteractive, 0.01),
                                             Job(2, JobKind::kTraining, 0.0),
                                             Job(3, JobKind::kInference, 0.0)};
  IdleTracker::Step s = t.Evaluate(Example(), jobs, clock.Now());
  EXPECT_TRUE(s.notices.empty());
  EXPECT_EQ(StateOf(t, 1), State::kIdle);
  EXPECT_EQ(StateOf(t, 2), State::kIdle);
  EXPECT_FALSE(Tracked(t, 3)) << "inference is never touched";
  clock.Advance(1799);
  EXPECT_TRUE(t.Evaluate(Example(), jobs, clock.Now()).notices.empty()) << "a second early";
  clock.Advance(1);
  s = t.Evaluate(Example(), jobs, clock.Now());
  ASSERT_EQ(s.notices.size(), 1u);
  EXPECT_EQ(s.notices[0].job.job, 1);
  EXPECT_EQ(s.notices[0].stop_at, clock.Now() + 600);
  EXPECT_EQ(StateOf(t, 1), State::kNoticed);
  EXPECT_EQ(StateOf(t, 2), State::kIdle) << "training waits an hour";
  clock.Advance(599);
  s = t.Evaluate(Example(), jobs, clock.Now());
  EXPECT_TRUE(s.stops.empty());
  EXPECT_TRUE(s.notices.empty()) << "told once";
  clock.Advance(1);
  s = t.Evaluate(Example(), jobs, clock.Now());
  ASSERT_EQ(s.stops.size(), 1u);
  EXPECT_EQ(s.stops[0].job.job, 1);
  EXPECT_EQ(s.stops[0].idle_since, clock.Now() - 2400);
  EXPECT_EQ(StateOf(t, 1), State::kReclaimed);
  clock.Advance(1200);  // an hour since training went idle
  s = t.Evaluate(Example(), jobs, clock.Now());
  EXPECT_TRUE(s.stops.empty()) << "asked once";
  EXPECT_EQ(StateOf(t, 2), State::kAlerting);
  const std::vector<AlertInputs::IdleJob> alerts = IdleAlertJobs(t.Findings());
  ASSERT_EQ(alerts.size(), 2u);
  EXPECT_EQ(alerts[0].action, "reclaim");
  EXPECT_EQ(alerts[1].job, 2);
  EXPECT_EQ(alerts[1].action, "alert");
  EXPECT_EQ(alerts[1].policy, "training");
  // A job that is no longer running is forgotten.
  t.Evaluate(Example(), {jobs[1]}, clock.Now());
  EXPECT_FALSE(Tracked(t, 1));
}

TEST(IdleTracker, BusyAgainWithdrawsTheNoticeAndStartsOver) {
  base::FakeClock clock;
  IdleTracker t;
  t.Evaluate(Example(), {Job(1, JobKind::kInteractive, 0.0)}, clock.Now());
  clock.Advance(1800);
  ASSERT_EQ(t.Evaluate(Example(), {Job(1, JobKind::kInteractive, 0.0)}, clock.Now()).notices.size(),
            1u);
  clock.Advance(300);
  // 5% is not under 5%: busy.
  IdleTracker::Step s = t.Evaluate(Example(), {Job(1, JobKind::kInteractive, 0.05)}, clock.Now());
  ASSERT_EQ(s.withdrawn.size(), 1u);
  EXPECT_FALSE(Tracked(t, 1));
  clock.Advance(10);
  t.Evaluate(Example(), {Job(1, JobKind::kInteractive, 0.0)}, clock.Now());
  clock.Advance(1799);
  EXPECT_TRUE(
      t.Evaluate(Example(), {Job(1, JobKind::kInteractive, 0.0)}, clock.Now()).notices.empty())
      << "its idle time counts again from zero";
}

TEST(IdleTracker, UnknownUseExemptLabelsDryRunAndAProjectsOwnPolicy) {
  base::FakeClock clock;
  std::vector<IdlePolicy> policies = Example();
  IdlePolicy dry = Policy("p2-dry", {JobKind::kInteractive}, IdleAction::kReclaim, 1800, 600);
  dry.project = "p2";
  dry.dry_run = true;
  policies.push_back(dry);
  IdleObservation exempt = Job(2, JobKind::kInteractive, 0.0);
  exempt.labels = {{"idle-exempt", "true"}};
  IdleObservation not_exempt = Job(3, JobKind::kInteractive, 0.0);
  not_exempt.labels = {{"idle-exempt", "yes"}};  // only "true" exempts
  const std::vector<IdleObservation> jobs = {Job(1, JobKind::kInteractive, std::nullopt), exempt,
                                             not_exempt, Job(4, JobKind::kInteractive, 0.0, "p2")};
  IdleTracker t;
  t.Evaluate(policies, jobs, clock.Now());
  clock.Advance(2400);
  IdleTracker::Step s = t.Evaluate(policies, jobs, clock.Now());
  EXPECT_FALSE(Tracked(t, 1)) << "a GPU that reports nothing is not idle";
  EXPECT_FALSE(Tracked(t, 2)) << "exempt by its label";
  ASSERT_EQ(s.notices.size(), 1u);
  EXPECT_EQ(s.notices[0].job.job, 3);
  // p2's own policy (a dry run) wins over the one for every project: listed, never noticed.
  EXPECT_EQ(StateOf(t, 4), State::kDryRun);
  for (const IdleFinding& f : t.Findings()) {
    if (f.job.job != 4) continue;
    EXPECT_EQ(f.policy.name, "p2-dry");
    EXPECT_EQ(f.noticed_at, clock.Now() - 600);
    EXPECT_EQ(f.stop_at, clock.Now());
  }
  clock.Advance(3600);
  s = t.Evaluate(policies, jobs, clock.Now());
  EXPECT_EQ(StateOf(t, 4), State::kDryRun);
  for (const IdleFinding& f : s.stops) EXPECT_NE(f.job.job, 4) << "a dry run stops nothing";
  // Dry run turned off: the job gets its whole grace from now, not a stop at once.
  policies.back().dry_run = false;
  s = t.Evaluate(policies, jobs, clock.Now());
  bool noticed = false;
  for (const IdleFinding& f : s.notices) noticed = noticed || f.job.job == 4;
  EXPECT_TRUE(noticed);
  for (const IdleFinding& f : s.stops) EXPECT_NE(f.job.job, 4);
}

// The control plane: a real store, node service and controller, on the fake clock.
class IdleReclaimTest : public testing::ControlPlane {
 protected:
  void SetUp() override {
    Open(testing::Estate(0));
    Register("n1");
    Round();
    reclaimer_ = std::make_unique<IdleReclaimer>(store_.get(), &clock_, &bus_, nodes_.get());
  }
  // A heartbeat from n1 with every GPU at `use` (GPU -> utilisation; others 0.5), reporting its
  // listed tasks as running.
  void Beat(const std::map<int, double>& use) {
    Json reports = Json::array();
    for (const Json& a : Heartbeat("n1")) {
      reports.push_back({{"job", a["job"]},
                         {"task", a["task"]},
                         {"generation", a["generation"]},
                         {"state", "Running"}});
    }
    Json telemetry = Json::array();
    for (int i = 0; i < 8; ++i) {
      auto u = use.find(i);
      telemetry.push_back({{"index", i}, {"utilization", u == use.end() ? 0.5 : u->second}});
    }
    auto r = nodes_->Heartbeat("n1", {{"telemetry", telemetry}, {"tasks", reports}});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  int Gpu(int64_t id) { return Get(id).allocation[0]["devices"][0]["gpu"]; }
  void Reclaim() { ASSERT_TRUE(reclaimer_->RunOnce().ok()); }
  std::string Metrics() {
    api::Metrics m;
    reclaimer_->Render(&m);
    return m.Render();
  }
  std::unique_ptr<IdleReclaimer> reclaimer_;
};

TEST_F(IdleReclaimTest, AnIdleInteractiveJobIsNoticedThenCancelledThroughTheLifecycle) {
  Apply({testing::Doc("IdlePolicy", "interactive",
                      {{"jobTypes", {"interactive"}},
                       {"action", "reclaim"},
                       {"threshold", 0.05},
                       {"idleFor", 1800.0},
                       {"grace", 600.0},
                       {"exemptLabel", "idle-exempt"}}),
         testing::Doc("IdlePolicy", "training",
                      {{"jobTypes", {"training"}}, {"action", "alert"}, {"idleFor", 3600.0}})});
  const int64_t notebook =
      Submit("p1", {{"type", "interactive"}, {"gpus", 1}, {"command", {"jupyter"}}});
  const int64_t exempt = Submit("p1", {{"type", "interactive"},
                                       {"gpus", 1},
                                       {"command", {"jupyter"}},
                                       {"labels", {{"idle-exempt", "true"}}}});
  const int64_t busy = Submit("p1", {{"type", "interactive"}, {"gpus", 1}, {"command", {"x"}}});
  const int64_t training =
      Submit("p2", {{"type", "training"}, {"gpus", 2}, {"command", {"train"}}});
  Rounds();
  Report("n1", "Running");
  for (int64_t id : {notebook, exempt, busy, training}) ASSERT_EQ(Phase(id), "Running");
  std::map<int, double> use = {{Gpu(notebook), 0.01}, {Gpu(exempt), 0.0}, {Gpu(busy), 0.6}};
  const store::JobRecord trainer = Get(training);
  for (const Json& d : trainer.allocation[0]["devices"]) use[d["gpu"].get<int>()] = 0.02;
  Beat(use);
  Reclaim();
  clock_.Advance(1800);
  Beat(use);
  Reclaim();
  const std::vector<std::string> notices = Events(notebook, "IdleNotice");
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("under 5% use for 30 min (IdlePolicy interactive)"), std::string::npos)
      << notices[0];
  EXPECT_NE(notices[0].find("stopped in 10 min"), std::string::npos) << notices[0];
  EXPECT_EQ(Phase(notebook), "Running") << "a notice first";
  clock_.Advance(600);
  Beat(use);
  Reclaim();
  EXPECT_EQ(Phase(notebook), "Stopping");
  const std::vector<std::string> reclaimed = Events(notebook, "Reclaimed");
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_NE(reclaimed[0].find("1.00 GPU(s) given back after 0.67 idle GPU-hours"),
            std::string::npos)
      << reclaimed[0];
  // The stop takes the cancel's path: the job's own grace period (30 s by default).
  EXPECT_EQ(Get(notebook).status["stop"].value("deadline", 0.0), clock_.Now() + 30);
  EXPECT_TRUE(Events(exempt, "IdleNotice").empty());
  EXPECT_TRUE(Events(busy, "IdleNotice").empty());
  EXPECT_TRUE(Events(training, "IdleNotice").empty());
  // The agent is told to stop it; its task exits; the job is cancelled, its GPU free.
  Round();
  ReportJob("n1", notebook, "Exited", 143);
  EXPECT_EQ(Phase(notebook), "Cancelled");
  EXPECT_NE(Get(notebook).reason.find("reclaimed: its GPUs have been under 5% use for 40 min"),
            std::string::npos)
      << Get(notebook).reason;
  for (int64_t id : {exempt, busy, training}) EXPECT_EQ(Phase(id), "Running");
  const std::string metrics = Metrics();
  EXPECT_NE(
      metrics.find("meridian_idle_reclaimed_jobs_total{project=\"p1\",type=\"interactive\"} 1"),
      std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("meridian_idle_reclaimed_gpu_hours_total{project=\"p1\",type="
                         "\"interactive\"} 0.666"),
            std::string::npos)
      << metrics;
  // The training job, idle an hour: alerted, not stopped.
  clock_.Advance(1200);
  Beat(use);
  Reclaim();
  const std::vector<AlertInputs::IdleJob> alerts = reclaimer_->AlertJobs();
  ASSERT_EQ(alerts.size(), 1u) << reclaimer_->Idle().dump() << Get(training).allocation.dump()
                               << controller_->Nodes().dump();
  EXPECT_EQ(alerts[0].job, training);
  EXPECT_EQ(alerts[0].action, "alert");
  EXPECT_EQ(Phase(training), "Running");
}

TEST_F(IdleReclaimTest, ADryRunListsWhatItWouldReclaimAndTouchesNothing) {
  Apply({testing::Doc(
      "IdlePolicy", "dry",
      {{"jobTypes", {"interactive"}}, {"idleFor", 60.0}, {"grace", 30.0}, {"dryRun", true}})});
  const int64_t notebook =
      Submit("p1", {{"type", "interactive"}, {"gpus", 1}, {"command", {"jupyter"}}});
  Rounds();
  Report("n1", "Running");
  Beat({{Gpu(notebook), 0.0}});
  Reclaim();
  clock_.Advance(600);
  Beat({{Gpu(notebook), 0.0}});
  Reclaim();
  const Json listed = reclaimer_->Idle();
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  EXPECT_EQ(listed[0]["job"], notebook);
  EXPECT_EQ(listed[0]["state"], "dry-run");
  EXPECT_EQ(listed[0]["stopAt"].get<double>(), clock_.Now() - 600 + 90);
  EXPECT_EQ(Phase(notebook), "Running");
  EXPECT_TRUE(Events(notebook, "IdleNotice").empty());
  EXPECT_TRUE(Events(notebook, "Reclaimed").empty());
  EXPECT_EQ(reclaimer_->AlertJobs().at(0).action, "dry-run");
}

}  // namespace
}  // namespace meridian::server
