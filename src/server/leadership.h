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
// its leadership as often, and the store calls its OnDeposed hook when it is lost.
//
// Meanwhile a follower answers every client as the leader would. It serves the reads that the
// database holds (documents, revisions, users, tokens, the audit log, samples) itself, and
// forwards every other API request, once authenticated (Forward), to the leader: writes, and
// reads of what only the leader holds in memory (pending reasons, explanations, nodes'
// telemetry, alerts, long polls of events, job logs). So a dashboard, or clients behind a load
// balancer, may use any server. Agents' calls, watches and WebSockets (streams it does not
// relay) are answered with 307 to the leader's advertised URL instead (Gate), which agents and
// the CLI follow; 503 while no leader is known. Thread-safe.
class Leadership {
 public:
  static constexpr double kCampaignInterval = 0.25;  // seconds

  // `advertised`: this server's URL as clients reach it, recorded when it leads. `ca_cert`: the
  // PEM file that a follower trusts the leader's HTTPS certificate by ("": the system's).
  Leadership(store::Election* election, std::string advertised, std::string ca_cert = "");
  ~Leadership();

  // Campaigns once, at start: an error only when the database cannot be asked.
  base::Status CampaignOnce();
  // Campaigns (or checks the leadership) until Stop; `on_lead` is called once, when it leads.
  void Start(std::function<void()> on_lead);
  void Stop();

  // The servers' shared secret (store::Election::PeerSecret), which forwarded requests carry.
  // Set before serving.
  void SetPeerSecret(std::string secret) { peer_secret_ = std::move(secret); }
  bool leading() const { return leading_.load(); }
  // The HTTP gate (net::HttpServer::SetGate): true when it answered in the handler's place.
  bool Gate(const net::Request& req, net::Response& res) const;
  // The API's forwarder (api::Api::SetForwarder): on a follower, sends a request of route
  // `action` on to the leader and gives its answer back (true), unless this server answers it
  // from the database (false).
  bool Forward(const std::string& action, const net::Request& req, net::Response& res) const;

 private:
  void Loop();
  void Learn();  // the leader the database records, for redirects
  std::string leader_url() const;
  // 503 with Retry-After: no leader known (`why` says more).
  static void NoLeader(net::Response& res, const std::string& why);

  store::Election* election_;
  const std::string advertised_;
  const std::string ca_cert_;
  std::string peer_secret_;
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
