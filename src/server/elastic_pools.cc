#include "server/elastic_pools.h"

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

// How long an instance may take to register before it is taken for broken.
double RegistrationTimeout(const ElasticPoolSpec& spec) {
  return spec.boot_seconds + std::max(60.0, spec.boot_seconds);
}

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
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
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

void ElasticPools::Failed(const std::string& pool, Pool& p, double now, const std::string& what) {
  ++p.failures;
  const double backoff = std::min(
      options_.max_backoff, options_.min_backoff * std::pow(2.0, std::min(p.failures - 1, 16)));
  p.backoff_until = now + backoff;
  Event(pool, "Warning", "ProvisioningFailed",
        what + "; no new node is asked of it for " + std::to_string(static_cast<int64_t>(backoff)) +
            " s (failure " + std::to_string(p.failures) + " in a row)",
        now);
}

base::Result<std::string> ElasticPools::BootstrapToken(double now, double lifetime) {
  api::NewToken t = api::GenerateToken(*entropy_);
  Status s = store_->Write([&](store::Tx& tx) {
    if (!tx.GetObject("User", kBootstrapUser).ok()) {
      store::Object user{"User",
                         kBootstrapUser,
                         Json{{"roles", Json::array({Json{{"role", "agent"}}})},
                              {"description",
                               "the agents of elastic pools' new instances register as this user, "
                               "with tokens that expire (docs/adr/0039-elastic-pools.md)"}},
                         0,
                         now,
                         "meridian"};
      if (auto v = tx.PutObject(user, store::kMustNotExist); !v.ok()) return v.status();
    }
    return tx.PutToken({t.id, kBootstrapUser, t.secret_hash, "bootstrap of elastic pool instances",
                        now, now + lifetime, false});
  });
  if (!s.ok()) return s;
  return t.text;
}

void ElasticPools::TakeOutcomes(double now, const Estate& estate) {
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
      p.listing = false;
      if (!o.status.ok()) {
        Failed(o.pool, p, now, "listing its instances failed: " + o.status.message());
        continue;
      }
      p.listed = true;
      for (const cloud::Instance& i : o.instances) {
        if (p.by_node.count(i.node)) continue;
        const bool ready = estate.Registered(i.node);
        p.by_node[i.node] = {i.id, ready ? State::kReady : State::kBooting, now, now};
      }
      if (!o.instances.empty()) {
        Event(o.pool, "Normal", "InstancesAdopted",
              std::to_string(o.instances.size()) + " instance(s) the provisioner holds taken in",
              now);
      }
    } else if (o.verb == "create") {
      if (!o.status.ok()) {
        for (const std::string& n : o.nodes) p.by_node.erase(n);
        Failed(o.pool, p, now,
               "asking for " + std::to_string(o.nodes.size()) +
                   " node(s) failed: " + o.status.message());
        continue;
      }
      p.failures = 0;
      std::set<std::string> answered;
      for (const cloud::Instance& i : o.instances) {
        auto it = p.by_node.find(i.node);
        if (it == p.by_node.end()) continue;
        it->second.id = i.id;
        it->second.state = State::kBooting;
        it->second.since = now;
        answered.insert(i.node);
      }
      for (const std::string& n : o.nodes) {
        if (!answered.count(n)) p.by_node.erase(n);  // the provisioner made fewer than asked
      }
    } else if (o.verb == "delete") {
      if (!o.status.ok()) {
        // Tried again at a later round: a node being deleted stays cordoned meanwhile.
        for (const std::string& n : o.nodes) {
          if (auto it = p.by_node.find(n); it != p.by_node.end()) it->second.since = now;
        }
        Failed(o.pool, p, now, "deleting " + Join(o.nodes) + " failed: " + o.status.message());
        continue;
      }
      for (const std::string& n : o.nodes) {
        p.by_node.erase(n);
        if (estate.Registered(n)) {
          auto d = nodes_->Delete(n, "elastic pool " + o.pool, false);
          if (!d.ok()) {
            base::log::Warn("elastic pool {}: node {} stays registered: {}", o.pool, n,
                            d.status().message());
          }
        }
      }
      Event(o.pool, "Normal", "NodesReleased", "released " + Join(o.nodes), now);
    }
  }
}

void ElasticPools::Grow(const ElasticPoolSpec& spec, Pool& p, int32_t count, double now) {
  auto token = BootstrapToken(now, RegistrationTimeout(spec) + 600);
  if (!token.ok()) {
    base::log::Warn("elastic pool {}: no bootstrap token: {}", spec.name, token.status().message());
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
    p.by_node[name] = {"", State::kCreating, now, now};
    r.nodes.push_back(name);
  }
  Event(spec.name, "Normal", "ScaleUp",
        "asked provisioner " + spec.provisioner + " for " + std::to_string(count) +
            " node(s): " + Join(r.nodes),
        now);
  Post(spec.provisioner, [r](const cloud::Provisioner& prov) {
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

void ElasticPools::Release(const ElasticPoolSpec& spec, Pool& p,
                           const std::vector<std::string>& nodes, double now,
                           const std::string& why) {
  std::vector<std::string> ids;
  for (const std::string& n : nodes) {
    Instance& i = p.by_node.at(n);
    i.state = State::kDeleting;
    i.since = now;
    if (!i.id.empty()) ids.push_back(i.id);
  }
  Event(spec.name, "Normal", "ScaleDown", "releasing " + Join(nodes) + ": " + why, now);
  const std::string pool = spec.name;
  Post(spec.provisioner, [pool, ids, nodes](const cloud::Provisioner& prov) {
    return Outcome{pool, "delete", ids.empty() ? Status::Ok() : prov.Delete(pool, ids), {}, nodes};
  });
}

void ElasticPools::Step(double now, const Estate& estate, sched::Scheduler& scheduler,
                        const sched::CycleResult& cycle,
                        const std::map<int64_t, sched::JobSpec>& refused, PendingReasons* reasons) {
  if (estate.elastic_pools.empty() && pools_.empty()) return;
  TakeOutcomes(now, estate);
  const sched::Snapshot& snap = scheduler.snapshot();
  std::map<std::string, int32_t> index;  // nodes of elastic pools in the snapshot
  std::set<std::string> elastic;
  for (const ElasticPoolSpec& spec : estate.elastic_pools) elastic.insert(spec.name);
  for (size_t i = 0; i < estate.nodes.size() && i < snap.nodes.size(); ++i) {
    if (elastic.count(estate.nodes[i].pool)) index[snap.nodes[i].name] = static_cast<int32_t>(i);
  }
  std::vector<sched::ElasticPool> plan_pools;
  std::vector<const ElasticPoolSpec*> specs;
  for (const ElasticPoolSpec& spec : estate.elastic_pools) {
    if (!provisioners_.count(spec.provisioner)) {
      if (!unknown_said_[spec.name]) {
        unknown_said_[spec.name] = true;
        Event(spec.name, "Warning", "UnknownProvisioner",
              "provisioner " + spec.provisioner +
                  " is not configured on this server (meridian server --provisioner " +
                  spec.provisioner + "=COMMAND): the pool does not grow",
              now);
      }
      continue;
    }
    Pool& p = pools_[spec.name];
    if (!p.listed) {
      if (!p.listing && now >= p.backoff_until) {
        p.listing = true;
        const std::string pool = spec.name;
        Post(spec.provisioner, [pool](const cloud::Provisioner& prov) {
          Outcome o{pool, "list", Status::Ok(), {}, {}};
          auto listed = prov.List(pool);
          if (listed.ok()) {
            o.instances = std::move(*listed);
          } else {
            o.status = listed.status();
          }
          return o;
        });
      }
      continue;
    }
    int32_t creating = 0, booting = 0, ready = 0;
    std::vector<std::string> never_joined, idle, gone;
    for (auto& [node, i] : p.by_node) {
      if (i.state == State::kBooting && estate.Registered(node)) {
        i.state = State::kReady;
        i.since = i.idle_since = now;
      }
      if (i.state == State::kBooting && now - i.since > RegistrationTimeout(spec)) {
        never_joined.push_back(node);
        continue;
      }
      if (i.state == State::kReady && !estate.Registered(node)) {
        gone.push_back(node);  // deleted by hand: the instance has nothing to do
        continue;
      }
      if (i.state == State::kReady) {
        auto n = index.find(node);
        if (n != index.end() && Busy(snap, n->second)) i.idle_since = now;
        if (n != index.end() && now - i.idle_since >= spec.idle_timeout) idle.push_back(node);
      }
      creating += i.state == State::kCreating;
      booting += i.state == State::kBooting;
      ready += i.state == State::kReady;
    }
    if (!never_joined.empty()) {
      Failed(spec.name, p, now,
             Join(never_joined) + " never registered within " +
                 std::to_string(static_cast<int64_t>(RegistrationTimeout(spec))) + " s");
      Release(spec, p, never_joined, now, "never registered");
    }
    if (!gone.empty()) Release(spec, p, gone, now, "its node was deleted");
    // Idle nodes above the pool's minimum are released, longest idle first. Cordoned before the
    // provisioner is asked, in the store and in the scheduler at once, so that no job is placed
    // on a node on its way out.
    std::sort(idle.begin(), idle.end(), [&](const std::string& a, const std::string& b) {
      return p.by_node.at(a).idle_since < p.by_node.at(b).idle_since;
    });
    const int32_t spare = std::max(0, ready + booting + creating - spec.min_nodes);
    if (static_cast<int32_t>(idle.size()) > spare) idle.resize(spare);
    std::vector<std::string> releasing;
    for (const std::string& node : idle) {
      auto c = nodes_->Cordon(node, "elastic pool " + spec.name, true);
      if (!c.ok()) {
        base::log::Warn("elastic pool {}: cannot cordon {}: {}", spec.name, node,
                        c.status().message());
        continue;
      }
      scheduler.SetSchedulable(index.at(node), false);
      releasing.push_back(node);
    }
    ready -= static_cast<int32_t>(releasing.size());
    if (!releasing.empty()) {
      Release(spec, p, releasing, now,
              "idle for " + std::to_string(static_cast<int64_t>(spec.idle_timeout)) + " s");
    }
    // Below its minimum, a pool grows whatever waits.
    const int32_t have = creating + booting + ready;
    if (have < spec.min_nodes && now >= p.backoff_until) {
      Grow(spec, p, spec.min_nodes - have, now);
      creating += spec.min_nodes - have;
    }
    sched::ElasticPool e;
    e.name = spec.name;
    e.shape = spec.shape;
    e.booting = creating + booting;
    e.headroom = std::max(0, std::min(spec.max_nodes - (creating + booting + ready),
                                      options_.max_creating_per_pool - creating));
    e.boot_seconds = spec.boot_seconds;
    e.price_per_gpu_hour = spec.price_per_gpu_hour;
    e.available = now >= p.backoff_until;
    plan_pools.push_back(std::move(e));
    specs.push_back(&spec);
  }
  if ((!cycle.short_of_capacity.empty() || !refused.empty()) && !plan_pools.empty()) {
    std::vector<sched::WaitingJob> waiting;
    for (int64_t id : cycle.short_of_capacity) {
      if (waiting.size() >= kMaxWaiting) break;
      const sched::JobSpec* job = scheduler.Find(id);
      if (job) waiting.push_back({job, scheduler.EstimatedStart(id, now)});
    }
    for (const auto& [id, job] : refused) {
      if (waiting.size() >= kMaxWaiting) break;
      waiting.push_back({&job, sched::kNever});
    }
    sched::BurstPlan plan = sched::PlanBurst(snap, scheduler.profile(), waiting, plan_pools, now,
                                             static_cast<uint64_t>(now * 1000));
    for (size_t i = 0; i < plan_pools.size(); ++i) {
      if (plan.grow[i] > 0) Grow(*specs[i], pools_[specs[i]->name], plan.grow[i], now);
    }
    for (const auto& [job, pool] : plan.pool_of_job) {
      const ElasticPoolSpec& spec = *specs[pool];
      reasons->Set(job, "waits for a new node of elastic pool " + spec.name + " (cluster " +
                            spec.cluster + "), which boots in about " +
                            std::to_string(static_cast<int64_t>(spec.boot_seconds)) + " s");
    }
  }
  Publish(estate);
}

void ElasticPools::Publish(const Estate& estate) {
  for (const ElasticPoolSpec& spec : estate.elastic_pools) {
    auto it = pools_.find(spec.name);
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
