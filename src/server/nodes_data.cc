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
constexpr int kStaged = 100;  // the steps of an ended staging, and above: past copying

int Step(const protocol::StagingProgress& p) {
  if (p.state == "staged") return kStaged;
  if (p.state == "cached") return kStaged + 1;
  if (p.state == "failed") return kStaged + 2;
  const double total = static_cast<double>(std::max<int64_t>(1, p.total_bytes));
  const int quarter =
      static_cast<int>(std::clamp(4.0 * static_cast<double>(p.done_bytes) / total, 0.0, 3.0));
  return std::clamp(p.attempt, 1, 20) * 4 + quarter - 4;  // a new attempt starts over
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

bool NodeService::Staging(int64_t job, int64_t generation) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto nodes = nodes_of_job_.find(job);
  if (nodes == nodes_of_job_.end()) return false;
  auto assigned = [&](int32_t task) {  // this run of the task is still the node's to run
    for (const std::string& node : nodes->second) {
      auto on = assigned_.find(node);
      if (on == assigned_.end()) continue;
      auto run = on->second.find({job, task});
      if (run != on->second.end() && run->second.assignment.generation == generation) return true;
    }
    return false;
  };
  const auto first = staging_steps_.lower_bound({job, 0, 0, 0, ""});
  auto of_job = [&](auto it) {
    return it != staging_steps_.end() && std::get<0>(it->first) == job;
  };
  // What each task's latest restart said: a dataset still copying.
  std::map<int32_t, int64_t> latest;
  for (auto it = first; of_job(it); ++it) {
    if (std::get<2>(it->first) != generation) continue;
    int64_t& restarts = latest[std::get<1>(it->first)];
    restarts = std::max(restarts, std::get<3>(it->first));
  }
  for (auto it = first; of_job(it); ++it) {
    const int32_t task = std::get<1>(it->first);
    if (std::get<2>(it->first) == generation && std::get<3>(it->first) == latest[task] &&
        it->second < kStaged && assigned(task)) {
      return true;
    }
  }
  return false;
}

base::Result<int64_t> NodeService::ApplyStaging(const std::string& node,
                                                const std::vector<protocol::TaskReport>& tasks) {
  // What the node says is taken only for runs assigned to it, of datasets those runs stage, and
  // of evictions the server asked of them: a node (or a task that wrote its supervisor's file)
  // cannot make the server record, or later evict, a path of its choosing.
  struct News {
    int64_t job;
    int32_t task;
    std::string project;
    std::string cluster;
    protocol::DataMount mount;
    protocol::StagingProgress progress;
    std::tuple<int64_t, int32_t, int64_t, int64_t, std::string> key;
    int step;
  };
  std::vector<News> news;
  std::map<std::string, domain::Cluster> sites;
  std::map<std::string, std::map<std::string, domain::DatasetCopy>> copies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto here = assigned_.find(node);
    if (here == assigned_.end()) return 0;
    for (const protocol::TaskReport& t : tasks) {
      auto run = here->second.find({t.job, t.report.task});
      if (run == here->second.end() || run->second.assignment.generation != t.report.generation) {
        continue;
      }
      for (const protocol::StagingProgress& p : t.staging) {
        const auto& mounts = run->second.assignment.data;
        auto m = std::find_if(mounts.begin(), mounts.end(), [&](const protocol::DataMount& d) {
          return d.name == p.dataset && !d.stage_from.empty();
        });
        if (m == mounts.end()) continue;
        auto key = std::make_tuple(t.job, t.report.task, t.report.generation, t.report.restarts,
                                   p.dataset);
        const int step = Step(p);
        auto said = staging_steps_.find(key);
        if (said != staging_steps_.end() && said->second >= step) continue;
        protocol::StagingProgress taken = p;
        std::erase_if(taken.evicted, [&](const std::string& path) {
          return std::find(m->evict.begin(), m->evict.end(), path) == m->evict.end();
        });
        news.push_back({t.job, t.report.task, run->second.assignment.project, run->second.cluster,
                        *m, std::move(taken), std::move(key), step});
      }
    }
    if (news.empty()) return 0;
    sites = sites_;
    copies = copies_;
  }
  const double now = clock_->Now();
  int64_t seq = 0;
  std::vector<domain::DatasetCopy> kept;
  std::vector<std::pair<std::string, std::string>> gone;  // cluster, dataset
  Status s = store_->Write([&](store::Tx& tx) {
    for (const News& n : news) {
      const protocol::StagingProgress& p = n.progress;
      const std::string& cluster = n.cluster;
      const std::string task = " (task " + std::to_string(n.task) + ")";
      std::string reason = "Staging", type = "Normal", message;
      const int64_t total = std::max<int64_t>(1, p.total_bytes);
      const int64_t done = std::clamp<int64_t>(p.done_bytes, 0, total);
      if (p.state == "copying") {
        message = "dataset " + p.dataset + ": copying into cluster " + cluster + "'s cache, " +
                  std::to_string(static_cast<int>(100.0 * static_cast<double>(done) /
                                                  static_cast<double>(total))) +
                  "% (" + Gib(static_cast<double>(done)) + " of " +
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
      auto e =
          tx.AppendEvent({0, now, "Job", std::to_string(n.job), n.project, type, reason, message});
      if (!e.ok()) return e.status();
      seq = *e;
      // The cache as it is now: what was evicted (whatever became of the copy), and this copy,
      // used now, once it is there.
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
      bool added = false;
      const std::string name = domain::DatasetCopyName(cluster, p.dataset);
      if (p.state == "staged" || p.state == "cached") {
        domain::DatasetCopy c;
        auto known = copies[cluster].find(p.dataset);
        added = known == copies[cluster].end();
        if (!added) c = known->second;
        c.cluster = cluster;
        c.dataset = p.dataset;
        c.path = n.mount.path;
        c.size_gib = n.mount.size_gib;
        if (p.state == "staged" || c.staged_at == 0) c.staged_at = now;
        c.last_used = now;
        store::Object o;
        o.kind = "DatasetCopy";
        o.name = name;
        o.spec = CopySpec(c);
        o.updated_at = now;
        o.updated_by = "node/" + node;
        if (auto v = tx.PutObject(o, store::kAnyVersion); !v.ok()) return v.status();
        copies[cluster][p.dataset] = c;
        kept.push_back(c);
      }
      if (added || !evicted.empty()) {
        // An estate event: the scheduler reads the caches again (server/controller_config.cc).
        auto ce = tx.AppendEvent(
            {0, now, "DatasetCopy", name, "", "Normal",
             added ? (p.state == "staged" ? "DatasetStaged" : "DatasetCached") : "DatasetEvicted",
             (added ? "dataset " + p.dataset + " is in cluster " + cluster + "'s cache"
                    : "cluster " + cluster + "'s cache") +
                 (evicted.empty() ? "" : "; evicted to make room: " + evicted)});
        if (!ce.ok()) return ce.status();
        seq = *ce;
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  // Said once written: a write that failed is said again with the next heartbeat.
  if (staging_steps_.size() > 100000) staging_steps_.clear();  // bounded; said again at worst
  for (const News& n : news) {
    int& step = staging_steps_[n.key];
    step = std::max(step, n.step);
  }
  for (const auto& [cluster, dataset] : gone) copies_[cluster].erase(dataset);
  for (const domain::DatasetCopy& c : kept) copies_[c.cluster][c.dataset] = c;
  return seq;
}

}  // namespace meridian::server
