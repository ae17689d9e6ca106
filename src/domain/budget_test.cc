#include "domain/budget.h"

#include <gtest/gtest.h>

#include "domain/documents.h"
#include "domain/testing/parse_documents.h"

namespace meridian::domain {
namespace {

std::vector<Document> ParseBudgets(const std::string& text, ErrorList* errors) {
  return testing::ParseDocuments(text, "budget.yaml", errors);
}

// 2026-12-05 12:00:00 UTC, and the month around it.
constexpr double kNow = 1796472000;
constexpr double kDecember = 1796083200;  // 2026-12-01 00:00:00 UTC
constexpr double kJanuary = 1798761600;   // 2027-01-01 00:00:00 UTC

TEST(Budgets, ADocumentReadsIntoItsTypeWithTheDefaults) {
  ErrorList errors;
  auto docs = ParseBudgets(
      "kind: Budget\nmetadata: {name: vision}\nspec: {project: vision, amount: 5000}\n", &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 1u);
  const Budget b = BudgetFromSpec("vision", docs[0].spec);
  EXPECT_EQ(b.level, "project");
  EXPECT_EQ(b.scope, "vision");
  EXPECT_TRUE(b.calendar_month);
  EXPECT_EQ(b.amount, 5000);
  EXPECT_LT(b.gpu_hours, 0) << "no GPU-hour limit unless given";
  EXPECT_EQ(b.thresholds, (std::vector<int64_t>{50, 80, 100}));
  EXPECT_EQ(b.action, BudgetAction::kBlockBursts);
  EXPECT_TRUE(b.clusters.empty());
}

TEST(Budgets, EveryErrorNamesFileLineAndField) {
  struct Case {
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"kind: Budget\nmetadata: {name: b}\nspec: {amount: 10}\n",
       "spec.project: exactly one of organization, team or project"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, team: t, amount: 10}\n",
       "exactly one of organization, team or project"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: \"\", amount: 10}\n",
       "spec.project: must name one"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p}\n",
       "spec.amount: a budget needs amount (money) or gpuHours"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, amount: -3}\n", "spec.amount"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, amount: 1, period: week}\n",
       "spec.period"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, amount: 1, period: rolling}\n",
       "spec.window: is required for a rolling period"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, amount: 1, window: 7d}\n",
       "spec.window: is used only by a rolling period"},
      {"kind: Budget\nmetadata: {name: b}\nspec:\n  project: p\n  amount: 1\n"
       "  thresholds: [80, 50]\n",
       "budget.yaml:6:3: spec.thresholds: must be ascending"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, amount: 1, thresholds: [0]}\n",
       "spec.thresholds[0]"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, amount: 1, action: stop}\n",
       "spec.action"},
      {"kind: Budget\nmetadata: {name: b}\nspec: {project: p, gpuHours: 1, cap: 3}\n",
       "spec.cap: unknown field"},
  };
  for (const Case& c : cases) {
    ErrorList errors;
    ParseBudgets(c.yaml, &errors);
    EXPECT_NE(errors.ToString().find(c.want), std::string::npos)
        << c.yaml << "\n got: " << errors.ToString();
  }
}

TEST(Budgets, ReferencesToScopesAndClustersMustExist) {
  ErrorList errors;
  auto docs = ParseBudgets(
      "kind: Organization\nmetadata: {name: acme}\n---\n"
      "kind: Cluster\nmetadata: {name: cloud}\nspec: {type: cloud}\n---\n"
      "kind: Budget\nmetadata: {name: a}\nspec: {team: ghost, amount: 1}\n---\n"
      "kind: Budget\nmetadata: {name: b}\n"
      "spec: {organization: acme, amount: 1, clusters: [cloud, moon]}\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ValidateDesiredState(docs, &errors);
  const std::string text = errors.ToString();
  EXPECT_NE(text.find("spec.team: Team \"ghost\" does not exist"), std::string::npos) << text;
  EXPECT_NE(text.find("spec.clusters: Cluster \"moon\" does not exist"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"cloud\""), std::string::npos) << text;
}

TEST(Budgets, AMonthIsTheCalendarsInUtcAndARollingWindowEndsNow) {
  Budget month;
  const BudgetPeriod m = PeriodOf(month, kNow);
  EXPECT_EQ(m.from, kDecember);
  EXPECT_EQ(m.to, kJanuary) << "December rolls over into the next year";
  EXPECT_EQ(PeriodOf(month, kDecember).from, kDecember) << "the first instant is the month's";
  EXPECT_EQ(PeriodOf(month, kJanuary - 1).to, kJanuary);
  Budget rolling;
  rolling.calendar_month = false;
  rolling.window = 7 * 86400;
  const BudgetPeriod r = PeriodOf(rolling, kNow);
  EXPECT_EQ(r.from, kNow - 7 * 86400);
  EXPECT_EQ(r.to, kNow);
}

TEST(Budgets, ThresholdsAreCrossedByTheTighterLimitAndTheForecastRunsToTheMonthsEnd) {
  Budget b;
  b.name = "vision";
  b.level = "project";
  b.scope = "vision";
  b.amount = 1000;
  b.gpu_hours = 100;
  b.thresholds = {50, 80, 100};
  BudgetUse use;
  use.cost = 400;      // 40% of the money
  use.gpu_hours = 85;  // 85% of the GPU-hours: the tighter limit
  use.cost_per_hour = 1;
  use.gpu_hours_per_hour = 0.1;
  const BudgetStatus s = EvaluateBudget(b, use, kNow);
  EXPECT_NEAR(s.percent, 85, 1e-9);
  EXPECT_EQ(s.crossed, (std::vector<int64_t>{50, 80}));
  EXPECT_FALSE(s.exhausted);
  EXPECT_FALSE(s.blocks_bursts);
  const double hours_left = (kJanuary - kNow) / 3600;  // 26.5 days
  EXPECT_NEAR(s.forecast_cost, 400 + hours_left, 1e-6);
  EXPECT_NEAR(s.forecast_gpu_hours, 85 + 0.1 * hours_left, 1e-6);
  EXPECT_NEAR(s.forecast_percent, 100 * (85 + 0.1 * hours_left) / 100, 1e-6);
  EXPECT_EQ(s.Summary(b), "cost 400.00 of 1000.00, 85.0 of 100.0 GPU-hours (85%) this month");

  use.gpu_hours = 100;
  const BudgetStatus spent = EvaluateBudget(b, use, kNow);
  EXPECT_TRUE(spent.exhausted);
  EXPECT_TRUE(spent.blocks_bursts);
  EXPECT_FALSE(spent.blocks_cloud) << "block-bursts leaves placements on existing nodes alone";
  EXPECT_EQ(spent.crossed, (std::vector<int64_t>{50, 80, 100}));
  b.action = BudgetAction::kBlockCloud;
  EXPECT_TRUE(EvaluateBudget(b, use, kNow).blocks_cloud);
  b.action = BudgetAction::kAlert;
  const BudgetStatus alert_only = EvaluateBudget(b, use, kNow);
  EXPECT_TRUE(alert_only.exhausted);
  EXPECT_FALSE(alert_only.blocks_bursts) << "an alert-only budget stops nothing";
}

TEST(Budgets, ARollingWindowForecastsWhatItWouldHoldAtTodaysRate) {
  Budget b;
  b.calendar_month = false;
  b.window = 30 * 86400;
  b.amount = 1000;
  BudgetUse use;
  use.cost = 100;
  use.cost_per_hour = 2;
  const BudgetStatus s = EvaluateBudget(b, use, kNow);
  EXPECT_NEAR(s.forecast_cost, 2 * 24 * 30, 1e-9);
  EXPECT_NEAR(s.forecast_percent, 144, 1e-9);
  EXPECT_EQ(s.Summary(b), "cost 100.00 of 1000.00 (10%) in the last 30 days");
  b.window = 36 * 3600;
  EXPECT_EQ(EvaluateBudget(b, use, kNow).Summary(b),
            "cost 100.00 of 1000.00 (10%) in the last 36 hours");
}

}  // namespace
}  // namespace meridian::domain
