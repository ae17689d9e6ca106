// Property tests of the queueing rules over random workloads: no decision exceeds a quota limit,
// splits a gang across clusters, or preempts a job for one of lower priority; no GPU or node is
// oversubscribed; the same input gives the same decisions.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "base/rng.h"
#include "sched/scheduler.h"
#include "sched/testing/estate.h"

namespace meridian::sched {
namespace {

struct World {
  QuotaTree quotas;
  std::vector<int32_t> leaves;
  std::unique_ptr<Scheduler> sched;
  std::map<int64_t, JobSpec> specs;
};

World MakeWorld(base::Rng& rng) {
  World w;
  int32_t org = w.quotas.AddNode("org", -1);
  for (int t = 0; t < 2; ++t) {
    int32_t team = w.quotas.AddNode("team" + std::to_string(t), org);
    if (rng.Uniform(2)) w.quotas.SetQuota(team, kNoModel, 16000, 32000 + 8000 * rng.Uniform(3));
    for (int p = 0; p < 2; ++p) {
      int32_t leaf = w.quotas.AddNode("p" + std::to_string(t) + std::to_string(p), team);
      if (rng.Uniform(2)) w.quotas.SetQuota(leaf, kNoModel, 8000, 16000 + 8000 * rng.Uniform(2));
      w.leaves.push_back(leaf);
    }
  }
  std::vector<testing::NodeSpec> nodes;
  for (int i = 0; i < 6; ++i) {
    nodes.push_back({"n" + std::to_string(i), i % 3 ? "H100-80GB" : "A100-80GB", 8, 96000,
                     512 * 1024, i % 2 ? "cloud" : "onprem", "r" + std::to_string(i / 2), 4});
  }
  SchedulerOptions o;
  o.aging_per_hour = 0;  // priorities stay as submitted, so the rule below can be checked
  w.sched = std::make_unique<Scheduler>(testing::Build(nodes),
                                        testing::MakeProfile({{"best-fit", 1}, {"topology", 1}}),
                                        w.quotas, o, rng.Next());
  return w;
}

JobSpec RandomJob(base::Rng& rng, int64_t id, const World& w, double now) {
  JobSpec j;
  j.id = id;
  j.tenant = w.leaves[rng.Uniform(w.leaves.size())];
  j.priority = static_cast<int32_t>(rng.Uniform(3)) * 10;
  j.gang = rng.Uniform(3) == 0;
  j.submit_time = now;
  j.runtime_estimate = 100 + static_cast<double>(rng.Uniform(1000));
  if (rng.Uniform(2)) j.runtime_limit = j.runtime_estimate * 2;
  j.min_runtime = static_cast<double>(rng.Uniform(2)) * 50;
  int tasks = 1 + static_cast<int>(rng.Uniform(j.gang ? 3 : 2));
  for (int t = 0; t < tasks; ++t) {
    j.tasks.push_back(rng.Uniform(3) == 0 ? testing::Fraction(250 * (1 + rng.Uniform(3)))
                                          : testing::Whole(1 << rng.Uniform(4), 4000, 8192));
  }
  return j;
}

void CheckInvariants(const World& w, const CycleResult& r) {
  const Snapshot& s = w.sched->snapshot();
  for (const NodeState& n : s.nodes) {
    ASSERT_GE(n.cpu_free, 0);
    ASSERT_GE(n.memory_free, 0);
  }
  for (const GpuState& g : s.gpus) ASSERT_GE(g.free_milli, 0);
  const QuotaTree& q = w.sched->quotas();
  for (int32_t n = 0; n < q.size(); ++n) {
    if (q.Limit(n, kNoModel) != kUnlimited) {
      ASSERT_LE(q.Used(n, kNoModel), q.Limit(n, kNoModel)) << q.name(n);
    }
  }
  for (const StartDecision& d : r.started) {
    const JobSpec& spec = w.specs.at(d.job);
    ASSERT_EQ(d.placements.size(), spec.tasks.size());
    if (spec.gang) {
      for (const Placement& p : d.placements) {
        ASSERT_EQ(s.nodes[p.node].cluster, s.nodes[d.placements[0].node].cluster)
            << "gang " << d.job << " split across clusters";
      }
    }
  }
  // A cycle starts or stops each job once, never both.
  std::set<int64_t> started, stopped;
  for (const StartDecision& d : r.started) ASSERT_TRUE(started.insert(d.job).second) << d.job;
  for (const PreemptDecision& p : r.preempted) {
    ASSERT_TRUE(stopped.insert(p.job).second) << p.job;
    ASSERT_FALSE(started.count(p.job)) << "job " << p.job << " started and stopped in one cycle";
  }
  for (const PreemptDecision& p : r.preempted) {
    const JobSpec& victim = w.specs.at(p.job);
    const JobSpec& for_job = w.specs.at(p.for_job);
    ASSERT_LE(victim.priority, for_job.priority) << "job " << p.for_job << " preempted " << p.job;
    if (p.reason == "priority") {
      ASSERT_LT(victim.priority, for_job.priority);
    }
  }
}

std::vector<int64_t> Simulate(uint64_t seed) {
  base::Rng rng(seed);
  World w = MakeWorld(rng);
  std::vector<int64_t> trail;
  std::map<int64_t, double> ends;  // running job -> finish time
  std::map<int64_t, double> stops;
  double now = 0;
  int64_t next_id = 1;
  for (int step = 0; step < 150; ++step) {
    now += static_cast<double>(rng.Uniform(120));
    for (int k = static_cast<int>(rng.Uniform(3)); k > 0; --k) {
      JobSpec j = RandomJob(rng, next_id++, w, now);
      w.specs[j.id] = j;
      EXPECT_TRUE(w.sched->Submit(j).ok());
    }
    for (auto it = ends.begin(); it != ends.end();) {
      if (it->second <= now && !stops.count(it->first)) {
        w.sched->Finish(it->first, now);
        it = ends.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = stops.begin(); it != stops.end();) {
      if (it->second <= now) {
        w.sched->Evicted(it->first, now);
        ends.erase(it->first);
        it = stops.erase(it);
      } else {
        ++it;
      }
    }
    CycleResult r = w.sched->Cycle(now);
    CheckInvariants(w, r);
    if (::testing::Test::HasFatalFailure()) return trail;
    for (const PreemptDecision& p : r.preempted) {
      trail.push_back(-p.job);
      if (p.stop_at > now) {
        stops[p.job] = p.stop_at;
      } else {
        ends.erase(p.job);
      }
    }
    for (const StartDecision& d : r.started) {
      trail.push_back(d.job);
      ends[d.job] = now + w.specs.at(d.job).runtime_estimate;
    }
  }
  return trail;
}

TEST(SchedulerProperty, QuotasGangsAndPriorityHoldOnRandomWorkloads) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::vector<int64_t> trail = Simulate(seed);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_GT(trail.size(), 20u) << "the random workload should start jobs";
  }
}

TEST(SchedulerProperty, SameInputSameDecisions) {
  for (uint64_t seed = 100; seed < 105; ++seed) EXPECT_EQ(Simulate(seed), Simulate(seed));
}

}  // namespace
}  // namespace meridian::sched
