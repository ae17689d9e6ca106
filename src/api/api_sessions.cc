// Sessions into running tasks over WebSockets: `meridian exec` and `meridian port-forward` on the
// user's side, the agent's WebSocket on the other (api/sessions.h, ADR 0029).
#include "api/api_internal.h"

namespace meridian::api {

namespace {

// "a b 'c d'": a command as a shell would take it, for the audit log.
std::string Quoted(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain =
        !a.empty() && a.find_first_of(" \t\n'\"\\$`;&|<>*?()[]{}~#") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace

void Api::OpenSession(Call& call, const std::string& kind) {
  if (!agents_) return Fail(call, 404, "not_found", "this server takes no agents");
  auto job = ReadableJob(call, store_);
  if (!job) return;
  const std::string what = kind == "exec" ? "exec into" : "forward a port of";
  // A session runs code as the job (or reaches what it serves): those who may cancel the job
  // may open one; a viewer, who may read its logs, may not.
  if (!call.access.CanManageJob(job->project, job->user)) {
    return Fail(call, 403, "permission_denied",
                call.access.user() + " may not " + what + " job " + std::to_string(job->id) +
                    " of " + job->user + " (its owner, and those who manage its project, may)");
  }
  call.project = job->project;
  auto task = IntParam(call, "task", 0, 0, 100000);
  if (!task) return;
  protocol::SessionOffer offer;
  offer.kind = kind;
  offer.job = job->id;
  offer.task = static_cast<int32_t>(*task);
  offer.generation = job->generation;
  if (kind == "exec") {
    auto [from, to] = call.req.params.equal_range("command");
    for (auto it = from; it != to; ++it) offer.command.push_back(it->second);
    if (offer.command.empty()) {
      return Fail(call, 400, "invalid_argument",
                  "command: what to run is required (?command=sh&command=-c&command=...)",
                  "command");
    }
    const std::string tty = call.req.get_param_value("tty");
    offer.tty = tty == "1" || tty == "true";
  } else {
    auto port = IntParam(call, "port", 0, 1, 65535);
    if (!port) return;
    if (*port == 0) {
      return Fail(call, 400, "invalid_argument", "port: the task's port is required", "port");
    }
    offer.port = static_cast<int32_t>(*port);
  }
  if (job->phase != "Running") {
    return Fail(call, 409, "conflict",
                "job " + std::to_string(job->id) + " is " + job->phase +
                    ", not Running: it has no task to " + (kind == "exec" ? "exec into" : "reach"));
  }
  const bool placed = job->allocation.is_array() &&
                      static_cast<size_t>(*task) < job->allocation.size() &&
                      job->allocation[static_cast<size_t>(*task)].is_object();
  if (!placed) {
    return Fail(call, 400, "invalid_argument",
                "task: job " + std::to_string(job->id) + " has " +
                    std::to_string(job->allocation.is_array() ? job->allocation.size() : 0) +
                    " task(s), numbered from 0",
                "task");
  }
  const std::string node = job->allocation[static_cast<size_t>(*task)].value("node", "");
  if (!call.req.websocket) {
    return Fail(
        call, 400, "invalid_argument",
        "this path opens a WebSocket (Connection: Upgrade, Upgrade: websocket); `meridian " +
            std::string(kind == "exec" ? "exec" : "port-forward") + "` does that");
  }
  call.audit_message = kind == "exec"
                           ? "exec into task " + std::to_string(*task) + " on node " + node +
                                 (offer.tty ? " (tty)" : "") + ": " + Quoted(offer.command)
                           : "port-forward to task " + std::to_string(*task) + " on node " + node +
                                 ", port " + std::to_string(offer.port);
  call.res.status = 101;
  const double timeout = options_.session_attach_timeout;
  SessionRelay* relay = sessions_.get();
  Metrics* metrics = metrics_;
  call.res.upgrade = [relay, metrics, node, offer, timeout,
                      kind](std::shared_ptr<net::Tunnel> tunnel) {
    metrics->Add("meridian_sessions_total", {{"kind", kind}}, 1);
    relay->RunUserSide(node, offer, std::move(tunnel), timeout);
  };
}

void Api::TakeSession(Call& call) {
  if (!agents_) return Fail(call, 404, "not_found", "this server takes no agents");
  const std::string node = call.Arg(1);
  const std::string id = call.Arg(2);
  if (!call.access.ActsFor(node)) {
    return Fail(call, 403, "permission_denied",
                "only node " + node + "'s own credential takes up its sessions");
  }
  if (base::Status may = sessions_->MayTake(node, id); !may.ok()) return Fail(call, may);
  if (!call.req.websocket) {
    return Fail(call, 400, "invalid_argument", "this path opens a WebSocket");
  }
  call.res.status = 101;
  SessionRelay* relay = sessions_.get();
  call.res.upgrade = [relay, node, id](std::shared_ptr<net::Tunnel> tunnel) {
    relay->RunAgentSide(node, id, std::move(tunnel));
  };
}

}  // namespace meridian::api
