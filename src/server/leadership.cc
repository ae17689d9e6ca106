#include "server/leadership.h"

#include <httplib.h>

#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>

#include "api/api.h"
#include "base/log.h"
#include "base/strings.h"

namespace meridian::server {

using base::Status;

Leadership::Leadership(store::Election* election, std::string advertised, std::string ca_cert)
    : election_(election), advertised_(std::move(advertised)), ca_cert_(std::move(ca_cert)) {}

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
    base::log::Info("following the leader {}: what the database alone does not answer goes there",
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

namespace {
constexpr const char* kNoLeader =
    "no leader: this server follows, and no server leads its database now (an election is under "
    "way)";
}  // namespace

std::string Leadership::leader_url() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_url_ != advertised_ ? leader_url_ : "";
}

void Leadership::NoLeader(net::Response& res, const std::string& why) {
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(
      nlohmann::json{{"error", {{"code", "unavailable"}, {"message", why + "; retry in a moment"}}}}
              .dump() +
          "\n",
      "application/json");
}

bool Leadership::Gate(const net::Request& req, net::Response& res) const {
  if (leading_) return false;
  // What a follower does not relay: agents' calls (their waits are the leader's to answer, and
  // agents follow redirects), streams of events, and sessions into tasks (WebSockets).
  const bool relayed =
      !req.websocket && req.path.rfind("/api/v1/agents/", 0) != 0 && req.path != "/api/v1/watch";
  if (relayed) return false;
  const std::string leader = leader_url();
  if (leader.empty()) {
    NoLeader(res, kNoLeader);
    return true;
  }
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

namespace {

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Headers a follower passes on, either way: the end-to-end ones (RFC 9110, 7.6.1), without what
// the hop to the leader sets anew (lengths, encodings its client decodes, the host), the
// headers that `Connection` names, and what only a follower may say (who the client is, the
// servers' secret).
bool Passed(const std::string& name, const std::set<std::string>& named_by_connection) {
  static const std::set<std::string> kDropped = {"connection",
                                                 "keep-alive",
                                                 "te",
                                                 "trailer",
                                                 "upgrade",
                                                 "host",
                                                 "content-length",
                                                 "content-type",
                                                 "accept-encoding",
                                                 "content-encoding",
                                                 "transfer-encoding",
                                                 "proxy-authorization",
                                                 "x-forwarded-for",
                                                 "forwarded",
                                                 "x-real-ip",
                                                 Lower(api::Api::kPeerHeader)};
  const std::string lower = Lower(name);
  return kDropped.count(lower) == 0 && named_by_connection.count(lower) == 0;
}

std::set<std::string> NamedByConnection(const std::string& connection) {
  std::set<std::string> out;
  for (std::string_view part : base::Split(connection, ',')) {
    const std::string name = Lower(std::string(base::Trim(part)));
    if (!name.empty()) out.insert(name);
  }
  return out;
}

}  // namespace

bool Leadership::Forward(const std::string& action, const net::Request& req,
                         net::Response& res) const {
  if (leading_ || api::Api::ReadsOnlyTheStore(action)) return false;
  // A request a follower forwarded that reaches a server that follows too (the leader moved
  // while it was on its way) is not sent on again: no loop between two servers that each think
  // the other leads.
  if (api::Api::CarriesPeerSecret(req, peer_secret_)) {
    NoLeader(res,
             "this server no longer leads (the leader moved while the request was on its way)");
    return true;
  }
  const std::string leader = leader_url();
  if (leader.empty() || peer_secret_.empty()) {
    NoLeader(res, leader.empty() ? kNoLeader : "this server cannot vouch for its clients yet");
    return true;
  }
  httplib::Client client(leader);
  client.set_connection_timeout(5);
  // A long poll of events waits as long as it asks (at most a minute); anything else is
  // answered well within 30 s, and a worker is not held longer by a leader that went silent.
  const std::string wait = req.get_param_value("wait");
  client.set_read_timeout(action == "events.list" && !wait.empty() ? 75 : 30);
  if (!ca_cert_.empty()) client.set_ca_cert_path(ca_cert_.c_str());
  httplib::Request out;
  out.method = req.method;
  out.path = req.target;
  out.body = req.body;
  const std::set<std::string> hop = NamedByConnection(req.get_header_value("Connection"));
  for (const auto& [name, value] : req.headers) {
    if (Passed(name, hop)) out.headers.emplace(name, value);
  }
  if (req.has_header("Content-Type")) {
    out.headers.emplace("Content-Type", req.get_header_value("Content-Type"));
  }
  out.headers.emplace(api::Api::kPeerHeader, peer_secret_);
  out.headers.emplace("X-Forwarded-For", req.remote_addr);
  httplib::Result r = client.send(out);
  if (!r) {
    // Not known to be done or not: the client's retry (with its Idempotency-Key) decides.
    NoLeader(res, "the leader " + leader + " did not answer: " + httplib::to_string(r.error()));
    return true;
  }
  res.status = r->status;
  const std::set<std::string> answer_hop = NamedByConnection(r->get_header_value("Connection"));
  for (const auto& [name, value] : r->headers) {
    if (Passed(name, answer_hop)) res.set_header(name, value);
  }
  res.set_content(std::move(r->body), r->has_header("Content-Type")
                                          ? r->get_header_value("Content-Type")
                                          : std::string("application/json"));
  return true;
}

}  // namespace meridian::server
