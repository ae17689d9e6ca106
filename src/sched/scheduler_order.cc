// Queue orders. FIFO, SJF and LAS sort one list; Meridian's order is two-level, as Kueue and
// YuniKorn do fair sharing: the next job comes from the tenant with the smallest weighted
// dominant share (counting the jobs already ordered ahead in this pass), and within a tenant the
// job with the shortest runtime estimate goes first, so that fairness across tenants does not
// cost each tenant's short jobs their turnaround. See docs/adr/0004-queue-order.md for the
// orders measured against each other (response-ratio and aging variants among them).
#include <algorithm>
#include <limits>
#include <map>

#include "sched/scheduler.h"

namespace meridian::sched {

std::vector<int64_t> Scheduler::Order(double now) {
  if (options_.order == QueueOrder::kMeridian) return FairOrder(now);
  struct Key {
    double priority;
    double second;
    double submit;
    int64_t id;
  };
  std::vector<Key> keys;
  keys.reserve(pending_.size());
  for (int64_t id : pending_) {
    const Job& j = jobs_.at(id);
    Key k{EffectivePriority(j, now), 0, j.spec.submit_time, id};
    if (options_.order == QueueOrder::kShortestJobFirst) {
      k.second = j.spec.runtime_estimate > 0 ? j.spec.runtime_estimate : kNever;
    }
    keys.push_back(k);
  }
  auto before = [](const Key& a, const Key& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.second != b.second) return a.second < b.second;
    if (a.submit != b.submit) return a.submit < b.submit;
    return a.id < b.id;
  };
  const size_t depth = std::min(keys.size(), static_cast<size_t>(options_.queue_depth));
  std::partial_sort(keys.begin(), keys.begin() + static_cast<long>(depth), keys.end(), before);
  std::vector<int64_t> out;
  out.reserve(depth);
  for (size_t i = 0; i < depth; ++i) out.push_back(keys[i].id);
  return out;
}

std::vector<int64_t> Scheduler::FairOrder(double now) {
  struct Entry {
    double priority;
    double estimate;  // seconds; jobs without one come last
    double work;      // estimated GPU milli-seconds, what the tenant is charged in this pass
    double submit;
    int64_t id;
    bool operator<(const Entry& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (estimate != o.estimate) return estimate < o.estimate;
      if (submit != o.submit) return submit < o.submit;
      return id < o.id;
    }
  };
  std::map<int32_t, std::vector<Entry>> by_tenant;
  for (int64_t id : pending_) {
    const Job& j = jobs_.at(id);
    const double estimate = j.spec.runtime_estimate > 0
                                ? j.spec.runtime_estimate
                                : (j.spec.runtime_limit > 0 ? j.spec.runtime_limit : 1e9);
    // Aging within the tenant: the estimate the order sees halves for every starvation
    // horizon a job has waited, so a long job cannot be passed over for ever.
    const double waited = std::max(0.0, now - j.spec.submit_time);
    const double aged = options_.starvation_horizon > 0
                            ? estimate / (1.0 + waited / options_.starvation_horizon)
                            : estimate;
    by_tenant[j.spec.tenant].push_back(
        {EffectivePriority(j, now), aged,
         estimate * static_cast<double>(std::max<int64_t>(j.milli, 1)), j.spec.submit_time, id});
  }
  // Each tenant's queue, best first (reversed so that the best is at the back), with its path
  // in the tenancy tree from the root down.
  struct Queue {
    int32_t tenant;
    std::vector<int32_t> path;
    std::vector<Entry> jobs;
  };
  std::vector<Queue> queues;
  for (auto& [tenant, jobs] : by_tenant) {
    std::sort(jobs.begin(), jobs.end(), [](const Entry& a, const Entry& b) { return b < a; });
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
  auto better = [&](const Queue& a, const Queue& b) {
    const Entry& x = a.jobs.back();
    const Entry& y = b.jobs.back();
    if (x.priority != y.priority) return x.priority > y.priority;
    if (int f = fairer(a, b); f != 0) return f < 0;
    if (x.submit != y.submit) return x.submit < y.submit;
    return x.id < y.id;
  };
  std::vector<int64_t> out;
  const size_t depth = std::min(pending_.size(), static_cast<size_t>(options_.queue_depth));
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
    out.push_back(e.id);
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
