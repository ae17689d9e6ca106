// Sessions into this node's tasks, as the agent starts them (agent/sessions.h runs each). Part
// of Agent (agent.h); the agent's loop is in agent.cc.
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/sessions.h"
#include "base/log.h"

namespace meridian::agent {

namespace {

constexpr size_t kSessionsRemembered = 512;

base::Result<Json> ReadJsonOrError(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Json j = Json::parse(text.str(), nullptr, false);
  if (!in || j.is_discarded()) return base::Status::Io("cannot read " + path);
  return j;
}

}  // namespace

base::Result<protocol::ShimExec> Agent::ExecInto(const Task& t,
                                                 const protocol::SessionOffer& offer) const {
  auto spec_json = ReadJsonOrError(t.dir + "/spec.json");
  if (!spec_json.ok()) return spec_json.status();
  auto spec = protocol::DecodeShimSpec(*spec_json);
  if (!spec.ok()) return spec.status();
  protocol::ShimExec exec;
  exec.env = spec->env;
  exec.tty = offer.tty;
  if (!spec->cleanup.empty()) {
    // A container: the runtime (as root) goes into it, as the task's user.
    exec.argv = RuntimeWords();
    if (exec.argv.empty()) return base::Status::Invalid("no container runtime on node " + o_.node);
    exec.argv.insert(exec.argv.end(), {"exec", "-i"});
    if (offer.tty) exec.argv.push_back("-t");
    if (t.uid)
      exec.argv.push_back("--user=" + std::to_string(*t.uid) + ":" + std::to_string(*t.uid));
    exec.argv.push_back("meridian-" + CgroupName(t));
    exec.argv.insert(exec.argv.end(), offer.command.begin(), offer.command.end());
    return exec;
  }
  exec.argv = offer.command;
  exec.cwd = spec->cwd;
  exec.uid = spec->uid;
  exec.gid = spec->gid;
  exec.cgroup_procs = spec->cgroup_procs;
  // Its mount namespace (where its GPUs are hidden, its datasets mounted) is entered only when it
  // has one of its own.
  if (spec->uid && (!spec->hide_devices.empty() || !spec->read_only.empty() ||
                    !spec->read_write.empty() || !spec->devices_dir.empty())) {
    auto started_json = ReadJsonOrError(t.dir + "/started.json");
    if (!started_json.ok()) return started_json.status();
    auto started = protocol::DecodeShimStarted(*started_json);
    if (!started.ok()) return started.status();
    exec.namespace_pid = started->pid;
  }
  return exec;
}

void Agent::TakeSessions(const Json& answer) {
  for (base::Result<protocol::SessionOffer>& decoded : protocol::DecodeSessionOffers(answer)) {
    if (!decoded.ok()) {
      base::log::Warn("{}", decoded.status().message());
      continue;
    }
    SessionWork work;
    work.offer = std::move(decoded.value());
    const protocol::SessionOffer& offer = work.offer;
    if (std::find(sessions_started_.begin(), sessions_started_.end(), offer.id) !=
        sessions_started_.end()) {
      continue;
    }
    sessions_started_.push_back(offer.id);
    if (sessions_started_.size() > kSessionsRemembered) sessions_started_.pop_front();
    work.server = client_.config();
    work.node = o_.node;
    work.shim = o_.shim;
    auto it = tasks_.find({offer.job, offer.task, offer.generation});
    const std::string which = "job " + std::to_string(offer.job) + " task " +
                              std::to_string(offer.task) + " (generation " +
                              std::to_string(offer.generation) + ")";
    if (it == tasks_.end() || it->second.state != "Running" || it->second.stop_requested) {
      work.refusal = which + " does not run on node " + o_.node +
                     (it == tasks_.end() ? "" : " (it is " + it->second.state + ")");
    } else if (offer.kind == "exec") {
      auto exec = ExecInto(it->second, offer);
      if (exec.ok()) {
        work.exec = std::move(exec.value());
      } else {
        work.refusal = "cannot exec into " + which + ": " + exec.status().message();
      }
    }
    base::log::Info("session {}: {} into {}{}", offer.id, offer.kind, which,
                    work.refusal.empty() ? "" : ", refused: " + work.refusal);
    std::thread([work = std::move(work)] { RunSession(work); }).detach();
  }
}

}  // namespace meridian::agent
