#include "domain/budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace meridian::domain {

namespace {

constexpr double kMaxWindow = 400.0 * 24 * 3600;  // as a usage report's

std::string Money(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string Hours(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

const char* BudgetActionName(BudgetAction a) {
  switch (a) {
    case BudgetAction::kAlert:
      return "alert";
    case BudgetAction::kBlockBursts:
      return "block-bursts";
    case BudgetAction::kBlockCloud:
      return "block-cloud";
  }
  return "block-bursts";
}

void ReadBudgetSpec(FieldReader& s) {
  int scopes = 0;
  for (const char* k : {"organization", "team", "project"}) {
    if (s.Has(k)) ++scopes;
    if (s.Name(k, false).empty() && s.Has(k)) s.Error(k, "must name one");
  }
  if (scopes != 1) s.Error("project", "exactly one of organization, team or project is required");
  const std::string period = s.Enum("period", {"month", "rolling"}, "month");
  if (period == "rolling") {
    if (!s.Has("window")) s.Error("window", "is required for a rolling period (e.g. 30d)");
    s.Duration("window", 3600, kMaxWindow, 30 * 24 * 3600.0);
  } else if (s.Has("window")) {
    s.Error("window", "is used only by a rolling period (a month is the calendar's)");
    s.Skip("window");
  }
  if (!s.Has("amount") && !s.Has("gpuHours")) {
    s.Error("amount", "a budget needs amount (money) or gpuHours, or both");
  }
  if (s.Has("amount")) s.Number("amount", 0.01, 1e12, 0);
  if (s.Has("gpuHours")) s.Number("gpuHours", 0.01, 1e12, 0);
  const std::vector<int64_t> thresholds = s.IntList("thresholds", 1, 1000);
  for (size_t i = 1; i < thresholds.size(); ++i) {
    if (thresholds[i] <= thresholds[i - 1]) {
      s.Error("thresholds", "must be ascending percentages, each once");
      break;
    }
  }
  s.Enum("action", {"alert", "block-bursts", "block-cloud"}, "block-bursts");
  const std::vector<std::string> clusters = s.StringList("clusters");
  for (const std::string& c : clusters) {
    if (!IsValidName(c)) s.Error("clusters", "\"" + c + "\" is not a cluster name");
  }
  s.String("description", false);
}

Budget BudgetFromSpec(const std::string& name, const Json& spec) {
  Budget b;
  b.name = name;
  for (const char* k : {"organization", "team", "project"}) {
    if (spec.contains(k) && !spec.at(k).get<std::string>().empty()) {
      b.level = k;
      b.scope = spec.at(k).get<std::string>();
    }
  }
  b.calendar_month = spec.value("period", "month") != "rolling";
  b.window = spec.value("window", 0.0);
  b.amount = spec.value("amount", -1.0);
  b.gpu_hours = spec.value("gpuHours", -1.0);
  if (spec.contains("thresholds")) {
    for (const Json& t : spec.at("thresholds")) b.thresholds.push_back(t.get<int64_t>());
  } else {
    b.thresholds = {50, 80, 100};
  }
  const std::string action = spec.value("action", "block-bursts");
  b.action = action == "alert"         ? BudgetAction::kAlert
             : action == "block-cloud" ? BudgetAction::kBlockCloud
                                       : BudgetAction::kBlockBursts;
  if (spec.contains("clusters")) {
    for (const Json& c : spec.at("clusters")) b.clusters.push_back(c.get<std::string>());
  }
  return b;
}

double MonthStart(double t) {
  const std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  tm.tm_mday = 1;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  return static_cast<double>(timegm(&tm));
}

double NextMonthStart(double t) {
  const std::time_t s = static_cast<std::time_t>(MonthStart(t));
  std::tm tm{};
  gmtime_r(&s, &tm);
  tm.tm_mon += 1;  // timegm normalises December + 1 into January of the next year
  return static_cast<double>(timegm(&tm));
}

BudgetPeriod PeriodOf(const Budget& b, double now) {
  if (b.calendar_month) return {MonthStart(now), NextMonthStart(now)};
  return {now - b.window, now};
}

BudgetStatus EvaluateBudget(const Budget& b, const BudgetUse& use, double now) {
  BudgetStatus s;
  s.period = PeriodOf(b, now);
  s.use = use;
  // A month's end is ahead: what is spent, and the recent rate until then. A rolling window
  // always ends now: at a steady rate it would hold the rate times its length.
  const double hours_left = b.calendar_month ? std::max(0.0, (s.period.to - now) / 3600) : 0;
  if (b.calendar_month) {
    s.forecast_cost = use.cost + use.cost_per_hour * hours_left;
    s.forecast_gpu_hours = use.gpu_hours + use.gpu_hours_per_hour * hours_left;
  } else {
    s.forecast_cost = use.cost_per_hour * b.window / 3600;
    s.forecast_gpu_hours = use.gpu_hours_per_hour * b.window / 3600;
  }
  auto share = [](double used, double limit) { return limit > 0 ? 100 * used / limit : 0.0; };
  s.percent = std::max(share(use.cost, b.amount), share(use.gpu_hours, b.gpu_hours));
  s.forecast_percent =
      std::max(share(s.forecast_cost, b.amount), share(s.forecast_gpu_hours, b.gpu_hours));
  for (int64_t t : b.thresholds) {
    if (s.percent >= static_cast<double>(t)) s.crossed.push_back(t);
  }
  s.exhausted = s.percent >= 100;
  s.blocks_bursts = s.exhausted && b.action != BudgetAction::kAlert;
  s.blocks_cloud = s.exhausted && b.action == BudgetAction::kBlockCloud;
  return s;
}

std::string BudgetStatus::Summary(const Budget& b) const {
  std::string out;
  if (b.amount > 0) out = "cost " + Money(use.cost) + " of " + Money(b.amount);
  if (b.gpu_hours > 0) {
    out += (out.empty() ? "" : ", ") + Hours(use.gpu_hours) + " of " + Hours(b.gpu_hours) +
           " GPU-hours";
  }
  out += " (" + std::to_string(static_cast<int64_t>(std::floor(percent))) + "%) ";
  if (b.calendar_month) return out + "this month";
  // A rolling window in days, or in hours when shorter than two days.
  const bool days = b.window >= 2 * 86400;
  const int64_t n = std::llround(b.window / (days ? 86400 : 3600));
  out += "in the last " + std::to_string(n) + (days ? " days" : " hours");
  return out;
}

}  // namespace meridian::domain
