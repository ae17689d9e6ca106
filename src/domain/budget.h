#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "domain/spec.h"

// Budgets as code (docs/adr/0041-budgets.md): the `Budget` kind of the desired state caps what an
// organization, team or project spends (money at the prices its runs were placed at, and
// GPU-hours) per calendar month or rolling window. Soft thresholds raise alerts; at 100% the
// budget's action stops new cloud capacity for the scope (and, if so configured, new placements
// on cloud clusters). Values and arithmetic only: the server's budget watch reads the accounting
// records and applies them (server/budgets.h).
namespace meridian::domain {

enum class BudgetAction {
  kAlert,        // the thresholds alert; nothing is stopped
  kBlockBursts,  // at 100%, no new node of an elastic pool is asked for the scope's jobs
  kBlockCloud,   // as kBlockBursts, and the scope's jobs are placed on no node of a cloud cluster
};
const char* BudgetActionName(BudgetAction a);  // "alert", "block-bursts", "block-cloud"

struct Budget {
  std::string name;
  std::string level;           // organization | team | project
  std::string scope;           // the organization's, team's or project's name
  bool calendar_month = true;  // the calendar month (UTC) that holds now; else a rolling window
  double window = 0;           // rolling: seconds back from now
  double amount = -1;          // money, in the unit of the clusters' prices; negative: no limit
  double gpu_hours = -1;       // negative: no limit
  std::vector<int64_t> thresholds;  // percent of the limit, ascending: an alert each
  BudgetAction action = BudgetAction::kBlockBursts;
  std::vector<std::string> clusters;  // the use that counts: on these clusters (empty: every one)

  // "project vision", "team research"
  std::string ScopeText() const { return level + " " + scope; }
};

// Reads a Budget document's spec (FieldReader's errors name field and line).
void ReadBudgetSpec(FieldReader& s);
// The typed budget of a canonical spec (as ReadBudgetSpec wrote it).
Budget BudgetFromSpec(const std::string& name, const Json& spec);

// The period a budget counts at `now`: [from, to). A calendar month ends at the next month's
// first instant; a rolling window ends now.
struct BudgetPeriod {
  double from = 0;
  double to = 0;
};
BudgetPeriod PeriodOf(const Budget& b, double now);

// The first instant of the calendar month (UTC) that holds `t`, and of the month after.
double MonthStart(double t);
double NextMonthStart(double t);

// What the scope used within the period up to now, and lately.
struct BudgetUse {
  double cost = 0;
  double gpu_hours = 0;
  // Spend per hour over the last day of the period (or all of it, if shorter): what the
  // forecast extrapolates.
  double cost_per_hour = 0;
  double gpu_hours_per_hour = 0;
};

struct BudgetStatus {
  BudgetPeriod period;
  BudgetUse use;
  double forecast_cost = 0;  // at the period's end; rolling: the window at today's rate
  double forecast_gpu_hours = 0;
  double percent = 0;  // of the tighter limit (the larger share)
  double forecast_percent = 0;
  std::vector<int64_t> crossed;  // thresholds reached, ascending
  bool exhausted = false;        // percent >= 100
  bool blocks_bursts = false;    // exhausted, and the action stops new cloud capacity
  bool blocks_cloud = false;     // exhausted, and the action stops placements on cloud clusters

  // "cost 512.40 of 500.00 (102%) this month", the limits it has, for messages.
  std::string Summary(const Budget& b) const;
};

BudgetStatus EvaluateBudget(const Budget& b, const BudgetUse& use, double now);

}  // namespace meridian::domain
