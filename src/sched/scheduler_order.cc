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

QueueKey Scheduler::KeyOf(const Job& j) const {
  // A pending job's priority under these orders: nothing that moves with time (LAS's level moves
  // only while the job runs).
  const double priority =
      options_.order == QueueOrder::kLeastAttainedService ? -LasLevel(j.attained) : 0;
  QueueKey k{priority, 0, j.spec.submit_time, j.spec.id, j.queued};
  if (options_.order == QueueOrder::kShortestJobFirst) {
    k.second = j.spec.runtime_estimate > 0 ? j.spec.runtime_estimate : kNever;
  }
  return k;
}

double Scheduler::FairEstimate(const JobSpec& spec) {
  double estimate = spec.runtime_estimate > 0 ? spec.runtime_estimate
                                              : (spec.runtime_limit > 0 ? spec.runtime_limit : 1e9);
  // A job is stopped at its limit, so it cannot run longer: an estimate beyond it is wrong.
  if (spec.runtime_limit > 0) estimate = std::min(estimate, spec.runtime_limit);
  return estimate;
}

PendingQueue::Entry Scheduler::QueueEntry(const Job& j) const {
  return {j.spec.id,          j.spec.tenant, j.spec.priority, FairEstimate(j.spec),
          j.spec.submit_time, j.milli,       NeverStarted(j)};
}

void Scheduler::Enqueue(Job& j) {
  ++j.queued;
  pending_.Add(QueueEntry(j));
  if (ordered_valid_) ordered_.insert(KeyOf(j));
}

std::vector<int64_t> Scheduler::Order(double now) {
  if (options_.order == QueueOrder::kMeridian) return FairOrder(now);
  // Entries of jobs that started or left pile up until met; past twice the queue, start again.
  if (!ordered_valid_ || ordered_.size() > 2 * pending_.size() + 1024) {
    ordered_.clear();
    pending_.ForEach([&](int64_t id) {
      const Job& j = jobs_.at(id);
      if (j.phase == Phase::kPending) ordered_.insert(KeyOf(j));
      return true;
    });
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
  // Each tenant's jobs best first, read from the queue only as far as the pass takes them: the
  // estimate counts for less the longer a job waits (halved after one starvation horizon), so a
  // long job cannot be passed over for ever within its tenant.
  const size_t depth = std::min(pending_.size(), static_cast<size_t>(options_.queue_depth));
  PendingQueue::Reading reading =
      pending_.Read({now, std::max(0.0, options_.aging_per_hour), options_.starvation_horizon,
                     options_.first_start_within},
                    depth);
  // Each tenant's queue, with its path in the tenancy tree from the root down.
  struct Queue {
    int32_t tenant;
    std::vector<int32_t> path;
    PendingQueue::Next head;  // the best job, kept here for the scan
  };
  std::vector<Queue> queues;
  for (int32_t tenant : pending_.Tenants()) {
    const PendingQueue::Next* head = reading.Head(tenant);
    if (head == nullptr) continue;
    std::vector<int32_t> path;
    for (int32_t n = tenant; n >= 0; n = quotas_.parent(n)) path.push_back(n);
    std::reverse(path.begin(), path.end());
    queues.push_back({tenant, std::move(path), *head});
  }
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
    const QueueKey& x = a.head.key;
    const QueueKey& y = b.head.key;
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
    out.push_back(q.head.key.id);
    // The tenant and everything above it are charged, in this pass, as if the job ran for its
    // estimate.
    for (int32_t n : q.path) {
      share[static_cast<size_t>(n)] +=
          q.head.work / static_cast<double>(gpu_capacity_) / quotas_.weight(n);
    }
    reading.Take(q.tenant);
    const PendingQueue::Next* next = reading.Head(q.tenant);
    if (next != nullptr) q.head = *next;
    if (next == nullptr) live.erase(live.begin() + static_cast<long>(best));
  }
  return out;
}

}  // namespace meridian::sched
