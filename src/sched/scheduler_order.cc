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
  // Each tenant's jobs as a heap, best on top: a pass takes a few jobs from each tenant, so
  // ordering all of a tenant's queue (as a sort would) is work no pass uses. The buffers are
  // kept from pass to pass: a replay makes hundreds of thousands of passes.
  std::vector<std::vector<FairEntry>>& by_tenant = fair_scratch_;
  if (by_tenant.size() < static_cast<size_t>(quotas_.size())) {
    by_tenant.resize(static_cast<size_t>(quotas_.size()));
  }
  std::vector<int32_t> tenants;
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
    std::vector<FairEntry>& mine = by_tenant[static_cast<size_t>(j.spec.tenant)];
    if (mine.empty()) tenants.push_back(j.spec.tenant);
    mine.push_back({{EffectivePriority(j, now), aged, j.spec.submit_time, id, 0},
                    estimate * static_cast<double>(std::max<int64_t>(j.milli, 1))});
  }
  std::sort(tenants.begin(), tenants.end());  // the scan below meets tenants in this order
  // Each tenant's queue, best on top of its heap, with its path in the tenancy tree from the
  // root down.
  struct Queue {
    int32_t tenant;
    std::vector<int32_t> path;
    std::vector<FairEntry>* jobs;
    QueueKey head;  // jobs->front().key, kept here for the scan
  };
  const auto worse = [](const FairEntry& a, const FairEntry& b) { return b.key < a.key; };
  std::vector<Queue> queues;
  queues.reserve(tenants.size());
  for (int32_t tenant : tenants) {
    std::vector<FairEntry>& jobs = by_tenant[static_cast<size_t>(tenant)];
    std::make_heap(jobs.begin(), jobs.end(), worse);
    std::vector<int32_t> path;
    for (int32_t n = tenant; n >= 0; n = quotas_.parent(n)) path.push_back(n);
    std::reverse(path.begin(), path.end());
    queues.push_back({tenant, std::move(path), &jobs, jobs.front().key});
  }
  const size_t depth = std::min(pending_.size(), static_cast<size_t>(options_.queue_depth));
  // Hierarchical fair share, as in hierarchical DRF: two tenants are compared by the shares of
  // their ancestors where their paths part (organization against organization, then team
  // against team within one organization, then project against project within one team).
  std::vector<double> share = Shares();
  // Two tenants are compared where their paths part: the first level at which they differ
  // (organization against organization, then team against team within one organization), or
  // the deeper of the shorter path's when one path holds the other. The level, with whether the
  // paths differ there (the fair-share tie break), is worked out once per pair when there are
  // few tenants, since the scan compares the same pairs hundreds of times a pass.
  auto parting = [](const Queue& a, const Queue& b) -> uint8_t {
    size_t i = 0;
    while (i + 1 < a.path.size() && i + 1 < b.path.size() && a.path[i] == b.path[i]) ++i;
    return static_cast<uint8_t>(i | (a.path[i] != b.path[i] ? 0x80 : 0));
  };
  const size_t n = queues.size();
  constexpr size_t kTabled = 64;  // at most this many tenants: a table of n * n levels
  std::vector<uint8_t> parted;
  if (n <= kTabled) {
    parted.resize(n * n);
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) parted[a * n + b] = parting(queues[a], queues[b]);
    }
  }
  // What two tenants have received lately, in hours of the whole estate, stretches their heads'
  // estimates; then the fairer (lower share where they part), the earlier, the lower id.
  auto better = [&](size_t ai, size_t bi) {
    const Queue& a = queues[ai];
    const Queue& b = queues[bi];
    const QueueKey& x = a.head;
    const QueueKey& y = b.head;
    if (x.priority != y.priority) return x.priority > y.priority;
    const uint8_t code = n <= kTabled ? parted[ai * n + bi] : parting(a, b);
    const size_t level = code & 0x7f;
    const double sa = share[static_cast<size_t>(a.path[level])];
    const double sb = share[static_cast<size_t>(b.path[level])];
    const double kx = x.second * (1.0 + options_.usage_stretch * (sa / 3600.0));
    const double ky = y.second * (1.0 + options_.usage_stretch * (sb / 3600.0));
    if (kx != ky) return kx < ky;
    if ((code & 0x80) && sa != sb) return sa < sb;
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
      if (better(live[i], live[best])) best = i;
    }
    Queue& q = queues[live[best]];
    std::pop_heap(q.jobs->begin(), q.jobs->end(), worse);
    const FairEntry e = q.jobs->back();
    q.jobs->pop_back();
    if (!q.jobs->empty()) q.head = q.jobs->front().key;
    out.push_back(e.key.id);
    // The tenant and everything above it are charged, in this pass, as if the job ran for its
    // estimate.
    for (int32_t n : q.path) {
      share[static_cast<size_t>(n)] +=
          e.work / static_cast<double>(gpu_capacity_) / quotas_.weight(n);
    }
    if (q.jobs->empty()) live.erase(live.begin() + static_cast<long>(best));
  }
  for (int32_t tenant : tenants) by_tenant[static_cast<size_t>(tenant)].clear();
  return out;
}

}  // namespace meridian::sched
