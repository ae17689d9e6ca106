// GET /api/v1/reports/usage: accounting (api/usage.h) summed over a window, as Slurm's sreport
// answers it, by project, team, organization, user, cluster, pool or GPU model.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/api.h"
#include "api/api_internal.h"
#include "api/usage.h"
#include "domain/budget.h"

namespace meridian::api {

using base::Status;

namespace {

// A time query parameter in Unix seconds; on a bad value answers 400 and returns nothing.
std::optional<double> TimeParam(Api::Call& call, const std::string& name, double fallback) {
  if (!call.req.has_param(name)) return fallback;
  const std::string text = call.req.get_param_value(name);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || v < 0) {
    Fail(call, 400, "invalid_argument", name + ": \"" + text + "\" is not a time in Unix seconds",
         name);
    return std::nullopt;
  }
  return v;
}

Json Rounded(double v, double unit) { return std::round(v * unit) / unit; }

Json TotalsToJson(const UsageTotals& t) {
  return {{"jobs", t.jobs},
          {"runs", t.runs},
          {"gpuSeconds", Rounded(t.gpu_seconds, 1000)},
          {"gpuHours", Rounded(t.gpu_seconds / 3600, 10000)},
          {"cpuCoreHours", Rounded(t.cpu_seconds / 3600, 10000)},
          {"memoryGibHours", Rounded(t.memory_gib_seconds / 3600, 10000)},
          {"cost", Rounded(t.cost, 10000)}};
}

// A report reads every record of its window: a window is at most this long.
constexpr double kMaxWindowDays = 400;
// A report over time has at most this many steps, each at least a minute.
constexpr int64_t kMaxSteps = 1000;
constexpr double kMinStep = 60;

}  // namespace

void Api::UsageReport(Call& call) {
  const double now = clock_->Now();
  auto to = TimeParam(call, "to", now);
  if (!to) return;
  auto from = TimeParam(call, "from", domain::MonthStart(*to));
  if (!from) return;
  if (*to <= *from) {
    return Fail(call, 400, "invalid_argument", "to: must be after from", "to");
  }
  if (*to - *from > kMaxWindowDays * 86400) {
    return Fail(call, 400, "invalid_argument",
                "from: a report's window is at most " +
                    std::to_string(static_cast<int>(kMaxWindowDays)) + " days",
                "from");
  }
  // Over time (the dashboard's spend chart): the window in steps of `step` seconds as well.
  auto step = TimeParam(call, "step", 0);
  if (!step) return;
  if (*step != 0 && (*step < kMinStep || (*to - *from) / *step > kMaxSteps)) {
    return Fail(call, 400, "invalid_argument",
                "step: at least 60 seconds, and at most " + std::to_string(kMaxSteps) +
                    " steps in the window",
                "step");
  }
  const std::string by =
      call.req.has_param("by") ? call.req.get_param_value("by") : std::string("project");
  auto config = Config();
  const Tenancy& tenancy = config->tenancy;
  std::function<std::string(const store::UsageRecord&)> key_of;
  if (by == "project") {
    key_of = [](const store::UsageRecord& u) { return u.project; };
  } else if (by == "team") {
    key_of = [&](const store::UsageRecord& u) { return tenancy.TeamOf(u.project); };
  } else if (by == "organization") {
    key_of = [&](const store::UsageRecord& u) { return tenancy.OrgOfProject(u.project); };
  } else if (by == "user") {
    key_of = [](const store::UsageRecord& u) { return u.user; };
  } else if (by == "cluster") {
    key_of = [](const store::UsageRecord& u) { return u.cluster; };
  } else if (by == "pool") {
    key_of = [](const store::UsageRecord& u) { return u.pool; };
  } else if (by == "gpuModel") {
    key_of = [](const store::UsageRecord& u) { return u.gpu_model; };
  } else {
    return Fail(call, 400, "invalid_argument",
                "by: \"" + by +
                    "\" is not one of project, team, organization, user, cluster, pool, gpuModel",
                "by");
  }
  // Who is not an admin reads the records of the projects it may read, and no other is loaded.
  std::vector<std::string> readable;
  if (!call.access.IsAdmin()) {
    readable = call.access.Readable(config->projects);
    if (readable.empty()) readable.push_back("");  // no project: no record matches
  }
  // The runs that ended, and those still going as if they ended now: one read, so that a run
  // ending meanwhile is counted once.
  std::vector<store::UsageRecord> records;
  Status read = store_->Read([&](store::Tx& tx) {
    records.clear();
    store::UsageFilter f;
    f.from = *from;
    f.to = *to;
    f.projects = readable;
    return ReadUsage(tx, f, now, &records);
  });
  if (!read.ok()) return Fail(call, read);
  UsageTotals total;
  const auto sums = SumUsage(records, *from, *to, key_of, &total);
  Json rows = Json::array();
  for (const auto& [key, t] : sums) {
    Json row = TotalsToJson(t);
    row["key"] = key;
    rows.push_back(std::move(row));
  }
  Json answer = {
      {"from", *from}, {"to", *to}, {"by", by}, {"rows", rows}, {"total", TotalsToJson(total)}};
  if (*step > 0) {
    // Each key's cost and GPU-hours per step, the steps' starts in `at`; the last step ends at
    // `to`. Every key of the rows has a series (zeros where it used nothing).
    const int64_t steps = static_cast<int64_t>(std::ceil((*to - *from) / *step));
    auto by_step = SumUsageByStep(records, *from, *to, *step, steps, key_of);
    Json at = Json::array();
    for (int64_t k = 0; k < steps; ++k) at.push_back(*from + static_cast<double>(k) * *step);
    Json keys = Json::array();
    for (const auto& [key, t] : sums) {
      std::vector<UsageStep>& series = by_step[key];
      series.resize(static_cast<size_t>(steps));
      Json cost = Json::array(), hours = Json::array();
      for (const UsageStep& s : series) {
        cost.push_back(Rounded(s.cost, 10000));
        hours.push_back(Rounded(s.gpu_seconds / 3600, 10000));
      }
      keys.push_back({{"key", key}, {"cost", cost}, {"gpuHours", hours}});
    }
    answer["series"] = {{"step", *step}, {"at", at}, {"keys", keys}};
  }
  Respond(call, 200, answer);
}

}  // namespace meridian::api
