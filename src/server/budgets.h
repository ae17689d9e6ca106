#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "api/auth.h"
#include "api/metrics.h"
#include "base/clock.h"
#include "domain/budget.h"
#include "server/alert_eval.h"
#include "store/store.h"

// Budgets (docs/adr/0041-budgets.md): the Budget documents held against the accounting records
// (api/usage.h). Every `interval` the watch reads the records of the budgets' periods and the
// runs still going, sums each budget's scope, and publishes what it found: the status the API
// gives with each Budget, the threshold alerts, the `meridian_budget_*` gauges, and the scopes
// whose budget is spent, which burst planning passes over (server/elastic_pools.h) and whose
// jobs the scheduler keeps off cloud clusters when the budget says so.
namespace meridian::server {

using Json = nlohmann::json;

// One budget as of one evaluation.
struct BudgetReading {
  domain::Budget budget;
  domain::BudgetStatus status;
  double evaluated_at = 0;

  // What the API gives as the Budget's `status` (api::BudgetHooks).
  Json ToJson() const;
};

// The pure half: each budget's status from the usage records that may count for it (ended
// runs, and runs still going as if they ended at `now`), with today's tenancy deciding which
// projects a team or organization holds.
std::vector<BudgetReading> EvaluateBudgets(const std::vector<domain::Budget>& budgets,
                                           const api::Tenancy& tenancy,
                                           const std::vector<store::UsageRecord>& records,
                                           double now);

// The budget-threshold alert's inputs: every threshold each budget reached, and 100% for a
// budget that blocks whatever thresholds it names.
std::vector<AlertInputs::BudgetThreshold> BudgetAlerts(const std::vector<BudgetReading>& readings);

// A scope's jobs that a spent budget holds back, by project.
struct BudgetBlock {
  std::string budget;
  std::string why;  // for the pending reason: "budget B (project P) is spent: cost ... this month"
  bool cloud = false;  // no placement on a node of a cloud cluster either (block-cloud)
};

// What a budget that is not spent yet has left, for burst planning: a plan asks for no node a
// job would cost more on than its budget has left (sched/elastic.h).
struct BudgetRoom {
  std::string budget;
  double left = 0;  // money
};

struct BudgetWatchOptions {
  double interval = 10;  // seconds between evaluations
};

class BudgetWatch final : public api::BudgetHooks {
 public:
  BudgetWatch(store::Store* store, const base::Clock* clock, BudgetWatchOptions options = {});
  ~BudgetWatch() override;
  BudgetWatch(const BudgetWatch&) = delete;
  BudgetWatch& operator=(const BudgetWatch&) = delete;

  void Start();
  void Stop();
  // One evaluation; Start's thread calls it, tests may instead.
  base::Status RunOnce();
  // Called after an evaluation whose blocks changed (the scheduler takes them in at once).
  void OnChange(std::function<void()> changed) { changed_ = std::move(changed); }

  Json BudgetStatus(const std::string& name) override;
  void Wake() override;
  // The projects a spent budget holds back; a project under several such budgets is held by the
  // first by name.
  std::map<std::string, BudgetBlock> Blocks() const;
  // By project, the tightest money budget that would stop bursts once spent and is not spent
  // yet (the one with least left).
  std::map<std::string, BudgetRoom> Room() const;
  // Every crossed threshold of every budget, for the budget-threshold alert.
  std::vector<AlertInputs::BudgetThreshold> AlertThresholds() const;
  // meridian_budget_* families into `out` (a fresh registry, as TelemetryMetrics does).
  void Render(api::Metrics* out) const;

 private:
  void Loop();

  store::Store* store_;
  const base::Clock* clock_;
  BudgetWatchOptions options_;
  std::function<void()> changed_;

  mutable std::mutex mu_;  // guards readings_ and tenancy_
  std::vector<BudgetReading> readings_;
  api::Tenancy tenancy_;

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool stopping_ = false;
  bool woken_ = false;
  std::thread thread_;
};

}  // namespace meridian::server
