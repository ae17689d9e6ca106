#include "store/sql/sql_tx.h"

#include <algorithm>

namespace meridian::store {

namespace {

using base::Result;
using base::Status;

std::string Placeholders(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += i ? ",?" : "?";
  return s;
}

class SqlTx final : public Tx {
 public:
  SqlTx(SqlConnection* c, bool read_only, bool* credentials_written)
      : c_(c), read_only_(read_only), credentials_written_(credentials_written) {}

  Result<Object> GetObject(const std::string& kind, const std::string& name) override {
    auto q = c_->Query(
        "SELECT kind, name, spec, version, updated_at, updated_by FROM objects "
        "WHERE kind = ? AND name = ?");
    q->Bind(kind).Bind(name);
    if (q->Next()) return ObjectAt(*q);
    if (!q->status().ok()) return q->status();
    return Status::NotFound(kind + " \"" + name + "\" not found");
  }

  Result<std::vector<Object>> ListObjects(const std::string& kind) override {
    auto q =
        c_->Query(kind.empty() ? "SELECT kind, name, spec, version, updated_at, updated_by FROM "
                                 "objects WHERE CAST(? AS TEXT) = '' ORDER BY kind, name"
                               : "SELECT kind, name, spec, version, updated_at, updated_by FROM "
                                 "objects WHERE kind = ? ORDER BY name");
    q->Bind(kind);
    std::vector<Object> out;
    while (q->Next()) out.push_back(ObjectAt(*q));
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<int64_t> PutObject(const Object& o, int64_t expected) override {
    if (read_only_) return ReadOnly();
    auto current = ObjectVersion(o.kind, o.name);
    if (!current.ok()) return current.status();
    if (Status s = Check(o.kind + " \"" + o.name + "\"", *current, expected); !s.ok()) return s;
    if (o.kind == "User") CredentialsWritten();
    const int64_t version = *current + 1;
    auto q = c_->Query(
        "INSERT INTO objects (kind, name, spec, version, updated_at, updated_by) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, name) DO UPDATE SET spec = "
        "excluded.spec, version = excluded.version, updated_at = excluded.updated_at, "
        "updated_by = excluded.updated_by");
    q->Bind(o.kind)
        .Bind(o.name)
        .Bind(o.spec.dump())
        .Bind(version)
        .Bind(o.updated_at)
        .Bind(o.updated_by);
    if (Status s = q->Run(); !s.ok()) return s;
    return version;
  }

  Status DeleteObject(const std::string& kind, const std::string& name, int64_t expected) override {
    if (read_only_) return ReadOnly();
    auto current = ObjectVersion(kind, name);
    if (!current.ok()) return current.status();
    if (*current == 0) return Status::NotFound(kind + " \"" + name + "\" not found");
    if (Status s = Check(kind + " \"" + name + "\"", *current, expected); !s.ok()) return s;
    if (kind == "User") CredentialsWritten();
    auto q = c_->Query("DELETE FROM objects WHERE kind = ? AND name = ?");
    q->Bind(kind).Bind(name);
    return q->Run();
  }

  Result<int64_t> InsertJob(const JobRecord& j) override {
    if (read_only_) return ReadOnly();
    Result<int64_t> id = int64_t{0};
    {
      auto q = c_->Query(
          "INSERT INTO jobs (name, project, \"user\", spec, phase, reason, allocation, generation, "
          "version, submitted_at, updated_at, status, array_id, array_index) VALUES (?, ?, ?, ?, "
          "?, ?, ?, ?, 1, ?, ?, ?, ?, ?) RETURNING id");
      q->Bind(j.name).Bind(j.project).Bind(j.user).Bind(j.spec.dump()).Bind(j.phase);
      q->Bind(j.reason).Bind(j.allocation.dump()).Bind(j.generation).Bind(j.submitted_at);
      q->Bind(j.updated_at).Bind(j.status.dump()).Bind(std::max<int64_t>(j.array_id, 0));
      q->Bind(j.array_index);
      id = Inserted(*q);
    }
    if (!id.ok() || j.array_id != kNewArray) return id;
    // The first element of a new array: the array's id is its own.
    auto a = c_->Query("UPDATE jobs SET array_id = id WHERE id = ?");
    a->Bind(*id);
    if (Status s = a->Run(); !s.ok()) return s;
    return id;
  }

  Result<std::vector<std::pair<std::string, int64_t>>> CountArrayByPhase(
      int64_t array_id) override {
    auto q = c_->Query(
        "SELECT phase, COUNT(*) FROM jobs WHERE array_id = ? AND array_id > 0 GROUP BY phase "
        "ORDER BY phase");
    q->Bind(array_id);
    std::vector<std::pair<std::string, int64_t>> out;
    while (q->Next()) out.emplace_back(q->Text(0), q->Int(1));
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<JobRecord> GetJob(int64_t id) override {
    auto q = c_->Query(std::string(kJobColumns) + " WHERE id = ?");
    q->Bind(id);
    if (q->Next()) return JobAt(*q);
    if (!q->status().ok()) return q->status();
    return Status::NotFound("job " + std::to_string(id) + " not found");
  }

  Result<std::vector<JobRecord>> ListJobs(const JobFilter& f) override {
    std::string sql = std::string(kJobColumns) + " WHERE id > ?";
    if (f.before_id > 0) sql += " AND id < ?";
    if (!f.projects.empty()) sql += " AND project IN (" + Placeholders(f.projects.size()) + ")";
    // An array listed as one row is listed when any of its elements is in a phase asked for.
    const bool array_phases = f.arrays_as_one && !f.phases.empty();
    if (!f.phases.empty() && !array_phases) {
      sql += " AND phase IN (" + Placeholders(f.phases.size()) + ")";
    }
    if (array_phases) {
      sql += " AND ((array_id = 0 AND phase IN (" + Placeholders(f.phases.size()) +
             ")) OR (array_id = id AND EXISTS (SELECT 1 FROM jobs e WHERE e.array_id = jobs.id "
             "AND e.phase IN (" +
             Placeholders(f.phases.size()) + "))))";
    }
    if (!f.user.empty()) sql += " AND \"user\" = ?";
    if (f.array_id > 0) sql += " AND array_id = ?";
    if (f.array_id > 0 && f.array_index >= 0) sql += " AND array_index = ?";
    if (f.arrays_as_one) sql += " AND (array_id = 0 OR array_id = id)";
    sql += f.newest_first ? " ORDER BY id DESC LIMIT ?" : " ORDER BY id LIMIT ?";
    auto q = c_->Query(sql);
    q->Bind(f.after_id);
    if (f.before_id > 0) q->Bind(f.before_id);
    for (const std::string& p : f.projects) q->Bind(p);
    for (const std::string& p : f.phases) q->Bind(p);
    if (array_phases) {
      for (const std::string& p : f.phases) q->Bind(p);
    }
    if (!f.user.empty()) q->Bind(f.user);
    if (f.array_id > 0) q->Bind(f.array_id);
    if (f.array_id > 0 && f.array_index >= 0) q->Bind(f.array_index);
    q->Bind(static_cast<int64_t>(f.limit));
    std::vector<JobRecord> out;
    size_t bytes = 0;
    while (q->Next()) {
      for (int column : {4, 7, 12}) bytes += q->Bytes(column);  // spec, allocation, status
      out.push_back(JobAt(*q));
      if (f.max_bytes > 0 && bytes >= f.max_bytes) break;
    }
    if (f.ended_by_bytes) {
      *f.ended_by_bytes =
          f.max_bytes > 0 && bytes >= f.max_bytes && out.size() < static_cast<size_t>(f.limit);
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<int64_t> UpdateJob(const JobRecord& j, int64_t expected) override {
    if (read_only_) return ReadOnly();
    auto current = JobVersion(j.id);
    if (!current.ok()) return current.status();
    if (*current == 0) return Status::NotFound("job " + std::to_string(j.id) + " not found");
    if (Status s = Check("job " + std::to_string(j.id), *current, expected); !s.ok()) return s;
    auto q = c_->Query(
        "UPDATE jobs SET phase = ?, reason = ?, allocation = ?, generation = ?, version = ?, "
        "updated_at = ?, status = ? WHERE id = ?");
    q->Bind(j.phase).Bind(j.reason).Bind(j.allocation.dump()).Bind(j.generation);
    q->Bind(*current + 1).Bind(j.updated_at).Bind(j.status.dump()).Bind(j.id);
    if (Status s = q->Run(); !s.ok()) return s;
    return *current + 1;
  }

  Result<std::vector<std::pair<std::string, int64_t>>> CountJobsByPhase() override {
    auto q = c_->Query("SELECT phase, COUNT(*) FROM jobs GROUP BY phase ORDER BY phase");
    std::vector<std::pair<std::string, int64_t>> out;
    while (q->Next()) out.emplace_back(q->Text(0), q->Int(1));
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<int64_t> AppendEvent(const Event& e) override {
    if (read_only_) return ReadOnly();
    auto q = c_->Query(
        "INSERT INTO events (at, object_kind, object_name, project, type, reason, message) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq");
    q->Bind(e.at).Bind(e.object_kind).Bind(e.object_name).Bind(e.project).Bind(e.type);
    q->Bind(e.reason).Bind(e.message);
    return Inserted(*q);
  }

  Result<std::vector<Event>> ListEvents(const EventFilter& f) override {
    std::string sql =
        "SELECT seq, at, object_kind, object_name, project, type, reason, message FROM events "
        "WHERE seq > ?";
    if (!f.object_kind.empty()) sql += " AND object_kind = ?";
    if (!f.object_name.empty()) sql += " AND object_name = ?";
    if (!f.all_projects) sql += " AND project IN (" + Placeholders(f.projects.size()) + ")";
    sql += f.newest_first ? " ORDER BY seq DESC LIMIT ?" : " ORDER BY seq LIMIT ?";
    if (!f.all_projects && f.projects.empty()) return std::vector<Event>{};
    auto q = c_->Query(sql);
    q->Bind(f.after_seq);
    if (!f.object_kind.empty()) q->Bind(f.object_kind);
    if (!f.object_name.empty()) q->Bind(f.object_name);
    if (!f.all_projects) {
      for (const std::string& p : f.projects) q->Bind(p);
    }
    q->Bind(static_cast<int64_t>(f.limit));
    std::vector<Event> out;
    while (q->Next()) {
      out.push_back({q->Int(0), q->Real(1), q->Text(2), q->Text(3), q->Text(4), q->Text(5),
                     q->Text(6), q->Text(7)});
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<int64_t> LatestEventSeq() override {
    auto q = c_->Query("SELECT COALESCE(MAX(seq), 0) FROM events");
    return VersionOf(*q);
  }

  Status PutToken(const TokenRecord& t) override {
    if (read_only_) return ReadOnly();
    CredentialsWritten();
    auto q = c_->Query(
        "INSERT INTO tokens (id, \"user\", secret_hash, description, created_at, expires_at, "
        "revoked) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET revoked = "
        "excluded.revoked, expires_at = excluded.expires_at, description = "
        "excluded.description");
    q->Bind(t.id).Bind(t.user).Bind(t.secret_hash).Bind(t.description).Bind(t.created_at);
    q->Bind(t.expires_at).Bind(t.revoked);
    return q->Run();
  }

  Result<TokenRecord> GetToken(const std::string& id) override {
    auto q = c_->Query(std::string(kTokenColumns) + " WHERE id = ?");
    q->Bind(id);
    if (q->Next()) return TokenAt(*q);
    if (!q->status().ok()) return q->status();
    return Status::NotFound("token " + id + " not found");
  }

  Result<std::vector<TokenRecord>> ListTokens(const std::string& user) override {
    auto q = c_->Query(std::string(kTokenColumns) +
                       " WHERE CAST(? AS TEXT) = '' OR \"user\" = ? ORDER BY created_at, id");
    q->Bind(user).Bind(user);
    std::vector<TokenRecord> out;
    while (q->Next()) out.push_back(TokenAt(*q));
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<int64_t> AppendAudit(const AuditEntry& a) override {
    if (read_only_) return ReadOnly();
    auto q = c_->Query(
        "INSERT INTO audit (at, \"user\", method, path, action, project, code, result, message) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq");
    q->Bind(a.at).Bind(a.user).Bind(a.method).Bind(a.path).Bind(a.action).Bind(a.project);
    q->Bind(a.code).Bind(a.result).Bind(a.message);
    return Inserted(*q);
  }

  Result<std::vector<AuditEntry>> ListAudit(const AuditFilter& f) override {
    std::string sql =
        "SELECT seq, at, \"user\", method, path, action, project, code, result, message FROM audit "
        "WHERE seq > ?";
    if (!f.user.empty()) sql += " AND \"user\" = ?";
    if (!f.result.empty()) sql += " AND result = ?";
    sql += f.newest_first ? " ORDER BY seq DESC LIMIT ?" : " ORDER BY seq LIMIT ?";
    auto q = c_->Query(sql);
    q->Bind(f.after_seq);
    if (!f.user.empty()) q->Bind(f.user);
    if (!f.result.empty()) q->Bind(f.result);
    q->Bind(static_cast<int64_t>(f.limit));
    std::vector<AuditEntry> out;
    while (q->Next()) {
      out.push_back({q->Int(0), q->Real(1), q->Text(2), q->Text(3), q->Text(4), q->Text(5),
                     q->Text(6), static_cast<int32_t>(q->Int(7)), q->Text(8), q->Text(9)});
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<int64_t> AppendUsage(const UsageRecord& u) override {
    if (read_only_) return ReadOnly();
    auto q = c_->Query(
        "INSERT INTO usage (job, generation, task, project, \"user\", cluster, pool, node, "
        "gpu_model, gpus, cpu_milli, memory_mib, price_per_gpu_hour, started_at, ended_at, "
        "outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq");
    q->Bind(u.job).Bind(u.generation).Bind(u.task).Bind(u.project).Bind(u.user).Bind(u.cluster);
    q->Bind(u.pool).Bind(u.node).Bind(u.gpu_model).Bind(u.gpus).Bind(u.cpu_milli);
    q->Bind(u.memory_mib).Bind(u.price_per_gpu_hour).Bind(u.started_at).Bind(u.ended_at);
    q->Bind(u.outcome);
    return Inserted(*q);
  }

  Result<std::vector<UsageRecord>> ListUsage(const UsageFilter& f) override {
    std::string sql =
        "SELECT seq, job, generation, task, project, \"user\", cluster, pool, node, gpu_model, "
        "gpus, cpu_milli, memory_mib, price_per_gpu_hour, started_at, ended_at, outcome FROM usage "
        "WHERE seq > ? AND ended_at > ?";
    if (f.to > 0) sql += " AND started_at < ?";
    if (!f.projects.empty()) {
      sql += " AND project IN (?";
      for (size_t i = 1; i < f.projects.size(); ++i) sql += ", ?";
      sql += ")";
    }
    sql += " ORDER BY seq LIMIT ?";
    auto q = c_->Query(sql);
    q->Bind(f.after_seq).Bind(f.from);
    if (f.to > 0) q->Bind(f.to);
    for (const std::string& p : f.projects) q->Bind(p);
    q->Bind(static_cast<int64_t>(f.limit));
    std::vector<UsageRecord> out;
    while (q->Next()) {
      UsageRecord u;
      u.seq = q->Int(0);
      u.job = q->Int(1);
      u.generation = q->Int(2);
      u.task = static_cast<int32_t>(q->Int(3));
      u.project = q->Text(4);
      u.user = q->Text(5);
      u.cluster = q->Text(6);
      u.pool = q->Text(7);
      u.node = q->Text(8);
      u.gpu_model = q->Text(9);
      u.gpus = q->Real(10);
      u.cpu_milli = q->Int(11);
      u.memory_mib = q->Int(12);
      u.price_per_gpu_hour = q->Real(13);
      u.started_at = q->Real(14);
      u.ended_at = q->Real(15);
      u.outcome = q->Text(16);
      out.push_back(std::move(u));
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Status PutSample(double at, const Json& sample) override {
    if (read_only_) return ReadOnly();
    auto q = c_->Query(
        "INSERT INTO samples (at, sample) VALUES (?, ?) ON CONFLICT (at) DO UPDATE SET sample = "
        "excluded.sample");
    q->Bind(at).Bind(sample.dump());
    return q->Run();
  }

  Result<std::vector<std::pair<double, Json>>> ListSamples(double since) override {
    auto q = c_->Query("SELECT at, sample FROM samples WHERE at >= ? ORDER BY at");
    q->Bind(since);
    std::vector<std::pair<double, Json>> out;
    while (q->Next()) {
      out.emplace_back(q->Real(0), Json::parse(q->Text(1), nullptr, false));
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Status PruneSamples(double before) override {
    if (read_only_) return ReadOnly();
    auto q = c_->Query("DELETE FROM samples WHERE at < ?");
    q->Bind(before);
    return q->Run();
  }

  Status PutFairShare(const std::vector<FairShareUsage>& usage) override {
    if (read_only_) return ReadOnly();
    if (Status s = c_->Query("DELETE FROM fair_share")->Run(); !s.ok()) return s;
    for (const FairShareUsage& u : usage) {
      auto q =
          c_->Query("INSERT INTO fair_share (scope, gpu, cpu, mem, at) VALUES (?, ?, ?, ?, ?)");
      q->Bind(u.scope).Bind(u.gpu).Bind(u.cpu).Bind(u.mem).Bind(u.at);
      if (Status s = q->Run(); !s.ok()) return s;
    }
    return Status::Ok();
  }

  Result<std::vector<FairShareUsage>> ListFairShare() override {
    auto q = c_->Query("SELECT scope, gpu, cpu, mem, at FROM fair_share ORDER BY scope");
    std::vector<FairShareUsage> out;
    while (q->Next()) out.push_back({q->Text(0), q->Real(1), q->Real(2), q->Real(3), q->Real(4)});
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<int64_t> FindSubmission(const std::string& user, const std::string& key,
                                 double now) override {
    auto q = c_->Query(
        "SELECT job_id FROM submission_keys WHERE owner = ? AND request_key = ? AND at >= ?");
    q->Bind(user).Bind(key).Bind(now - kSubmissionKeySeconds);
    if (q->Next()) return q->Int(0);
    if (!q->status().ok()) return q->status();
    return Status::NotFound("no submission with key " + key);
  }

  Status PutSubmission(const std::string& user, const std::string& key, int64_t job,
                       double now) override {
    if (read_only_) return ReadOnly();
    auto old = c_->Query("DELETE FROM submission_keys WHERE at < ?");
    old->Bind(now - kSubmissionKeySeconds);
    if (Status s = old->Run(); !s.ok()) return s;
    auto q = c_->Query(
        "INSERT INTO submission_keys (owner, request_key, job_id, at) VALUES (?, ?, ?, ?)");
    q->Bind(user).Bind(key).Bind(job).Bind(now);
    return q->Run();
  }

  Result<int64_t> AddRevision(const Revision& r) override {
    if (read_only_) return ReadOnly();
    auto q = c_->Query(
        "INSERT INTO revisions (created_at, author, message, documents) VALUES (?, ?, ?, ?) "
        "RETURNING number");
    q->Bind(r.created_at).Bind(r.author).Bind(r.message).Bind(r.documents.dump());
    return Inserted(*q);
  }

  Result<Revision> GetRevision(int64_t number) override {
    auto q = c_->Query(
        "SELECT number, created_at, author, message, documents FROM revisions WHERE number "
        "= ?");
    q->Bind(number);
    if (q->Next()) return Revision{q->Int(0), q->Real(1), q->Text(2), q->Text(3), q->JsonAt(4)};
    if (!q->status().ok()) return q->status();
    return Status::NotFound("revision " + std::to_string(number) + " not found");
  }

  Result<std::vector<Revision>> ListRevisions(int32_t limit) override {
    auto q = c_->Query(
        "SELECT number, created_at, author, message FROM revisions ORDER BY number DESC "
        "LIMIT ?");
    q->Bind(static_cast<int64_t>(limit));
    std::vector<Revision> out;
    while (q->Next()) out.push_back({q->Int(0), q->Real(1), q->Text(2), q->Text(3), Json::array()});
    if (!q->status().ok()) return q->status();
    return out;
  }

 private:
  static constexpr const char* kJobColumns =
      "SELECT id, name, project, \"user\", spec, phase, reason, allocation, generation, version, "
      "submitted_at, updated_at, status, array_id, array_index FROM jobs";
  static constexpr const char* kTokenColumns =
      "SELECT id, \"user\", secret_hash, description, created_at, expires_at, revoked FROM tokens";

  static Status ReadOnly() { return Status::Internal("write in a read-only transaction"); }

  static Status Check(const std::string& what, int64_t current, int64_t expected) {
    if (expected == kAnyVersion || expected == current) return Status::Ok();
    if (expected == kMustNotExist) return Status::Exists(what + " already exists");
    if (current == 0) return Status::NotFound(what + " not found");
    return Status::Conflict(what + " was changed (version " + std::to_string(current) +
                            ", expected " + std::to_string(expected) + ")");
  }

  // The stored version of a row, 0 when there is none.
  Result<int64_t> ObjectVersion(const std::string& kind, const std::string& name) {
    auto q = c_->Query("SELECT version FROM objects WHERE kind = ? AND name = ?");
    q->Bind(kind).Bind(name);
    return VersionOf(*q);
  }
  Result<int64_t> JobVersion(int64_t id) {
    auto q = c_->Query("SELECT version FROM jobs WHERE id = ?");
    q->Bind(id);
    return VersionOf(*q);
  }
  // The key an INSERT ... RETURNING gave its row.
  static Result<int64_t> Inserted(SqlQuery& q) {
    if (q.Next()) return q.Int(0);
    if (!q.status().ok()) return q.status();
    return Status::Internal("the insert returned no key");
  }
  static Result<int64_t> VersionOf(SqlQuery& q) {
    if (q.Next()) return q.Int(0);
    if (!q.status().ok()) return q.status();
    return int64_t{0};
  }

  static Object ObjectAt(const SqlQuery& q) {
    return {q.Text(0), q.Text(1), q.JsonAt(2), q.Int(3), q.Real(4), q.Text(5)};
  }
  static JobRecord JobAt(const SqlQuery& q) {
    JobRecord j;
    j.id = q.Int(0);
    j.name = q.Text(1);
    j.project = q.Text(2);
    j.user = q.Text(3);
    j.spec = q.JsonAt(4);
    j.phase = q.Text(5);
    j.reason = q.Text(6);
    j.allocation = q.JsonAt(7);
    j.generation = q.Int(8);
    j.version = q.Int(9);
    j.submitted_at = q.Real(10);
    j.updated_at = q.Real(11);
    j.status = q.JsonAt(12);
    j.array_id = q.Int(13);
    j.array_index = q.Int(14);
    return j;
  }
  static TokenRecord TokenAt(const SqlQuery& q) {
    return {q.Text(0), q.Text(1), q.Text(2), q.Text(3), q.Real(4), q.Real(5), q.Int(6) != 0};
  }

  void CredentialsWritten() {
    if (credentials_written_) *credentials_written_ = true;
  }

  SqlConnection* c_;
  bool read_only_;
  bool* credentials_written_;
};

}  // namespace

std::unique_ptr<Tx> MakeSqlTx(SqlConnection* connection, bool read_only,
                              bool* credentials_written) {
  return std::make_unique<SqlTx>(connection, read_only, credentials_written);
}

}  // namespace meridian::store
