// The API's core: routing, authentication, audit, errors, and the cached view of the tenancy.
#include "api/api.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "api/api_internal.h"
#include "base/log.h"
#include "base/strings.h"
#include "net/http_server.h"

namespace meridian::api {

using base::Status;

void EventBus::Notify(int64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seq > latest_) latest_ = seq;
  }
  cv_.notify_all();
}

bool EventBus::Wait(int64_t after, double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
               [&] { return closed_ || latest_ > after; });
  return !closed_;
}

void EventBus::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

int HttpStatus(base::StatusCode code) {
  switch (code) {
    case base::StatusCode::kOk:
      return 200;
    case base::StatusCode::kInvalidArgument:
      return 400;
    case base::StatusCode::kUnauthenticated:
      return 401;
    case base::StatusCode::kPermissionDenied:
      return 403;
    case base::StatusCode::kNotFound:
      return 404;
    case base::StatusCode::kAlreadyExists:
    case base::StatusCode::kConflict:
      return 409;
    case base::StatusCode::kFailedPrecondition:
      return 422;
    case base::StatusCode::kUnavailable:
      return 503;
    case base::StatusCode::kIoError:
    case base::StatusCode::kInternal:
      return 500;
  }
  return 500;
}

namespace {

const char* CodeName(int status) {
  switch (status) {
    case 400:
      return "invalid_argument";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 409:
      return "conflict";
    case 413:
      return "payload_too_large";
    case 422:
      return "failed_precondition";
    case 503:
      return "unavailable";
    default:
      return status >= 500 ? "internal" : "error";
  }
}

}  // namespace

void Respond(Api::Call& call, int status, const Json& body) {
  call.res.status = status;
  call.res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n",
                       "application/json");
}

void Fail(Api::Call& call, int status, const std::string& code, const std::string& message,
          const std::string& field, const Json& details) {
  Json error = {{"code", code}, {"message", message}};
  if (!field.empty()) error["field"] = field;
  if (!details.is_null()) error["details"] = details;
  call.audit_message = message;
  Respond(call, status, {{"error", error}});
}

void Fail(Api::Call& call, const Status& status) {
  const int http = HttpStatus(status.code());
  std::string field;
  std::string message = status.message();
  // Validators write "field: message"; the field goes apart so that clients can point at it.
  const size_t colon = message.find(": ");
  if (status.code() == base::StatusCode::kInvalidArgument && colon != std::string::npos &&
      message.find(' ') > colon) {
    field = message.substr(0, colon);
  }
  Fail(call, http, status.code() == base::StatusCode::kConflict ? "conflict" : CodeName(http),
       message, field);
}

void FailFields(Api::Call& call, const domain::ErrorList& errors) {
  Json details = Json::array();
  for (const domain::FieldError& e : errors.errors()) {
    Json d = {{"field", e.field}, {"message", e.message}};
    if (!e.file.empty()) d["file"] = e.file;
    if (e.line > 0) {
      d["line"] = e.line;
      d["column"] = e.column;
    }
    details.push_back(d);
  }
  const domain::FieldError& first = errors.errors().front();
  Fail(call, 400, "invalid_argument", first.ToString(), first.field, details);
}

std::optional<Json> JsonBody(Api::Call& call) {
  JsonBodyError where;
  auto body = DecodeJsonBody(call.req.body, &where);
  if (body.ok()) return std::move(body.value());
  // The place goes in details too, in the shape of every other field error.
  Json details = nullptr;
  if (where.line > 0) {
    details = Json::array(
        {{{"line", where.line}, {"column", where.column}, {"message", body.status().message()}}});
  }
  Fail(call, 400, "invalid_argument", body.status().message(), "", details);
  return std::nullopt;
}

std::optional<int64_t> IntParam(Api::Call& call, const std::string& name, int64_t fallback,
                                int64_t min, int64_t max) {
  if (!call.req.has_param(name.c_str())) return fallback;
  const std::string text = call.req.get_param_value(name.c_str());
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || v < min || v > max) {
    Fail(call, 400, "invalid_argument",
         name + ": \"" + text + "\" is not an integer in [" + std::to_string(min) + ", " +
             std::to_string(max) + "]",
         name);
    return std::nullopt;
  }
  return v;
}

std::optional<int64_t> IdArg(Api::Call& call, size_t n, const std::string& what) {
  const std::string text = call.Arg(n);
  long long v = 0;
  if (base::ParseInt64(text, &v) && v >= 0) return v;
  Fail(call, 404, "not_found", what + " " + text + " not found");
  return std::nullopt;
}

bool PageWhole(Api::Call& call, Json* items, Json* next, int64_t default_limit, int64_t max_page) {
  const int64_t size = static_cast<int64_t>(items->size());
  const int64_t fallback = default_limit > 0 ? default_limit : std::max<int64_t>(1, size);
  auto limit = IntParam(call, "limit", std::min(fallback, max_page), 1, max_page);
  if (!limit) return false;
  auto from = IntParam(call, "continue", 0, 0, INT64_MAX);
  if (!from) return false;
  const int64_t begin = std::min(*from, size);
  const int64_t end = std::min(size, begin + *limit);
  Json page = Json::array();
  for (int64_t i = begin; i < end; ++i) page.push_back(std::move((*items)[i]));
  *items = std::move(page);
  *next = end < size ? Json(end) : Json();
  return true;
}

std::optional<bool> NewestFirst(Api::Call& call) {
  const std::string order = call.req.get_param_value("order");
  if (order.empty() || order == "oldest") return false;
  if (order == "newest") return true;
  Fail(call, 400, "invalid_argument",
       "order: \"" + order + "\" is neither \"oldest\" nor \"newest\"", "order");
  return std::nullopt;
}

Json JobToJson(store::JobRecord j) {
  Json out = {{"id", j.id},
              {"kind", "Job"},
              {"metadata",
               {{"name", std::move(j.name)},
                {"project", std::move(j.project)},
                {"user", std::move(j.user)},
                {"resourceVersion", j.version}}},
              {"spec", std::move(j.spec)},
              {"status",
               {{"phase", std::move(j.phase)},
                {"reason", std::move(j.reason)},
                {"allocation", std::move(j.allocation)},
                {"generation", j.generation},
                {"submittedAt", j.submitted_at},
                {"updatedAt", j.updated_at}}}};
  if (j.array_id > 0) {
    out["metadata"]["arrayId"] = j.array_id;
    out["metadata"]["arrayIndex"] = j.array_index;
  }
  // What agents reported: tasks, restarts, start and end times.
  if (j.status.is_object()) {
    for (auto& [k, v] : j.status.items()) out["status"][k] = std::move(v);
  }
  return out;
}

Json ObjectToJson(const store::Object& o) {
  return {{"kind", o.kind},
          {"metadata",
           {{"name", o.name},
            {"resourceVersion", o.version},
            {"updatedAt", o.updated_at},
            {"updatedBy", o.updated_by}}},
          {"spec", o.spec}};
}

Json EventToJson(const store::Event& e) {
  return {{"seq", e.seq},
          {"at", e.at},
          {"objectKind", e.object_kind},
          {"object", e.object_name},
          {"project", e.project},
          {"type", e.type},
          {"reason", e.reason},
          {"message", e.message}};
}

std::string Plural(const std::string& kind) {
  std::string p;
  for (char c : kind) p.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (!p.empty() && p.back() == 'y') return p.substr(0, p.size() - 1) + "ies";  // policies
  if (!p.empty() && p.back() == 's') return p + "es";                           // priorityclasses
  return p + "s";
}

Api::Api(store::Store* store, const base::Clock* clock, base::Entropy* entropy,
         SchedulerHooks* hooks, EventBus* bus, Metrics* metrics, ApiOptions options)
    : store_(store),
      clock_(clock),
      entropy_(entropy),
      hooks_(hooks),
      bus_(bus),
      metrics_(metrics),
      options_(options),
      audit_(NewAuditState()),
      writes_(options.write_rate, options.write_burst),
      failed_auths_(options.failed_auths_per_minute / 60, options.failed_auths_per_minute),
      waiting_(options.max_waits_per_token),
      doorbells_(std::make_unique<Doorbells>(static_cast<uint64_t>(clock->Now() * 1000))),
      sessions_(std::make_unique<SessionRelay>(
          entropy, [this](const std::string& node) { doorbells_->Ring(node); })) {
  HttpFetcher* fetcher = options_.oidc_fetcher;
  if (!fetcher) {
    own_fetcher_ = std::make_unique<HttplibFetcher>();
    fetcher = own_fetcher_.get();
  }
  oidc_fetcher_ = fetcher;
  oidc_ = std::make_unique<OidcVerifier>(fetcher, clock_, options_.oidc);
  metrics_->Describe("meridian_sessions_total", "counter",
                     "Sessions into tasks opened by users, by kind (exec, port-forward).");
  metrics_->Describe("meridian_api_rate_limited_total", "counter",
                     "Requests answered 429 by limit: writes (per token), waits (long polls "
                     "and watches open per token) or failed_auth (per client address).");
  metrics_->Describe("meridian_audit_write_failures_total", "counter",
                     "Audit log writes the store refused; their entries are held and retried, "
                     "and logged in full on stderr.");
  metrics_->Describe("meridian_audit_entries_held", "gauge",
                     "Audit entries not yet written to the store (0 when the log is whole).");
  metrics_->Describe("meridian_api_requests_total", "counter",
                     "API requests by route (action), method and status code.");
  metrics_->Describe("meridian_api_request_duration_seconds", "histogram",
                     "API request latency by route (action) and status code.");
  metrics_->Describe("meridian_config_problems", "gauge",
                     "Configuration objects the scheduler leaves out or takes in part (/healthz "
                     "names them); 0 when the whole configuration is scheduled.");
}

void Api::Register(net::HttpServer& server) {
  const std::string v1 = "/api/v1";
  auto bind = [this](void (Api::*fn)(Call&)) { return [this, fn](Call& c) { (this->*fn)(c); }; };
  Route(server, "GET", "/healthz", "health", Kind::kPublic, bind(&Api::Health));
  Route(server, "GET", "/metrics", "metrics", options_.open_metrics ? Kind::kPublic : Kind::kRead,
        bind(&Api::ServeMetrics));
  Route(server, "GET", v1 + "/whoami", "whoami", Kind::kRead, bind(&Api::WhoAmI));
  Route(server, "GET", v1 + "/version", "version", Kind::kRead, bind(&Api::Version));
  Route(server, "POST", v1 + "/jobs", "jobs.create", Kind::kMutate, bind(&Api::SubmitJob));
  Route(server, "GET", v1 + "/jobs", "jobs.list", Kind::kRead, bind(&Api::ListJobs));
  Route(server, "GET", v1 + R"(/jobs/(\d+))", "jobs.get", Kind::kRead, bind(&Api::GetJob));
  Route(server, "POST", v1 + R"(/jobs/(\d+)/cancel)", "jobs.cancel", Kind::kMutate,
        bind(&Api::CancelJob));
  Route(server, "GET", v1 + R"(/jobs/(\d+)/explanation)", "jobs.explain", Kind::kRead,
        bind(&Api::ExplainJob));
  Route(server, "GET", v1 + R"(/jobs/(\d+)/events)", "jobs.events", Kind::kRead,
        bind(&Api::JobEvents));
  // A long poll with ?wait=N, and a watch's stream, may wait: they run apart from the workers.
  Route(server, "GET", v1 + "/events", "events.list", Kind::kRead, bind(&Api::ListEvents),
        [](const net::Request& req) {
          const std::string wait = req.get_param_value("wait");
          return !wait.empty() && wait != "0";
        });
  Route(server, "GET", v1 + "/watch", "events.watch", Kind::kRead, bind(&Api::Watch),
        [](const net::Request&) { return true; });
  Route(server, "GET", v1 + "/nodes", "nodes.list", Kind::kRead, bind(&Api::Nodes));
  Route(server, "GET", v1 + "/nodes/([^/]+)", "nodes.get", Kind::kRead, bind(&Api::GetNode));
  Route(server, "GET", v1 + "/nodes/([^/]+)/history", "nodes.history", Kind::kRead,
        bind(&Api::NodeHistory));
  Route(server, "POST", v1 + "/nodes/([^/]+)/cordon", "nodes.cordon", Kind::kMutate,
        [this](Call& c) { CordonNode(c, true); });
  Route(server, "POST", v1 + "/nodes/([^/]+)/uncordon", "nodes.uncordon", Kind::kMutate,
        [this](Call& c) { CordonNode(c, false); });
  Route(server, "POST", v1 + "/nodes/([^/]+)/drain", "nodes.drain", Kind::kMutate,
        bind(&Api::DrainNode));
  Route(server, "POST", v1 + R"(/nodes/([^/]+)/gpus/(\d+)/faults)", "nodes.gpus.faults",
        Kind::kMutate, bind(&Api::InjectGpuFault));
  Route(server, "POST", v1 + R"(/nodes/([^/]+)/gpus/(\d+)/uncordon)", "nodes.gpus.uncordon",
        Kind::kMutate, bind(&Api::UncordonGpu));
  Route(server, "DELETE", v1 + "/nodes/([^/]+)", "nodes.delete", Kind::kMutate,
        bind(&Api::DeleteNode));
  Route(server, "GET", v1 + "/usage", "usage.get", Kind::kRead, bind(&Api::Usage));
  Route(server, "GET", v1 + "/history", "history.get", Kind::kRead, bind(&Api::History));
  Route(server, "GET", v1 + "/alerts", "alerts.list", Kind::kRead, bind(&Api::ListAlerts));
  Route(server, "GET", v1 + "/idle", "idle.list", Kind::kRead, bind(&Api::ListIdle));
  Route(server, "POST", v1 + "/agents/register", "agents.register", Kind::kMutate,
        bind(&Api::RegisterAgent));
  // Heartbeats come every few seconds from every node: audited only when refused.
  Route(server, "POST", v1 + "/agents/([^/]+)/heartbeat", "agents.heartbeat", Kind::kRead,
        bind(&Api::AgentHeartbeat));
  // An agent's long poll for news of its orders: it holds no thread while it waits.
  Route(server, "GET", v1 + "/agents/([^/]+)/wait", "agents.wait", Kind::kRead,
        bind(&Api::AgentWait));
  // Both of those on one connection, a WebSocket that holds no thread (ADR 0047).
  Route(server, "GET", v1 + "/agents/([^/]+)/channel", "agents.channel", Kind::kRead,
        [this, &server](Call& call) { AgentChannel(call, server); });
  Route(server, "POST", v1 + "/agents/([^/]+)/logs", "agents.logs", Kind::kRead,
        bind(&Api::UploadLogs));
  Route(server, "GET", v1 + R"(/jobs/(\d+)/logs)", "jobs.logs", Kind::kRead, bind(&Api::JobLogs));
  // Sessions into tasks run on threads of their own, for as long as they last.
  const Waits websocket = [](const net::Request& req) { return req.websocket; };
  Route(
      server, "GET", v1 + R"(/jobs/(\d+)/exec)", "jobs.exec", Kind::kMutate,
      [this](Call& call) { OpenSession(call, "exec"); }, websocket);
  Route(
      server, "GET", v1 + R"(/jobs/(\d+)/portforward)", "jobs.portforward", Kind::kMutate,
      [this](Call& call) { OpenSession(call, "port-forward"); }, websocket);
  Route(server, "GET", v1 + "/agents/([^/]+)/sessions/([^/]+)", "agents.sessions", Kind::kRead,
        bind(&Api::TakeSession), websocket);
  for (const std::string& kind : domain::ConfigKinds()) {
    const std::string base = v1 + "/" + Plural(kind);
    const std::string one = base + "/([^/]+)";
    const std::string lower = Plural(kind);
    Route(server, "GET", base, lower + ".list", Kind::kRead,
          [this, kind](Call& c) { ListObjects(c, kind); });
    Route(server, "GET", one, lower + ".get", Kind::kRead,
          [this, kind](Call& c) { GetObject(c, kind); });
    Route(server, "PUT", one, lower + ".put", Kind::kMutate,
          [this, kind](Call& c) { PutObject(c, kind); });
    Route(server, "DELETE", one, lower + ".delete", Kind::kMutate,
          [this, kind](Call& c) { DeleteObject(c, kind); });
  }
  Route(server, "POST", v1 + "/config/plan", "config.plan", Kind::kRead, bind(&Api::Plan));
  Route(server, "POST", v1 + "/config/apply", "config.apply", Kind::kMutate, bind(&Api::Apply));
  Route(server, "POST", v1 + "/config/rollback", "config.rollback", Kind::kMutate,
        bind(&Api::Rollback));
  Route(server, "GET", v1 + "/config/revisions", "config.revisions", Kind::kRead,
        bind(&Api::Revisions));
  Route(server, "GET", v1 + R"(/config/revisions/(\d+))", "config.revision", Kind::kRead,
        bind(&Api::RevisionDetail));
  Route(server, "GET", v1 + "/users", "users.list", Kind::kRead, bind(&Api::ListUsers));
  Route(server, "PUT", v1 + "/users/([^/]+)", "users.put", Kind::kMutate, bind(&Api::PutUser));
  Route(server, "POST", v1 + "/tokens", "tokens.create", Kind::kMutate, bind(&Api::CreateToken));
  Route(server, "GET", v1 + "/tokens", "tokens.list", Kind::kRead, bind(&Api::ListTokens));
  Route(server, "DELETE", v1 + "/tokens/([^/]+)", "tokens.revoke", Kind::kMutate,
        bind(&Api::RevokeToken));
  Route(server, "GET", v1 + "/audit", "audit.list", Kind::kRead, bind(&Api::ListAudit));
  Route(server, "GET", v1 + "/reports/usage", "reports.usage", Kind::kRead,
        bind(&Api::UsageReport));
  Route(server, "GET", v1 + "/auth/providers", "auth.providers", Kind::kPublic,
        bind(&Api::AuthProviders));
  Route(server, "POST", v1 + "/auth/token", "auth.token", Kind::kSignIn, bind(&Api::ExchangeCode));

  // What the server answers itself (no such path, body too large, a handler that threw) is in
  // the same error format.
  server.SetErrorBody([](int status, const std::string& message) {
    Json error = {{"code", CodeName(status)},
                  {"message", status == 404 ? std::string("no such API path") : message}};
    return std::make_pair(Json{{"error", error}}.dump() + "\n", std::string("application/json"));
  });
}

void Api::Route(net::HttpServer& server, const char* method, const std::string& pattern,
                const std::string& action, Kind kind, Handler handler, Waits waits) {
  auto wrapped = [this, action, kind, handler, waits](const net::Request& req, net::Response& res) {
    const auto t0 = std::chrono::steady_clock::now();
    FlushFailedAuths(false);
    Call call{req,           res,     action, {}, false,
              false,         "",      "",     "", "",
              clock_->Now(), nullptr, "",     0,  ClientAddress(req)};
    double held = 0;  // seconds until the address may try to authenticate again
    bool forwarded = false;
    try {
      // On a follower, what the store alone does not answer goes to the leader as it came.
      forwarded = kind != Kind::kPublic && forwarder_ && forwarder_(action, req, res);
      // An address that keeps failing to authenticate is held off before its tokens are
      // looked up (a guess costs the store a read and the audit log a count).
      held = kind == Kind::kPublic || forwarded ? 0 : failed_auths_.Wait(call.client, call.started);
      Status auth = forwarded || kind == Kind::kPublic || kind == Kind::kSignIn || held > 0
                        ? Status::Ok()
                        : Authenticate(call);
      double wait = 0;
      std::shared_ptr<void> slot;  // one of the token's long polls and watches
      if (forwarded) {
        // The leader's answer is in `res`.
      } else if (held > 0) {
        call.auth_failure = "held off: too many failed authentications";
        RateLimited(call, "failed_auth", held,
                    "too many failed authentications from " + call.client + " (at most " +
                        base::Decimal(failed_auths_.burst()) + " a minute)");
      } else if (!auth.ok()) {
        if (kind != Kind::kPublic) failed_auths_.Take(call.client, call.started);
        Fail(call, auth);
      } else if (kind == Kind::kMutate && !call.access.OnlyRunsNodes() &&
                 (wait = writes_.Take(call.token_id, call.started)) > 0) {
        RateLimited(call, "writes", wait,
                    "too many writes with token " + call.token_id + ": at most " +
                        base::Decimal(writes_.rate()) + " a second after a burst of " +
                        base::Decimal(writes_.burst()));
      } else if (waits && waits(req) && !(slot = waiting_.Acquire(call.token_id))) {
        RateLimited(call, "waits", 1,
                    "too many long polls and watches open with token " + call.token_id +
                        " (at most " + std::to_string(waiting_.limit()) + " at once)");
      } else {
        handler(call);
        // A stream or a session holds its place until it ends.
        if (slot && res.stream) {
          res.stream = [slot, stream = std::move(res.stream)](net::Sink& sink) {
            return stream(sink);
          };
        }
        if (slot && res.upgrade) {
          res.upgrade = [slot, upgrade = std::move(res.upgrade)](
                            std::shared_ptr<net::Tunnel> tunnel) { upgrade(std::move(tunnel)); };
        }
      }
    } catch (const std::exception& e) {
      // Handlers validate their input; this is a bug, reported without taking the server down.
      // The exception's text is for the log, not for the client.
      base::log::Error("{} {}: handler failed: {}", req.method, req.path, e.what());
      Fail(call, 500, "internal", "internal error; the server logs it");
    }
    bool failed_auth = kind != Kind::kPublic && !call.authenticated;
    if (forwarded) {
      failed_auth = false;  // the leader counted it
    } else if (kind == Kind::kSignIn) {
      failed_auth = held > 0 || res.status == 401;
      if (res.status == 401) failed_auths_.Take(call.client, call.started);
    }
    if (failed_auth) {
      // Counted, not written one by one: a client retrying a bad token must not fill the log.
      CountFailedAuth(call);
    } else if (!forwarded && kind != Kind::kPublic && kind != Kind::kSignIn && res.status != 429 &&
               ((kind == Kind::kMutate && !call.audited) || res.status == 401 ||
                res.status == 403)) {
      Audit(call);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const Metrics::Labels labels = {{"route", action}, {"code", std::to_string(res.status)}};
    metrics_->Add("meridian_api_requests_total", labels, 1);
    metrics_->Observe("meridian_api_request_duration_seconds", labels, seconds);
    AccessLog(call, kind, seconds);
  };
  server.Handle(method, pattern, std::move(wrapped), std::move(waits));
}

bool Api::CarriesPeerSecret(const net::Request& req, const std::string& secret) {
  const std::string peer = req.get_header_value(kPeerHeader);
  return !secret.empty() && peer.size() == secret.size() &&
         CRYPTO_memcmp(peer.data(), secret.data(), peer.size()) == 0;
}

std::string Api::ClientAddress(const net::Request& req) const {
  if (!CarriesPeerSecret(req, peer_secret_)) return req.remote_addr;
  const std::string forwarded_for = req.get_header_value("X-Forwarded-For");
  return forwarded_for.empty() ? req.remote_addr : forwarded_for;
}

bool Api::ReadsOnlyTheStore(const std::string& action) {
  static const std::set<std::string> kActions = [] {
    std::set<std::string> a = {"metrics",          "whoami",          "version",
                               "config.revisions", "config.revision", "users.list",
                               "tokens.list",      "audit.list",      "reports.usage"};
    for (const std::string& kind : domain::ConfigKinds()) {
      if (kind == "Budget") continue;  // its status is the leader's budget service's
      a.insert(Plural(kind) + ".list");
      a.insert(Plural(kind) + ".get");
    }
    return a;
  }();
  return kActions.count(action) > 0;
}

void Api::AccessLog(const Call& call, Kind kind, double seconds) {
  // Changes and refusals at info; successful reads (heartbeats, scrapes, polls) at debug, so
  // that the default level is not filled by what agents and dashboards ask every few seconds.
  const int status = call.res.status;
  const auto level =
      status >= 400 || kind == Kind::kMutate ? base::log::Level::kInfo : base::log::Level::kDebug;
  if (!base::log::Enabled(level)) return;
  const std::string ms = fmt::format("{:.1f}", seconds * 1000);
  base::log::Fields fields = {{"kind", "access"},
                              {"method", call.req.method},
                              {"path", call.req.path},
                              {"status", std::to_string(status)},
                              {"ms", ms},
                              {"route", call.action},
                              {"client", call.client}};
  if (call.authenticated) fields.emplace_back("user", call.access.user());
  // The path only: a query may carry what is not the log's (a sign-in's code and state).
  base::log::Log(level, fields, "{} {} {} {} ms", call.req.method, call.req.path, status, ms);
}

void Api::RateLimited(Call& call, const std::string& limit, double wait, const std::string& why) {
  const int64_t seconds = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait)));
  call.res.set_header("Retry-After", std::to_string(seconds));
  Fail(call, 429, "rate_limited", why + "; retry in " + std::to_string(seconds) + " s");
  metrics_->Add("meridian_api_rate_limited_total", {{"limit", limit}}, 1);
  // A write refused for its rate is audited once a minute per token, not once per refusal.
  if (limit == "writes" && NoteLimitedOnce(call.token_id, call.started)) {
    call.audit_message = why;
    Audit(call);
  }
}

Status Api::Authenticate(Call& call) {
  // RFC 9110: the scheme is case-insensitive, and whitespace may follow it.
  const std::string header = call.req.get_header_value("Authorization");
  const size_t space = header.find(' ');
  std::string scheme = header.substr(0, space);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (space == std::string::npos || scheme != "bearer") {
    call.auth_failure = "no bearer token";
    return Status(base::StatusCode::kUnauthenticated,
                  "missing credentials: send \"Authorization: Bearer <token>\"");
  }
  // Unknown, revoked and expired tokens answer alike: the answer must not tell someone who
  // holds only a token's id (it is in the audit log and in listings) whether it is still good.
  const Status invalid(base::StatusCode::kUnauthenticated,
                       "invalid token: it is unknown, revoked or expired");
  std::string id, secret;
  const std::string credential(base::Trim(header.substr(space + 1)));
  if (!ParseToken(credential, &id, &secret)) {
    if (LooksLikeJwt(credential)) return AuthenticateIdToken(call, credential);
    call.auth_failure = "malformed token";
    return invalid;
  }
  store::TokenRecord token;
  std::vector<RoleBinding> roles;
  Status s = Status::Ok();
  // The generation before the read: a write that commits meanwhile moves it past the entry.
  const uint64_t generation = store_->CredentialsGeneration();
  const double read_at = credentials_.Now();
  bool from_store = false;
  if (std::optional<CredentialCache::Entry> held = credentials_.Find(id, generation)) {
    token = std::move(held->token);
    roles = std::move(held->roles);
  } else {
    from_store = true;
    s = store_->Read([&](store::Tx& tx) {
      auto t = tx.GetToken(id);
      if (!t.ok()) return t.status();
      token = *t;
      auto user = tx.GetObject("User", token.user);
      if (!user.ok()) return user.status();
      auto r = ParseRoles(user->spec);
      if (!r.ok()) return r.status();
      roles = *r;
      return Status::Ok();
    });
  }
  if (!s.ok() &&
      (s.code() == base::StatusCode::kIoError || s.code() == base::StatusCode::kUnavailable ||
       s.code() == base::StatusCode::kInternal)) {
    return s;  // the store failed: not the caller's fault
  }
  const bool secret_ok = s.ok() && ConstantTimeEquals(Sha256Hex(secret), token.secret_hash);
  if (!secret_ok) {
    call.auth_failure = "unknown token";
    return invalid;
  }
  // Kept only once its secret was shown: a guess at a known id costs a store read each, as
  // an unknown one does.
  if (from_store) credentials_.Put(id, generation, read_at, {token, roles});
  // Whoever holds the secret learns nothing more either; the audit log says why.
  if (token.revoked) {
    call.auth_failure = "revoked token " + id + " of " + token.user;
    return invalid;
  }
  if (token.expires_at != 0 && token.expires_at <= clock_->Now()) {
    call.auth_failure = "expired token " + id + " of " + token.user;
    return invalid;
  }
  auto config = Config();
  call.token_id = id;
  call.access = Access(token.user, std::move(roles), &config->tenancy);
  call.authenticated = true;
  call.pinned = config;  // the Access points into the view: keep it alive for the call
  call.expires_at = token.expires_at;
  return Status::Ok();
}

Status Api::AuthenticateIdToken(Call& call, const std::string& token) {
  // Every refusal answers as an unknown token does (ADR 0013): the audit log says which it was.
  const Status invalid(base::StatusCode::kUnauthenticated,
                       "invalid token: it is unknown, revoked or expired");
  auto config = Config();
  if (config->identity_providers.empty()) {
    call.auth_failure = "an ID token, but no IdentityProvider is configured";
    return invalid;
  }
  auto identity = oidc_->Verify(token, config->identity_providers);
  if (!identity.ok()) {
    const Status& s = identity.status();
    call.auth_failure = "ID token refused: " + s.message();
    if (s.code() == base::StatusCode::kUnavailable) {
      return Status(base::StatusCode::kUnavailable,
                    "the identity provider cannot be reached to check the token; retry later");
    }
    if (s.code() == base::StatusCode::kPermissionDenied) return s;
    return invalid;
  }
  // Writes are limited per signed-in user, as per token for API tokens.
  call.token_id = "sso:" + identity->user;
  call.identity_provider = identity->provider;
  call.expires_at = identity->expires_at;
  call.access = Access(identity->user, std::move(identity->roles), &config->tenancy);
  call.authenticated = true;
  call.pinned = config;
  return Status::Ok();
}

void Api::Audit(Call& call) {
  store::AuditEntry a;
  a.at = call.started;
  a.user = call.access.user();
  a.method = call.req.method;
  a.path = call.req.path;
  a.action = call.action;
  a.project = call.project;
  a.code = call.res.status;
  a.result = call.res.status == 401 || call.res.status == 403 ? "denied"
             : call.res.status < 400                          ? "allowed"
                                                              : "failed";
  a.message = call.audit_message;
  WriteAudit(std::move(a));
}

std::shared_ptr<const Api::ConfigView> Api::Config() {
  std::lock_guard<std::mutex> lock(config_mu_);
  // Writes through this API invalidate the view at once; the timeout bounds how long a write
  // by another server replica goes unseen.
  if (config_ && clock_->Now() - config_read_at_ < 5.0) return config_;
  auto view = std::make_shared<ConfigView>();
  Status s = store_->Read([&](store::Tx& tx) {
    for (const char* kind :
         {"Team", "Project", "Cluster", "PriorityClass", "IdentityProvider", "Dataset"}) {
      auto objects = tx.ListObjects(kind);
      if (!objects.ok()) return objects.status();
      for (const store::Object& o : *objects) {
        if (o.kind == "Team") view->tenancy.org_of_team[o.name] = o.spec.value("organization", "");
        if (o.kind == "Project") {
          view->tenancy.team_of_project[o.name] = o.spec.value("team", "");
          view->projects.push_back(o.name);
        }
        if (o.kind == "Cluster") view->clusters.push_back(o.name);
        if (o.kind == "PriorityClass") view->priority_classes[o.name] = ClassUseOf(o.name, o.spec);
        if (o.kind == "Dataset") view->datasets.insert(o.name);
        if (o.kind == "IdentityProvider") {
          view->identity_providers.push_back(OidcProviderFromSpec(o.name, o.spec));
        }
      }
    }
    return Status::Ok();
  });
  if (!s.ok() && config_) return config_;  // keep serving the last view through a store hiccup
  config_ = view;
  config_read_at_ = clock_->Now();
  return config_;
}

void Api::InvalidateConfig() {
  std::lock_guard<std::mutex> lock(config_mu_);
  config_.reset();
}

void Api::Changed(int64_t seq, bool config) {
  if (config) InvalidateConfig();
  if (seq > 0) bus_->Notify(seq);
  hooks_->Wake();
  if (config && budgets_) budgets_->Wake();
}

base::Result<std::string> Api::Bootstrap() {
  std::string text;
  Status s = store_->Write([&](store::Tx& tx) {
    auto users = tx.ListObjects("User");
    if (!users.ok()) return users.status();
    if (!users->empty()) return Status::Ok();
    store::Object admin;
    admin.kind = "User";
    admin.name = "admin";
    admin.spec = {{"roles", Json::array({{{"role", "admin"}}})},
                  {"description", "created at first start"}};
    admin.updated_at = clock_->Now();
    admin.updated_by = "bootstrap";
    if (auto r = tx.PutObject(admin, store::kMustNotExist); !r.ok()) return r.status();
    NewToken t = GenerateToken(*entropy_);
    if (Status put =
            tx.PutToken({t.id, "admin", t.secret_hash, "bootstrap", clock_->Now(), 0, false});
        !put.ok()) {
      return put;
    }
    store::AuditEntry a;
    a.at = clock_->Now();
    a.user = "bootstrap";
    a.method = "-";
    a.action = "users.bootstrap";
    a.code = 201;
    a.result = "allowed";
    a.message = "created user admin and its first token";
    text = t.text;
    return tx.AppendAudit(a).status();
  });
  if (!s.ok()) return s;
  return text;
}

}  // namespace meridian::api
