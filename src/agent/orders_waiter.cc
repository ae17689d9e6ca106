#include "agent/orders_waiter.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace meridian::agent {

struct OrdersWaiter::Shared {
  std::string node;
  std::mutex mu;
  std::condition_variable cv;
  cli::ClientConfig config;
  uint64_t config_version = 0;  // moves on with each Use
  bool started = false;
  bool stop = false;
  bool finished = false;  // the thread has returned
  std::atomic<bool> rung{false};

  // Sleeps `seconds`, or less when stopping. Returns whether to go on.
  bool Pause(double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return stop; });
    return !stop;
  }
};

namespace {

void WaitLoop(const std::shared_ptr<OrdersWaiter::Shared>& s);

void RunWaitLoop(const std::shared_ptr<OrdersWaiter::Shared>& s) {
  WaitLoop(s);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->finished = true;
  }
  s->cv.notify_all();
}

void WaitLoop(const std::shared_ptr<OrdersWaiter::Shared>& s) {
  std::optional<cli::Client> client;
  uint64_t client_version = 0;
  uint64_t seen = 0;  // no version yet: the first answer comes at once
  double backoff = 1;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->stop) return;
      if (!client || client_version != s->config_version) {
        client.emplace(s->config);
        client_version = s->config_version;
      }
    }
    const std::string path = "/api/v1/agents/" + s->node + "/wait?seen=" + std::to_string(seen) +
                             "&timeout=" + std::to_string(OrdersWaiter::kWaitSeconds);
    auto r = client->Call("GET", path);
    const nlohmann::json* version = nullptr;
    if (r.ok() && r->status == 200 && r->body.is_object() && r->body.contains("version") &&
        r->body["version"].is_number_unsigned()) {
      version = &r->body["version"];
    }
    if (!version) {
      // The server is away, older, or refuses this node (heartbeats say why): wait longer
      // before asking again; heartbeats carry the orders meanwhile.
      if (!s->Pause(backoff)) return;
      backoff = std::min(backoff * 2, 30.0);
      continue;
    }
    backoff = 1;
    const uint64_t now = version->get<uint64_t>();
    if (now != seen) {
      s->rung = true;
      seen = now;
    }
  }
}

}  // namespace

OrdersWaiter::OrdersWaiter(std::string node) : shared_(std::make_shared<Shared>()) {
  shared_->node = std::move(node);
}

OrdersWaiter::~OrdersWaiter() {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
  // A wait answered meanwhile (the agent's last heartbeat rings it, when tasks ended) lets the
  // thread end here; one still held by the server ends with its answer, on its own.
  shared_->cv.wait_for(lock, std::chrono::milliseconds(200),
                       [this] { return !shared_->started || shared_->finished; });
}

void OrdersWaiter::Use(const cli::ClientConfig& config) {
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->config = config;
    shared_->config.keep_connection = true;  // its own connection, beside the heartbeats'
    ++shared_->config_version;
    start = !shared_->started;
    shared_->started = true;
  }
  if (start) std::thread(RunWaitLoop, shared_).detach();
}

bool OrdersWaiter::TakeRung() { return shared_->rung.exchange(false); }

bool OrdersWaiter::rung() const { return shared_->rung.load(); }

}  // namespace meridian::agent
