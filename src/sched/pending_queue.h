#pragma once

// The scheduler's pending jobs, held so that a pass costs what it takes from the queue and not
// the queue's depth (issue 18: a million pending jobs).
//
// They are kept twice over:
// - in the order they joined, which FIFO, SJF and LAS build their sorted queues from and the
//   live workload mix samples (Scheduler::LiveTasks);
// - for the Meridian order, by tenant, in groups of one priority class and one band of runtime
//   estimates, each group oldest first.
//
// The Meridian order ranks a tenant's jobs by a key that moves with time: a job's priority rises
// as it waits (aging), and its estimate counts for less the longer it waits (the starvation
// horizon), and a job that has waited its first start for too long goes before the rest of its
// class (the first-start guarantee). No order of the jobs holds from one pass to the next, so
// none is kept. What does hold
// is this: within a group, a younger job can be no better than the bound its elders set (it has
// waited less, and its estimate is at least the group's least). A pass reads each tenant best
// first by opening a group one job at a time, only while the group's next job could still come
// next, so it reads about as many jobs as it takes. The keys it gives are exactly the keys a
// sort of every job would give (pending_queue_test.cc checks one against the other).

#include <compare>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace meridian::sched {

// A pending job's place in a queue: priority first (higher first), then `second` (the order's
// own: an estimate, or nothing), then age, then id. `queued` tells an old entry of a job from
// its current one where a queue keeps them (Scheduler::ordered_).
struct QueueKey {
  double priority, second, submit;
  int64_t id;
  uint32_t queued;
  bool operator<(const QueueKey& o) const {
    if (priority != o.priority) return priority > o.priority;
    if (second != o.second) return second < o.second;
    if (submit != o.submit) return submit < o.submit;
    if (id != o.id) return id < o.id;
    return queued < o.queued;
  }
};

// How the Meridian order ages a pending job at a pass (SchedulerOptions has the meaning of each).
struct Aging {
  double now = 0;
  double aging_per_hour = 0;
  double starvation_horizon = 0;
  double first_start_within = 0;
};

class PendingQueue {
 public:
  struct Entry {
    int64_t id = 0;
    int32_t tenant = 0;
    int32_t priority = 0;  // the job's class, before aging
    double estimate = 1;   // what the order takes the job to run for (> 0)
    double submit = 0;
    int64_t milli = 0;  // GPU milli of the whole job
    // It has never run: once it has waited Aging::first_start_within, it goes before the other
    // jobs of its class (half a step above them), oldest first.
    bool never_started = false;
  };

  // The job's key in the Meridian order at `aging.now`.
  static QueueKey KeyAt(const Entry& e, const Aging& aging);

  // Adds a job at the end of the joining order; false (and nothing changed) when it is there, or
  // when its tenant is negative or its id is the least int64_t (which the queue keeps for itself).
  bool Add(const Entry& e);
  // False when it was not there.
  bool Remove(int64_t id);
  // The job's tenant or priority changed: it moves group and keeps its place in the joining
  // order. Nothing happens when it is not there.
  void Regroup(const Entry& e);
  bool Contains(int64_t id) const { return where_.count(id) > 0; }
  size_t size() const { return where_.size(); }

  PendingQueue() = default;
  // It holds iterators into itself.
  PendingQueue(const PendingQueue&) = delete;
  PendingQueue& operator=(const PendingQueue&) = delete;

  // Calls f(id) for every job in the order they joined, while f returns true.
  template <typename F>
  void ForEach(F&& f) const {
    for (int64_t id : order_) {
      if (id != kGone && !f(id)) return;
    }
  }

  // Tenants holding pending jobs, ascending.
  std::vector<int32_t> Tenants() const;

  // A job in its group: by age, then id.
  struct Member {
    double submit;
    int64_t id;
    double estimate;
    double work;  // estimate times GPU milli (at least 1): what its tenant is charged in a pass
    bool operator<(const Member& o) const {
      return submit != o.submit ? submit < o.submit : id < o.id;
    }
  };

  // A job as a reading gives it.
  struct Next {
    QueueKey key;
    double work;  // Member::work
  };

  // One pass's reading of the queue at one time. It must not outlive a change of the queue, and
  // only one may be read at a time (they share the queue's buffers). Aging must not be negative:
  // the bounds count on a younger job being no better than an older one of its group.
  class Reading {
   public:
    // The best job of `tenant` not taken yet in this reading; nullptr when none is left.
    const Next* Head(int32_t tenant);
    // Takes Head(tenant), which must not be nullptr.
    void Take(int32_t tenant);
    // Jobs whose exact key this reading worked out: what it cost.
    int64_t keys_read() const { return keys_read_; }

   private:
    friend class PendingQueue;
    using Jobs = std::set<Member>;
    // A group read so far: its next job, and what bounds the keys of the jobs from there on.
    struct Bound {
      const Jobs* group;
      Jobs::const_iterator next;
      double least;
      int32_t priority;
      bool never_started;
    };
    // A tenant's heap holds jobs with their keys (`queued` 0), and bounds: keys no job left
    // unread in a group can be better than, with `queued` the bound's index in `bounds` plus 1.
    struct Tenant {
      bool opened = false;
      std::vector<Next> heap;  // best on top
      std::vector<Bound> bounds;
    };
    Reading(const PendingQueue& queue, const Aging& aging, size_t wanted);
    Reading(const Reading&) = delete;
    Reading& operator=(const Reading&) = delete;
    Tenant& Open(int32_t tenant);
    Next BoundAt(const Bound& b, uint32_t index) const;
    Next Read(const Member& m, int32_t tenant, int32_t priority, bool never_started) const;

    const PendingQueue* queue_;
    Aging aging_;
    size_t wanted_;
    std::vector<Tenant>& tenants_;  // the queue's, kept from reading to reading
    int64_t keys_read_ = 0;
  };
  // A reading for a pass that takes at most `wanted` jobs.
  Reading Read(const Aging& aging, size_t wanted) const { return Reading(*this, aging, wanted); }

 private:
  static constexpr int64_t kGone = std::numeric_limits<int64_t>::min();
  static constexpr size_t kReadWhole = 8;  // a group this small is read whole
  // A band of estimates: 4 to each doubling, so a group's least estimate is within 19% of any of
  // its jobs' and a group is read little past the jobs that are taken, while a tenant with
  // estimates from a second to a year has at most 100 groups per priority class to bound at
  // each pass (16 bands a doubling made replays with learned estimates slower: more bounds).
  static int32_t Band(double estimate);
  static Member MemberOf(const Entry& e);
  // A tenant's groups. Within one, jobs by (submit, id).
  struct GroupKey {
    int32_t priority;
    bool never_started;
    int32_t band;
    auto operator<=>(const GroupKey&) const = default;
  };
  static GroupKey GroupOf(const Entry& e) {
    return {e.priority, e.never_started, Band(e.estimate)};
  }
  struct Group {
    double least = std::numeric_limits<double>::infinity();  // no job's estimate is below it
    std::set<Member> jobs;
  };
  using Groups = std::map<GroupKey, Group>;
  struct Where {
    size_t at;  // in order_
    int32_t tenant;
    Groups::iterator group;
    std::set<Member>::iterator member;
  };
  // Into the group `key` of `tenant`, and out of it.
  void Join(Where* w, int32_t tenant, const GroupKey& key, const Member& m);
  void Leave(const Where& w);
  void Compact();

  std::vector<int64_t> order_;  // the joining order; kGone where a job left
  size_t gone_ = 0;
  std::unordered_map<int64_t, Where> where_;
  std::deque<Groups> groups_;   // by tenant; a deque, so that Where's iterators outlive its growth
  std::vector<int64_t> count_;  // pending jobs by tenant
  // The readings' buffers: a replay makes hundreds of thousands of passes.
  mutable std::vector<Reading::Tenant> reading_buffers_;
};

}  // namespace meridian::sched
