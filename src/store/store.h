#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace meridian::store {

using Json = nlohmann::json;

// A named document of the desired state (Organization, Team, Project, Quota, PriorityClass,
// Cluster, NodePool, Policy) or a User. `version` is the resource version: every write bumps
// it, and a write that names the version it read fails with kConflict when another came first.
struct Object {
  std::string kind;
  std::string name;
  Json spec = Json::object();
  int64_t version = 0;  // 0: never written
  double updated_at = 0;
  std::string updated_by;
};

inline constexpr double kSubmissionKeySeconds = 24 * 3600;  // as Stripe keeps its keys

inline constexpr int64_t kAnyVersion = -1;  // a write that does not check the version
inline constexpr int64_t kMustNotExist = 0;

struct JobRecord {
  int64_t id = 0;  // assigned by InsertJob
  std::string name;
  std::string project;
  std::string user;
  Json spec = Json::object();  // the submitted spec, as accepted
  std::string phase = "Pending";
  std::string reason;               // why it is in its phase (why it waits, why it failed)
  Json allocation = Json::array();  // one entry per task while placed or running
  int64_t generation = 0;           // bumped by every placement; fences stale agents
  // What agents reported of the current run: {tasks: [{state, exitCode, restarts, node}],
  // restarts (requeues after a lost node), startedAt, finishedAt}. Replaced with the phase.
  int64_t version = 0;  // resource version, as for objects
  double submitted_at = 0;
  double updated_at = 0;
  Json status = Json::object();
  // An element of a job array: the array's id (that of its first element, as in Slurm) and the
  // element's index. 0 and -1 for a job that is not an array's.
  int64_t array_id = 0;
  int64_t array_index = -1;
};

// JobRecord::array_id for InsertJob: this job is the first element of a new array, whose id is
// its own.
inline constexpr int64_t kNewArray = -1;

struct JobFilter {
  std::vector<std::string> projects;  // empty: every project
  std::vector<std::string> phases;    // empty: every phase
  std::string user;                   // empty: every user
  int64_t after_id = 0;               // pagination: ids greater than this
  int64_t before_id = 0;              // and, when not 0, less than this (newest first)
  int32_t limit = 100;
  bool newest_first = false;  // the newest `limit` jobs, newest first
  // When not 0, the list ends with the job that brings the bytes of the jobs' specs,
  // allocations and statuses to this many or more (at least one job is listed): fewer than
  // `limit` jobs, then, while more match.
  size_t max_bytes = 0;
  bool* ended_by_bytes = nullptr;  // when given: set to whether max_bytes ended the list
  int64_t array_id = 0;            // when not 0: only this array's elements
  int64_t array_index = -1;        // with array_id, when not -1: only its element of this index
  // Listings: an array is one row, its first element's (the other elements are left out); with
  // `phases`, listed when any of its elements is in one of them.
  bool arrays_as_one = false;
};

struct Event {
  int64_t seq = 0;  // assigned by AppendEvent, increasing
  double at = 0;
  std::string object_kind;      // "Job", "Project", "Revision", ...
  std::string object_name;      // a job's id, or a document's name
  std::string project;          // the project it belongs to; empty for estate-wide events
  std::string type = "Normal";  // Normal | Warning
  std::string reason;           // CamelCase: Submitted, Placed, Preempted, Cancelled, ...
  std::string message;
};

struct EventFilter {
  int64_t after_seq = 0;
  std::string object_kind;            // empty: any
  std::string object_name;            // empty: any
  std::vector<std::string> projects;  // visible projects; ignored when all_projects
  bool all_projects = true;           // false: only events of `projects` (none estate-wide)
  int32_t limit = 100;
  bool newest_first = false;  // the newest `limit` events, newest first
};

struct TokenRecord {
  std::string id;  // public part of the token, the lookup key
  std::string user;
  std::string secret_hash;  // hex SHA-256 of the secret part; the secret itself is never kept
  std::string description;
  double created_at = 0;
  double expires_at = 0;  // 0: never
  bool revoked = false;
};

struct AuditEntry {
  int64_t seq = 0;  // assigned by AppendAudit
  double at = 0;
  std::string user;    // empty when the caller could not be identified
  std::string method;  // HTTP method, or the CLI verb for actions taken without HTTP
  std::string path;
  std::string action;   // "jobs.create", "config.apply", ...
  std::string project;  // the project it touched, when it touched one
  int32_t code = 0;     // HTTP status
  std::string result;   // allowed | denied | failed
  std::string message;
};

struct AuditFilter {
  int64_t after_seq = 0;
  std::string user;
  std::string result;
  int32_t limit = 100;
  bool newest_first = false;  // the newest `limit` entries, newest first
};

// What one node of the tenancy tree has received, for fair share: decayed resource-seconds
// (GPU milli-seconds, CPU milli-seconds, memory MiB-seconds) as of `at`.
struct FairShareUsage {
  std::string scope;  // the tenancy node's name
  double gpu = 0;
  double cpu = 0;
  double mem = 0;
  double at = 0;
};

// One task's part of one run of a job, written in the transaction that ends the run (the job
// leaves the phases that hold devices): what accounting reports (api/usage.h).
struct UsageRecord {
  int64_t seq = 0;  // assigned by AppendUsage
  int64_t job = 0;
  int64_t generation = 0;  // the run
  int32_t task = 0;
  std::string project;
  std::string user;
  std::string cluster;
  std::string pool;
  std::string node;
  std::string gpu_model;  // empty: no GPU
  double gpus = 0;        // GPUs held: a fraction or a MIG slice counts as its share of one
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  double price_per_gpu_hour = 0;  // as when the run was placed; 0: unpriced
  double started_at = 0;
  double ended_at = 0;
  std::string outcome;  // Succeeded | Failed | Cancelled | Requeued
};

struct UsageFilter {
  double from = 0;                    // runs that ended after this
  double to = 0;                      // and started before this (0: any)
  std::vector<std::string> projects;  // only these projects' (empty: every project's)
  int64_t after_seq = 0;
  int32_t limit = 1000;
};

// A configuration revision: every document of the desired state as applied, so that rolling
// back means applying an older revision's documents again.
struct Revision {
  int64_t number = 0;  // assigned by AddRevision, 1, 2, ...
  double created_at = 0;
  std::string author;
  std::string message;
  Json documents = Json::array();  // [{kind, name, spec}]
};

// Everything one transaction can do. A Tx is handed to the function given to Store::Write or
// Store::Read and is valid only during that call, on that thread.
class Tx {
 public:
  virtual ~Tx() = default;

  virtual base::Result<Object> GetObject(const std::string& kind, const std::string& name) = 0;
  // Every object of `kind` (every object when `kind` is empty), by kind then name.
  virtual base::Result<std::vector<Object>> ListObjects(const std::string& kind) = 0;
  // Creates or replaces; `expected_version` is kAnyVersion, kMustNotExist (kAlreadyExists when
  // it does) or the version read (kConflict when it moved). Returns the new version.
  virtual base::Result<int64_t> PutObject(const Object& object, int64_t expected_version) = 0;
  virtual base::Status DeleteObject(const std::string& kind, const std::string& name,
                                    int64_t expected_version) = 0;

  virtual base::Result<int64_t> InsertJob(const JobRecord& job) = 0;  // returns the new id
  virtual base::Result<JobRecord> GetJob(int64_t id) = 0;
  virtual base::Result<std::vector<JobRecord>> ListJobs(const JobFilter& filter) = 0;
  // Replaces the job's mutable fields (phase, reason, allocation, generation) when its version
  // is still `expected_version`; returns the new version.
  virtual base::Result<int64_t> UpdateJob(const JobRecord& job, int64_t expected_version) = 0;
  // An array's elements per phase (none: no such array).
  virtual base::Result<std::vector<std::pair<std::string, int64_t>>> CountArrayByPhase(
      int64_t array_id) = 0;
  // Jobs per phase, for the metrics.
  virtual base::Result<std::vector<std::pair<std::string, int64_t>>> CountJobsByPhase() = 0;

  virtual base::Result<int64_t> AppendEvent(const Event& event) = 0;
  virtual base::Result<std::vector<Event>> ListEvents(const EventFilter& filter) = 0;
  virtual base::Result<int64_t> LatestEventSeq() = 0;  // 0 when there is none

  virtual base::Status PutToken(const TokenRecord& token) = 0;
  virtual base::Result<TokenRecord> GetToken(const std::string& id) = 0;
  virtual base::Result<std::vector<TokenRecord>> ListTokens(const std::string& user) = 0;

  virtual base::Result<int64_t> AppendAudit(const AuditEntry& entry) = 0;
  virtual base::Result<std::vector<AuditEntry>> ListAudit(const AuditFilter& filter) = 0;

  // Accounting: one record per task of each ended run, kept for good; listed by seq.
  virtual base::Result<int64_t> AppendUsage(const UsageRecord& record) = 0;
  virtual base::Result<std::vector<UsageRecord>> ListUsage(const UsageFilter& filter) = 0;

  // Samples of the estate over time (the dashboard's charts), one per time: put (replacing one
  // at the same time), read from a time on in time order, and dropped before a time.
  virtual base::Status PutSample(double at, const Json& sample) = 0;
  virtual base::Result<std::vector<std::pair<double, Json>>> ListSamples(double since) = 0;
  virtual base::Status PruneSamples(double before) = 0;

  // Fair-share usage, so that it survives restarts: replaced whole, read whole (by scope).
  virtual base::Status PutFairShare(const std::vector<FairShareUsage>& usage) = 0;
  virtual base::Result<std::vector<FairShareUsage>> ListFairShare() = 0;

  // Submissions by idempotency key (the client's Idempotency-Key, per user): the job a key
  // created, so that a retried submission returns it rather than making another. Keys are kept
  // kSubmissionKeySeconds; Put drops older ones.
  virtual base::Result<int64_t> FindSubmission(const std::string& user, const std::string& key,
                                               double now) = 0;  // NotFound when none
  virtual base::Status PutSubmission(const std::string& user, const std::string& key, int64_t job,
                                     double now) = 0;

  virtual base::Result<int64_t> AddRevision(const Revision& revision) = 0;
  virtual base::Result<Revision> GetRevision(int64_t number) = 0;
  // Newest first, without their documents.
  virtual base::Result<std::vector<Revision>> ListRevisions(int32_t limit) = 0;
};

// Durable state of the control plane. Thread-safe: any thread may call Write and Read at any
// time. Backends: SqliteStore (the default) and PostgresStore, which pass the same conformance
// suite (store_conformance_test.cc).
class Store {
 public:
  virtual ~Store() = default;

  // Runs `fn` in a read-write transaction. When `fn` returns OK the transaction commits, and
  // Write returns only once the commit is durable; when `fn` returns an error nothing it did is
  // kept and that error is returned. `fn` may be run on another thread, together with other
  // writers' functions in one group commit; it must not block or call back into the Store.
  virtual base::Status Write(const std::function<base::Status(Tx&)>& fn) = 0;
  // Runs `fn` on a consistent snapshot; writes through its Tx fail.
  virtual base::Status Read(const std::function<base::Status(Tx&)>& fn) = 0;
  // Schema version, for `meridian server --version` and the conformance suite.
  virtual int32_t SchemaVersion() const = 0;
  // Moves once a commit of this store object that wrote a token or a User has become visible to
  // reads: what a reader learnt of credentials after it last saw this value holds while it has
  // not moved. Writes by other processes (other servers on one PostgreSQL, the `meridian store`
  // tools) do not move it. A wrapper must give its inner store's.
  virtual uint64_t CredentialsGeneration() const = 0;
};

// Runs one query that returns a Result in a read transaction: `ReadValue(store, [&](Tx& tx) {
// return tx.ListJobs(filter); })`.
template <class F>
auto ReadValue(Store& store, F&& query) -> std::invoke_result_t<F, Tx&> {
  using R = std::invoke_result_t<F, Tx&>;
  std::optional<R> out;
  base::Status s = store.Read([&](Tx& tx) {
    out.emplace(query(tx));
    return out->status();
  });
  if (!s.ok()) return s;
  return std::move(*out);
}

}  // namespace meridian::store
