// The alert rules' evaluation on a fake clock: pending, firing after `for`, resolved when the
// condition clears, and each condition's figures.
#include "server/alert_eval.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "base/clock.h"

namespace meridian::server {
namespace {

using domain::AlertCondition;
using domain::AlertRule;

AlertRule MakeRule(const char* name, AlertCondition c, double for_seconds, double threshold = 0,
                   double window = 0, int64_t min_jobs = 0) {
  AlertRule r;
  r.name = name;
  r.condition = c;
  r.for_seconds = for_seconds;
  r.threshold = threshold;
  r.window = window;
  r.min_jobs = min_jobs;
  return r;
}

AlertInputs OneNode(bool lost) {
  AlertInputs in;
  AlertInputs::Node n;
  n.name = "n1";
  n.cluster = "east";
  n.registered = true;
  n.lost = lost;
  AlertInputs::Gpu g;
  g.index = 0;
  g.uuid = "GPU-0";
  g.utilization = 0.5;
  n.gpus.push_back(g);
  in.nodes.push_back(n);
  return in;
}

TEST(AlertEvaluator, PendingThenFiringAfterForThenResolved) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {MakeRule("node-lost", AlertCondition::kNodeLost, 30)};
  EXPECT_TRUE(e.Evaluate(rules, OneNode(false), clock.Now()).empty());
  EXPECT_TRUE(e.Active().empty());

  clock.Advance(5);
  const double lost_at = clock.Now();
  EXPECT_TRUE(e.Evaluate(rules, OneNode(true), clock.Now()).empty());
  ASSERT_EQ(e.Active().size(), 1u);
  EXPECT_EQ(e.Active()[0].state, Alert::State::kPending);

  clock.Advance(29);  // 29 s of the 30 s
  EXPECT_TRUE(e.Evaluate(rules, OneNode(true), clock.Now()).empty());
  clock.Advance(1);
  auto fired = e.Evaluate(rules, OneNode(true), clock.Now());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].state, Alert::State::kFiring);
  EXPECT_EQ(fired[0].active_since, lost_at);
  EXPECT_EQ(fired[0].fired_at, clock.Now());
  EXPECT_EQ(fired[0].labels.at("alertname"), "MeridianNodeLost");
  EXPECT_EQ(fired[0].labels.at("node"), "n1");
  EXPECT_EQ(fired[0].labels.at("cluster"), "east");
  EXPECT_EQ(fired[0].labels.at("severity"), "warning");
  // Firing goes on without a second notification.
  clock.Advance(10);
  EXPECT_TRUE(e.Evaluate(rules, OneNode(true), clock.Now()).empty());

  clock.Advance(10);
  auto resolved = e.Evaluate(rules, OneNode(false), clock.Now());
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, Alert::State::kResolved);
  EXPECT_EQ(resolved[0].resolved_at, clock.Now());
  EXPECT_TRUE(e.Active().empty());
  EXPECT_EQ(e.Resolved(clock.Now(), 900).size(), 1u);
  EXPECT_TRUE(e.Resolved(clock.Now() + 901, 900).empty());
}

TEST(AlertEvaluator, APendingAlertThatClearsIsDroppedUntold) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {MakeRule("node-lost", AlertCondition::kNodeLost, 30)};
  e.Evaluate(rules, OneNode(true), clock.Now());
  clock.Advance(10);
  EXPECT_TRUE(e.Evaluate(rules, OneNode(false), clock.Now()).empty());
  EXPECT_TRUE(e.Active().empty());
  EXPECT_TRUE(e.Resolved(clock.Now(), 900).empty());
}

TEST(AlertEvaluator, ARuleRemovedResolvesItsAlerts) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {MakeRule("node-lost", AlertCondition::kNodeLost, 0)};
  ASSERT_EQ(e.Evaluate(rules, OneNode(true), clock.Now()).size(), 1u);
  clock.Advance(2);
  auto changed = e.Evaluate({}, OneNode(true), clock.Now());
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].state, Alert::State::kResolved);
}

TEST(AlertEvaluator, IdleGpusAlertPerHoldingJobAfterTheDuration) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {
      MakeRule("gpu-held-idle", AlertCondition::kGpuIdle, 1800, 0.05)};
  AlertInputs in = OneNode(false);
  in.nodes[0].gpus[0].utilization = 0.01;
  // Idle but held by nobody: nothing to reclaim.
  e.Evaluate(rules, in, clock.Now());
  EXPECT_TRUE(e.Active().empty());
  in.nodes[0].gpus[0].holders = {{7, "vision"}};
  e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(e.Active().size(), 1u);
  clock.Advance(1799);
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty());
  clock.Advance(1);
  auto fired = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].labels.at("job_id"), "7");
  EXPECT_EQ(fired[0].labels.at("project"), "vision");
  EXPECT_DOUBLE_EQ(fired[0].value, 0.01);
  // Busy again: resolved.
  in.nodes[0].gpus[0].utilization = 0.9;
  clock.Advance(2);
  auto resolved = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, Alert::State::kResolved);
}

TEST(AlertEvaluator, XidFiresForTheWindowAfterTheCountRises) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {MakeRule("gpu-xid", AlertCondition::kGpuXid, 0, 0, 600)};
  AlertInputs in = OneNode(false);
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty());
  clock.Advance(5);
  in.nodes[0].gpus[0].xid_errors = 1;
  in.nodes[0].gpus[0].last_xid = 79;
  auto fired = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].annotations.at("xid"), "79");
  EXPECT_EQ(fired[0].labels.at("UUID"), "GPU-0");
  clock.Advance(600);
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty());  // still within the window
  clock.Advance(1);
  auto resolved = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, Alert::State::kResolved);
}

TEST(AlertEvaluator, PendingAgeQuotaAndHealthThresholds) {
  base::FakeClock clock;
  AlertEvaluator e;
  AlertRule vision = MakeRule("vision-queue", AlertCondition::kPendingJobAge, 0, 600);
  vision.project = "vision";
  const std::vector<AlertRule> rules = {
      MakeRule("pending-job-too-old", AlertCondition::kPendingJobAge, 0, 3600), vision,
      MakeRule("quota-near-limit", AlertCondition::kQuotaNearLimit, 0, 0.9),
      MakeRule("gpu-unhealthy", AlertCondition::kGpuUnhealthy, 0)};
  AlertInputs in = OneNode(false);
  in.nodes[0].gpus[0].healthy = false;
  in.oldest_pending = {{"vision", 700}, {"nlp", 3601}, {"ads", 10}};
  in.quotas = {
      {"lab", "team", 9, 10}, {"acme", "organization", 8.9, 10}, {"free", "project", 99, -1}};
  auto fired = e.Evaluate(rules, in, clock.Now());
  std::multiset<std::string> got;
  for (const Alert& a : fired) {
    std::string what = a.rule;
    for (const char* k : {"project", "scope", "node"}) {
      if (a.labels.count(k)) what += ":" + a.labels.at(k);
    }
    got.insert(what);
  }
  EXPECT_EQ(got, (std::multiset<std::string>{"pending-job-too-old:nlp", "vision-queue:vision",
                                             "quota-near-limit:lab", "gpu-unhealthy:n1"}));
}

TEST(AlertEvaluator, FailureRateOverTheWindowWithEnoughJobs) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {
      MakeRule("job-failure-rate", AlertCondition::kJobFailureRate, 0, 0.5, 3600, 4)};
  AlertInputs in;
  in.ended = {{"vision", {1, 2}}};  // 3 ended: too few to say
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty());
  clock.Advance(60);
  in.ended = {{"vision", {1, 4}}};  // 4 of 5 failed
  auto fired = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_DOUBLE_EQ(fired[0].value, 0.8);
  // An hour later the failures are out of the window; the successes since are in it.
  clock.Advance(3600);
  in.ended = {{"vision", {7, 4}}};
  auto resolved = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, Alert::State::kResolved);
}

TEST(AlertEvaluator, SchedulerErrorsCountInTheWindow) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {
      MakeRule("scheduler-errors", AlertCondition::kSchedulerErrors, 0, 3, 300)};
  AlertInputs in;
  in.scheduler_errors = 2;
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty());
  clock.Advance(10);
  in.scheduler_errors = 3;
  ASSERT_EQ(e.Evaluate(rules, in, clock.Now()).size(), 1u);
  clock.Advance(400);  // no new error for longer than the window
  auto resolved = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, Alert::State::kResolved);
}

// A GPU that faulted too often stays cordoned for an operator: its own critical alert, with how
// to put it back, resolved when the operator uncordons it.
TEST(AlertEvaluator, AHeldGpuFiresUntilAnOperatorUncordonsIt) {
  base::FakeClock clock;
  AlertEvaluator e;
  const std::vector<AlertRule> rules = {MakeRule("gpu-held", AlertCondition::kGpuHeld, 0)};
  AlertInputs in = OneNode(false);
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty()) << "a healthy GPU";
  in.nodes[0].gpus[0].healthy = false;  // cordoned, remediation on its way: not held yet
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty());
  in.nodes[0].gpus[0].held = true;
  in.nodes[0].gpus[0].held_reason = "GPU 0 of node n1: XID 48 (double-bit ECC error) (3 fault(s))";
  const std::vector<Alert> fired = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].labels.at("alertname"), "MeridianGpuHeld");
  EXPECT_EQ(fired[0].labels.at("gpu"), "0");
  EXPECT_EQ(fired[0].labels.at("UUID"), "GPU-0");
  EXPECT_NE(fired[0].annotations.at("description").find("meridian uncordon n1 --gpu 0"),
            std::string::npos);
  // Lost, it stays held: it waits for an operator either way.
  in.nodes[0].lost = true;
  EXPECT_TRUE(e.Evaluate(rules, in, clock.Now()).empty());
  EXPECT_EQ(e.Active().size(), 1u);
  in.nodes[0].gpus[0].held = false;
  const std::vector<Alert> resolved = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, Alert::State::kResolved);
}

// The job-idle rule fires for each job the idle reclaimer reports, labelled with its policy and
// action, and only for the rule's project when it names one.
TEST(AlertEvaluator, JobIdleFiresPerReportedJobAndProject) {
  base::FakeClock clock;
  AlertEvaluator e;
  AlertRule rule = MakeRule("job-idle", AlertCondition::kJobIdle, 0);
  rule.project = "research";
  AlertInputs in;
  in.idle_jobs = {{7, "research", "training", "alert", 0.01, "Job 7 holds 2 GPU(s)"},
                  {8, "vision", "notebooks", "reclaim", 0, "Job 8"}};
  const std::vector<Alert> fired = e.Evaluate({rule}, in, clock.Now());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].labels.at("alertname"), "MeridianJobIdle");
  EXPECT_EQ(fired[0].labels.at("job_id"), "7");
  EXPECT_EQ(fired[0].labels.at("policy"), "training");
  EXPECT_EQ(fired[0].labels.at("action"), "alert");
  EXPECT_EQ(fired[0].annotations.at("summary"), "Job 7 holds 2 GPU(s)");
  in.idle_jobs.clear();
  ASSERT_EQ(e.Evaluate({rule}, in, clock.Now()).size(), 1u) << "resolved when it is busy again";
}

// The provisioning-failed rule (built in) fires once per elastic pool whose provisioning failed,
// labelled with the pool and cluster and saying what failed, and resolves when the pool is right.
TEST(AlertEvaluator, ProvisioningFailedFiresPerPoolUntilItComesRight) {
  base::FakeClock clock;
  AlertEvaluator e;
  std::vector<AlertRule> rules;
  for (const AlertRule& r : domain::BuiltinAlertRules()) {
    if (r.condition == AlertCondition::kProvisioningFailed) rules.push_back(r);
  }
  ASSERT_EQ(rules.size(), 1u);
  AlertInputs in;
  in.pool_failures = {
      {"h200", "cloud", "dev-cloud", "asking for 1 node(s) failed: capacity: no capacity left", 2},
      {"a100", "cloud", "gcp", "provisioner gcp is not configured", 0}};
  const std::vector<Alert> fired = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(fired.size(), 2u);
  std::map<std::string, Alert> by_pool;
  for (const Alert& a : fired) by_pool[a.labels.at("pool")] = a;
  const Alert& h200 = by_pool.at("h200");
  EXPECT_EQ(h200.state, Alert::State::kFiring);
  EXPECT_EQ(h200.labels.at("alertname"), "MeridianProvisioningFailed");
  EXPECT_EQ(h200.labels.at("severity"), "warning");
  EXPECT_EQ(h200.labels.at("cluster"), "cloud");
  EXPECT_EQ(h200.annotations.at("summary"),
            "Elastic pool h200 (cluster cloud, provisioner dev-cloud): asking for 1 node(s) "
            "failed: capacity: no capacity left (failure 2 in a row; the pool is backed off, and "
            "jobs that need new nodes go to another pool or wait)");
  EXPECT_EQ(by_pool.at("a100").annotations.at("summary"),
            "Elastic pool a100 (cluster cloud, provisioner gcp): provisioner gcp is not "
            "configured");
  in.pool_failures.pop_back();
  const std::vector<Alert> resolved = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].labels.at("pool"), "a100");
  EXPECT_EQ(resolved[0].state, Alert::State::kResolved);
  EXPECT_EQ(e.Active().size(), 1u);
}

}  // namespace
}  // namespace meridian::server

namespace meridian::server {
namespace {

// Node conditions (warnings before failures, a failing node) alert through their built-in
// rules: one alert per GPU for a GPU's condition, with the GPU's labels; a node's own without
// them; a lost node's warnings say nothing; the temperature waits for its rule's `for`.
TEST(AlertEvaluator, NodeConditionsAlertByTheirBuiltInRules) {
  base::FakeClock clock;
  AlertEvaluator e;
  std::vector<AlertRule> rules;
  for (const AlertRule& r : domain::BuiltinAlertRules()) {
    if (domain::NodeConditionType(r.condition)) rules.push_back(r);
  }
  ASSERT_EQ(rules.size(), 5u);
  AlertInputs in = OneNode(false);
  in.nodes[0].conditions = {
      {domain::kEccCorrectedRate, 0, "GPU 0: 120 corrected ECC errors", 0, 120},
      {domain::kTemperatureNearSlowdown, 0, "GPU 0 at 84 °C", 0, 84},
      {domain::kFailingJobs, -1, "5 runs of jobs of 3 projects failed", 0, 5}};
  const std::vector<Alert> fired = e.Evaluate(rules, in, clock.Now());
  std::map<std::string, Alert> by_rule;
  for (const Alert& a : fired) by_rule[a.rule] = a;
  ASSERT_EQ(by_rule.size(), 2u);  // the temperature is pending for 120 s
  const Alert& ecc = by_rule.at("gpu-ecc-corrected-rate");
  EXPECT_EQ(ecc.labels.at("alertname"), "MeridianGpuEccCorrectedRate");
  EXPECT_EQ(ecc.labels.at("UUID"), "GPU-0");
  EXPECT_EQ(ecc.labels.at("gpu"), "0");
  EXPECT_EQ(ecc.labels.at("severity"), "warning");
  EXPECT_EQ(ecc.value, 120);
  const Alert& failing = by_rule.at("node-failing-jobs");
  EXPECT_EQ(failing.labels.at("node"), "n1");
  EXPECT_FALSE(failing.labels.count("gpu"));
  EXPECT_NE(failing.annotations.at("summary").find("3 projects"), std::string::npos);

  clock.Advance(120);
  const std::vector<Alert> later = e.Evaluate(rules, in, clock.Now());
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].rule, "gpu-temperature-near-slowdown");
  EXPECT_EQ(later[0].state, Alert::State::kFiring);

  // The conditions clear: every alert resolves.
  clock.Advance(2);
  in.nodes[0].conditions.clear();
  const std::vector<Alert> resolved = e.Evaluate(rules, in, clock.Now());
  EXPECT_EQ(resolved.size(), 3u);
  for (const Alert& a : resolved) EXPECT_EQ(a.state, Alert::State::kResolved) << a.rule;
}

}  // namespace
}  // namespace meridian::server
