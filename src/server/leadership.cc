#include "server/leadership.h"

#include <httplib.h>

#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>

#include "base/log.h"

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
    NoLeader(res,
             "no leader: this server follows, and no server leads its database now (an election "
             "is under way)");
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

// Routes a follower answers from the database itself (what they read is in the store alone);
// every other request goes to the leader.
bool ServedByFollowers(const std::string& action, const net::Request& req) {
  static const std::set<std::string> kLocal = {
      "metrics",         "whoami",      "version",       "config.revisions",
      "config.revision", "users.list",  "tokens.list",   "audit.list",
      "reports.usage",   "history.get", "auth.providers"};
  if (kLocal.count(action)) return true;
  // Documents (organizations, projects, pools, ...): read from the store, but for a Budget's
  // status (the leader's budget service keeps it).
  const bool document_read = req.method == "GET" && action.size() > 5 &&
                             (action.compare(action.size() - 5, 5, ".list") == 0 ||
                              action.compare(action.size() - 4, 4, ".get") == 0) &&
                             action.rfind("jobs.", 0) != 0 && action.rfind("nodes.", 0) != 0 &&
                             action.rfind("budgets.", 0) != 0;  // spend is the leader's
  return document_read;
}

// Request headers a follower passes on: the end-to-end ones (RFC 9110, 7.6.1), without what the
// hop to the leader sets anew (its own length, encodings its client handles, the host).
bool EndToEnd(const std::string& name) {
  static const std::set<std::string> kHop = {"connection",
                                             "keep-alive",
                                             "te",
                                             "trailer",
                                             "upgrade",
                                             "host",
                                             "content-length",
                                             "accept-encoding",
                                             "transfer-encoding",
                                             "proxy-authorization"};
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return kHop.count(lower) == 0 && lower != "content-encoding" && lower != "x-meridian-forwarded";
}

}  // namespace

bool Leadership::Forward(const std::string& action, const net::Request& req,
                         net::Response& res) const {
  if (leading_ || ServedByFollowers(action, req)) return false;
  // A request forwarded to a server that follows too (the leader moved meanwhile) is not sent
  // on again: no loop between two servers that each think the other leads.
  if (req.has_header("X-Meridian-Forwarded")) {
    NoLeader(res,
             "this server no longer leads (the leader moved while the request was on its way)");
    return true;
  }
  const std::string leader = leader_url();
  if (leader.empty()) {
    NoLeader(res,
             "no leader: this server follows, and no server leads its database now (an election "
             "is under way)");
    return true;
  }
  httplib::Client client(leader);
  client.set_connection_timeout(5);
  // A long poll waits up to its own ?wait= (at most a minute); the leader answers it in time.
  client.set_read_timeout(75);
  client.set_decompress(true);
  if (!ca_cert_.empty()) client.set_ca_cert_path(ca_cert_.c_str());
  httplib::Headers headers;
  for (const auto& [name, value] : req.headers) {
    if (EndToEnd(name)) headers.emplace(name, value);
  }
  headers.emplace("X-Meridian-Forwarded", advertised_);
  headers.emplace("X-Forwarded-For", req.remote_addr);
  const std::string type = req.get_header_value("Content-Type");
  httplib::Result r = req.method == "GET"      ? client.Get(req.target, headers)
                      : req.method == "HEAD"   ? client.Head(req.target, headers)
                      : req.method == "DELETE" ? client.Delete(req.target, headers, req.body, type)
                      : req.method == "PUT"    ? client.Put(req.target, headers, req.body, type)
                      : req.method == "PATCH"  ? client.Patch(req.target, headers, req.body, type)
                                               : client.Post(req.target, headers, req.body, type);
  if (!r) {
    // Not known to be done or not: the client's retry (with its Idempotency-Key) decides.
    NoLeader(res, "the leader " + leader + " did not answer: " + httplib::to_string(r.error()));
    return true;
  }
  res.status = r->status;
  std::string content_type = "application/json";
  for (const auto& [name, value] : r->headers) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "content-type") {
      content_type = value;
    } else if (EndToEnd(name) && lower != "content-length") {
      res.set_header(name, value);
    }
  }
  res.set_content(std::move(r->body), content_type);
  return true;
}

}  // namespace meridian::server
