#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "net/http.h"
#include "store/election.h"

namespace meridian::server {

// One server's part in the election among the replicas on one PostgreSQL database
// (docs/adr/0028-several-servers-one-leader.md). A follower campaigns continually (every
// kCampaignInterval) and, once it leads, calls `on_lead` on its own thread, once; a leader checks
// its leadership as often, and the store calls its OnDeposed hook when it is lost. Meanwhile a
// follower answers what would write (every method but GET and HEAD: API writes, agents'
// registrations and heartbeats) with 307 to the leader's advertised URL, or 503 when no leader
// is known; it serves reads from the database. Thread-safe.
class Leadership {
 public:
  static constexpr double kCampaignInterval = 0.25;  // seconds

  // `advertised`: this server's URL as clients reach it, recorded when it leads.
  Leadership(store::Election* election, std::string advertised);
  ~Leadership();

  // Campaigns once, at start: an error only when the database cannot be asked.
  base::Status CampaignOnce();
  // Campaigns (or checks the leadership) until Stop; `on_lead` is called once, when it leads.
  void Start(std::function<void()> on_lead);
  void Stop();

  bool leading() const { return leading_.load(); }
  // The HTTP gate (net::HttpServer::SetGate): true when it answered in the handler's place.
  bool Gate(const net::Request& req, net::Response& res) const;

 private:
  void Loop();
  void Learn();  // the leader the database records, for redirects

  store::Election* election_;
  const std::string advertised_;
  std::atomic<bool> leading_{false};
  std::function<void()> on_lead_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string leader_url_;  // "" when none is known
  std::string last_error_;  // logged once per change
  std::thread thread_;
};

}  // namespace meridian::server
