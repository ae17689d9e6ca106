#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "api/metrics.h"
#include "base/entropy.h"
#include "cloud/provisioner.h"
#include "sched/elastic.h"
#include "sched/scheduler.h"
#include "server/budgets.h"
#include "server/estate.h"
#include "server/nodes.h"
#include "server/pending_reasons.h"
#include "store/store.h"

// Elastic node pools (docs/adr/0039-elastic-pools.md): the controller's side of a pool that a
// provisioner grows and shrinks. Each scheduling round, under the controller's lock, Step
// decides from the round's outcome (sched/elastic.h): new nodes for jobs that found no room,
// the release of nodes idle past the pool's idleTimeout (cordoned first, so that nothing is
// placed on a node being removed; never one with work on it, never below minNodes), and the
// deletion of instances that never registered. Provisioners run on a worker thread of this
// object, never under the controller's lock; what they answer is taken in at the next Step.
//
// What the pool holds is the provisioner's to say: at its first Step a pool lists its
// instances, and adopts them (a restarted server finds what it had asked for), before it asks
// for more.
namespace meridian::server {

struct ElasticOptions {
  // Provisioner name (a pool's `provisioner`) -> the program and its leading arguments.
  std::map<std::string, std::vector<std::string>> provisioners;
  std::string server_url;  // where new instances' agents register
  double provisioner_timeout = 120;
  int32_t max_creating_per_pool = 8;  // instances asked for and not yet answered, per pool
  double min_backoff = 15;            // after a failure; doubled per failure in a row
  double max_backoff = 600;
};

class ElasticPools {
 public:
  ElasticPools(ElasticOptions options, store::Store* store, NodeService* nodes, api::EventBus* bus,
               api::Metrics* metrics, base::Entropy* entropy, std::function<void()> wake);
  ~ElasticPools();
  ElasticPools(const ElasticPools&) = delete;
  ElasticPools& operator=(const ElasticPools&) = delete;

  // One round, under the controller's lock, after the cycle's decisions were committed.
  // `refused`: pending jobs the scheduler was not given, as no node of the estate could ever hold
  // them (a pool's model that no node has yet); they wait for one to join. `blocks`: projects
  // whose spent budget asks for no new node, `room` what the others' budgets have left
  // (server/budgets.h).
  void Step(double now, const Estate& estate, sched::Scheduler& scheduler,
            const sched::CycleResult& cycle, const std::map<int64_t, sched::JobSpec>& refused,
            const std::map<std::string, BudgetBlock>& blocks,
            const std::map<std::string, BudgetRoom>& room, PendingReasons* reasons);

  // A pool whose provisioning failed and has not come right since: what the provisioning-failed
  // alert fires for (server/alert_eval.h).
  struct Failure {
    std::string pool;
    std::string cluster;
    std::string provisioner;
    std::string what;      // the failure, in words
    int32_t in_a_row = 0;  // failures in a row (0: a configuration, not a call that failed)
  };
  // As of the last Step; under the controller's lock.
  const std::vector<Failure>& Failures() const { return failures_; }

 private:
  enum class State { kCreating, kBooting, kReady, kDeleting };
  struct Instance {
    std::string id;
    State state = State::kCreating;
    double since = 0;          // when it entered its state
    double idle_since = 0;     // ready: when it last held work (or joined)
    std::string token;         // the id of the bootstrap token it was created with
    bool asked = false;        // deleting: a delete is on its way to the provisioner
    double retry_at = 0;       // deleting: when a failed delete is asked again
    bool interrupted = false;  // a spot instance the cloud is taking back
  };
  struct Pool {
    std::string provisioner;  // the one its instances were made by
    std::map<std::string, Instance> by_node;
    bool listing = false;
    double listed_at = -1;  // when the last list was asked; -1: never answered
    bool relist = false;    // list again at the next round (after a failure)
    int32_t failures = 0;   // in a row
    double backoff_until = 0;
    // The failure it has not recovered from: the call that failed (create, list, delete; join:
    // an instance that never registered), and in words. The next success of that call clears
    // it; a node that registers clears create and join.
    std::string failing;
    std::string failure;
  };
  // What a provisioner answered, taken in at the next Step.
  struct Outcome {
    std::string pool, verb;
    base::Status status;
    std::vector<cloud::Instance> instances;  // create, list
    std::vector<std::string> nodes;          // create: the names asked for; delete: the nodes
    double asked_at = 0;                     // list: when it was asked
  };
  // One round's view of the estate.
  struct Round {
    double now = 0;
    const Estate* estate = nullptr;
    sched::Scheduler* scheduler = nullptr;
    std::map<std::string, int32_t> index;  // nodes of elastic pools in the scheduler's snapshot
  };

  void TakeOutcomes(const Round& r);
  void TakeList(const Round& r, const std::string& name, Pool& p, const Outcome& o);
  // A spot instance the cloud takes back: its node is drained by the deadline (its jobs get the
  // notice a preemption gives, and are requeued), and the instance deleted then.
  void Interrupted(const Round& r, const std::string& name, Pool& p, const std::string& node,
                   double at);
  void Post(const std::string& provisioner, std::function<Outcome(const cloud::Provisioner&)> work);
  void List(const std::string& name, Pool& p, double now);
  void Failed(const std::string& pool, Pool& p, double now, const std::string& call,
              const std::string& what);
  static void Succeeded(Pool& p, const std::string& call);
  void Event(const std::string& pool, const std::string& type, const std::string& reason,
             const std::string& message, double now);
  base::Result<std::string> BootstrapToken(double now, double lifetime, std::string* id);
  void RevokeSpentTokens(const Pool& p, const std::string& token);
  void Grow(const ElasticPoolSpec& spec, Pool& p, int32_t count, double now);
  // Cordons what of `nodes` is registered, then asks for their instances' deletion.
  void Release(const Round& r, const std::string& name, Pool& p,
               const std::vector<std::string>& nodes, const std::string& why);
  void AskDeletes(const std::string& name, Pool& p, double now);
  // A pool's instances through the round: registrations, time-outs, idle nodes; its entry for
  // the plan (false: it takes no part).
  bool Tend(const Round& r, const ElasticPoolSpec& spec, Pool& p, sched::ElasticPool* plan);
  void Publish(const Estate& estate);

  ElasticOptions options_;
  store::Store* store_;
  NodeService* nodes_;
  api::EventBus* bus_;
  api::Metrics* metrics_;
  base::Entropy* entropy_;
  std::function<void()> wake_;
  std::map<std::string, Pool> pools_;
  std::map<std::string, std::unique_ptr<cloud::Provisioner>> provisioners_;
  std::set<std::string> unknown_;  // pools whose provisioner this server does not know
  std::vector<Failure> failures_;  // as of the last Step
  // How often each job has lost a spot node; after kMaxSpotInterruptions it goes to on-demand.
  // In memory: a restarted server gives every job its chances again.
  std::map<int64_t, int32_t> interruptions_;

  std::mutex mu_;  // the worker's queue and its outcomes
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<Outcome> outcomes_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace meridian::server
