#include "sched/pending_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace meridian::sched {
namespace {

// A job's key as the Meridian order has always defined it (written out here, not taken from
// PendingQueue::KeyAt, so that a change of either shows): its class plus a step per
// 1/aging_per_hour hours waited; its estimate over 1 + the horizons it waited; then age and id.
// A job that never ran and has waited first_start_within is half a step up, with no estimate.
QueueKey ReferenceKey(const PendingQueue::Entry& e, const Aging& aging) {
  const double waited = std::max(0.0, aging.now - e.submit);
  QueueKey k{0, 0, e.submit, e.id, 0};
  k.priority = e.priority + std::floor(aging.aging_per_hour * waited / 3600.0);
  k.second = aging.starvation_horizon > 0 ? e.estimate / (1.0 + waited / aging.starvation_horizon)
                                          : e.estimate;
  if (e.never_started && aging.first_start_within > 0 && waited >= aging.first_start_within) {
    k.priority += 0.5;
    k.second = 0;
  }
  return k;
}

// What a reading must give: every job of the tenant, by its key at that time, as a sort of the
// whole queue gives them.
std::vector<QueueKey> Sorted(const std::map<int64_t, PendingQueue::Entry>& jobs, int32_t tenant,
                             const Aging& aging) {
  std::vector<QueueKey> keys;
  for (const auto& [id, e] : jobs) {
    if (e.tenant == tenant) keys.push_back(ReferenceKey(e, aging));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Reads a tenant whole, best first.
std::vector<PendingQueue::Next> ReadAll(PendingQueue::Reading& reading, int32_t tenant) {
  std::vector<PendingQueue::Next> jobs;
  while (const PendingQueue::Next* head = reading.Head(tenant)) {
    jobs.push_back(*head);
    reading.Take(tenant);
  }
  return jobs;
}

void ExpectSameJobs(const std::vector<PendingQueue::Next>& got, const std::vector<QueueKey>& want,
                    const std::map<int64_t, PendingQueue::Entry>& jobs) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].key.id, want[i].id) << "at " << i;
    ASSERT_EQ(got[i].key.priority, want[i].priority) << "at " << i;
    ASSERT_EQ(got[i].key.second, want[i].second) << "at " << i;
    const PendingQueue::Entry& e = jobs.at(want[i].id);
    ASSERT_EQ(got[i].work, e.estimate * static_cast<double>(std::max<int64_t>(e.milli, 1)));
  }
}

TEST(PendingQueue, ReadsEachTenantInTheOrderASortOfEveryJobGives) {
  // Estimates repeated (runtime limits people pick) and spread (learned ones), ages spread over
  // days, with aging of priority and of estimates on and off, jobs leaving and changing class,
  // read both by bounds (a pass that takes few) and whole.
  std::mt19937_64 rng(7);
  const double kDay = 86400;
  for (int round = 0; round < 40; ++round) {
    PendingQueue queue;
    std::map<int64_t, PendingQueue::Entry> jobs;
    std::lognormal_distribution<double> spread(std::log(3600.0), 2.0);
    const double picks[] = {600, 3600, 4 * 3600.0, kDay};
    const int count = 200 + static_cast<int>(rng() % 3000);
    for (int64_t id = 1; id <= count; ++id) {
      PendingQueue::Entry e;
      e.id = id;
      e.tenant = static_cast<int32_t>(rng() % 4);
      e.priority = static_cast<int32_t>(rng() % 3) * 5;
      e.estimate = rng() % 2 ? picks[rng() % 4] : std::max(1.0, spread(rng));
      // Mostly in order of joining, some requeued with their old age.
      e.submit = rng() % 5 ? static_cast<double>(id) * 60 : static_cast<double>(rng() % 100) * 60;
      e.milli = static_cast<int64_t>(rng() % 4) * 500;  // CPU-only jobs among them
      e.never_started = rng() % 4 != 0;                 // some requeued
      ASSERT_TRUE(queue.Add(e));
      ASSERT_FALSE(queue.Add(e));
      jobs[id] = e;
    }
    for (int k = 0; k < count / 4; ++k) {
      const int64_t id = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(count));
      if (rng() % 3) {
        EXPECT_EQ(queue.Remove(id), jobs.erase(id) > 0);
      } else if (auto it = jobs.find(id); it != jobs.end()) {
        // Another class, tenant, GPU count or estimate (a Retarget does not change the last
        // two today; the queue must follow if it ever does).
        it->second.priority = static_cast<int32_t>(rng() % 3) * 5;
        it->second.tenant = static_cast<int32_t>(rng() % 4);
        it->second.milli = static_cast<int64_t>(rng() % 4) * 500;
        if (rng() % 2) it->second.estimate = picks[rng() % 4];
        if (rng() % 4 == 0) it->second.never_started = false;
        queue.Regroup(it->second);
      }
    }
    ASSERT_EQ(queue.size(), jobs.size());
    Aging aging;
    // Now, or days later; and on some rounds before the last jobs joined (clocks apart: a
    // negative wait counts as none).
    aging.now = round % 5 == 4
                    ? static_cast<double>(count) * 30
                    : static_cast<double>(count) * 60 + static_cast<double>(rng() % 5) * kDay;
    aging.aging_per_hour = round % 3 == 0 ? 0 : 0.5;
    aging.starvation_horizon = round % 4 == 0 ? 0 : (round % 2 ? kDay : 3600);
    // First starts due after half an hour (some jobs due, most not), after days, or never.
    aging.first_start_within = round % 3 == 1 ? 0 : (round % 3 ? 1800 : 2 * kDay);
    for (size_t wanted : {size_t{4}, size_t{100000}}) {
      PendingQueue::Reading reading = queue.Read(aging, wanted);
      for (int32_t tenant = 0; tenant < 5; ++tenant) {
        SCOPED_TRACE("round " + std::to_string(round) + ", tenant " + std::to_string(tenant) +
                     ", wanted " + std::to_string(wanted));
        ExpectSameJobs(ReadAll(reading, tenant), Sorted(jobs, tenant, aging), jobs);
      }
    }
  }
}

TEST(PendingQueue, APassReadsAboutAsManyJobsAsItTakesFromADeepQueue) {
  // 200,000 jobs of one tenant over a day: with estimates people pick, with learned ones, and
  // as arrays of 10,000 submitted together, alike.
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> spread(std::log(3600.0), 1.5);
  PendingQueue repeated, learned, arrays;
  for (int64_t id = 0; id < 200000; ++id) {
    const double submit = static_cast<double>(id) * 0.4;
    repeated.Add({id, 0, 0, id % 3 == 0 ? 3600.0 : 4 * 3600.0, submit});
    learned.Add({id, 0, 0, std::max(1.0, spread(rng)), submit});
    arrays.Add({id, 0, 0, 1e9, static_cast<double>(id / 10000) * 4000});
  }
  const Aging aging{80000, 0, 86400};
  for (PendingQueue* queue : {&repeated, &learned, &arrays}) {
    PendingQueue::Reading reading = queue->Read(aging, 256);
    for (int k = 0; k < 256; ++k) {
      ASSERT_NE(reading.Head(0), nullptr);
      reading.Take(0);
    }
    const char* kind = queue == &repeated ? "repeated" : queue == &learned ? "learned" : "arrays";
    EXPECT_LT(reading.keys_read(), 1000) << kind;
    // The jobs alike go by id.
    if (queue == &arrays) EXPECT_EQ(reading.Head(0)->key.id, 256) << kind;
  }
}

TEST(PendingQueue, KeepsTheJoiningOrderThroughRemovalsAndChangesOfClass) {
  PendingQueue queue;
  std::vector<int64_t> want;
  for (int64_t id = 0; id < 5000; ++id) {
    queue.Add({id, static_cast<int32_t>(id % 3), 0, 60.0 * static_cast<double>(1 + id % 7), 0});
    want.push_back(id);
  }
  // Enough removals that the order is written again (more holes than jobs).
  for (int64_t id = 0; id < 5000; ++id) {
    if (id % 5 != 0) {
      ASSERT_TRUE(queue.Remove(id));
      ASSERT_FALSE(queue.Remove(id));
    }
  }
  std::erase_if(want, [](int64_t id) { return id % 5 != 0; });
  queue.Regroup({10, 2, 9, 60, 0});  // another tenant and class: its place stays
  queue.Add({99999, 0, 0, 1, 0});
  want.push_back(99999);
  std::vector<int64_t> got;
  queue.ForEach([&](int64_t id) {
    got.push_back(id);
    return true;
  });
  EXPECT_EQ(got, want);
  EXPECT_EQ(queue.size(), want.size());
  EXPECT_TRUE(queue.Contains(10));
  EXPECT_FALSE(queue.Contains(11));
  EXPECT_EQ(queue.Tenants(), (std::vector<int32_t>{0, 1, 2}));
  // What it cannot hold, it refuses.
  EXPECT_FALSE(queue.Add({123456, -1, 0, 60, 0}));
  EXPECT_FALSE(queue.Add({std::numeric_limits<int64_t>::min(), 0, 0, 60, 0}));
  EXPECT_EQ(queue.size(), want.size());
  // ForEach stops when asked.
  int seen = 0;
  queue.ForEach([&](int64_t) { return ++seen < 3; });
  EXPECT_EQ(seen, 3);
}

}  // namespace
}  // namespace meridian::sched
