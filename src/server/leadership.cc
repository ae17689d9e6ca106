#include "server/leadership.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "base/log.h"

namespace meridian::server {

using base::Status;

Leadership::Leadership(store::Election* election, std::string advertised)
    : election_(election), advertised_(std::move(advertised)) {}

Leadership::~Leadership() { Stop(); }

Status Leadership::CampaignOnce() {
  auto leads = election_->Campaign(advertised_);
  if (!leads.ok()) return leads.status();
  if (*leads) {
    leading_ = true;
    base::log::Info("leading the servers on this database (epoch {}, advertised as {})",
                    election_->epoch(), advertised_);
  } else {
    Learn();
    std::lock_guard<std::mutex> lock(mu_);
    base::log::Info("following the leader {}: writes are redirected there",
                    leader_url_.empty() ? std::string("(none known)") : leader_url_);
  }
  return Status::Ok();
}

void Leadership::Start(std::function<void()> on_lead) {
  on_lead_ = std::move(on_lead);
  thread_ = std::thread([this] { Loop(); });
}

void Leadership::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Leadership::Learn() {
  auto leader = election_->Leader();
  std::lock_guard<std::mutex> lock(mu_);
  if (!leader.ok()) return;
  const std::string url = leader->epoch > 0 ? leader->url : "";
  if (url != leader_url_ && !url.empty() && url != advertised_) {
    base::log::Info("following the leader {} (epoch {})", url, leader->epoch);
  }
  leader_url_ = url;
}

void Leadership::Loop() {
  const auto interval = std::chrono::duration<double>(kCampaignInterval);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, interval, [this] { return stopping_; })) return;
    }
    Status s = Status::Ok();
    if (leading_) {
      // A lost session or a moved epoch deposes the store, whose hook stops this server.
      s = election_->CheckLeading();
    } else {
      auto leads = election_->Campaign(advertised_);
      if (leads.ok() && *leads) {
        leading_ = true;
        {
          std::lock_guard<std::mutex> lock(mu_);
          leader_url_ = advertised_;
        }
        base::log::Info("took over as leader (epoch {}, advertised as {})", election_->epoch(),
                        advertised_);
        if (on_lead_) on_lead_();
        continue;
      }
      s = leads.status();
      Learn();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok() && s.message() != last_error_) {
      base::log::Warn("leader election: {}", s.message());
    }
    last_error_ = s.ok() ? "" : s.message();
  }
}

bool Leadership::Gate(const net::Request& req, net::Response& res) const {
  // Reads are served here; writes, sessions into tasks (WebSockets: the leader's agents take
  // them up) and agents' waits for orders (the leader gives them) go to the leader.
  const bool read = (req.method == "GET" || req.method == "HEAD") && !req.websocket &&
                    req.path.rfind("/api/v1/agents/", 0) != 0;
  if (leading_ || read) return false;
  std::string leader;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader = leader_url_;
  }
  if (!leader.empty() && leader != advertised_) {
    // 307 keeps the method and the body: the client sends the same request to the leader.
    res.status = 307;
    res.set_header("Location", leader + req.target);
    res.set_content(nlohmann::json{{"error",
                                    {{"code", "redirect"},
                                     {"message", "this server follows; the leader is " + leader}}}}
                            .dump() +
                        "\n",
                    "application/json");
    return true;
  }
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(
      nlohmann::json{
          {"error",
           {{"code", "unavailable"},
            {"message",
             "no leader: this server follows, and no server leads its database now (an election "
             "is under way); retry in a moment"}}}}
              .dump() +
          "\n",
      "application/json");
  return true;
}

}  // namespace meridian::server
