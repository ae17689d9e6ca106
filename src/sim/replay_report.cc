#include "sim/replay_report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>

#include "sim/svg_chart.h"

namespace meridian::sim {
namespace {

nlohmann::json PercentilesJson(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}};
}

std::string Fixed(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct Row {
  const char* label;
  std::string (*value)(const ReplayResult&);
};

const Row kRows[] = {
    {"jobs completed", [](const ReplayResult& r) { return std::to_string(r.completed); }},
    {"never started", [](const ReplayResult& r) { return std::to_string(r.never_started); }},
    {"refused (fit nowhere)", [](const ReplayResult& r) { return std::to_string(r.refused); }},
    {"JCT mean (s)", [](const ReplayResult& r) { return Fixed(r.jct.mean); }},
    {"JCT p50 (s)", [](const ReplayResult& r) { return Fixed(r.jct.p50); }},
    {"JCT p95 (s)", [](const ReplayResult& r) { return Fixed(r.jct.p95); }},
    {"JCT p99 (s)", [](const ReplayResult& r) { return Fixed(r.jct.p99); }},
    {"wait mean (s)", [](const ReplayResult& r) { return Fixed(r.queueing_delay.mean); }},
    {"wait p50 (s)", [](const ReplayResult& r) { return Fixed(r.queueing_delay.p50); }},
    {"wait p95 (s)", [](const ReplayResult& r) { return Fixed(r.queueing_delay.p95); }},
    {"wait p99 (s)", [](const ReplayResult& r) { return Fixed(r.queueing_delay.p99); }},
    {"not running p99 (s)", [](const ReplayResult& r) { return Fixed(r.not_running.p99); }},
    {"makespan (s)", [](const ReplayResult& r) { return Fixed(r.makespan); }},
    {"GPU utilisation %", [](const ReplayResult& r) { return Fixed(100 * r.utilization, 2); }},
    {"Jain fairness", [](const ReplayResult& r) { return Fixed(r.jain_fairness, 3); }},
    {"preemptions", [](const ReplayResult& r) { return std::to_string(r.preemptions); }},
    {"GPU-h lost to preemption",
     [](const ReplayResult& r) { return Fixed(r.preempted_gpu_hours); }},
    {"idle GPU-h", [](const ReplayResult& r) { return Fixed(r.idle_gpu_hours); }},
    {"idle GPU-h while jobs waited",
     [](const ReplayResult& r) { return Fixed(r.idle_gpu_hours_queued); }},
    {"idle-held GPU-h", [](const ReplayResult& r) { return Fixed(r.idle_held_gpu_hours); }},
    {"jobs reclaimed idle", [](const ReplayResult& r) { return std::to_string(r.reclaimed); }},
    {"GPU-h reclaimed", [](const ReplayResult& r) { return Fixed(r.reclaimed_gpu_hours); }},
    {"cost", [](const ReplayResult& r) { return Fixed(r.cost, 2); }},
    {"cloud cost (instances)", [](const ReplayResult& r) { return Fixed(r.cloud_cost, 2); }},
    {"cloud node-hours", [](const ReplayResult& r) { return Fixed(r.cloud_node_hours); }},
    {"cloud nodes asked for", [](const ReplayResult& r) { return std::to_string(r.nodes_grown); }},
    {"replay wall time (s)", [](const ReplayResult& r) { return Fixed(r.wall_seconds, 2); }},
};

// Shown when the jobs read datasets.
const Row kDataRows[] = {
    {"datasets staged", [](const ReplayResult& r) { return std::to_string(r.stagings); }},
    {"cached copies evicted", [](const ReplayResult& r) { return std::to_string(r.evictions); }},
    {"GiB moved", [](const ReplayResult& r) { return Fixed(r.staged_gib); }},
    {"GPU-h waiting for data", [](const ReplayResult& r) { return Fixed(r.staging_hours); }},
    {"egress cost", [](const ReplayResult& r) { return Fixed(r.egress, 2); }},
};

// Shown when jobs ask for MIG instances.
const Row kMigRows[] = {
    {"MIG jobs", [](const ReplayResult& r) { return std::to_string(r.mig_jobs); }},
    {"MIG wait mean (s)", [](const ReplayResult& r) { return Fixed(r.mig_queueing_delay.mean); }},
    {"MIG wait p95 (s)", [](const ReplayResult& r) { return Fixed(r.mig_queueing_delay.p95); }},
    {"GPU-job wait mean (s)",
     [](const ReplayResult& r) { return Fixed(r.gpu_queueing_delay.mean); }},
    {"GPU-job wait p95 (s)", [](const ReplayResult& r) { return Fixed(r.gpu_queueing_delay.p95); }},
    {"MIG slice utilisation %",
     [](const ReplayResult& r) { return Fixed(100 * r.slice_utilization, 2); }},
    {"MIG layout changes", [](const ReplayResult& r) { return std::to_string(r.layout_changes); }},
};

bool AsksMig(const std::vector<ReplayResult>& results) {
  return std::any_of(results.begin(), results.end(),
                     [](const ReplayResult& r) { return r.mig_jobs > 0; });
}

// Whether the runs are of jobs that read datasets: the data rows and plot are shown then.
bool ReadsData(const std::vector<ReplayResult>& results) {
  return std::any_of(results.begin(), results.end(), [](const ReplayResult& r) {
    return r.policy.find("data-blind") != std::string::npos || r.stagings > 0;
  });
}

}  // namespace

void PrintReplayTable(const std::vector<ReplayResult>& results, std::ostream& out) {
  char buf[128];
  // 14 wide, or wider for a long name ("meridian+reclaim"), so that columns stay apart.
  int width = 14;
  for (const ReplayResult& r : results) {
    width = std::max(width, static_cast<int>(std::min<size_t>(r.policy.size(), 60)) + 2);
  }
  std::snprintf(buf, sizeof buf, "%-30s", "");
  out << buf;
  for (const ReplayResult& r : results) {
    std::snprintf(buf, sizeof buf, "%*s", width, r.policy.c_str());
    out << buf;
  }
  out << "\n";
  const bool data = ReadsData(results);
  auto print = [&](const Row& row) {
    std::snprintf(buf, sizeof buf, "%-30s", row.label);
    out << buf;
    for (const ReplayResult& r : results) {
      std::snprintf(buf, sizeof buf, "%*s", width, row.value(r).c_str());
      out << buf;
    }
    out << "\n";
  };
  for (const Row& row : kRows) print(row);
  if (data) {
    for (const Row& row : kDataRows) print(row);
  }
  if (AsksMig(results)) {
    for (const Row& row : kMigRows) print(row);
  }
  if (results.empty()) return;
  out << "\nshare of GPU-hours by project (quota share):\n";
  for (size_t p = 0; p < results[0].projects.size(); ++p) {
    std::snprintf(buf, sizeof buf, "  %-28s", results[0].projects[p].name.c_str());
    out << buf;
    for (const ReplayResult& r : results) {
      std::snprintf(buf, sizeof buf, "%7.1f%% (%3.0f%%)", 100 * r.projects[p].share,
                    100 * r.projects[p].quota_share);
      out << buf;
    }
    out << "\n";
  }
}

nlohmann::json ReplayJson(const std::vector<ReplayResult>& results) {
  nlohmann::json policies = nlohmann::json::array();
  for (const ReplayResult& r : results) {
    nlohmann::json projects = nlohmann::json::array();
    for (const ProjectStats& p : r.projects) {
      projects.push_back({{"project", p.name},
                          {"gpu_hours", p.gpu_hours},
                          {"mean_gpus", p.mean_gpus},
                          {"share", p.share},
                          {"guaranteed_gpus", p.guaranteed_gpus},
                          {"quota_share", p.quota_share}});
    }
    policies.push_back(
        {{"policy", r.policy},
         {"jobs", r.jobs},
         {"completed", r.completed},
         {"never_started", r.never_started},
         {"refused", r.refused},
         {"jct", PercentilesJson(r.jct)},
         {"queueing_delay", PercentilesJson(r.queueing_delay)},
         {"not_running", PercentilesJson(r.not_running)},
         {"makespan", r.makespan},
         {"utilization", r.utilization},
         {"jain_fairness", r.jain_fairness},
         {"preemptions", r.preemptions},
         {"preempted_gpu_hours", r.preempted_gpu_hours},
         {"idle_gpu_hours", r.idle_gpu_hours},
         {"idle_gpu_hours_while_queued", r.idle_gpu_hours_queued},
         {"idle_held_gpu_hours", r.idle_held_gpu_hours},
         {"reclaimed", r.reclaimed},
         {"reclaimed_gpu_hours", r.reclaimed_gpu_hours},
         {"cost", r.cost},
         {"cloud_cost", r.cloud_cost},
         {"cloud_node_hours", r.cloud_node_hours},
         {"nodes_grown", r.nodes_grown},
         {"stagings", r.stagings},
         {"evictions", r.evictions},
         {"staged_gib", r.staged_gib},
         {"staging_hours", r.staging_hours},
         {"egress", r.egress},
         {"mig_jobs", r.mig_jobs},
         {"mig_queueing_delay", PercentilesJson(r.mig_queueing_delay)},
         {"gpu_queueing_delay", PercentilesJson(r.gpu_queueing_delay)},
         {"slice_utilization", r.slice_utilization},
         {"layout_changes", r.layout_changes},
         {"budget", r.budget < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.budget)},
         {"gpus", r.total_gpus},
         {"wall_seconds", r.wall_seconds},
         {"projects", projects}});
  }
  return {{"policies", policies}};
}

base::Status WriteReplayCsv(const std::vector<ReplayResult>& results, const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return base::Status::Io(dir + ": cannot create the directory");
  }
  for (const ReplayResult& r : results) {
    // "burst <= 500" names no file well: letters, digits, '.', '+' and '-' only.
    std::string name = r.policy;
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '+' && c != '-') c = '-';
    }
    const std::string path = dir + "/replay-" + name + ".csv";
    std::ofstream f(path);
    if (!f) return base::Status::Io(path + ": cannot open for writing");
    f << "time,utilization,pending,running";
    for (const ProjectStats& p : r.projects) f << ",gpus_" << p.name;
    f << "\n";
    for (const ReplaySample& s : r.samples) {
      f << Fixed(s.time, 0) << "," << Fixed(s.utilization, 4) << "," << s.pending << ","
        << s.running;
      for (double g : s.project_gpus) f << "," << Fixed(g, 3);
      f << "\n";
    }
    if (!f) return base::Status::Io(path + ": write failed");
  }
  const std::string path = dir + "/replay-projects.csv";
  std::ofstream f(path);
  if (!f) return base::Status::Io(path + ": cannot open for writing");
  f << "policy,project,gpu_hours,mean_gpus,share,guaranteed_gpus,quota_share\n";
  for (const ReplayResult& r : results) {
    for (const ProjectStats& p : r.projects) {
      f << r.policy << "," << p.name << "," << Fixed(p.gpu_hours, 3) << "," << Fixed(p.mean_gpus, 3)
        << "," << Fixed(p.share, 4) << "," << Fixed(p.guaranteed_gpus, 1) << ","
        << Fixed(p.quota_share, 4) << "\n";
    }
  }
  return f ? base::Status::Ok() : base::Status::Io(path + ": write failed");
}

namespace {

// The runs of RunBurstReplays, cheapest first.
std::vector<const ReplayResult*> BurstFrontier(const std::vector<ReplayResult>& results) {
  std::vector<const ReplayResult*> out;
  for (const ReplayResult& r : results) {
    if (r.policy == "on-prem only" || r.policy == "burst" || r.budget >= 0) out.push_back(&r);
  }
  std::stable_sort(out.begin(), out.end(), [](const ReplayResult* a, const ReplayResult* b) {
    return a->cloud_cost < b->cloud_cost;
  });
  return out;
}

}  // namespace

void PrintBurstFrontier(const std::vector<ReplayResult>& results, std::ostream& out) {
  const auto frontier = BurstFrontier(results);
  if (frontier.size() < 2) return;
  char buf[160];
  out << "\ncost and completion time over budgets (per 30 days of trace time, "
      << (frontier.back()->block_cloud ? "block-cloud" : "block-bursts") << "):\n";
  std::snprintf(buf, sizeof buf, "  %-18s %14s %12s %12s %12s %10s\n", "run", "cloud cost",
                "JCT mean", "wait p99", "never ran", "nodes");
  out << buf;
  for (const ReplayResult* r : frontier) {
    std::snprintf(buf, sizeof buf, "  %-18s %14.2f %12.1f %12.1f %12lld %10lld\n",
                  r->policy.c_str(), r->cloud_cost, r->jct.mean, r->queueing_delay.p99,
                  static_cast<long long>(r->never_started), static_cast<long long>(r->nodes_grown));
    out << buf;
  }
}

std::string BurstFrontierHtml(const std::vector<ReplayResult>& results) {
  const auto frontier = BurstFrontier(results);
  if (frontier.size() < 2) return "";
  Series jct{"mean JCT", {}, {}}, wait{"p99 wait", {}, {}};
  std::string table =
      "<table><tr><th>run</th><th>cloud cost</th><th>JCT mean (s)</th><th>wait p99 (s)</th>"
      "<th>never ran</th></tr>";
  for (const ReplayResult* r : frontier) {
    jct.x.push_back(r->cloud_cost);
    jct.y.push_back(r->jct.mean);
    wait.x.push_back(r->cloud_cost);
    wait.y.push_back(r->queueing_delay.p99);
    table += "<tr><td>" + HtmlEscape(r->policy) + "</td><td>" + Fixed(r->cloud_cost, 2) +
             "</td><td>" + Fixed(r->jct.mean) + "</td><td>" + Fixed(r->queueing_delay.p99) +
             "</td><td>" + std::to_string(r->never_started) + "</td></tr>";
  }
  return "<h2>Bursting: what each budget buys</h2>" +
         SvgLineChart("Mean job completion time against cloud spend, over budgets",
                      "cloud cost (instances)", "seconds", {jct}) +
         SvgLineChart("p99 queueing delay against cloud spend, over budgets",
                      "cloud cost (instances)", "seconds", {wait}) +
         table + "</table>";
}

std::string ReplayHtml(const std::vector<ReplayResult>& results, const std::string& title) {
  std::vector<Series> util, queue;
  for (const ReplayResult& r : results) {
    Series u{r.policy, {}, {}}, q{r.policy, {}, {}};
    const double t0 = r.samples.empty() ? 0 : r.samples.front().time;
    for (const ReplaySample& s : r.samples) {
      u.x.push_back((s.time - t0) / 3600.0);
      u.y.push_back(100 * s.utilization);
      q.x.push_back((s.time - t0) / 3600.0);
      q.y.push_back(static_cast<double>(s.pending));
    }
    util.push_back(std::move(u));
    queue.push_back(std::move(q));
  }
  std::vector<Series> jct, wait, share;
  for (const ReplayResult& r : results) {
    jct.push_back({r.policy, {}, {r.jct.mean, r.jct.p50, r.jct.p95, r.jct.p99}});
    wait.push_back({r.policy,
                    {},
                    {r.queueing_delay.mean, r.queueing_delay.p50, r.queueing_delay.p95,
                     r.queueing_delay.p99}});
    Series s{r.policy, {}, {}};
    for (const ProjectStats& p : r.projects) s.y.push_back(100 * p.share);
    share.push_back(std::move(s));
  }
  std::vector<std::string> project_names;
  if (!results.empty()) {
    for (const ProjectStats& p : results[0].projects) project_names.push_back(p.name);
    Series quota{"quota share", {}, {}};
    for (const ProjectStats& p : results[0].projects) quota.y.push_back(100 * p.quota_share);
    share.push_back(std::move(quota));
  }
  std::string html = HtmlReportStart(title) + "<table><tr><th></th>";
  for (const ReplayResult& r : results) html += "<th>" + HtmlEscape(r.policy) + "</th>";
  html += "</tr>";
  const bool data = ReadsData(results);
  for (const Row& row : kRows) {
    html += "<tr><td>" + std::string(row.label) + "</td>";
    for (const ReplayResult& r : results) html += "<td>" + row.value(r) + "</td>";
    html += "</tr>";
  }
  for (size_t i = 0; data && i < std::size(kDataRows); ++i) {
    html += "<tr><td>" + std::string(kDataRows[i].label) + "</td>";
    for (const ReplayResult& r : results) html += "<td>" + kDataRows[i].value(r) + "</td>";
    html += "</tr>";
  }
  const bool mig = AsksMig(results);
  for (size_t i = 0; mig && i < std::size(kMigRows); ++i) {
    html += "<tr><td>" + std::string(kMigRows[i].label) + "</td>";
    for (const ReplayResult& r : results) html += "<td>" + kMigRows[i].value(r) + "</td>";
    html += "</tr>";
  }
  html += "</table>";
  if (data) {
    // What data-aware placement buys: each policy beside its data-blind run.
    std::vector<Series> moved;
    for (const ReplayResult& r : results) {
      moved.push_back({r.policy, {}, {r.staged_gib / 1024, r.staging_hours, r.egress / 100}});
    }
    html += SvgBarChart("Data moved, GPU-hours waiting for it, and egress", "",
                        {"TiB moved", "GPU-h waiting for data", "egress (hundreds)"}, moved);
  }
  if (mig) {
    // MIG shaped by demand beside the static layout: waits, and how full the MIG GPUs were.
    std::vector<Series> waits, slices;
    for (const ReplayResult& r : results) {
      waits.push_back({r.policy, {}, {r.mig_queueing_delay.mean, r.gpu_queueing_delay.mean}});
      slices.push_back({r.policy, {}, {100 * r.slice_utilization, 100 * r.utilization}});
    }
    html += SvgBarChart("Mean wait of MIG jobs and of GPU jobs", "seconds",
                        {"MIG jobs", "GPU jobs"}, waits);
    html += SvgBarChart("MIG slice utilisation and GPU utilisation", "%",
                        {"slices of MIG GPUs held", "GPUs allocated"}, slices);
  }
  html += SvgLineChart("GPU utilisation over time", "hours", "% of GPUs allocated", util);
  html += SvgLineChart("Queue length over time", "hours", "pending jobs", queue);
  html += SvgBarChart("Job completion time", "seconds", {"mean", "p50", "p95", "p99"}, jct);
  html += SvgBarChart("Queueing delay", "seconds", {"mean", "p50", "p95", "p99"}, wait);
  html += SvgBarChart("Share of GPU-hours by project vs quota share", "%", project_names, share);
  // What idle reclamation gains (runs of "+reclaim" beside the same policy without it).
  bool idle = false;
  for (const ReplayResult& r : results) idle = idle || r.idle_held_gpu_hours > 0;
  if (idle) {
    std::vector<Series> gain;
    for (const ReplayResult& r : results) {
      gain.push_back(
          {r.policy, {}, {r.idle_held_gpu_hours, r.reclaimed_gpu_hours, r.idle_gpu_hours_queued}});
    }
    html += SvgBarChart(
        "Idle reclamation: GPU-hours held idle, reclaimed, and idle while jobs "
        "waited",
        "GPU-hours", {"held idle", "reclaimed", "free while jobs waited"}, gain);
  }
  html += BurstFrontierHtml(results);
  return html + "</body></html>\n";
}

}  // namespace meridian::sim
