#include "api/sessions.h"

#include <chrono>

#include "base/strings.h"

namespace meridian::api {

using base::Status;
using protocol::Channel;

std::string SessionRelay::RunUserSide(const std::string& node, protocol::SessionOffer offer,
                                      std::shared_ptr<net::Tunnel> user, double attach_timeout) {
  auto session = std::make_shared<Session>();
  offer.id = base::Hex(entropy_->Bytes(16));
  session->node = node;
  session->offer = offer;
  session->user = user;
  std::shared_ptr<net::Tunnel> agent;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[offer.id] = session;
  }
  if (offered_) offered_(node);
  {
    std::unique_lock<std::mutex> lock(mu_);
    taken_.wait_for(lock, std::chrono::duration<double>(attach_timeout),
                    [&] { return session->agent != nullptr; });
    agent = session->agent;
    if (!agent) sessions_.erase(offer.id);
  }
  if (!agent) {
    user->Write(protocol::ErrorFrame("node " + node +
                                     "'s agent did not take the session up within " +
                                     base::Decimal(attach_timeout) +
                                     " s: is it running, and does it heartbeat to this server?"));
    return "not taken up by node " + node + "'s agent";
  }
  std::string message;
  while (user->Read(&message)) {
    if (!agent->Write(message)) break;
  }
  // The user is gone (or the agent is): the agent ends what the session ran.
  agent->Close();
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(offer.id);
  return "ended";
}

std::vector<protocol::SessionOffer> SessionRelay::Offers(const std::string& node) {
  std::vector<protocol::SessionOffer> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, s] : sessions_) {
    if (s->node == node && !s->agent) out.push_back(s->offer);
  }
  return out;
}

Status SessionRelay::MayTake(const std::string& node, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->node != node || it->second->agent) {
    return Status::NotFound("no session " + id + " waits for node " + node);
  }
  return Status::Ok();
}

void SessionRelay::RunAgentSide(const std::string& node, const std::string& id,
                                std::shared_ptr<net::Tunnel> agent) {
  std::shared_ptr<net::Tunnel> user;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second->node == node && !it->second->agent) {
      it->second->agent = agent;
      user = it->second->user;
    }
  }
  if (!user) {
    agent->Write(protocol::ErrorFrame("session " + id + " is not node " + node + "'s to take up"));
    return;
  }
  taken_.notify_all();
  std::string message;
  while (agent->Read(&message)) {
    if (!user->Write(message)) break;
  }
  user->Close();
}

int SessionRelay::open() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(sessions_.size());
}

}  // namespace meridian::api
