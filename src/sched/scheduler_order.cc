// Queue orders. FIFO, SJF and LAS sort one list. Meridian's order takes, among the tenants'
// queue heads, the job with the shortest runtime estimate stretched by its tenant's usage: the
// estimate counts for more the more the tenant (and its team and organization) has received
// lately, and the tenants' dominant shares break ties, so a heavy user's short job may still go
// before a light user's long one, but not for ever. Within a tenant the shortest estimate goes
// first. An estimate is never taken above the job's runtime limit, which users set as an upper
// bound. See docs/adr/0004-queue-order.md and docs/adr/0034-deep-queues.md for the orders
// measured against each other.
#include <algorithm>
#include <limits>
#include <map>

#include "sched/scheduler.h"

namespace meridian::sched {

Scheduler::QueueKey Scheduler::KeyOf(const Job& j) const {
  // What EffectivePriority gives a pending job under these orders: nothing that moves with time.
  const double priority =
      options_.order == QueueOrder::kLeastAttainedService ? -LasLevel(j.attained) : 0;
  QueueKey k{priority, 0, j.spec.submit_time, j.spec.id, j.queued};
  if (options_.order == QueueOrder::kShortestJobFirst) {
    k.second = j.spec.runtime_estimate > 0 ? j.spec.runtime_estimate : kNever;
  }
  return k;
}

void Scheduler::Enqueue(Job& j, bool maybe_queued) {
  ++j.queued;
  if (!maybe_queued || std::find(pending_.begin(), pending_.end(), j.spec.id) == pending_.end()) {
    pending_.push_back(j.spec.id);
  }
  if (ordered_valid_) ordered_.insert(KeyOf(j));
}

std::vector<int64_t> Scheduler::Order(double now) {
  if (options_.order == QueueOrder::kMeridian) return FairOrder(now);
  // Entries of jobs that started or left pile up until met; past twice the queue, start again.
  if (!ordered_valid_ || ordered_.size() > 2 * pending_.size() + 1024) {
    ordered_.clear();
    for (int64_t id : pending_) {
      const Job& j = jobs_.at(id);
      if (j.phase == Phase::kPending) ordered_.insert(KeyOf(j));
    }
    ordered_valid_ = true;
  }
  const size_t depth = std::min(pending_.size(), static_cast<size_t>(options_.queue_depth));
  std::vector<int64_t> out;
  out.reserve(depth);
  for (auto it = ordered_.begin(); it != ordered_.end() && out.size() < depth;) {
    auto j = jobs_.find(it->id);
    if (j == jobs_.end() || j->second.phase != Phase::kPending || j->second.queued != it->queued) {
      it = ordered_.erase(it);
      continue;
    }
    out.push_back(it->id);
    ++it;
  }
  return out;
}

std::vector<int64_t> Scheduler::FairOrder(double now) {
  // The queue key, its second field the (aged) estimate in seconds: jobs without one come last.
  struct Entry {
    QueueKey key;
    double work;  // estimated GPU milli-seconds, what the tenant is charged in this pass
    bool operator<(const Entry& o) const { return key < o.key; }
  };
  std::map<int32_t, std::vector<Entry>> by_tenant;
  for (int64_t id : pending_) {
    const Job& j = jobs_.at(id);
    double estimate = j.spec.runtime_estimate > 0
                          ? j.spec.runtime_estimate
                          : (j.spec.runtime_limit > 0 ? j.spec.runtime_limit : 1e9);
    // A job is stopped at its limit, so it cannot run longer: an estimate beyond it is wrong.
    if (j.spec.runtime_limit > 0) estimate = std::min(estimate, j.spec.runtime_limit);
    // Aging within the tenant: the estimate the order sees halves for every starvation
    // horizon a job has waited, so a long job cannot be passed over for ever.
    const double waited = std::max(0.0, now - j.spec.submit_time);
    const double aged = options_.starvation_horizon > 0
                            ? estimate / (1.0 + waited / options_.starvation_horizon)
                            : estimate;
    by_tenant[j.spec.tenant].push_back(
        {{EffectivePriority(j, now), aged, j.spec.submit_time, id, 0},
         estimate * static_cast<double>(std::max<int64_t>(j.milli, 1))});
  }
  // Each tenant's queue, best first (reversed so that the best is at the back), with its path
  // in the tenancy tree from the root down.
  struct Queue {
    int32_t tenant;
    std::vector<int32_t> path;
    std::vector<Entry> jobs;
  };
  std::vector<Queue> queues;
  const size_t depth = std::min(pending_.size(), static_cast<size_t>(options_.queue_depth));
  for (auto& [tenant, jobs] : by_tenant) {
    // No pass takes more than `depth` jobs from one tenant: only those are put in order.
    const auto keep = static_cast<long>(std::min(depth, jobs.size()));
    std::partial_sort(jobs.begin(), jobs.begin() + keep, jobs.end());
    jobs.resize(static_cast<size_t>(keep));
    std::reverse(jobs.begin(), jobs.end());
    std::vector<int32_t> path;
    for (int32_t n = tenant; n >= 0; n = quotas_.parent(n)) path.push_back(n);
    std::reverse(path.begin(), path.end());
    queues.push_back({tenant, std::move(path), std::move(jobs)});
  }
  // Hierarchical fair share, as in hierarchical DRF: two tenants are compared by the shares of
  // their ancestors where their paths part (organization against organization, then team
  // against team within one organization, then project against project within one team).
  std::vector<double> share = Shares();
  auto fairer = [&](const Queue& a, const Queue& b) {
    const size_t depth = std::min(a.path.size(), b.path.size());
    for (size_t i = 0; i < depth; ++i) {
      if (a.path[i] == b.path[i]) continue;
      const double x = share[static_cast<size_t>(a.path[i])];
      const double y = share[static_cast<size_t>(b.path[i])];
      if (x != y) return x < y ? -1 : 1;
      break;
    }
    return 0;
  };
  // What two tenants have received lately, in hours of the whole estate, compared where their
  // paths part, as fairer does: organization against organization, then team against team.
  auto received = [&](const Queue& a, const Queue& b) {
    size_t i = 0;
    while (i + 1 < a.path.size() && i + 1 < b.path.size() && a.path[i] == b.path[i]) ++i;
    return std::pair(share[static_cast<size_t>(a.path[i])] / 3600.0,
                     share[static_cast<size_t>(b.path[i])] / 3600.0);
  };
  auto better = [&](const Queue& a, const Queue& b) {
    const QueueKey& x = a.jobs.back().key;
    const QueueKey& y = b.jobs.back().key;
    if (x.priority != y.priority) return x.priority > y.priority;
    const auto [ha, hb] = received(a, b);
    const double kx = x.second * (1.0 + options_.usage_stretch * ha);
    const double ky = y.second * (1.0 + options_.usage_stretch * hb);
    if (kx != ky) return kx < ky;
    if (int f = fairer(a, b); f != 0) return f < 0;
    if (x.submit != y.submit) return x.submit < y.submit;
    return x.id < y.id;
  };
  std::vector<int64_t> out;
  // Charging one tenant moves every tenant under the same ancestors, so the next queue is
  // chosen by a scan rather than from a heap; there are few tenants beside the depth.
  std::vector<size_t> live(queues.size());
  for (size_t q = 0; q < queues.size(); ++q) live[q] = q;
  while (!live.empty() && out.size() < depth) {
    size_t best = 0;
    for (size_t i = 1; i < live.size(); ++i) {
      if (better(queues[live[i]], queues[live[best]])) best = i;
    }
    Queue& q = queues[live[best]];
    const Entry e = q.jobs.back();
    q.jobs.pop_back();
    out.push_back(e.key.id);
    // The tenant and everything above it are charged, in this pass, as if the job ran for its
    // estimate.
    for (int32_t n : q.path) {
      share[static_cast<size_t>(n)] +=
          e.work / static_cast<double>(gpu_capacity_) / quotas_.weight(n);
    }
    if (q.jobs.empty()) live.erase(live.begin() + static_cast<long>(best));
  }
  return out;
}

}  // namespace meridian::sched
