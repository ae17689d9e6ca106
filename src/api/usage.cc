#include "api/usage.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "api/job_life.h"

namespace meridian::api {

std::vector<store::UsageRecord> UsageOfRun(const store::JobRecord& job, double end,
                                           const std::string& outcome) {
  std::vector<store::UsageRecord> out;
  auto time_of = [](const store::Json& o, const char* key) {
    return o.is_object() && o.contains(key) && o[key].is_number() ? o[key].get<double>() : 0.0;
  };
  if (!job.allocation.is_array() || job.allocation.empty()) return out;
  // From the run's start; a run whose tasks ended (or were stopped) before any was reported
  // running has no start, and counts from its placement: its devices were held from then.
  double started = time_of(job.status, "startedAt");
  if (started <= 0) started = time_of(job.allocation[0], "placedAt");
  if (started <= 0) return out;
  int64_t cpu_milli = 0, memory_mib = 0;
  if (auto spec = SpecOf(job); spec.ok()) {
    cpu_milli = spec->cpu_milli;
    memory_mib = spec->memory_mib;
  }
  for (const store::Json& task : job.allocation) {
    if (!task.is_object()) continue;
    store::UsageRecord u;
    u.job = job.id;
    u.generation = job.generation;
    u.task = task.value("task", 0);
    u.project = job.project;
    u.user = job.user;
    u.cluster = task.value("cluster", "");
    u.pool = task.value("pool", "");
    u.node = task.value("node", "");
    u.gpu_model = task.value("gpuModel", "");
    // The share the placement wrote (a MIG slice by its memory slices); an allocation made
    // before it did counts its devices' milli.
    if (task.contains("gpus") && task["gpus"].is_number()) {
      u.gpus = task["gpus"].get<double>();
    } else {
      for (const store::Json& d : task.value("devices", store::Json::array())) {
        u.gpus += d.value("milli", 1000) / 1000.0;
      }
    }
    u.cpu_milli = cpu_milli;
    u.memory_mib = memory_mib;
    u.price_per_gpu_hour = task.value("pricePerGpuHour", 0.0);
    u.started_at = started;
    u.ended_at = std::max(started, end);
    u.outcome = outcome;
    out.push_back(std::move(u));
  }
  return out;
}

base::Status ReadUsage(store::Tx& tx, store::UsageFilter filter, double now,
                       std::vector<store::UsageRecord>* out) {
  for (;;) {
    auto page = tx.ListUsage(filter);
    if (!page.ok()) return page.status();
    for (store::UsageRecord& u : *page) out->push_back(std::move(u));
    if (page->size() < static_cast<size_t>(filter.limit)) break;
    filter.after_seq = out->back().seq;
  }
  store::JobFilter jobs;
  jobs.phases = {"Placed", "Running", "Stopping"};
  jobs.projects = filter.projects;
  jobs.limit = 1000;
  for (;;) {
    auto page = tx.ListJobs(jobs);
    if (!page.ok()) return page.status();
    for (const store::JobRecord& j : *page) {
      for (store::UsageRecord& u : UsageOfRun(j, now, "Running")) out->push_back(std::move(u));
    }
    if (page->size() < static_cast<size_t>(jobs.limit)) break;
    jobs.after_id = page->back().id;
  }
  return base::Status::Ok();
}

std::map<std::string, UsageTotals> SumUsage(
    const std::vector<store::UsageRecord>& records, double from, double to,
    const std::function<std::string(const store::UsageRecord&)>& key_of, UsageTotals* total) {
  std::map<std::string, UsageTotals> out;
  std::map<std::string, std::set<int64_t>> jobs;
  std::map<std::string, std::set<std::pair<int64_t, int64_t>>> runs;
  std::set<int64_t> all_jobs;
  std::set<std::pair<int64_t, int64_t>> all_runs;
  *total = {};
  for (const store::UsageRecord& u : records) {
    const double seconds = std::min(u.ended_at, to) - std::max(u.started_at, from);
    if (seconds <= 0) continue;
    std::string key = key_of(u);
    if (key.empty()) key = kNoKey;
    for (UsageTotals* t : {&out[key], total}) {
      t->gpu_seconds += u.gpus * seconds;
      t->cpu_seconds += static_cast<double>(u.cpu_milli) / 1000.0 * seconds;
      t->memory_gib_seconds += static_cast<double>(u.memory_mib) / 1024.0 * seconds;
      t->cost += u.gpus * seconds / 3600.0 * u.price_per_gpu_hour;
    }
    jobs[key].insert(u.job);
    runs[key].insert({u.job, u.generation});
    all_jobs.insert(u.job);
    all_runs.insert({u.job, u.generation});
  }
  for (auto& [key, t] : out) {
    t.jobs = static_cast<int64_t>(jobs[key].size());
    t.runs = static_cast<int64_t>(runs[key].size());
  }
  total->jobs = static_cast<int64_t>(all_jobs.size());
  total->runs = static_cast<int64_t>(all_runs.size());
  return out;
}

std::map<std::string, std::vector<UsageStep>> SumUsageByStep(
    const std::vector<store::UsageRecord>& records, double from, double to, double step,
    int64_t steps, const std::function<std::string(const store::UsageRecord&)>& key_of) {
  std::map<std::string, std::vector<UsageStep>> out;
  for (const store::UsageRecord& u : records) {
    const double start = std::max(u.started_at, from);
    const double end = std::min(u.ended_at, to);
    if (end <= start) continue;
    std::string key = key_of(u);
    if (key.empty()) key = kNoKey;
    std::vector<UsageStep>& series = out[key];
    series.resize(static_cast<size_t>(steps));
    const int64_t first =
        std::clamp<int64_t>(static_cast<int64_t>(std::floor((start - from) / step)), 0, steps - 1);
    for (int64_t k = first; k < steps; ++k) {
      const double lo = from + static_cast<double>(k) * step;
      if (lo >= end) break;
      const double hi = k + 1 == steps ? to : std::min(to, lo + step);
      const double seconds = std::min(end, hi) - std::max(start, lo);
      if (seconds <= 0) continue;
      UsageStep& s = series[static_cast<size_t>(k)];
      s.gpu_seconds += u.gpus * seconds;
      s.cost += u.gpus * seconds / 3600.0 * u.price_per_gpu_hour;
    }
  }
  return out;
}

}  // namespace meridian::api
