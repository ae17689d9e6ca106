#include "server/elastic_pools.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "api/auth.h"
#include "base/log.h"
#include "sched/elastic.h"

namespace meridian::server {

using base::Status;

namespace {

// The user whose expiring tokens new instances' agents register with: an agent, no more.
constexpr char kBootstrapUser[] = "meridian-elastic-pools";

// Jobs a round plans new nodes for at most (the first in the queue's order).
constexpr size_t kMaxWaiting = 256;

// How often a pool's instances are listed again, to find those a failed or timed-out request
// made after all, and those that went away (a spot instance taken back).
constexpr double kRelistSeconds = 300;
// Spot pools are listed more often: an interruption gives two minutes' notice (AWS), or thirty
// seconds (GCP), and the notice is for the jobs.
constexpr double kSpotRelistSeconds = 5;
// A job that lost spot nodes this often goes to on-demand pools.
constexpr int32_t kMaxSpotInterruptions = 2;
// How long after a failed delete it is asked again.
constexpr double kDeleteRetrySeconds = 30;

// Whether a node of the scheduler's snapshot holds anything.
bool Busy(const sched::Snapshot& s, int32_t n) {
  const sched::NodeState& node = s.nodes[n];
  if (node.cpu_free < node.cpu_capacity || node.memory_free < node.memory_capacity) return true;
  for (int32_t g = node.gpu_begin; g < node.gpu_begin + node.gpu_count; ++g) {
    if (s.GpuAllocatedMilli(g) > 0) return true;
  }
  return false;
}

std::string Join(const std::vector<std::string>& items) {
  return fmt::format("{}", fmt::join(items, ", "));
}

}  // namespace

ElasticPools::ElasticPools(ElasticOptions options, store::Store* store, NodeService* nodes,
                           api::EventBus* bus, api::Metrics* metrics, base::Entropy* entropy,
                           std::function<void()> wake)
    : options_(std::move(options)),
      store_(store),
      nodes_(nodes),
      bus_(bus),
      metrics_(metrics),
      entropy_(entropy),
      wake_(std::move(wake)) {
  for (const auto& [name, argv] : options_.provisioners) {
    provisioners_[name] = std::make_unique<cloud::Provisioner>(argv, options_.provisioner_timeout);
  }
  metrics_->Describe("meridian_pool_nodes", "gauge",
                     "Nodes of each elastic pool by state: creating (asked for), booting (not "
                     "registered yet), ready, deleting.");
  metrics_->Describe("meridian_pool_provisioning_failing", "gauge",
                     "1 while an elastic pool's provisioning has failed and not come right since "
                     "(the provisioning-failed alert), else 0.");
  metrics_->Describe("meridian_provisioner_requests_total", "counter",
                     "Requests to provisioners by pool, verb and result.");
  worker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      // Stopping: what was not asked yet is not asked. A server started again lists the
      // pools' instances before it asks for more.
      if (stop_) return;
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  });
}

ElasticPools::~ElasticPools() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void ElasticPools::Post(const std::string& provisioner,
                        std::function<Outcome(const cloud::Provisioner&)> work) {
  const cloud::Provisioner* p = provisioners_.at(provisioner).get();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back([this, p, work = std::move(work)] {
    Outcome o = work(*p);
    {
      std::lock_guard<std::mutex> done(mu_);
      outcomes_.push_back(std::move(o));
    }
    if (wake_) wake_();
  });
  cv_.notify_all();
}

void ElasticPools::Event(const std::string& pool, const std::string& type,
                         const std::string& reason, const std::string& message, double now) {
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto e = tx.AppendEvent({0, now, "NodePool", pool, "", type, reason, message});
    if (!e.ok()) return e.status();
    seq = *e;
    return Status::Ok();
  });
  if (!s.ok())
    base::log::Warn("elastic pool {}: event {} not recorded: {}", pool, reason, s.message());
  if (seq > 0) bus_->Notify(seq);
  if (type == "Warning") {
    base::log::Warn("elastic pool {}: {}", pool, message);
  } else {
    base::log::Info("elastic pool {}: {}", pool, message);
  }
}

void ElasticPools::Failed(const std::string& pool, Pool& p, double now, const std::string& call,
                          const std::string& what) {
  ++p.failures;
  p.failing = call;
  p.failure = what;
  const double backoff = std::min(
      options_.max_backoff, options_.min_backoff * std::pow(2.0, std::min(p.failures - 1, 16)));
  p.backoff_until = now + backoff;
  Event(pool, "Warning", "ProvisioningFailed",
        what + "; no new node is asked of it for " + std::to_string(static_cast<int64_t>(backoff)) +
            " s (failure " + std::to_string(p.failures) + " in a row)",
        now);
}

void ElasticPools::Succeeded(Pool& p, const std::string& call) {
  if (p.failing == call || (call == "join" && p.failing == "create")) p.failing.clear();
}

base::Result<std::string> ElasticPools::BootstrapToken(double now, double lifetime,
                                                       std::string* id) {
  api::NewToken t = api::GenerateToken(*entropy_);
  Status s = store_->Write([&](store::Tx& tx) {
    auto user = tx.GetObject("User", kBootstrapUser);
    if (user.ok()) {
      // Someone else's user of that name, or one given more: not a credential to hand out.
      const Json roles = user->spec.value("roles", Json::array());
      if (roles != Json::array({Json{{"role", "agent"}}})) {
        return Status::Conflict(std::string("user ") + kBootstrapUser +
                                " exists with roles other than agent alone: new instances get "
                                "no credential from it");
      }
    } else {
      store::Object made{"User",
                         kBootstrapUser,
                         Json{{"roles", Json::array({Json{{"role", "agent"}}})},
                              {"description",
                               "the agents of elastic pools' new instances register as this user, "
                               "with tokens that expire (docs/adr/0039-elastic-pools.md)"}},
                         0,
                         now,
                         "meridian"};
      if (auto v = tx.PutObject(made, store::kMustNotExist); !v.ok()) return v.status();
    }
    return tx.PutToken({t.id, kBootstrapUser, t.secret_hash, "bootstrap of elastic pool instances",
                        now, now + lifetime, false});
  });
  if (!s.ok()) return s;
  *id = t.id;
  return t.text;
}

// A bootstrap token is revoked once every instance it was given to has joined or gone: it is
// spent, whatever its expiry says.
void ElasticPools::RevokeSpentTokens(const Pool& p, const std::string& token) {
  if (token.empty()) return;
  for (const auto& [node, i] : p.by_node) {
    if (i.token == token && (i.state == State::kCreating || i.state == State::kBooting)) return;
  }
  Status s = store_->Write([&](store::Tx& tx) {
    auto t = tx.GetToken(token);
    if (!t.ok() || t->revoked) return Status::Ok();
    t->revoked = true;
    return tx.PutToken(*t);
  });
  if (!s.ok())
    base::log::Warn("elastic pools: bootstrap token {} not revoked: {}", token, s.message());
}

void ElasticPools::List(const std::string& name, Pool& p, double now) {
  p.listing = true;
  p.relist = false;
  Post(p.provisioner, [name, now](const cloud::Provisioner& prov) {
    Outcome o{name, "list", Status::Ok(), {}, {}, now};
    auto listed = prov.List(name);
    if (listed.ok()) {
      o.instances = std::move(*listed);
    } else {
      o.status = listed.status();
    }
    return o;
  });
}

void ElasticPools::TakeList(const Round& r, const std::string& name, Pool& p, const Outcome& o) {
  p.listing = false;
  if (!o.status.ok()) {
    Failed(name, p, r.now, "list", "listing its instances failed: " + o.status.message());
    return;
  }
  Succeeded(p, "list");
  p.listed_at = o.asked_at;
  std::set<std::string> listed;
  std::vector<std::string> adopted, vanished;
  for (const cloud::Instance& i : o.instances) {
    listed.insert(i.node);
    if (auto known = p.by_node.find(i.node); known != p.by_node.end()) {
      if (i.interrupt_at > 0 && !known->second.interrupted) {
        Interrupted(r, name, p, i.node, i.interrupt_at);
      }
      continue;
    }
    const bool ready = r.estate->Registered(i.node);
    Instance& adopted_one = p.by_node[i.node];
    adopted_one.id = i.id;
    adopted_one.state = ready ? State::kReady : State::kBooting;
    adopted_one.since = adopted_one.idle_since = r.now;
    adopted.push_back(i.node);
  }
  // Gone from the provisioner's list since it was asked for: taken back by the cloud, or
  // deleted by hand. The node, if it joined, falls silent and is lost like any other.
  for (auto it = p.by_node.begin(); it != p.by_node.end();) {
    const Instance& i = it->second;
    const bool known = i.state == State::kBooting || i.state == State::kReady;
    if (known && i.since < o.asked_at && !listed.count(it->first)) {
      vanished.push_back(it->first);
      it = p.by_node.erase(it);
    } else {
      ++it;
    }
  }
  if (!adopted.empty()) {
    Event(name, "Normal", "InstancesAdopted",
          "instance(s) the provisioner holds taken in: " + Join(adopted), r.now);
  }
  if (!vanished.empty()) {
    Event(name, "Warning", "InstancesVanished",
          "no longer listed by the provisioner: " + Join(vanished), r.now);
  }
}

void ElasticPools::Interrupted(const Round& r, const std::string& name, Pool& p,
                               const std::string& node, double at) {
  Instance& i = p.by_node.at(node);
  i.interrupted = true;
  std::string told;
  if (r.estate->Registered(node)) {
    domain::DrainRequest drain;
    drain.deadline = std::max(0.0, at - r.now);
    drain.reason = "spot interruption";
    auto d = nodes_->Drain(node, "elastic pool " + name, drain);
    if (d.ok()) {
      for (const Json& job : d->value("stopping", Json::array())) {
        const int64_t id = job.get<int64_t>();
        ++interruptions_[id];
        told += (told.empty() ? "" : ", ") + std::to_string(id);
      }
    } else {
      base::log::Warn("elastic pool {}: cannot drain {} before its interruption: {}", name, node,
                      d.status().message());
    }
    if (auto n = r.index.find(node); n != r.index.end()) {
      r.scheduler->SetSchedulable(n->second, false);
    }
  }
  i.state = State::kDeleting;
  i.since = r.now;
  i.asked = false;
  i.retry_at = at;  // the instance is deleted (and its node) once it has gone
  Event(name, "Warning", "SpotInterruption",
        "the cloud takes " + node + " back in " +
            std::to_string(static_cast<int64_t>(std::max(0.0, at - r.now))) + " s" +
            (told.empty() ? "" : ": job(s) " + told + " told, and requeued"),
        r.now);
}

void ElasticPools::TakeOutcomes(const Round& r) {
  std::vector<Outcome> outcomes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcomes.swap(outcomes_);
  }
  for (Outcome& o : outcomes) {
    Pool& p = pools_[o.pool];
    metrics_->Add("meridian_provisioner_requests_total",
                  {{"pool", o.pool}, {"verb", o.verb}, {"result", o.status.ok() ? "ok" : "failed"}},
                  1);
    if (o.verb == "list") {
      TakeList(r, o.pool, p, o);
    } else if (o.verb == "create") {
      if (!o.status.ok()) {
        // It may have made some after all (a time-out): the next list finds them.
        std::string token;
        for (const std::string& n : o.nodes) {
          if (auto it = p.by_node.find(n); it != p.by_node.end()) token = it->second.token;
          p.by_node.erase(n);
        }
        p.relist = true;
        RevokeSpentTokens(p, token);
        Failed(o.pool, p, r.now, "create",
               "asking for " + std::to_string(o.nodes.size()) +
                   " node(s) failed: " + o.status.message());
        continue;
      }
      p.failures = 0;
      Succeeded(p, "create");
      for (const cloud::Instance& i : o.instances) {
        auto it = p.by_node.find(i.node);
        if (it == p.by_node.end() || it->second.state != State::kCreating) continue;
        it->second.id = i.id;
        it->second.state = State::kBooting;
        it->second.since = r.now;
      }
    } else if (o.verb == "delete") {
      for (const std::string& n : o.nodes) {
        auto it = p.by_node.find(n);
        if (it == p.by_node.end()) continue;
        it->second.asked = false;
        it->second.retry_at = r.now + kDeleteRetrySeconds;
      }
      if (!o.status.ok()) {
        // Asked again after kDeleteRetrySeconds; the nodes stay cordoned meanwhile.
        Failed(o.pool, p, r.now, "delete",
               "deleting " + Join(o.nodes) + " failed: " + o.status.message());
        continue;
      }
      Succeeded(p, "delete");
      for (const std::string& n : o.nodes) {
        p.by_node.erase(n);
        if (!r.estate->Registered(n)) continue;
        auto d = nodes_->Delete(n, "elastic pool " + o.pool, false);
        if (!d.ok()) {
          base::log::Warn("elastic pool {}: node {} stays registered: {}", o.pool, n,
                          d.status().message());
        }
      }
      Event(o.pool, "Normal", "NodesReleased", "released " + Join(o.nodes), r.now);
    }
  }
}

void ElasticPools::Grow(const ElasticPoolSpec& spec, Pool& p, int32_t count, double now) {
  std::string token_id;
  auto token = BootstrapToken(now, spec.join_timeout + 600, &token_id);
  if (!token.ok()) {
    Failed(spec.name, p, now, "create",
           "no bootstrap token for new instances: " + token.status().message());
    return;
  }
  cloud::CreateRequest r;
  r.pool = spec.name;
  r.cluster = spec.cluster;
  r.region = spec.region;
  r.spot = spec.spot;
  r.shape.gpus = static_cast<int32_t>(spec.shape.gpus.size());
  r.shape.gpu_model = spec.shape.gpus.empty() ? "" : spec.shape.gpus[0].model;
  r.shape.cpu_milli = spec.shape.cpu_milli;
  r.shape.memory_mib = spec.shape.memory_mib;
  r.boot_seconds = spec.boot_seconds;
  r.price_per_hour = spec.price_per_gpu_hour * r.shape.gpus;
  r.server = options_.server_url;
  r.token = *token;
  for (int32_t i = 0; i < count; ++i) {
    std::string name;
    do {
      name = spec.name + "-" + base::Hex(entropy_->Bytes(3));
    } while (p.by_node.count(name));
    Instance& fresh = p.by_node[name];
    fresh.state = State::kCreating;
    fresh.since = fresh.idle_since = now;
    fresh.token = token_id;
    r.nodes.push_back(name);
  }
  Event(spec.name, "Normal", "ScaleUp",
        "asked provisioner " + spec.provisioner + " for " + std::to_string(count) +
            " node(s): " + Join(r.nodes),
        now);
  Post(p.provisioner, [r](const cloud::Provisioner& prov) {
    Outcome o{r.pool, "create", Status::Ok(), {}, r.nodes};
    auto made = prov.Create(r);
    if (made.ok()) {
      o.instances = std::move(*made);
    } else {
      o.status = made.status();
    }
    return o;
  });
}

void ElasticPools::Release(const Round& r, const std::string& name, Pool& p,
                           const std::vector<std::string>& nodes, const std::string& why) {
  std::vector<std::string> released;
  for (const std::string& n : nodes) {
    // Cordoned first, in the store and in the scheduler at once, so that no job is placed on a
    // node on its way out (an instance that joins late is cordoned too).
    if (r.estate->Registered(n)) {
      auto c = nodes_->Cordon(n, "elastic pool " + name, true);
      if (!c.ok()) {
        base::log::Warn("elastic pool {}: {} not released, as it cannot be cordoned: {}", name, n,
                        c.status().message());
        continue;
      }
      if (auto i = r.index.find(n); i != r.index.end())
        r.scheduler->SetSchedulable(i->second, false);
    }
    Instance& i = p.by_node.at(n);
    i.state = State::kDeleting;
    i.since = r.now;
    i.retry_at = r.now;
    released.push_back(n);
  }
  if (released.empty()) return;
  Event(name, "Normal", "ScaleDown", "releasing " + Join(released) + ": " + why, r.now);
  AskDeletes(name, p, r.now);
}

void ElasticPools::AskDeletes(const std::string& name, Pool& p, double now) {
  std::vector<std::string> nodes, ids;
  for (auto& [node, i] : p.by_node) {
    if (i.state != State::kDeleting || i.asked || i.retry_at > now) continue;
    i.asked = true;
    nodes.push_back(node);
    if (!i.id.empty()) ids.push_back(i.id);
  }
  if (nodes.empty()) return;
  Post(p.provisioner, [name, ids, nodes](const cloud::Provisioner& prov) {
    return Outcome{name, "delete", ids.empty() ? Status::Ok() : prov.Delete(name, ids), {}, nodes};
  });
}

bool ElasticPools::Tend(const Round& r, const ElasticPoolSpec& spec, Pool& p,
                        sched::ElasticPool* plan) {
  const double now = r.now;
  const sched::Snapshot& snap = r.scheduler->snapshot();
  const double relist = spec.spot ? kSpotRelistSeconds : kRelistSeconds;
  if (p.listed_at < 0 || p.relist || now - p.listed_at >= relist) {
    if (!p.listing && now >= p.backoff_until) List(spec.name, p, now);
  }
  // Until its first list is answered, a pool asks for nothing: it may already hold enough.
  if (p.listed_at < 0) return false;
  int32_t creating = 0, booting = 0, ready = 0, deleting = 0, idle_ready = 0;
  std::vector<std::string> never_joined, idle, gone;
  for (auto& [node, i] : p.by_node) {
    if (i.state == State::kBooting && r.estate->Registered(node)) {
      i.state = State::kReady;
      Succeeded(p, "join");
      i.since = i.idle_since = now;
      RevokeSpentTokens(p, i.token);
    }
    if (i.state == State::kBooting && now - i.since > spec.join_timeout) {
      never_joined.push_back(node);
      continue;
    }
    if (i.state == State::kReady && !r.estate->Registered(node)) {
      gone.push_back(node);  // deleted by hand: its instance has nothing left to do
      continue;
    }
    if (i.state == State::kReady) {
      auto n = r.index.find(node);
      const bool busy = n == r.index.end() || Busy(snap, n->second);
      if (busy) i.idle_since = now;
      if (!busy && snap.nodes[n->second].Usable()) ++idle_ready;
      if (!busy && now - i.idle_since >= spec.idle_timeout) idle.push_back(node);
    }
    creating += i.state == State::kCreating;
    booting += i.state == State::kBooting;
    ready += i.state == State::kReady;
    deleting += i.state == State::kDeleting;
  }
  if (!never_joined.empty()) {
    Failed(spec.name, p, now, "join",
           Join(never_joined) + " never registered within " +
               std::to_string(static_cast<int64_t>(spec.join_timeout)) + " s");
    Release(r, spec.name, p, never_joined, "never registered");
    deleting += static_cast<int32_t>(never_joined.size());
  }
  if (!gone.empty()) Release(r, spec.name, p, gone, "its node was deleted");
  // Idle nodes above the pool's minimum are released, longest idle first.
  std::sort(idle.begin(), idle.end(), [&](const std::string& a, const std::string& b) {
    return p.by_node.at(a).idle_since < p.by_node.at(b).idle_since;
  });
  const int32_t spare = std::max(0, ready + booting + creating - spec.min_nodes);
  if (static_cast<int32_t>(idle.size()) > spare) idle.resize(static_cast<size_t>(spare));
  if (!idle.empty()) {
    Release(r, spec.name, p, idle,
            "idle for " + std::to_string(static_cast<int64_t>(spec.idle_timeout)) + " s");
    ready -= static_cast<int32_t>(idle.size());
    idle_ready = std::max(0, idle_ready - static_cast<int32_t>(idle.size()));
    deleting += static_cast<int32_t>(idle.size());
  }
  AskDeletes(spec.name, p, now);
  // Below its minimum, a pool grows whatever waits.
  const int32_t have = creating + booting + ready;
  if (have < spec.min_nodes && now >= p.backoff_until) {
    Grow(spec, p, spec.min_nodes - have, now);
    creating += spec.min_nodes - have;
  }
  plan->name = spec.name;
  plan->shape = spec.shape;
  plan->idle = idle_ready;
  plan->booting = creating + booting;
  // Nodes on their way out count against maxNodes until they are gone.
  plan->headroom = std::max(0, std::min(spec.max_nodes - (creating + booting + ready + deleting),
                                        options_.max_creating_per_pool - creating));
  plan->boot_seconds = spec.boot_seconds;
  plan->price_per_gpu_hour = spec.price_per_gpu_hour;
  plan->speed = spec.speed;
  plan->spot = spec.spot;
  plan->available = now >= p.backoff_until;
  return true;
}

void ElasticPools::Step(double now, const Estate& estate, sched::Scheduler& scheduler,
                        const sched::CycleResult& cycle,
                        const std::map<int64_t, sched::JobSpec>& refused,
                        const std::map<std::string, BudgetBlock>& blocks,
                        const std::map<std::string, BudgetRoom>& room, PendingReasons* reasons) {
  if (estate.elastic_pools.empty() && pools_.empty()) return;
  Round r;
  r.now = now;
  r.estate = &estate;
  r.scheduler = &scheduler;
  std::set<std::string> elastic;
  for (const ElasticPoolSpec& spec : estate.elastic_pools) elastic.insert(spec.name);
  const sched::Snapshot& snap = scheduler.snapshot();
  for (size_t i = 0; i < estate.nodes.size() && i < snap.nodes.size(); ++i) {
    if (elastic.count(estate.nodes[i].pool)) r.index[snap.nodes[i].name] = static_cast<int32_t>(i);
  }
  TakeOutcomes(r);
  // A pool gone from the configuration gives back what it still holds, through the provisioner
  // that made it.
  for (auto it = pools_.begin(); it != pools_.end();) {
    Pool& p = it->second;
    if (elastic.count(it->first)) {
      ++it;
      continue;
    }
    std::vector<std::string> left;
    for (const auto& [node, i] : p.by_node) {
      if (i.state != State::kDeleting && i.state != State::kCreating) left.push_back(node);
    }
    if (!left.empty()) Release(r, it->first, p, left, "its pool was removed");
    AskDeletes(it->first, p, now);
    const bool waiting = p.listing || !p.by_node.empty();
    it = waiting ? std::next(it) : pools_.erase(it);
  }
  std::vector<sched::ElasticPool> plan_pools;
  std::vector<const ElasticPoolSpec*> specs;
  bool unsettled = false;  // a pool whose instances are not known yet
  for (const ElasticPoolSpec& spec : estate.elastic_pools) {
    auto known = pools_.find(spec.name);
    const std::string& provisioner = known != pools_.end() && !known->second.provisioner.empty()
                                         ? known->second.provisioner
                                         : spec.provisioner;
    if (!provisioners_.count(provisioner)) {
      if (unknown_.insert(spec.name).second) {
        Event(spec.name, "Warning", "UnknownProvisioner",
              "provisioner " + provisioner +
                  " is not configured on this server (meridian server --provisioner " +
                  provisioner + "=COMMAND): the pool does not grow",
              now);
      }
      continue;
    }
    unknown_.erase(spec.name);
    Pool& p = pools_[spec.name];
    p.provisioner = provisioner;
    sched::ElasticPool plan;
    if (!Tend(r, spec, p, &plan)) {
      // Not listed yet: the choice of the cheapest pool waits for it, unless it is backed off.
      if (now >= p.backoff_until) unsettled = true;
      continue;
    }
    plan_pools.push_back(std::move(plan));
    specs.push_back(&spec);
  }
  if ((!cycle.short_of_capacity.empty() || !refused.empty()) && !plan_pools.empty() && !unsettled) {
    // Jobs lent reserved nodes in the same cycle started after all.
    std::set<int64_t> started;
    for (const sched::StartDecision& d : cycle.started) started.insert(d.job);
    // A spent budget asks for nothing for its scope's jobs, and says so (docs/adr/0041); they
    // take no place in the plan's list either.
    std::map<int32_t, const BudgetBlock*> held;
    for (const auto& [project, tenant] : estate.tenant_of_project) {
      auto b = blocks.find(project);
      if (b != blocks.end()) held[tenant] = &b->second;
    }
    auto held_back = [&](const sched::JobSpec& job) {
      auto b = held.find(job.tenant);
      if (b == held.end()) return false;
      reasons->Set(job.id,
                   "waits for capacity; " + b->second->why + ": no new cloud node is asked for it");
      return true;
    };
    std::vector<sched::WaitingJob> waiting;
    for (int64_t id : cycle.short_of_capacity) {
      if (waiting.size() >= kMaxWaiting) break;
      const sched::JobSpec* job = scheduler.Find(id);
      if (job && !started.count(id) && !held_back(*job)) {
        waiting.push_back({job, scheduler.EstimatedStart(id, now)});
      }
    }
    for (const auto& [id, job] : refused) {
      if (waiting.size() >= kMaxWaiting) break;
      if (!held_back(job)) waiting.push_back({&job, sched::kNever});
    }
    // What each budget has left, and the budget each job is charged to.
    std::vector<double> budget_left;
    std::vector<const BudgetRoom*> budget_of;
    std::map<int32_t, int32_t> budget_of_tenant;
    for (const auto& [project, tenant] : estate.tenant_of_project) {
      auto r = room.find(project);
      if (r == room.end()) continue;
      int32_t index = -1;
      for (size_t b = 0; b < budget_of.size(); ++b) {
        if (budget_of[b]->budget == r->second.budget) index = static_cast<int32_t>(b);
      }
      if (index < 0) {
        index = static_cast<int32_t>(budget_of.size());
        budget_of.push_back(&r->second);
        budget_left.push_back(r->second.left);
      }
      budget_of_tenant[tenant] = index;
    }
    for (sched::WaitingJob& w : waiting) {
      auto b = budget_of_tenant.find(w.job->tenant);
      if (b != budget_of_tenant.end()) w.budget = b->second;
      auto lost = interruptions_.find(w.job->id);
      w.avoid_spot = !w.job->preemptible ||
                     (lost != interruptions_.end() && lost->second >= kMaxSpotInterruptions);
    }
    sched::BurstPlan plan = sched::PlanBurst(snap, scheduler.profile(), waiting, plan_pools, now,
                                             static_cast<uint64_t>(now * 1000), budget_left);
    for (const auto& [job, cost] : plan.over_budget) {
      const sched::JobSpec* spec = scheduler.Find(job);
      if (!spec && refused.count(job)) spec = &refused.at(job);
      auto b = spec ? budget_of_tenant.find(spec->tenant) : budget_of_tenant.end();
      if (b == budget_of_tenant.end()) continue;
      const BudgetRoom& r = *budget_of[static_cast<size_t>(b->second)];
      reasons->Set(job, fmt::format("waits for capacity; budget {} has {:.2f} left, less than this "
                                    "job would cost on a new node ({:.2f}): no new cloud node is "
                                    "asked for it",
                                    r.budget, r.left, cost));
    }
    for (size_t i = 0; i < plan_pools.size(); ++i) {
      if (plan.grow[i] > 0) Grow(*specs[i], pools_[specs[i]->name], plan.grow[i], now);
    }
    for (const auto& [job, pool] : plan.pool_of_job) {
      const ElasticPoolSpec& spec = *specs[static_cast<size_t>(pool)];
      reasons->Set(job, "waits for a new node of elastic pool " + spec.name + " (cluster " +
                            spec.cluster + "), which boots in about " +
                            std::to_string(static_cast<int64_t>(spec.boot_seconds)) + " s");
    }
  }
  Publish(estate);
}

void ElasticPools::Publish(const Estate& estate) {
  failures_.clear();
  for (const ElasticPoolSpec& spec : estate.elastic_pools) {
    auto it = pools_.find(spec.name);
    Failure f{spec.name, spec.cluster, spec.provisioner, "", 0};
    if (unknown_.count(spec.name)) {
      f.what = "provisioner " + spec.provisioner + " is not configured on this server";
      failures_.push_back(f);
    } else if (it != pools_.end() && !it->second.failing.empty()) {
      f.provisioner = it->second.provisioner;
      f.what = it->second.failure;
      f.in_a_row = it->second.failures;
      failures_.push_back(f);
    }
    metrics_->Set("meridian_pool_provisioning_failing",
                  {{"pool", spec.name}, {"cluster", spec.cluster}}, f.what.empty() ? 0 : 1);
    int32_t counts[4] = {0, 0, 0, 0};
    if (it != pools_.end()) {
      for (const auto& [node, i] : it->second.by_node) ++counts[static_cast<int>(i.state)];
    }
    const char* names[4] = {"creating", "booting", "ready", "deleting"};
    for (int s = 0; s < 4; ++s) {
      metrics_->Set("meridian_pool_nodes", {{"pool", spec.name}, {"state", names[s]}}, counts[s]);
    }
  }
}

}  // namespace meridian::server
