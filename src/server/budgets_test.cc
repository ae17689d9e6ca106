// Budgets against accounting records (docs/adr/0041-budgets.md): which records count for which
// budget (the scope through today's tenancy, the clusters it names, its period), the recent rate
// the forecast extrapolates, and what a spent budget holds back.
#include "server/budgets.h"

#include <gtest/gtest.h>

namespace meridian::server {
namespace {

constexpr double kDecember = 1796083200;  // 2026-12-01 00:00:00 UTC
constexpr double kBudgetsNow = kDecember + 10 * 86400;

store::UsageRecord Record(int64_t job, const std::string& project, const std::string& cluster,
                          double gpus, double price, double start, double end) {
  store::UsageRecord u;
  u.job = job;
  u.generation = 1;
  u.project = project;
  u.cluster = cluster;
  u.gpu_model = "A100";
  u.gpus = gpus;
  u.price_per_gpu_hour = price;
  u.started_at = start;
  u.ended_at = end;
  u.outcome = "Succeeded";
  return u;
}

api::Tenancy Tree() {
  api::Tenancy t;
  t.team_of_project = {{"vision", "research"}, {"speech", "research"}, {"ads", "product"}};
  t.org_of_team = {{"research", "acme"}, {"product", "acme"}};
  return t;
}

domain::Budget Budget(const std::string& name, const std::string& level, const std::string& scope,
                      double amount) {
  domain::Budget b;
  b.name = name;
  b.level = level;
  b.scope = scope;
  b.amount = amount;
  b.thresholds = {50, 80, 100};
  return b;
}

TEST(BudgetEvaluation, AScopeCountsItsProjectsRecordsClippedToThePeriod) {
  const std::vector<store::UsageRecord> records = {
      // 2 GPUs × 10 h at 3/GPU-hour, all within December: 60.
      Record(1, "vision", "cloud", 2, 3, kDecember + 86400, kDecember + 86400 + 36000),
      // Started in November: only its 5 December hours count (1 GPU × 5 h × 4 = 20).
      Record(2, "speech", "onprem", 1, 4, kDecember - 5 * 3600, kDecember + 5 * 3600),
      // Another team's: counted by the organization's budget only (4 GPUs × 1 h × 10 = 40).
      Record(3, "ads", "cloud", 4, 10, kBudgetsNow - 7200, kBudgetsNow - 3600),
  };
  const std::vector<BudgetReading> r = EvaluateBudgets(
      {Budget("vision", "project", "vision", 100), Budget("research", "team", "research", 1000),
       Budget("acme", "organization", "acme", 1000)},
      Tree(), records, kBudgetsNow);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_NEAR(r[0].status.use.cost, 60, 1e-9);
  EXPECT_NEAR(r[0].status.use.gpu_hours, 20, 1e-9);
  EXPECT_EQ(r[0].status.crossed, (std::vector<int64_t>{50}));
  EXPECT_NEAR(r[1].status.use.cost, 80, 1e-9) << "the team holds vision and speech";
  EXPECT_NEAR(r[2].status.use.cost, 120, 1e-9) << "the organization holds every team";
  // The last day held only the ads run (40 in one hour of the last 24).
  EXPECT_NEAR(r[2].status.use.cost_per_hour, 40.0 / 24, 1e-9);
  EXPECT_NEAR(r[1].status.use.cost_per_hour, 0, 1e-9);
}

TEST(BudgetEvaluation, ABudgetNamingClustersCountsTheirUseAlone) {
  domain::Budget b = Budget("cloud-only", "organization", "acme", 50);
  b.clusters = {"cloud"};
  const std::vector<BudgetReading> r =
      EvaluateBudgets({b}, Tree(),
                      {Record(1, "vision", "cloud", 1, 10, kBudgetsNow - 3 * 3600, kBudgetsNow),
                       Record(2, "vision", "onprem", 8, 10, kBudgetsNow - 3 * 3600, kBudgetsNow)},
                      kBudgetsNow);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NEAR(r[0].status.use.cost, 30, 1e-9);
  EXPECT_EQ(r[0].status.crossed, (std::vector<int64_t>{50})) << "30 of 50";
  EXPECT_FALSE(r[0].status.exhausted);
}

TEST(BudgetEvaluation, ARollingWindowForgetsWhatLeftIt) {
  domain::Budget b = Budget("week", "project", "vision", 100);
  b.calendar_month = false;
  b.window = 7 * 86400;
  const std::vector<BudgetReading> r = EvaluateBudgets(
      {b}, Tree(),
      {Record(1, "vision", "cloud", 1, 10, kBudgetsNow - 8 * 86400, kBudgetsNow - 8 * 86400 + 3600),
       Record(2, "vision", "cloud", 1, 10, kBudgetsNow - 86400 * 2,
              kBudgetsNow - 86400 * 2 + 3600)},
      kBudgetsNow);
  EXPECT_NEAR(r[0].status.use.cost, 10, 1e-9);
  EXPECT_NEAR(r[0].status.period.from, kBudgetsNow - 7 * 86400, 1e-9);
}

TEST(BudgetEvaluation, TheStatusTheApiGivesNamesWhatIsSpentAndWhatIsBlocked) {
  domain::Budget b = Budget("vision", "project", "vision", 10);
  const std::vector<BudgetReading> r = EvaluateBudgets(
      {b}, Tree(), {Record(1, "vision", "cloud", 1, 12, kBudgetsNow - 3600, kBudgetsNow)},
      kBudgetsNow);
  const Json j = r[0].ToJson();
  EXPECT_EQ(j["spent"]["cost"], 12.0);
  EXPECT_EQ(j["percent"], 120.0);
  EXPECT_EQ(j["exhausted"], true);
  EXPECT_EQ(j["blocking"], "bursts");
  EXPECT_EQ(j["crossed"], Json::array({50, 80, 100}));
  EXPECT_EQ(j["period"]["from"], kDecember);
  EXPECT_EQ(j["summary"], "cost 12.00 of 10.00 (120%) this month");
}

TEST(BudgetEvaluation, ABudgetThatBlocksAlertsAtItsLimitWhateverThresholdsItNames) {
  domain::Budget b = Budget("vision", "project", "vision", 10);
  b.thresholds = {50};
  const std::vector<store::UsageRecord> spent = {
      Record(1, "vision", "cloud", 1, 12, kBudgetsNow - 3600, kBudgetsNow)};
  std::vector<AlertInputs::BudgetThreshold> alerts =
      BudgetAlerts(EvaluateBudgets({b}, Tree(), spent, kBudgetsNow));
  ASSERT_EQ(alerts.size(), 2u);
  EXPECT_EQ(alerts[0].threshold, 50);
  EXPECT_FALSE(alerts[0].blocking);
  EXPECT_EQ(alerts[1].threshold, 100);
  EXPECT_TRUE(alerts[1].blocking);
  b.action = domain::BudgetAction::kAlert;
  alerts = BudgetAlerts(EvaluateBudgets({b}, Tree(), spent, kBudgetsNow));
  ASSERT_EQ(alerts.size(), 1u) << "an alert-only budget alerts at the thresholds it names";
}

}  // namespace
}  // namespace meridian::server
