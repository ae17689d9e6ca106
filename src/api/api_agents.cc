// The agent protocol (registration, heartbeats, log uploads) and task output for users.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "api/api_internal.h"
#include "protocol/agent_protocol.h"

namespace meridian::api {

using base::Status;

namespace {

constexpr int64_t kMaxLogRead = 1 << 20;

bool RunsNodes(Api::Call& call) {
  if (call.access.RunsNodes()) return true;
  Fail(call, 403, "permission_denied",
       call.access.user() + " is not a node agent (role agent or admin)");
  return false;
}

}  // namespace

std::string LogStore::Path(int64_t job, int32_t task, int64_t generation) const {
  return dir_ + "/" + std::to_string(job) + "/task-" + std::to_string(task) + ".gen-" +
         std::to_string(generation) + ".log";
}

base::Result<int64_t> LogStore::Append(int64_t job, int32_t task, int64_t generation,
                                       int64_t offset, const std::string& data) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string path = Path(job, task, generation);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return Status::Io("logs: " + ec.message());
  struct stat st;
  const int64_t size = ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
  if (offset != size || data.empty() || size >= max_bytes_) return size;
  static const std::string kTruncated =
      "\n[meridian: output truncated here; the rest was dropped]\n";
  const int64_t room = max_bytes_ - size - static_cast<int64_t>(kTruncated.size());
  std::ofstream out(path, std::ios::app | std::ios::binary);
  if (static_cast<int64_t>(data.size()) <= room) {
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  } else {
    out.write(data.data(), static_cast<std::streamsize>(std::max<int64_t>(room, 0)));
    out << kTruncated;
  }
  out.close();
  if (!out) return Status::Io("logs: cannot write " + path);
  return static_cast<int64_t>(::stat(path.c_str(), &st) == 0 ? st.st_size : size);
}

base::Result<std::string> LogStore::Read(int64_t job, int32_t task, int64_t offset, int64_t max,
                                         int64_t* size) {
  std::lock_guard<std::mutex> lock(mu_);
  // The newest generation is the current or last run.
  const std::string prefix = "task-" + std::to_string(task) + ".gen-";
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(dir_ + "/" + std::to_string(job), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    try {
      newest = std::max<int64_t>(newest, std::stoll(name.substr(prefix.size())));
    } catch (const std::exception&) {
    }
  }
  if (newest < 0) return Status::NotFound("no output yet");
  std::ifstream in(Path(job, task, newest), std::ios::binary);
  in.seekg(0, std::ios::end);
  *size = static_cast<int64_t>(in.tellg());
  if (offset >= *size) return std::string();
  in.seekg(offset);
  std::string out(static_cast<size_t>(std::min(max, *size - offset)), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

// Whether the node is registered, not lost, and holds a credential that still works: then its
// agent is live under that identity, and a registration with a bootstrap token would take it
// over (a second machine of the same name, or a stolen bootstrap token).
base::Result<bool> Api::LiveUnderCredential(const std::string& node) {
  return store::ReadValue(*store_, [&](store::Tx& tx) -> base::Result<bool> {
    auto o = tx.GetObject("Node", node);
    if (!o.ok()) {
      if (o.status().code() == base::StatusCode::kNotFound) return false;
      return o.status();
    }
    if (o->spec.value("state", "Ready") == "Lost") return false;
    auto tokens = tx.ListTokens(NodeUser(node));
    if (!tokens.ok()) return tokens.status();
    const double now = clock_->Now();
    for (const store::TokenRecord& t : *tokens) {
      if (!t.revoked && (t.expires_at == 0 || t.expires_at > now)) return true;
    }
    return false;
  });
}

// A new credential for the node, replacing any it had: the user NodeUser(node), bound to the
// node alone, with one token; earlier tokens of that user are revoked.
base::Result<std::string> Api::IssueNodeCredential(const std::string& node, double now) {
  NewToken t = GenerateToken(*entropy_);
  const std::string user = NodeUser(node);
  store::Object u{"User", user, Json::object(), 0, now, "registration"};
  RoleBinding b;
  b.role = Role::kNode;
  b.node = node;
  u.spec = {{"roles", RolesToJson({b})},
            {"description", "the credential of node " + node + ", issued at its registration"}};
  Status s = store_->Write([&](store::Tx& tx) {
    if (auto v = tx.PutObject(u, store::kAnyVersion); !v.ok()) return v.status();
    if (Status r = RevokeTokensOf(tx, user); !r.ok()) return r;
    return tx.PutToken({t.id, user, t.secret_hash, "node " + node, now, 0, false});
  });
  if (!s.ok()) return s;
  return t.text;
}

void Api::RegisterAgent(Call& call) {
  if (!agents_) return Fail(call, 404, "not_found", "this server takes no agents");
  if (!RunsNodes(call)) return;
  auto body = JsonBody(call);
  if (!body) return;
  const std::string node =
      body->is_object() && body->contains("node") && body->at("node").is_string()
          ? body->at("node").get<std::string>()
          : "";
  const std::string bound = call.access.BoundNode();
  if (!bound.empty() && node != bound) {
    return Fail(call, 403, "permission_denied",
                "this credential is node " + bound + "'s: it cannot register node " + node);
  }
  const bool bootstrap = bound.empty();
  if (bootstrap && !node.empty()) {
    auto live = LiveUnderCredential(node);
    if (!live.ok()) return Fail(call, live.status());
    if (*live) {
      return Fail(call, 409, "conflict",
                  "node " + node +
                      " is registered and live under its own credential: its agent registers "
                      "again with that credential (kept in its work directory). To replace the "
                      "machine, revoke that credential (it cordons the node) or wait until the "
                      "node is lost",
                  "node");
    }
  }
  auto answer = agents_->Register(call.access.user(), *body);
  if (!answer.ok()) return Fail(call, answer.status());
  if (bootstrap) {
    // Heartbeats, reports and output uploads of this node need this credential from now on.
    auto credential = IssueNodeCredential(node, call.started);
    if (!credential.ok()) return Fail(call, credential.status());
    (*answer)["credential"] = *credential;
  }
  call.audit_message =
      "node " + answer->value("node", "") + (bootstrap ? " (a new node credential issued)" : "");
  Respond(call, 200, *answer);
}

namespace {

// Only the node's own credential (or an admin) speaks for a node: a bootstrap token registers
// nodes and no more, and one node's credential cannot act as another.
bool ActsFor(Api::Call& call, const std::string& node) {
  if (call.access.ActsFor(node)) return true;
  const std::string bound = call.access.BoundNode();
  Fail(call, 403, "permission_denied",
       bound.empty()
           ? call.access.user() + " registers nodes but does not speak for them: node " + node +
                 " heartbeats and uploads with the credential its registration returned"
           : "this credential is node " + bound + "'s, not node " + node + "'s");
  return false;
}

}  // namespace

void Api::AgentHeartbeat(Call& call) {
  if (!agents_) return Fail(call, 404, "not_found", "this server takes no agents");
  if (!RunsNodes(call)) return;
  if (!ActsFor(call, call.Arg(1))) return;
  auto body = JsonBody(call);
  if (!body) return;
  auto answer = agents_->Heartbeat(call.Arg(1), *body);
  if (!answer.ok()) return Fail(call, answer.status());
  // Sessions into the node's tasks that users wait on: the agent opens each as a WebSocket.
  for (const protocol::SessionOffer& offer : sessions_->Offers(call.Arg(1))) {
    (*answer)["sessions"].push_back(protocol::ToJson(offer));
  }
  Respond(call, 200, *answer);
}

void Api::AgentWait(Call& call) {
  if (!agents_) return Fail(call, 404, "not_found", "this server takes no agents");
  if (!RunsNodes(call)) return;
  const std::string node = call.Arg(1);
  if (!ActsFor(call, node)) return;
  auto seen = IntParam(call, "seen", 0, 0, INT64_MAX);
  if (!seen) return;
  auto timeout = IntParam(call, "timeout", 25, 1, 60);
  if (!timeout) return;
  // scope=cluster: the bell of the node's whole cluster, which rings with each of its nodes'.
  std::string bell = node;
  const std::string scope = call.req.has_param("scope") ? call.req.get_param_value("scope") : "";
  if (scope == "cluster") {
    auto o = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetObject("Node", node); });
    if (!o.ok()) return Fail(call, o.status());
    bell = ClusterBell(o->spec.value("cluster", ""));
  } else if (!scope.empty() && scope != "node") {
    return Fail(call, 400, "invalid_argument",
                "scope: \"" + scope + "\" is not one of node, cluster", "scope");
  }
  // Answered when the bell rings (or at once, when it rang since `seen`); at the timeout with
  // `seen` itself: nothing new.
  Respond(call, 200, {{"version", *seen}});
  call.res.later_timeout = static_cast<double>(*timeout);
  call.res.later = [this, bell,
                    seen = static_cast<uint64_t>(*seen)](std::shared_ptr<net::Later> later) {
    doorbells_->Wait(bell, seen, std::move(later));
  };
}

namespace {

// A channel's wait for its node's doorbell: a ring goes to the agent as "ring VERSION-ANSWER".
// Each heartbeat arms a new one and retires the one before, so that the doorbell keeps one wait
// per channel.
class ChannelRing : public net::Later {
 public:
  explicit ChannelRing(std::shared_ptr<net::Channel> channel) : channel_(std::move(channel)) {}
  bool Answer(net::Response response) override {
    if (!live_.exchange(false)) return false;
    return channel_->Send(protocol::ChannelRing(response.body));
  }
  bool waiting() const override { return live_ && channel_->open(); }
  void Retire() { live_ = false; }

 private:
  std::shared_ptr<net::Channel> channel_;
  std::atomic<bool> live_{true};
};

}  // namespace

void Api::AgentChannel(Call& call, net::HttpServer& server) {
  if (!agents_) return Fail(call, 404, "not_found", "this server takes no agents");
  if (!RunsNodes(call)) return;
  const std::string node = call.Arg(1);
  if (!ActsFor(call, node)) return;
  if (!call.req.websocket) {
    return Fail(call, 400, "invalid_argument",
                "this path opens a WebSocket (Connection: Upgrade, Upgrade: websocket)");
  }
  // Each message is a heartbeat's body. It is answered as POST .../heartbeat with this
  // request's headers would be (authenticated, rate-limited and counted as one), and the answer
  // goes back as "STATUS BODY". After each answer the channel waits on the node's doorbell
  // from the version it had before the heartbeat, as GET .../wait?seen= does. At the open it
  // waits from nothing, as the first wait (seen=0) does: it rings at once, and the agent
  // heartbeats on its channel, so that no change made before its first heartbeat there is missed.
  net::Request heartbeat;
  heartbeat.method = "POST";
  heartbeat.path = "/api/v1/agents/" + node + "/heartbeat";
  heartbeat.target = heartbeat.path;
  heartbeat.headers = call.req.headers;
  heartbeat.remote_addr = call.req.remote_addr;
  call.res.status = 101;
  call.res.channel = [this, &server, node,
                      heartbeat = std::move(heartbeat)](std::shared_ptr<net::Channel> channel) {
    auto armed = std::make_shared<std::shared_ptr<ChannelRing>>();
    *armed = std::make_shared<ChannelRing>(channel);
    doorbells_->Wait(node, 0, *armed);
    return [this, &server, node, heartbeat, channel, armed](std::string message) {
      const uint64_t seen = doorbells_->Version(node);
      net::Request req = heartbeat;
      req.body = std::move(message);
      net::Response res;
      server.Answer(req, res);
      channel->Send(protocol::ChannelAnswer(res.status, res.body));
      if (*armed) (*armed)->Retire();
      if (res.status == 401 || res.status == 403) {
        // A credential revoked (or the node's) since the upgrade: no more rings, no channel.
        *armed = nullptr;
        channel->Close();
        return;
      }
      *armed = std::make_shared<ChannelRing>(channel);
      doorbells_->Wait(node, seen, *armed);
    };
  };
}

void Api::UploadLogs(Call& call) {
  if (!agents_ || !logs_) return Fail(call, 404, "not_found", "this server takes no agents");
  if (!RunsNodes(call)) return;
  for (const char* name : {"job", "task", "generation", "offset"}) {
    if (!call.req.has_param(name)) {
      return Fail(call, 400, "invalid_argument", std::string(name) + ": is required", name);
    }
  }
  auto job = IntParam(call, "job", -1, 1, INT64_MAX);
  if (!job) return;
  auto task = IntParam(call, "task", -1, 0, 100000);
  if (!task) return;
  auto generation = IntParam(call, "generation", -1, 0, INT64_MAX);
  if (!generation) return;
  auto offset = IntParam(call, "offset", -1, 0, INT64_MAX);
  if (!offset) return;
  const std::string node = call.Arg(1);
  if (!ActsFor(call, node)) return;
  // Output only of a task that runs (or ran) on this node at the job's current generation: no
  // uploads into other nodes' tasks, forged generations or jobs that do not exist.
  if (Status may = agents_->MayUpload(node, *job, static_cast<int32_t>(*task), *generation);
      !may.ok()) {
    return Fail(call, may);
  }
  auto size = logs_->Append(*job, static_cast<int32_t>(*task), *generation, *offset, call.req.body);
  if (!size.ok()) return Fail(call, size.status());
  // `full`: the server keeps no more of this run's output; the agent stops sending it.
  Respond(call, 200, {{"size", *size}, {"full", *size >= logs_->max_bytes()}});
}

void Api::JobLogs(Call& call) {
  if (!logs_) return Fail(call, 404, "not_found", "this server keeps no task output");
  auto job = ReadableJob(call, store_);
  if (!job) return;
  auto task = IntParam(call, "task", 0, 0, 100000);
  if (!task) return;
  auto offset = IntParam(call, "offset", 0, 0, INT64_MAX);
  if (!offset) return;
  auto limit = IntParam(call, "limit", kMaxLogRead, 1, kMaxLogRead);
  if (!limit) return;
  int64_t size = 0;
  auto text = logs_->Read(job->id, static_cast<int32_t>(*task), *offset, *limit, &size);
  if (!text.ok() && text.status().code() != base::StatusCode::kNotFound) {
    return Fail(call, text.status());
  }
  const std::string data = text.ok() ? *text : "";
  call.res.status = 200;
  call.res.set_header("X-Meridian-Log-Size", std::to_string(size));
  call.res.set_header("X-Meridian-Log-Offset", std::to_string(*offset + data.size()));
  call.res.set_header("X-Meridian-Job-Phase", job->phase);
  call.res.set_content(data, "text/plain; charset=utf-8");
}

}  // namespace meridian::api
