// The node service's part in datasets (docs/adr/0044-datasets.md): what to evict from a site's
// cache before a staging, and what the agents report of staging (progress in the job's events,
// the cache as it is now in DatasetCopy objects). Part of NodeService (nodes.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "api/job_life.h"
#include "server/nodes.h"

namespace meridian::server {

using base::Status;

namespace {

// Steps of one dataset's staging, each said once: a quarter of the copy at a time, then how it
// ended.
int Step(const protocol::StagingProgress& p) {
  if (p.state == "staged") return 100;
  if (p.state == "cached") return 101;
  if (p.state == "failed") return 102;
  const int64_t total = std::max<int64_t>(1, p.total_bytes);
  const int quarter = static_cast<int>(std::min<int64_t>(3, 4 * p.done_bytes / total));
  return p.attempt * 4 + quarter - 4;  // a new attempt starts over, as new steps
}

std::string Gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / 1073741824.0);
  return buf;
}

}  // namespace

std::vector<std::string> NodeService::EvictionsLocked(const std::string& cluster,
                                                      const protocol::DataMount& m) const {
  auto site = sites_.find(cluster);
  if (site == sites_.end() || site->second.storage.cache_capacity_gib <= 0) return {};
  auto held = copies_.find(cluster);
  if (held == copies_.end() || held->second.count(m.name)) return {};
  double used = 0;
  for (const auto& [name, c] : held->second) used += c.size_gib;
  const double capacity = site->second.storage.cache_capacity_gib;
  if (used + m.size_gib <= capacity) return {};
  // Read by a task assigned in the cluster now (the copy's path is one of its mounts).
  std::set<std::string> read;
  for (const auto& [node, tasks] : assigned_) {
    for (const auto& [key, a] : tasks) {
      for (const protocol::DataMount& d : a.assignment.data) read.insert(d.path);
    }
  }
  std::vector<const domain::DatasetCopy*> candidates;
  for (const auto& [name, c] : held->second) {
    auto d = datasets_.find(name);
    const bool pinned = d != datasets_.end() &&
                        std::count(d->second.pinned_in.begin(), d->second.pinned_in.end(), cluster);
    if (!pinned && !read.count(c.path)) candidates.push_back(&c);
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const domain::DatasetCopy* a, const domain::DatasetCopy* b) {
              return a->last_used < b->last_used;
            });
  std::vector<std::string> out;
  for (const domain::DatasetCopy* c : candidates) {
    if (used + m.size_gib <= capacity) break;
    out.push_back(c->path);
    used -= c->size_gib;
  }
  return out;
}

base::Result<int64_t> NodeService::ApplyStaging(const std::string& node,
                                                const std::vector<protocol::TaskReport>& tasks) {
  struct News {
    int64_t job;
    int32_t task;
    int64_t generation;
    protocol::StagingProgress progress;
  };
  std::vector<News> news;
  std::map<std::string, domain::Dataset> datasets;
  std::map<std::string, domain::Cluster> sites;
  std::map<std::string, std::map<std::string, domain::DatasetCopy>> copies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const protocol::TaskReport& t : tasks) {
      for (const protocol::StagingProgress& p : t.staging) {
        const auto key = std::make_tuple(t.job, t.report.task, t.report.generation, p.dataset);
        auto said = staging_steps_.find(key);
        const int step = Step(p);
        if (said != staging_steps_.end() && said->second >= step) continue;
        if (staging_steps_.size() > 100000) staging_steps_.clear();  // bounded; said again at worst
        staging_steps_[key] = step;
        news.push_back({t.job, t.report.task, t.report.generation, p});
      }
    }
    if (news.empty()) return 0;
    datasets = datasets_;
    sites = sites_;
    copies = copies_;
  }
  const double now = clock_->Now();
  int64_t seq = 0;
  std::vector<domain::DatasetCopy> kept;
  std::vector<std::pair<std::string, std::string>> gone;  // cluster, dataset
  Status s = store_->Write([&](store::Tx& tx) {
    for (const News& n : news) {
      auto job = tx.GetJob(n.job);
      if (!job.ok() || job->generation != n.generation || !job->allocation.is_array() ||
          n.task < 0 || n.task >= static_cast<int32_t>(job->allocation.size())) {
        continue;  // a run that is over
      }
      const std::string cluster = job->allocation[n.task].value("cluster", "");
      const protocol::StagingProgress& p = n.progress;
      const std::string task = " (task " + std::to_string(n.task) + ")";
      std::string reason = "Staging", type = "Normal", message;
      if (p.state == "copying") {
        const int64_t total = std::max<int64_t>(1, p.total_bytes);
        message = "dataset " + p.dataset + ": copying into cluster " + cluster + "'s cache, " +
                  std::to_string(100 * std::min(p.done_bytes, total) / total) + "% (" +
                  Gib(static_cast<double>(p.done_bytes)) + " of " +
                  Gib(static_cast<double>(p.total_bytes)) + ", attempt " +
                  std::to_string(p.attempt) + ")" + task;
      } else if (p.state == "staged") {
        reason = "Staged";
        message = "dataset " + p.dataset + ": staged into cluster " + cluster + "'s cache (" +
                  Gib(static_cast<double>(p.done_bytes)) + " in " +
                  std::to_string(static_cast<int64_t>(std::ceil(p.seconds))) + " s)" + task;
      } else if (p.state == "cached") {
        reason = "DatasetCached";
        message = "dataset " + p.dataset + ": found in cluster " + cluster +
                  "'s cache, nothing to copy" + task;
      } else {
        reason = "StagingFailed";
        type = "Warning";
        message = "dataset " + p.dataset + ": " + p.error + task;
      }
      auto e = tx.AppendEvent(
          {0, now, "Job", std::to_string(n.job), job->project, type, reason, message});
      if (!e.ok()) return e.status();
      seq = *e;
      if (p.state != "staged" && p.state != "cached") continue;
      // The cache as it is now: this copy, used now, and what was evicted for it.
      auto site = sites.find(cluster);
      if (site == sites.end() || site->second.storage.cache.empty()) continue;
      domain::DatasetCopy c;
      auto known = copies[cluster].find(p.dataset);
      if (known != copies[cluster].end()) c = known->second;
      c.cluster = cluster;
      c.dataset = p.dataset;
      c.path = site->second.storage.cache + "/" + p.dataset;
      auto d = datasets.find(p.dataset);
      c.size_gib = d != datasets.end() ? d->second.size_gib : c.size_gib;
      if (p.state == "staged" || c.staged_at == 0) c.staged_at = now;
      c.last_used = now;
      store::Object o;
      o.kind = "DatasetCopy";
      o.name = domain::DatasetCopyName(cluster, p.dataset);
      o.spec = CopySpec(c);
      o.updated_at = now;
      o.updated_by = "node/" + node;
      if (auto v = tx.PutObject(o, store::kAnyVersion); !v.ok()) return v.status();
      const bool news_for_scheduler = known == copies[cluster].end();
      copies[cluster][p.dataset] = c;
      kept.push_back(c);
      std::string evicted;
      for (const std::string& path : p.evicted) {
        for (auto it = copies[cluster].begin(); it != copies[cluster].end(); ++it) {
          if (it->second.path != path) continue;
          if (Status del =
                  tx.DeleteObject("DatasetCopy", domain::DatasetCopyName(cluster, it->first), -1);
              !del.ok() && del.code() != base::StatusCode::kNotFound) {
            return del;
          }
          evicted += (evicted.empty() ? "" : ", ") + it->first;
          gone.emplace_back(cluster, it->first);
          copies[cluster].erase(it);
          break;
        }
      }
      if (news_for_scheduler || !evicted.empty()) {
        // An estate event: the scheduler reads the caches again (server/controller_config.cc).
        auto ce =
            tx.AppendEvent({0, now, "DatasetCopy", o.name, "", "Normal",
                            p.state == "staged" ? "DatasetStaged" : "DatasetCached",
                            "dataset " + p.dataset + " is in cluster " + cluster + "'s cache" +
                                (evicted.empty() ? "" : "; evicted to make room: " + evicted)});
        if (!ce.ok()) return ce.status();
        seq = *ce;
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  for (const domain::DatasetCopy& c : kept) copies_[c.cluster][c.dataset] = c;
  for (const auto& [cluster, dataset] : gone) copies_[cluster].erase(dataset);
  return seq;
}

}  // namespace meridian::server
