#include "agent/orders_waiter.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "net/websocket_client.h"
#include "protocol/agent_protocol.h"

namespace meridian::agent {

struct OrdersWaiter::Shared {
  std::string node;
  bool whole_cluster = false;
  std::mutex mu;
  std::condition_variable cv;
  cli::ClientConfig config;
  uint64_t config_version = 0;  // moves on with each Use
  bool started = false;
  bool stop = false;
  bool finished = false;  // the thread has returned
  std::atomic<bool> rung{false};
  // The channel, while it is open: the loop's wake-up pipe (a heartbeat to send, a Use, a stop),
  // what to send, and the answer the loop hands back.
  uint64_t channel_number = 0;   // moves on with each channel opened
  uint64_t channel_version = 0;  // the config_version it was opened with
  int wake = -1;                 // -1: no channel open
  bool close_channel = false;    // asked to close: it takes no more heartbeats
  std::optional<std::string> outgoing;
  // Read once, as it came: status 0 when it had none.
  std::optional<protocol::ChannelMessage> answer;
  // An older server offers no channel: until then, the long poll.
  std::chrono::steady_clock::time_point no_channel_until{};

  void Wake() {
    if (wake >= 0) (void)!::write(wake, "x", 1);
  }

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

// Runs the node's channel until it ends: heartbeats handed over by OrdersWaiter::Heartbeat go
// out, answers come back to it, rings set `rung`.
void RunChannel(const std::shared_ptr<OrdersWaiter::Shared>& s, net::WebSocketClient& socket,
                uint64_t version) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    ++s->channel_number;
    s->channel_version = version;
    s->close_channel = false;
    s->answer.reset();
    s->outgoing.reset();
    s->wake = fds[1];
    // A stop or a new credential while it was being opened found no pipe to wake it.
    if (s->stop || s->config_version != version) socket.Close();
  }
  socket.Watch(fds[0], [&](std::string_view data) {
    std::lock_guard<std::mutex> lock(s->mu);
    if (data.empty() || s->stop || s->close_channel || s->config_version != version) {
      socket.Close();
      return;
    }
    if (s->outgoing) {
      socket.Send(std::move(*s->outgoing));
      s->outgoing.reset();
    }
  });
  socket.Run([&](std::string_view m) {
    auto message = protocol::DecodeChannelMessage(m);
    if (message && message->ring) {
      s->rung = true;
      return;
    }
    std::lock_guard<std::mutex> lock(s->mu);
    s->answer = message ? std::move(*message) : protocol::ChannelMessage{};
    s->cv.notify_all();
  });
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->wake = -1;
    s->outgoing.reset();
  }
  s->cv.notify_all();
  ::close(fds[0]);
  ::close(fds[1]);
}

void WaitLoop(const std::shared_ptr<OrdersWaiter::Shared>& s) {
  std::optional<cli::Client> client;
  uint64_t client_version = 0;
  uint64_t seen = 0;  // no version yet: the first answer comes at once
  double backoff = 1;
  for (;;) {
    cli::ClientConfig config;
    bool try_channel = false;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->stop) return;
      if (!client || client_version != s->config_version) {
        client.emplace(s->config);
        client_version = s->config_version;
      }
      config = s->config;
      try_channel = !s->whole_cluster && std::chrono::steady_clock::now() >= s->no_channel_until;
    }
    if (try_channel) {
      net::WebSocketOpen open =
          cli::OpenWebSocket(config, "/api/v1/agents/" + s->node + "/channel");
      if (open.socket) {
        const auto opened = std::chrono::steady_clock::now();
        RunChannel(s, *open.socket, client_version);
        // One that ends at once (a server closing it) is not opened again at once.
        if (std::chrono::steady_clock::now() - opened < std::chrono::seconds(1)) {
          if (!s->Pause(backoff)) return;
          backoff = std::min(backoff * 2, 30.0);
        } else {
          backoff = 1;
        }
        continue;
      }
      if (open.status == 404 || open.status == 400) {
        // A server without channels: the long poll, and the channel tried again in a while (the
        // server may be upgraded meanwhile).
        std::lock_guard<std::mutex> lock(s->mu);
        s->no_channel_until = std::chrono::steady_clock::now() + std::chrono::minutes(5);
      } else {
        // The server is away, or refuses this node (heartbeats say why): wait longer before
        // asking again; heartbeats carry the orders meanwhile.
        if (!s->Pause(backoff)) return;
        backoff = std::min(backoff * 2, 30.0);
        continue;
      }
    }
    const std::string path = "/api/v1/agents/" + s->node + "/wait?seen=" + std::to_string(seen) +
                             "&timeout=" + std::to_string(OrdersWaiter::kWaitSeconds) +
                             (s->whole_cluster ? "&scope=cluster" : "");
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

OrdersWaiter::OrdersWaiter(std::string node, bool whole_cluster)
    : shared_(std::make_shared<Shared>()) {
  shared_->node = std::move(node);
  shared_->whole_cluster = whole_cluster;
}

OrdersWaiter::~OrdersWaiter() {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->stop = true;
  shared_->Wake();
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
    shared_->Wake();  // a channel opened with the old credential is opened again
    start = !shared_->started;
    shared_->started = true;
  }
  if (start) std::thread(RunWaitLoop, shared_).detach();
}

bool OrdersWaiter::TakeRung() { return shared_->rung.exchange(false); }

bool OrdersWaiter::rung() const { return shared_->rung.load(); }

bool OrdersWaiter::channel_open() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->wake >= 0;
}

base::Result<OrdersWaiter::Answer> OrdersWaiter::Heartbeat(std::string body, double timeout) {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  // Only an open channel, not one closing (whose late answers would be taken for this one's) or
  // opened with an older credential.
  if (s.wake < 0 || s.close_channel || s.channel_version != s.config_version) {
    return base::Status(base::StatusCode::kUnavailable, "no channel open");
  }
  const uint64_t mine = s.channel_number;
  s.answer.reset();
  s.outgoing = std::move(body);
  s.Wake();
  s.cv.wait_for(lock, std::chrono::duration<double>(timeout), [&] {
    return s.answer.has_value() || s.wake < 0 || s.channel_number != mine || s.stop;
  });
  if (!s.answer || s.channel_number != mine) {
    // A channel that does not answer is no use: closed, and opened again by the loop. One that
    // ended meanwhile is left to the loop.
    if (s.wake >= 0 && s.channel_number == mine) {
      s.outgoing.reset();
      s.close_channel = true;
      s.Wake();
    }
    return base::Status(base::StatusCode::kUnavailable, "the channel gave no answer");
  }
  Answer a{s.answer->status, std::move(s.answer->body)};
  s.answer.reset();
  if (a.status == 0) {
    return base::Status(base::StatusCode::kUnavailable, "a channel answer without a status");
  }
  if (a.status == 307 || a.status == 308) {
    // The server it is open to no longer leads: the channel is opened again at the leader (the
    // loop follows the redirect), and this heartbeat is POSTed, which follows it too.
    s.close_channel = true;
    s.Wake();
    return base::Status(base::StatusCode::kUnavailable, "the channel's server no longer leads");
  }
  return a;
}

}  // namespace meridian::agent
