#include "api/sessions.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace meridian::api {
namespace {

using protocol::Channel;

// One end of a WebSocket as the relay sees it: what the peer sends is queued for Read, what
// the relay writes is kept; Close wakes a waiting Read.
class FakeTunnel : public net::Tunnel {
 public:
  bool Read(std::string* message) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !in_.empty(); });
    if (in_.empty()) return false;
    *message = in_.front();
    in_.pop_front();
    return true;
  }
  bool Write(std::string_view message) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    out_.emplace_back(message);
    cv_.notify_all();
    return true;
  }
  void Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  void Send(const std::string& m) {
    std::lock_guard<std::mutex> lock(mu_);
    in_.push_back(m);
    cv_.notify_all();
  }
  // What the relay wrote, once `n` messages have come (or after a second).
  std::vector<std::string> Written(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return out_.size() >= n; });
    return out_;
  }
  bool closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> in_;
  std::vector<std::string> out_;
  bool closed_ = false;
};

class CountingEntropy : public base::Entropy {
 public:
  std::string Bytes(size_t n) override { return std::string(n, static_cast<char>(next_++)); }

 private:
  int next_ = 1;
};

protocol::SessionOffer Exec(int64_t job) {
  protocol::SessionOffer o;
  o.job = job;
  o.generation = 1;
  o.command = {"true"};
  return o;
}

// The offers for `node` once the user's side has made one (within half a second).
std::vector<protocol::SessionOffer> OffersSoon(SessionRelay& relay, const std::string& node) {
  std::vector<protocol::SessionOffer> offers;
  for (int i = 0; i < 100 && offers.empty(); ++i) {
    offers = relay.Offers(node);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return offers;
}

TEST(SessionRelay, OffersGoToTheirNodeUntilTakenAndFramesFlowBothWays) {
  CountingEntropy entropy;
  std::mutex mu;
  std::vector<std::string> rung;  // nodes whose agents were told at once
  SessionRelay relay(&entropy, [&](const std::string& node) {
    std::lock_guard<std::mutex> lock(mu);
    rung.push_back(node);
  });
  auto user = std::make_shared<FakeTunnel>();
  std::thread user_side([&] { relay.RunUserSide("n1", Exec(7), user, 10); });
  const std::vector<protocol::SessionOffer> offers = OffersSoon(relay, "n1");
  ASSERT_EQ(offers.size(), 1u);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(rung, std::vector<std::string>{"n1"});
  }
  EXPECT_EQ(offers[0].job, 7);
  EXPECT_TRUE(relay.Offers("n2").empty());
  const std::string id = offers[0].id;
  // Another node's agent cannot take it up, nor an id that was never offered.
  EXPECT_FALSE(relay.MayTake("n2", id).ok());
  EXPECT_FALSE(relay.MayTake("n1", "nothing").ok());
  ASSERT_TRUE(relay.MayTake("n1", id).ok());
  auto agent = std::make_shared<FakeTunnel>();
  std::thread agent_side([&] { relay.RunAgentSide("n1", id, agent); });
  user->Send(protocol::Frame(Channel::kStdin, "hello"));
  agent->Send(protocol::Frame(Channel::kStdout, "world"));
  EXPECT_EQ(agent->Written(1),
            (std::vector<std::string>{protocol::Frame(Channel::kStdin, "hello")}));
  EXPECT_EQ(user->Written(1),
            (std::vector<std::string>{protocol::Frame(Channel::kStdout, "world")}));
  // Taken: no longer offered, and no second agent may take it.
  EXPECT_TRUE(relay.Offers("n1").empty());
  EXPECT_FALSE(relay.MayTake("n1", id).ok());
  // The agent ends (the command exited): the user's side is closed, and the session is gone.
  agent->Close();
  agent_side.join();
  EXPECT_TRUE(user->closed());
  user_side.join();
  EXPECT_EQ(relay.open(), 0);
}

TEST(SessionRelay, AnOfferNoAgentTakesUpEndsWithAnErrorTheUserReads) {
  CountingEntropy entropy;
  SessionRelay relay(&entropy, nullptr);
  auto user = std::make_shared<FakeTunnel>();
  relay.RunUserSide("n1", Exec(7), user, 0.05);
  const std::vector<std::string> written = user->Written(1);
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0][0], static_cast<char>(Channel::kStatus));
  EXPECT_NE(written[0].find("node n1's agent did not take the session up"), std::string::npos)
      << written[0];
  EXPECT_TRUE(relay.Offers("n1").empty());
  EXPECT_EQ(relay.open(), 0);
}

TEST(SessionRelay, TheUserGoingClosesTheAgentsSide) {
  CountingEntropy entropy;
  std::mutex mu;
  std::vector<std::string> rung;  // nodes whose agents were told at once
  SessionRelay relay(&entropy, [&](const std::string& node) {
    std::lock_guard<std::mutex> lock(mu);
    rung.push_back(node);
  });
  auto user = std::make_shared<FakeTunnel>();
  std::thread user_side([&] { relay.RunUserSide("n1", Exec(7), user, 10); });
  const std::vector<protocol::SessionOffer> offers = OffersSoon(relay, "n1");
  ASSERT_EQ(offers.size(), 1u);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(rung, std::vector<std::string>{"n1"});
  }
  auto agent = std::make_shared<FakeTunnel>();
  std::thread agent_side([&] { relay.RunAgentSide("n1", offers[0].id, agent); });
  for (int i = 0; i < 100 && !relay.Offers("n1").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  user->Close();
  user_side.join();
  EXPECT_TRUE(agent->closed());  // the agent then ends the command
  agent_side.join();
}

}  // namespace
}  // namespace meridian::api
