#include "sched/pending_queue.h"

#include <algorithm>
#include <cmath>

namespace meridian::sched {

namespace {

// A heap's order: the best key on top. A type rather than a function, so that the heap's
// algorithms inline it.
struct Worse {
  bool operator()(const PendingQueue::Next& a, const PendingQueue::Next& b) const {
    return b.key < a.key;
  }
};

}  // namespace

QueueKey PendingQueue::KeyAt(const Entry& e, const Aging& aging) {
  const double waited = std::max(0.0, aging.now - e.submit);
  // Whole priority steps, so that within a class fair share decides (Scheduler's
  // EffectivePriority); the estimate halves after one starvation horizon waited, thirds after two.
  // A job whose first start is due goes half a step up, above the rest of its class and below the
  // next, and the due jobs go oldest first: their estimates no longer count.
  const bool due =
      e.never_started && aging.first_start_within > 0 && waited >= aging.first_start_within;
  const double priority =
      e.priority + std::floor(aging.aging_per_hour * waited / 3600.0) + (due ? 0.5 : 0.0);
  const double second = due ? 0.0
                        : aging.starvation_horizon > 0
                            ? e.estimate / (1.0 + waited / aging.starvation_horizon)
                            : e.estimate;
  return {priority, second, e.submit, e.id, 0};
}

PendingQueue::Member PendingQueue::MemberOf(const Entry& e) {
  return {e.submit, e.id, e.estimate,
          e.estimate * static_cast<double>(std::max<int64_t>(e.milli, 1))};
}

int32_t PendingQueue::Band(double estimate) {
  const double band = std::floor(std::log2(estimate) * 4);
  if (!(band < std::numeric_limits<int32_t>::max())) return std::numeric_limits<int32_t>::max();
  if (!(band > std::numeric_limits<int32_t>::min())) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(band);
}

bool PendingQueue::Add(const Entry& e) {
  if (e.tenant < 0 || e.id == kGone) return false;
  auto [it, added] = where_.try_emplace(e.id);
  if (!added) return false;
  it->second.at = order_.size();
  order_.push_back(e.id);
  Join(&it->second, e.tenant, GroupOf(e), MemberOf(e));
  return true;
}

bool PendingQueue::Remove(int64_t id) {
  auto it = where_.find(id);
  if (it == where_.end()) return false;
  order_[it->second.at] = kGone;
  ++gone_;
  Leave(it->second);
  where_.erase(it);
  // Past as many holes as jobs, the order is written again: each job is moved once for every
  // job that left before it, so a removal costs a constant on average.
  if (gone_ > where_.size() + 1024) Compact();
  return true;
}

void PendingQueue::Regroup(const Entry& e) {
  auto it = where_.find(e.id);
  if (it == where_.end() || e.tenant < 0) return;
  Where& w = it->second;
  const GroupKey group = GroupOf(e);
  const Member member = MemberOf(e);
  const Member& was = *w.member;
  if (w.tenant == e.tenant && w.group->first == group && was.submit == member.submit &&
      was.estimate == member.estimate && was.work == member.work) {
    return;
  }
  Leave(w);
  Join(&w, e.tenant, group, member);
}

void PendingQueue::Join(Where* w, int32_t tenant, const GroupKey& key, const Member& m) {
  const auto t = static_cast<size_t>(tenant);
  if (groups_.size() <= t) {
    groups_.resize(t + 1);
    count_.resize(t + 1, 0);
  }
  w->tenant = tenant;
  w->group = groups_[t].try_emplace(key).first;
  Group& g = w->group->second;
  g.least = std::min(g.least, m.estimate);
  w->member = g.jobs.insert(m).first;
  ++count_[t];
}

void PendingQueue::Leave(const Where& w) {
  Group& g = w.group->second;
  g.jobs.erase(w.member);
  if (g.jobs.empty()) groups_[static_cast<size_t>(w.tenant)].erase(w.group);
  --count_[static_cast<size_t>(w.tenant)];
}

void PendingQueue::Compact() {
  size_t kept = 0;
  for (int64_t id : order_) {
    if (id == kGone) continue;
    where_.at(id).at = kept;
    order_[kept++] = id;
  }
  order_.resize(kept);
  gone_ = 0;
}

std::vector<int32_t> PendingQueue::Tenants() const {
  std::vector<int32_t> out;
  for (size_t t = 0; t < count_.size(); ++t) {
    if (count_[t] > 0) out.push_back(static_cast<int32_t>(t));
  }
  return out;
}

PendingQueue::Next PendingQueue::Reading::Read(const Member& m, int32_t tenant, int32_t priority,
                                               bool never_started) const {
  return {KeyAt({m.id, tenant, priority, m.estimate, m.submit, 0, never_started}, aging_), m.work};
}

PendingQueue::Next PendingQueue::Reading::BoundAt(const Bound& b, uint32_t index) const {
  // Every job from `next` on waited no longer than it (the group is by age, then id), so it has
  // gained no more priority, its estimate is at least `least` and aged no more, and on a tie it
  // is no older, nor of a lower id when as old, and its first start is due only if this one's is:
  // none of their keys is better than this one. (A bound that went before the jobs of its own key
  // would read a whole array of jobs submitted together, all alike, to take one.)
  const Entry bound{b.next->id, 0, b.priority, b.least, b.next->submit, 0, b.never_started};
  Next next{KeyAt(bound, aging_), 0};
  next.key.queued = index + 1;
  return next;
}

PendingQueue::Reading::Reading(const PendingQueue& queue, const Aging& aging, size_t wanted)
    : queue_(&queue), aging_(aging), wanted_(wanted), tenants_(queue.reading_buffers_) {
  for (Tenant& t : tenants_) {
    if (!t.opened) continue;
    t.opened = false;
    t.heap.clear();
    t.bounds.clear();
  }
}

PendingQueue::Reading::Tenant& PendingQueue::Reading::Open(int32_t tenant) {
  const auto t = static_cast<size_t>(tenant);
  if (tenants_.size() <= t) tenants_.resize(std::max(t + 1, queue_->groups_.size()));
  Tenant& mine = tenants_[t];
  if (mine.opened) return mine;
  mine.opened = true;
  if (t >= queue_->groups_.size()) return mine;
  // A tenant with few jobs beside what the pass may take, or a small group, is read whole:
  // bounds pay only where they leave many jobs unread.
  const bool whole = static_cast<size_t>(queue_->count_[t]) <= 2 * wanted_;
  for (const auto& [key, group] : queue_->groups_[t]) {
    if (whole || group.jobs.size() <= kReadWhole) {
      for (const Member& m : group.jobs) {
        mine.heap.push_back(Read(m, tenant, key.priority, key.never_started));
      }
      keys_read_ += static_cast<int64_t>(group.jobs.size());
      continue;
    }
    const Bound b{&group.jobs, group.jobs.begin(), group.least, key.priority, key.never_started};
    mine.heap.push_back(BoundAt(b, static_cast<uint32_t>(mine.bounds.size())));
    mine.bounds.push_back(b);
  }
  std::make_heap(mine.heap.begin(), mine.heap.end(), Worse{});
  return mine;
}

const PendingQueue::Next* PendingQueue::Reading::Head(int32_t tenant) {
  Tenant& mine = Open(tenant);
  std::vector<Next>& heap = mine.heap;
  // A bound on top: its group's next job may be the best, so it is read, and the bound moves to
  // the job after it.
  while (!heap.empty() && heap.front().key.queued != 0) {
    const uint32_t index = heap.front().key.queued - 1;
    std::pop_heap(heap.begin(), heap.end(), Worse{});
    heap.pop_back();
    Bound& b = mine.bounds[index];
    const Member& m = *b.next;
    heap.push_back(Read(m, tenant, b.priority, b.never_started));
    std::push_heap(heap.begin(), heap.end(), Worse{});
    ++keys_read_;
    if (++b.next != b.group->end()) {
      heap.push_back(BoundAt(b, index));
      std::push_heap(heap.begin(), heap.end(), Worse{});
    }
  }
  return heap.empty() ? nullptr : &heap.front();
}

void PendingQueue::Reading::Take(int32_t tenant) {
  std::vector<Next>& heap = Open(tenant).heap;
  std::pop_heap(heap.begin(), heap.end(), Worse{});
  heap.pop_back();
}

}  // namespace meridian::sched
