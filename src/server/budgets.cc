#include "server/budgets.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "api/usage.h"
#include "base/log.h"

namespace meridian::server {

using base::Status;

namespace {

// The forecast extrapolates the spend of the last day (or of the period so far, if shorter).
constexpr double kRateWindow = 86400;

Json Rounded(double v) { return std::round(v * 10000) / 10000; }

api::Scope ScopeOf(const domain::Budget& b) {
  api::Scope s;
  if (b.level == "organization") s.organization = b.scope;
  if (b.level == "team") s.team = b.scope;
  if (b.level == "project") s.project = b.scope;
  return s;
}

}  // namespace

Json BudgetReading::ToJson() const {
  const domain::BudgetStatus& s = status;
  Json crossed = Json::array();
  for (int64_t t : s.crossed) crossed.push_back(t);
  return {{"evaluatedAt", evaluated_at},
          {"period", {{"from", s.period.from}, {"to", s.period.to}}},
          {"spent", {{"cost", Rounded(s.use.cost)}, {"gpuHours", Rounded(s.use.gpu_hours)}}},
          {"rate",
           {{"costPerHour", Rounded(s.use.cost_per_hour)},
            {"gpuHoursPerHour", Rounded(s.use.gpu_hours_per_hour)}}},
          {"forecast",
           {{"cost", Rounded(s.forecast_cost)},
            {"gpuHours", Rounded(s.forecast_gpu_hours)},
            {"percent", Rounded(s.forecast_percent)}}},
          {"percent", Rounded(s.percent)},
          {"crossed", crossed},
          {"exhausted", s.exhausted},
          {"blocking", s.blocks_cloud    ? "bursts and cloud placements"
                       : s.blocks_bursts ? "bursts"
                                         : ""},
          {"summary", s.Summary(budget)}};
}

std::vector<BudgetReading> EvaluateBudgets(const std::vector<domain::Budget>& budgets,
                                           const api::Tenancy& tenancy,
                                           const std::vector<store::UsageRecord>& records,
                                           double now) {
  std::vector<BudgetReading> out;
  for (const domain::Budget& b : budgets) {
    const api::Scope scope = ScopeOf(b);
    const std::set<std::string> clusters(b.clusters.begin(), b.clusters.end());
    auto key_of = [&](const store::UsageRecord& u) -> std::string {
      if (!clusters.empty() && !clusters.count(u.cluster)) return "";
      return tenancy.Contains(scope, u.project) ? "in" : "";
    };
    const domain::BudgetPeriod period = domain::PeriodOf(b, now);
    domain::BudgetUse use;
    api::UsageTotals all;  // of every record: not this budget's
    const auto whole = api::SumUsage(records, period.from, now, key_of, &all);
    if (auto it = whole.find("in"); it != whole.end()) {
      use.cost = it->second.cost;
      use.gpu_hours = it->second.gpu_seconds / 3600;
    }
    const double recent_from = std::max(period.from, now - kRateWindow);
    if (now > recent_from) {
      const auto recent = api::SumUsage(records, recent_from, now, key_of, &all);
      if (auto it = recent.find("in"); it != recent.end()) {
        const double hours = (now - recent_from) / 3600;
        use.cost_per_hour = it->second.cost / hours;
        use.gpu_hours_per_hour = it->second.gpu_seconds / 3600 / hours;
      }
    }
    out.push_back({b, domain::EvaluateBudget(b, use, now), now});
  }
  return out;
}

BudgetWatch::BudgetWatch(store::Store* store, const base::Clock* clock, BudgetWatchOptions options)
    : store_(store), clock_(clock), options_(options) {}

BudgetWatch::~BudgetWatch() { Stop(); }

void BudgetWatch::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void BudgetWatch::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BudgetWatch::Loop() {
  std::string last;
  for (;;) {
    Status s = RunOnce();
    if (!s.ok() && s.message() != last) base::log::Error("budgets: {}", s.message());
    last = s.ok() ? "" : s.message();
    std::unique_lock<std::mutex> lock(wake_mu_);
    if (wake_cv_.wait_for(lock, std::chrono::duration<double>(options_.interval),
                          [this] { return stopping_ || woken_; }) &&
        stopping_) {
      return;
    }
    woken_ = false;
  }
}

Status BudgetWatch::RunOnce() {
  const double now = clock_->Now();
  std::vector<domain::Budget> budgets;
  api::Tenancy tenancy;
  std::vector<store::UsageRecord> records;
  Status read = store_->Read([&](store::Tx& tx) {
    budgets.clear();
    tenancy = {};
    records.clear();
    auto docs = tx.ListObjects("Budget");
    if (!docs.ok()) return docs.status();
    for (const store::Object& o : *docs) budgets.push_back(domain::BudgetFromSpec(o.name, o.spec));
    if (budgets.empty()) return Status::Ok();
    for (const char* kind : {"Project", "Team"}) {
      auto objects = tx.ListObjects(kind);
      if (!objects.ok()) return objects.status();
      for (const store::Object& o : *objects) {
        if (o.kind == "Project") tenancy.team_of_project[o.name] = o.spec.value("team", "");
        if (o.kind == "Team") tenancy.org_of_team[o.name] = o.spec.value("organization", "");
      }
    }
    // Only the projects some budget holds are read, from the earliest period's start.
    std::vector<std::string> projects;
    double from = now;
    for (const domain::Budget& b : budgets) {
      from = std::min(from, domain::PeriodOf(b, now).from);
      for (const auto& [project, team] : tenancy.team_of_project) {
        if (tenancy.Contains(ScopeOf(b), project)) projects.push_back(project);
      }
    }
    std::sort(projects.begin(), projects.end());
    projects.erase(std::unique(projects.begin(), projects.end()), projects.end());
    if (projects.empty()) return Status::Ok();
    store::UsageFilter f;
    f.from = from;
    f.to = now;
    f.projects = projects;
    // Runs still going count up to now, as a report counts them.
    return api::ReadUsage(tx, f, now, &records);
  });
  if (!read.ok()) return read;
  std::vector<BudgetReading> readings = EvaluateBudgets(budgets, tenancy, records, now);
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto blocking = [](const std::vector<BudgetReading>& rs) {
      std::vector<std::pair<std::string, int>> out;
      for (const BudgetReading& r : rs) {
        out.emplace_back(r.budget.name + "/" + r.budget.ScopeText(), r.status.blocks_cloud    ? 2
                                                                     : r.status.blocks_bursts ? 1
                                                                                              : 0);
      }
      return out;
    };
    changed = blocking(readings) != blocking(readings_);
    readings_ = std::move(readings);
    tenancy_ = std::move(tenancy);
  }
  if (changed && changed_) changed_();
  return Status::Ok();
}

void BudgetWatch::Wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_all();
}

Json BudgetWatch::BudgetStatus(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const BudgetReading& r : readings_) {
    if (r.budget.name == name) return r.ToJson();
  }
  return nullptr;
}

std::map<std::string, BudgetBlock> BudgetWatch::Blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, BudgetBlock> out;
  for (const BudgetReading& r : readings_) {
    if (!r.status.blocks_bursts) continue;
    const std::string why = "budget " + r.budget.name + " (" + r.budget.ScopeText() +
                            ") is spent: " + r.status.Summary(r.budget);
    for (const auto& [project, team] : tenancy_.team_of_project) {
      if (!tenancy_.Contains(ScopeOf(r.budget), project)) continue;
      BudgetBlock& b = out[project];
      if (b.budget.empty()) b = {r.budget.name, why, r.status.blocks_cloud};
      b.cloud = b.cloud || r.status.blocks_cloud;
    }
  }
  return out;
}

std::map<std::string, BudgetRoom> BudgetWatch::Room() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, BudgetRoom> out;
  for (const BudgetReading& r : readings_) {
    if (r.budget.amount <= 0 || r.budget.action == domain::BudgetAction::kAlert ||
        r.status.blocks_bursts) {
      continue;
    }
    const double left = std::max(0.0, r.budget.amount - r.status.use.cost);
    for (const auto& [project, team] : tenancy_.team_of_project) {
      if (!tenancy_.Contains(ScopeOf(r.budget), project)) continue;
      auto it = out.find(project);
      if (it == out.end() || left < it->second.left) out[project] = {r.budget.name, left};
    }
  }
  return out;
}

std::vector<AlertInputs::BudgetThreshold> BudgetWatch::AlertThresholds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return BudgetAlerts(readings_);
}

std::vector<AlertInputs::BudgetThreshold> BudgetAlerts(const std::vector<BudgetReading>& readings) {
  std::vector<AlertInputs::BudgetThreshold> out;
  for (const BudgetReading& r : readings) {
    std::vector<int64_t> crossed = r.status.crossed;
    // A budget that blocks says so, whatever thresholds it names.
    if (r.status.blocks_bursts && std::find(crossed.begin(), crossed.end(), 100) == crossed.end()) {
      crossed.push_back(100);
    }
    for (int64_t t : crossed) {
      out.push_back({r.budget.name, r.budget.level, r.budget.scope, t, r.status.percent,
                     r.status.Summary(r.budget), r.status.blocks_bursts && t >= 100});
    }
  }
  return out;
}

void BudgetWatch::Render(api::Metrics* out) const {
  out->Describe("meridian_budget_spent", "gauge",
                "What a Budget's scope spent in its period so far (unit: cost or gpuHours).");
  out->Describe("meridian_budget_limit", "gauge", "A Budget's limit (unit: cost or gpuHours).");
  out->Describe("meridian_budget_forecast", "gauge",
                "What a Budget's scope will have spent at its period's end at the recent rate.");
  out->Describe("meridian_budget_blocking", "gauge",
                "1 while a spent Budget stops new cloud capacity for its scope.");
  std::lock_guard<std::mutex> lock(mu_);
  for (const BudgetReading& r : readings_) {
    const api::Metrics::Labels scope = {
        {"budget", r.budget.name}, {"level", r.budget.level}, {"scope", r.budget.scope}};
    auto with = [&](const char* unit) {
      api::Metrics::Labels l = scope;
      l.push_back({"unit", unit});
      return l;
    };
    out->Set("meridian_budget_spent", with("cost"), r.status.use.cost);
    out->Set("meridian_budget_spent", with("gpuHours"), r.status.use.gpu_hours);
    if (r.budget.amount > 0) out->Set("meridian_budget_limit", with("cost"), r.budget.amount);
    if (r.budget.gpu_hours > 0) {
      out->Set("meridian_budget_limit", with("gpuHours"), r.budget.gpu_hours);
    }
    out->Set("meridian_budget_forecast", with("cost"), r.status.forecast_cost);
    out->Set("meridian_budget_forecast", with("gpuHours"), r.status.forecast_gpu_hours);
    out->Set("meridian_budget_blocking", scope, r.status.blocks_bursts ? 1 : 0);
  }
}

}  // namespace meridian::server
