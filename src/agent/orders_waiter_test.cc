#include "agent/orders_waiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "net/http_server.h"

namespace meridian::agent {
namespace {

// A server in this process that answers an agent's calls for node n: with `channel`, its channel
// answers each heartbeat "200 {"got":BODY}" and rings at the open; without, the path is unknown
// (a server from before channels: 404), and its long poll answers at once with version 7.
class FakeServer {
 public:
  explicit FakeServer(bool channel) : server_(net::ServerOptions{}) {
    if (channel) {
      server_.Handle(
          "GET", "/api/v1/agents/n/channel", [this](const net::Request&, net::Response& res) {
            ++channels_;
            res.status = 101;
            res.channel = [](std::shared_ptr<net::Channel> c) {
              c->Send("ring {\"version\":1}");
              return [c](std::string message) { c->Send("200 {\"got\":" + message + "}"); };
            };
          });
    }
    server_.Handle(
        "GET", "/api/v1/agents/n/wait",
        [this](const net::Request&, net::Response& res) {
          ++waits_;
          res.set_content("{\"version\":7}", "application/json");
        },
        [](const net::Request&) { return true; });
    auto port = server_.Bind("127.0.0.1", 0);
    EXPECT_TRUE(port.ok());
    url_ = "http://127.0.0.1:" + std::to_string(port.ok() ? *port : 0);
    thread_ = std::thread([this] { server_.Run(); });
  }
  ~FakeServer() {
    server_.Stop();
    thread_.join();
  }
  cli::ClientConfig config() const {
    cli::ClientConfig c;
    c.server = url_;
    c.token = "t";
    return c;
  }
  std::atomic<int> channels_{0}, waits_{0};

 private:
  net::HttpServer server_;
  std::string url_;
  std::thread thread_;
};

bool Within(double seconds, const std::function<bool()>& ready) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ready();
}

TEST(OrdersWaiter, HeartbeatsOverTheChannelAndHearsItsRings) {
  FakeServer server(true);
  OrdersWaiter waiter("n");
  EXPECT_EQ(waiter.Heartbeat("{}", 1).status().code(), base::StatusCode::kUnavailable)
      << "no channel before Use";
  waiter.Use(server.config());
  ASSERT_TRUE(Within(10, [&] { return waiter.channel_open(); }));
  EXPECT_TRUE(Within(10, [&] { return waiter.rung(); })) << "the ring at the open";
  EXPECT_TRUE(waiter.TakeRung());
  for (int i = 0; i < 3; ++i) {
    auto answer = waiter.Heartbeat("[" + std::to_string(i) + "]", 10);
    ASSERT_TRUE(answer.ok()) << answer.status().message();
    EXPECT_EQ(answer->status, 200);
    EXPECT_EQ(answer->body, "{\"got\":[" + std::to_string(i) + "]}");
  }
  EXPECT_EQ(server.channels_, 1);
  EXPECT_EQ(server.waits_, 0);
}

TEST(OrdersWaiter, AgainstAServerWithoutChannelsItLongPollsAndHeartbeatsArePosted) {
  FakeServer server(false);
  OrdersWaiter waiter("n");
  waiter.Use(server.config());
  // The long poll's first answer (version 7 after none) rings.
  ASSERT_TRUE(Within(10, [&] { return server.waits_ > 0 && waiter.rung(); }));
  EXPECT_FALSE(waiter.channel_open());
  // No channel: the caller POSTs its heartbeat.
  EXPECT_EQ(waiter.Heartbeat("{}", 1).status().code(), base::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace meridian::agent
