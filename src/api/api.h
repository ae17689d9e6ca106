#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/auth.h"
#include "api/credential_cache.h"
#include "api/doorbells.h"
#include "api/json_body.h"
#include "api/metrics.h"
#include "api/oidc.h"
#include "api/rate_limit.h"
#include "api/sessions.h"
#include "base/clock.h"
#include "base/entropy.h"
#include "domain/documents.h"
#include "domain/job_spec.h"
#include "domain/node_ops.h"
#include "store/store.h"

namespace meridian::net {
class HttpServer;
struct Request;
}  // namespace meridian::net

namespace meridian::api {

// One sample of the estate, taken every few seconds by the server for the dashboard's charts
// (GET /api/v1/history).
struct HistorySample {
  double at = 0;
  struct Group {  // the GPUs of one model in one cluster
    std::string cluster;
    std::string model;
    double gpus = 0;
    double allocated = 0;     // fractions and MIG slices counted in parts
    double utilization = -1;  // mean of the GPUs that report it (0..1); -1 when none does
  };
  std::vector<Group> groups;
  struct Queue {
    int32_t pending = 0;
    int32_t running = 0;  // placed, running or stopping
  };
  std::map<std::string, Queue> projects;
  std::map<std::string, double> quota_used;  // GPUs in use by each node of the tenancy tree
};

// The GPUs of one node over time (GET /api/v1/nodes/{name}/history), sampled with the history
// above but kept in memory only, for at most kNodeHistorySeconds: per GPU, what its agent last
// reported. A restart begins it afresh.
inline constexpr double kNodeHistorySeconds = 3600;
struct NodeGpuSample {
  int32_t index = 0;
  float utilization = -1;      // 0..1; -1 when the GPU reports none
  float memory_used_mib = -1;  // -1 when the GPU reports none
};
struct NodeSample {
  double at = 0;
  std::vector<NodeGpuSample> gpus;
};

// A sample as stored (store::Tx::PutSample), and back; parts of the wrong shape are skipped.
Json HistorySampleToJson(const HistorySample& sample);
HistorySample HistorySampleFromJson(double at, const Json& json);

// An object of the live configuration that the scheduler leaves out, or takes in only in part
// (a node of a cluster that does not exist, a project of a team that does not), and why. The
// rest of the estate is scheduled as usual; /healthz and /metrics report these.
struct ConfigProblem {
  std::string kind;
  std::string name;
  std::string message;  // e.g. `cluster "cloud" does not exist: the node is not scheduled`
};

// What the API asks of the scheduling side of the server (implemented by the scheduler
// controller in src/server). Thread-safe.
class SchedulerHooks {
 public:
  virtual ~SchedulerHooks() = default;
  // Something changed (a job was submitted or cancelled, the configuration moved): run a
  // cycle soon rather than at the next period.
  virtual void Wake() = 0;
  // Why a pending job waits, per cluster, and when it should start: {quota, clusters: [{name,
  // reason}], estimatedStart}. NotFound when the scheduler does not hold it as pending.
  virtual base::Result<Json> Explain(int64_t job) = 0;
  // The reason the last cycle gave for a pending job ("" when none).
  virtual std::string PendingReason(int64_t job) = 0;
  // Nodes with their GPUs and what is allocated on them, from the last cycle.
  virtual Json Nodes() = 0;
  // Quota use of every node of the tenancy tree: [{name, parent, guaranteedGpus, limitGpus,
  // usedGpus, borrowing, pending}].
  virtual Json Usage() = 0;
  // The samples taken at or after `since` (Unix seconds), oldest first, and the sampling
  // interval in seconds.
  virtual std::vector<HistorySample> History(double since, double* interval) = 0;
  // The samples of one node's GPUs taken at or after `since`, oldest first (empty for a node
  // never sampled), and the sampling interval in seconds.
  virtual std::vector<NodeSample> NodeHistory(const std::string& node, double since,
                                              double* interval) = 0;
  // What the estate the scheduler runs on leaves out of the configuration, and why (empty when
  // all of it is scheduled).
  virtual std::vector<ConfigProblem> ConfigProblems() = 0;
  // Why nothing the estate has, or may be given, could ever hold a job of `spec`, naming the
  // field (domain/admission.h); nothing when something could.
  virtual std::optional<domain::FieldError> NeverHeld(const domain::JobSpec& spec) = 0;
};

// What the API asks of the side of the server that node agents talk to (implemented by
// server::NodeService). Thread-safe. Both answer an error whose message names the field.
class AgentHooks {
 public:
  virtual ~AgentHooks() = default;
  // An agent registers (or re-registers) its node: {node, cluster, pool, labels, address,
  // cpuMilli, memoryMib, simulated, gpus: [...]}. Answers {node, heartbeatInterval, lease}.
  virtual base::Result<Json> Register(const std::string& user, const Json& body) = 0;
  // A heartbeat: {telemetry: [...], tasks: [{job, task, generation, state, exitCode, restarts,
  // message}]}. Records what the tasks did and answers what should run on the node: {tasks:
  // [...], heartbeatInterval, lease}.
  virtual base::Result<Json> Heartbeat(const std::string& node, const Json& body) = 0;
  // Whether `node` may upload output of (job, task, generation): the task is the node's at the
  // job's current generation. NotFound for a job that does not exist, PermissionDenied else.
  virtual base::Status MayUpload(const std::string& node, int64_t job, int32_t task,
                                 int64_t generation) = 0;
};

// What an operator asks of registered nodes (implemented by server::NodeService), through
// /api/v1/nodes/{name}/cordon, /uncordon, /drain and DELETE /api/v1/nodes/{name}. The API checks
// who may ask (admins) and audits the call; these write the operator's intent on the Node object
// with its event, in one transaction. Thread-safe. NotFound when no agent registered the node.
class NodeOperations {
 public:
  virtual ~NodeOperations() = default;
  // Cordon (true: it takes no new job; what runs there goes on) or uncordon (false: it is
  // schedulable again, and a drain is over). Idempotent: a node already so changes nothing.
  // Answers the node's operator state (Operations).
  virtual base::Result<Json> Cordon(const std::string& node, const std::string& by,
                                    bool cordoned) = 0;
  // Cordons the node and asks every job with a task on it to stop by the deadline and go back
  // to the queue (through Stopping: its resources stay taken until its tasks have stopped).
  // Answers the operator state with `stopping`: the ids of the jobs asked to stop.
  virtual base::Result<Json> Drain(const std::string& node, const std::string& by,
                                   const domain::DrainRequest& request) = 0;
  // Forgets the node: its agent's next heartbeat is answered 404, and it registers afresh.
  // Conflict, naming them, while jobs hold resources on it, unless `force` and the node is Lost
  // (its tasks have been fenced off; those jobs go back to the queue).
  virtual base::Result<Json> Delete(const std::string& node, const std::string& by, bool force) = 0;
  // {cordoned, drain: {deadline, reason, by, at} | null, scheduling: "" | cordoned | draining |
  // drained, gpuHealth: [{index, cordoned, xid, reason, since, held, faults}]} of a registered
  // node; null when it is not registered.
  virtual Json Operations(const std::string& node) = 0;
  // Fault injection: GPU `gpu` of a node whose GPUs are simulated reports `xid` as an XID event
  // (its agent is told with its next heartbeat's answer), and the server acts on it as on any
  // XID. FailedPrecondition for a node with real GPUs, InvalidArgument for a GPU it lacks.
  // Answers {node, gpu, xid, class, scope}. A warning (fault.warning, domain/gpu_warnings.h)
  // makes the GPU read as a warning before failure does; it answers {node, gpu, warning}.
  virtual base::Result<Json> InjectFault(const std::string& node, const std::string& by,
                                         int32_t gpu, const domain::FaultInjection& fault) = 0;
  // Puts a GPU cordoned for a fault back into service and forgets its faults (the operator
  // repaired or vouched for it); a held GPU is released only so. Answers Operations.
  virtual base::Result<Json> UncordonGpu(const std::string& node, const std::string& by,
                                         int32_t gpu) = 0;
};

// What the API asks of the server's alerting (implemented by server::AlertService): the alerts
// the rules hold now. Thread-safe.
class AlertHooks {
 public:
  virtual ~AlertHooks() = default;
  // Pending and firing alerts, ordered by their labels: [{rule, state, labels, annotations,
  // activeSince, firedAt, resolvedAt, value}]. The API filters them per caller.
  virtual Json Alerts() = 0;
};

// What the API asks of the server's idle-GPU reclamation (implemented by server::IdleReclaimer,
// docs/adr/0019-idle-reclamation.md): the running jobs that an IdlePolicy finds idle now, and
// what it does or, in dry-run mode, would do about each. Thread-safe.
class IdleHooks {
 public:
  virtual ~IdleHooks() = default;
  // [{job, name, project, type, policy, action, state, dryRun, idleSince, noticedAt, stopAt,
  // gpus, utilization}], by job id. The API filters them per caller by project.
  virtual Json Idle() = 0;
};

// What the budget watch knows of each Budget document (server/budgets.h,
// docs/adr/0041-budgets.md): its status as of the last evaluation, given with the document.
class BudgetHooks {
 public:
  virtual ~BudgetHooks() = default;
  // {evaluatedAt, period: {from, to}, spent: {cost, gpuHours}, rate: {costPerHour,
  // gpuHoursPerHour}, forecast: {cost, gpuHours, percent}, percent, crossed, exhausted,
  // blocking, summary}; null (and left out of the answer) until the budget is first evaluated.
  virtual Json BudgetStatus(const std::string& name) = 0;
  // The configuration changed (a Budget, or the tenancy it counts by): evaluate soon.
  virtual void Wake() = 0;
};

// Task output as agents upload it: one file per job, task and generation, appended at known
// offsets so that a retried upload never duplicates or loses bytes. Thread-safe.
class LogStore {
 public:
  // Each run's output is kept up to `max_bytes`; the rest is dropped, and said so in the file.
  explicit LogStore(std::string dir, int64_t max_bytes = int64_t{64} << 20)
      : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  int64_t max_bytes() const { return max_bytes_; }
  // Appends `data` when `offset` is the current size; returns the size after (the size it has
  // when the offset is wrong, so the agent can resume from there). Once a file is full it keeps
  // its size: the caller compares with max_bytes().
  base::Result<int64_t> Append(int64_t job, int32_t task, int64_t generation, int64_t offset,
                               const std::string& data);
  // Up to `max` bytes from `offset` of the newest generation of the task's output; `size` gets
  // the whole size. NotFound when nothing was uploaded.
  base::Result<std::string> Read(int64_t job, int32_t task, int64_t offset, int64_t max,
                                 int64_t* size);

 private:
  std::string Path(int64_t job, int32_t task, int64_t generation) const;
  std::string dir_;
  int64_t max_bytes_;
  std::mutex mu_;
};

// Wakes watchers when events are appended. The API and the scheduler controller notify it after
// each commit that appended events; watchers wait for a sequence number beyond the one they saw.
class EventBus {
 public:
  void Notify(int64_t seq);
  // Waits until an event after `after` may exist, or the timeout passes, or Close is called.
  // Returns false once closed.
  bool Wait(int64_t after, double timeout_seconds);
  void Close();
  int64_t latest() const { return latest_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int64_t> latest_{0};
  bool closed_ = false;
};

// How documents meet the live configuration. kMerge creates and updates what they hold and
// deletes nothing (`apply -f`, as kubectl does); kPrune makes them the whole desired state,
// deleting what they lack (`apply --prune -f DIR`, and every rollback).
enum class ApplyMode { kMerge, kPrune };
struct DesiredDocuments {
  std::vector<domain::Document> docs;
  ApplyMode mode = ApplyMode::kMerge;
  std::string message;
  // A rollback's revision was checked when it was made: its references are not checked again.
  bool check_references = true;
};

struct ApiOptions {
  size_t max_body_bytes = 1 << 20;
  // /metrics names every project with its queue and quota use: it needs a token of an admin or
  // of a user with the metrics role, unless this is set (`server --dev`, which says so).
  bool open_metrics = false;
  int32_t max_page = 1000;
  // One listing's answer stops at the item that takes it past this many bytes (of its records'
  // JSON), and says where to continue: a page of large specs costs bounded memory.
  size_t max_answer_bytes = 8 << 20;
  double watch_timeout = 30;  // long polls and server-sent event streams end after this long
  // Writes per token: `write_burst` at once, then `write_rate` a second (0: no limit); node
  // agents' identities are not limited. Failed authentications per client address: past
  // `failed_auths_per_minute` at once, one a second (0: no limit). Both answer 429 with
  // Retry-After.
  double write_rate = 50;
  double write_burst = 500;
  double failed_auths_per_minute = 60;
  // Long polls (?wait=), watches and sessions into tasks open at once with one token; past it
  // they answer 429.
  int max_waits_per_token = 16;
  // Seconds a session into a task (exec, port-forward) waits for the task's agent to take it
  // up: the agent learns of it at its next heartbeat.
  double session_attach_timeout = 15;
  // Single sign-on: how ID tokens are checked, and what fetches discovery documents and key
  // sets (null: cpp-httplib's client).
  OidcOptions oidc;
  HttpFetcher* oidc_fetcher = nullptr;
};

// The JSON API under /api/v1, plus /healthz and /metrics. Every /api/v1 call is authenticated
// with a bearer token and authorized against the caller's roles; every mutating call and every
// denied call is written to the audit log. Handlers hold no scheduling logic: they validate,
// store, and wake the scheduler. Thread-safe: the HTTP server calls handlers from its worker
// threads.
class Api {
 public:
  Api(store::Store* store, const base::Clock* clock, base::Entropy* entropy, SchedulerHooks* hooks,
      EventBus* bus, Metrics* metrics, ApiOptions options = {});
  // Serves the agent protocol (/api/v1/agents/...) and task logs; without it those answer 404.
  void ServeAgents(AgentHooks* agents, LogStore* logs) {
    agents_ = agents;
    logs_ = logs;
  }
  // Rung when a node's orders change, so that its agent heartbeats at once (api/doorbells.h).
  Doorbells& doorbells() { return *doorbells_; }
  // Serves cordon, uncordon, drain and delete of nodes; without it those answer 404.
  void ServeNodeOperations(NodeOperations* nodes) { node_ops_ = nodes; }
  // Serves GET /api/v1/alerts; without it the list is empty.
  void ServeAlerts(AlertHooks* alerts) { alerts_ = alerts; }
  // Serves GET /api/v1/idle; without it the list is empty.
  void ServeIdle(IdleHooks* idle) { idle_ = idle; }
  // Adds each Budget's status to what GET /api/v1/budgets answers.
  void ServeBudgets(BudgetHooks* budgets) { budgets_ = budgets; }
  // A follower's way to its leader (server/leadership.h): called with the route's action for
  // every request but a public route's, before anything else; when it answers in the handler's
  // place (the leader authenticated, limited, answered and audited it), it returns true.
  using Forwarder =
      std::function<bool(const std::string& action, const net::Request&, net::Response&)>;
  void SetForwarder(Forwarder forwarder) { forwarder_ = std::move(forwarder); }
  // Forgets the tokens read so far (CredentialCache): a follower that takes over has not seen
  // the old leader's revocations move its store's generation.
  void ForgetCredentials() { credentials_.Clear(); }
  // Whether a route's answer comes from the store alone (documents but Budgets, revisions,
  // users, tokens, the audit log, usage reports, whoami, version, this server's metrics): what
  // a follower answers itself rather than forwarding to the leader.
  static bool ReadsOnlyTheStore(const std::string& action);
  // The servers' shared secret (store::Election::PeerSecret): a request that carries it in
  // kPeerHeader comes from a follower, and its X-Forwarded-For is taken as the client's
  // address (for the failed-sign-in limit, the audit log and the access log).
  static constexpr const char* kPeerHeader = "X-Meridian-Peer";
  // Whether `req` carries `secret` in kPeerHeader, compared in constant time (how much of a
  // guess matched says nothing); false for an empty secret.
  static bool CarriesPeerSecret(const net::Request& req, const std::string& secret);
  void TrustPeers(std::string secret) { peer_secret_ = std::move(secret); }
  ~Api();

  void Register(net::HttpServer& server);

  // Creates the "admin" user and a token for it when the store holds no user yet; returns the
  // token text, or "" when users existed already.
  base::Result<std::string> Bootstrap();

  struct Call;        // one request being served (api_internal.h)
  struct AuditState;  // what the audit log's writer holds (audit_writer.cc)

 private:
  using Handler = std::function<void(Call&)>;
  // Whether a request of the route may wait (a long poll): it runs on a thread of its own, and
  // counts against its token's max_waits_per_token.
  using Waits = std::function<bool(const net::Request&)>;
  // kSignIn: public, but what it is given is a credential of another kind (an authorization
  // code): a refusal (401) counts against the address as a failed authentication does, and an
  // address held off is answered 429 before the work (a call to the identity provider).
  enum class Kind { kPublic, kSignIn, kRead, kMutate };
  void Route(net::HttpServer& server, const char* method, const std::string& pattern,
             const std::string& action, Kind kind, Handler handler, Waits waits = nullptr);
  base::Status Authenticate(Call& call);
  // The client's address (Call::client): X-Forwarded-For on a request a follower forwarded.
  std::string ClientAddress(const net::Request& req) const;
  // One line of the access log for a request answered in `seconds`.
  void AccessLog(const Call& call, Kind kind, double seconds);
  // An ID token of an IdentityProvider's issuer (docs/adr/0021-single-sign-on.md).
  base::Status AuthenticateIdToken(Call& call, const std::string& token);
  // Answers 429 with Retry-After (`limit` names the limit in the metric).
  void RateLimited(Call& call, const std::string& limit, double wait, const std::string& why);
  // Whether this is the first refusal of `token` in the minute of `now` (audit_writer.cc).
  bool NoteLimitedOnce(const std::string& token, double now);
  void Audit(Call& call);
  // Writes an audit entry, with any that failed before; one that fails is logged, counted and
  // kept to be retried with the next (audit_writer.cc).
  void WriteAudit(store::AuditEntry entry);
  // Failed authentications are counted per address and minute, and written as one audit entry
  // each once its minute is over (or all at once with `all`, before the audit log is read).
  void CountFailedAuth(const Call& call);
  void FlushFailedAuths(bool all);
  size_t PendingAudit();

  // Jobs and events (api_jobs.cc).
  void SubmitJob(Call& call);
  // A submission whose Idempotency-Key made job `id` before: that job again (200).
  void ReplaySubmission(Call& call, int64_t id, const std::string& key,
                        const domain::JobDocument& doc);
  void ListJobs(Call& call);
  void GetJob(Call& call);
  void CancelJob(Call& call);
  void ExplainJob(Call& call);
  void JobEvents(Call& call);
  void ListEvents(Call& call);
  void Watch(Call& call);
  void Nodes(Call& call);
  void GetNode(Call& call);
  void AddOperations(Json* row);  // to a node's row: what operators asked of the node
  // /healthz and /metrics (api_estate.cc).
  void Health(Call& call);
  void Version(Call& call);  // GET /api/v1/version: this server's build
  void ServeMetrics(Call& call);
  void Usage(Call& call);
  void History(Call& call);
  void NodeHistory(Call& call);
  void ListAlerts(Call& call);
  void ListIdle(Call& call);
  // Node agents and task output (api_agents.cc).
  void RegisterAgent(Call& call);
  base::Result<bool> LiveUnderCredential(const std::string& node);
  base::Result<std::string> IssueNodeCredential(const std::string& node, double now);
  void AgentHeartbeat(Call& call);
  void AgentWait(Call& call);
  // One WebSocket carrying an agent's heartbeats, their answers and its doorbell (ADR 0047).
  void AgentChannel(Call& call, net::HttpServer& server);
  void UploadLogs(Call& call);
  void JobLogs(Call& call);
  // A session into a running task over a WebSocket (api_sessions.cc): the user's end (exec,
  // port-forward) and the agent's.
  void OpenSession(Call& call, const std::string& kind);
  void TakeSession(Call& call);
  // Operators' node operations (api_nodes.cc).
  void CordonNode(Call& call, bool cordoned);
  void DrainNode(Call& call);
  void InjectGpuFault(Call& call);
  void UncordonGpu(Call& call);
  void DeleteNode(Call& call);
  // Configuration (api_config.cc).
  // A configuration object as the API answers it: a Budget with its status, for a caller who may
  // read every project it counts (what the whole scope spent says what each part did).
  Json WithStatus(const Access& access, const store::Object& o);
  void ListObjects(Call& call, const std::string& kind);
  void GetObject(Call& call, const std::string& kind);
  void PutObject(Call& call, const std::string& kind);
  void DeleteObject(Call& call, const std::string& kind);
  void Plan(Call& call);
  void Apply(Call& call);
  void Rollback(Call& call);
  void Revisions(Call& call);
  void RevisionDetail(Call& call);
  // Users, tokens, audit (api_admin.cc).
  void WhoAmI(Call& call);
  void ListUsers(Call& call);
  void PutUser(Call& call);
  void CreateToken(Call& call);
  void ListTokens(Call& call);
  void RevokeToken(Call& call);
  void ListAudit(Call& call);
  // Accounting summed over a window (api/usage.h): ?from&to (Unix seconds) &by.
  void UsageReport(Call& call);
  // What a client needs to sign in with an IdentityProvider: public.
  void AuthProviders(Call& call);
  // The dashboard's sign-in: an authorization code (with its PKCE verifier) exchanged at the
  // provider's token endpoint for an ID token, which is checked and handed back. Public.
  void ExchangeCode(Call& call);

  // The tenancy tree and the names that exist, read from the store and kept until a
  // configuration write through this API (or Refresh after a timeout) changes them.
  struct ConfigView {
    Tenancy tenancy;
    std::vector<std::string> projects;
    std::vector<std::string> clusters;
    std::map<std::string, ClassUse> priority_classes;  // who may use each
    std::vector<OidcProvider> identity_providers;
    std::set<std::string> datasets;
  };
  std::shared_ptr<const ConfigView> Config();
  void InvalidateConfig();
  // After a commit that appended events up to `seq`: wake watchers and the scheduler, and
  // forget the cached tenancy when the configuration changed.
  void Changed(int64_t seq, bool config);
  // Applies the documents as a new revision in one transaction; fills `changes`. Invalid
  // references go to `errors` (and nothing is applied); a deletion that would orphan live
  // objects (nodes of a cluster, jobs of a project) fails with kConflict naming them.
  base::Result<int64_t> ApplyDocuments(Call& call, const DesiredDocuments& desired, Json* changes,
                                       domain::ErrorList* errors);

  store::Store* store_;
  const base::Clock* clock_;
  base::Entropy* entropy_;
  SchedulerHooks* hooks_;
  Forwarder forwarder_;
  std::string peer_secret_;
  EventBus* bus_;
  Metrics* metrics_;
  ApiOptions options_;
  AgentHooks* agents_ = nullptr;
  LogStore* logs_ = nullptr;
  NodeOperations* node_ops_ = nullptr;
  AlertHooks* alerts_ = nullptr;
  IdleHooks* idle_ = nullptr;
  BudgetHooks* budgets_ = nullptr;

  std::shared_ptr<AuditState> audit_;       // shared_ptr: its type is complete only there
  RateLimiter writes_;                      // by token id
  RateLimiter failed_auths_;                // by client address
  ConcurrencyLimit waiting_;                // long polls and watches, by token id
  std::unique_ptr<Doorbells> doorbells_;    // agents told at once that their orders changed
  std::unique_ptr<SessionRelay> sessions_;  // sessions into tasks (exec, port-forward)
  std::unique_ptr<HttpFetcher> own_fetcher_;
  HttpFetcher* oidc_fetcher_ = nullptr;
  std::unique_ptr<OidcVerifier> oidc_;
  CredentialCache credentials_;  // tokens read from the store, with their users' roles

  std::mutex config_mu_;
  std::shared_ptr<const ConfigView> config_;
  double config_read_at_ = 0;
};

}  // namespace meridian::api
