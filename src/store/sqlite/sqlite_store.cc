#include "store/sqlite/sqlite_store.h"

#include <sqlite3.h>

#include <future>
#include <map>
#include <utility>

namespace meridian::store {

namespace {

using base::Result;
using base::Status;

// Numbered migrations: entry k brings the schema from version k to k + 1. Never edit one that
// has shipped; add the next.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE objects (
  kind TEXT NOT NULL, name TEXT NOT NULL, spec TEXT NOT NULL, version INTEGER NOT NULL,
  updated_at REAL NOT NULL, updated_by TEXT NOT NULL, PRIMARY KEY (kind, name)) WITHOUT ROWID;
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, project TEXT NOT NULL,
  user TEXT NOT NULL, spec TEXT NOT NULL, phase TEXT NOT NULL, reason TEXT NOT NULL,
  allocation TEXT NOT NULL, generation INTEGER NOT NULL, version INTEGER NOT NULL,
  submitted_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE INDEX jobs_by_project ON jobs (project, id);
CREATE INDEX jobs_by_phase ON jobs (phase, id);
CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, object_kind TEXT NOT NULL,
  object_name TEXT NOT NULL, project TEXT NOT NULL, type TEXT NOT NULL, reason TEXT NOT NULL,
  message TEXT NOT NULL);
CREATE INDEX events_by_object ON events (object_kind, object_name, seq);
CREATE TABLE tokens (
  id TEXT PRIMARY KEY, user TEXT NOT NULL, secret_hash TEXT NOT NULL, description TEXT NOT NULL,
  created_at REAL NOT NULL, expires_at REAL NOT NULL, revoked INTEGER NOT NULL);
CREATE INDEX tokens_by_user ON tokens (user);
CREATE TABLE audit (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, user TEXT NOT NULL,
  method TEXT NOT NULL, path TEXT NOT NULL, action TEXT NOT NULL, project TEXT NOT NULL,
  code INTEGER NOT NULL, result TEXT NOT NULL, message TEXT NOT NULL);
CREATE TABLE revisions (
  number INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, author TEXT NOT NULL,
  message TEXT NOT NULL, documents TEXT NOT NULL);
)sql",
    // 2: what agents report about a job's run (task states, exit codes, restarts).
    R"sql(
ALTER TABLE jobs ADD COLUMN status TEXT NOT NULL DEFAULT '{}';
)sql",
    // 3: the estate sampled over time, for the dashboard's charts.
    R"sql(
CREATE TABLE samples (at REAL PRIMARY KEY, sample TEXT NOT NULL) WITHOUT ROWID;
)sql",
    // 4: fair-share usage per tenancy node, kept across restarts.
    R"sql(
CREATE TABLE fair_share (
  scope TEXT PRIMARY KEY, gpu REAL NOT NULL, cpu REAL NOT NULL, mem REAL NOT NULL,
  at REAL NOT NULL) WITHOUT ROWID;
)sql",
};

Status SqlError(sqlite3* db, const std::string& what) {
  return Status::Io(what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

}  // namespace

// One SQLite connection with its prepared statements, used by one thread at a time.
class SqliteConnection {
 public:
  ~SqliteConnection() {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }

  static Result<std::unique_ptr<SqliteConnection>> Open(const std::string& path) {
    auto c = std::unique_ptr<SqliteConnection>(new SqliteConnection());
    int rc =
        sqlite3_open_v2(path.c_str(), &c->db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) return SqlError(c->db_, "opening " + path);
    sqlite3_busy_timeout(c->db_, 10000);
    for (const char* pragma :
         {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"}) {
      if (Status s = c->Exec(pragma); !s.ok()) return s;
    }
    return c;
  }

  Status Exec(const char* sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
      std::string message = error ? error : sqlite3_errmsg(db_);
      sqlite3_free(error);
      return Status::Io(std::string(sql).substr(0, 40) + ": " + message);
    }
    return Status::Ok();
  }

  // A cached prepared statement, reset and cleared for new bindings.
  Result<sqlite3_stmt*> Prepare(const std::string& sql) {
    auto it = cache_.find(sql);
    if (it != cache_.end()) {
      sqlite3_reset(it->second);
      sqlite3_clear_bindings(it->second);
      return it->second;
    }
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) !=
        SQLITE_OK) {
      return SqlError(db_, "preparing statement");
    }
    cache_.emplace(sql, stmt);
    return stmt;
  }

  sqlite3* db() const { return db_; }

 private:
  SqliteConnection() = default;
  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*> cache_;
};

namespace {

// Binds arguments by position and steps a statement.
class Query {
 public:
  Query(SqliteConnection* c, const std::string& sql) : c_(c) {
    auto s = c->Prepare(sql);
    if (s.ok()) {
      stmt_ = *s;
    } else {
      status_ = s.status();
    }
  }
  ~Query() {
    if (stmt_) sqlite3_reset(stmt_);
  }
  Query& Bind(const std::string& v) {
    if (stmt_)
      sqlite3_bind_text(stmt_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Query& Bind(const char* v) { return Bind(std::string(v)); }
  Query& Bind(int64_t v) {
    if (stmt_) sqlite3_bind_int64(stmt_, ++n_, v);
    return *this;
  }
  Query& Bind(int32_t v) { return Bind(static_cast<int64_t>(v)); }
  Query& Bind(double v) {
    if (stmt_) sqlite3_bind_double(stmt_, ++n_, v);
    return *this;
  }
  Query& Bind(bool v) { return Bind(static_cast<int64_t>(v ? 1 : 0)); }

  // True while there is a row; errors end the loop and are left in status().
  bool Next() {
    if (!stmt_) return false;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) status_ = SqlError(c_->db(), "query");
    return false;
  }
  Status Run() {
    Next();
    return status_;
  }
  const Status& status() const { return status_; }

  std::string Text(int i) const {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t ? std::string(reinterpret_cast<const char*>(t),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, i)))
             : std::string();
  }
  int64_t Int(int i) const { return sqlite3_column_int64(stmt_, i); }
  size_t Bytes(int i) const { return static_cast<size_t>(sqlite3_column_bytes(stmt_, i)); }
  double Real(int i) const { return sqlite3_column_double(stmt_, i); }
  Json JsonAt(int i) const { return Json::parse(Text(i), nullptr, false); }

 private:
  SqliteConnection* c_;
  sqlite3_stmt* stmt_ = nullptr;
  int n_ = 0;
  Status status_;
};

std::string Placeholders(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += i ? ",?" : "?";
  return s;
}

class SqliteTx final : public Tx {
 public:
  SqliteTx(SqliteConnection* c, bool read_only) : c_(c), read_only_(read_only) {}

  Result<Object> GetObject(const std::string& kind, const std::string& name) override {
    Query q(c_,
            "SELECT kind, name, spec, version, updated_at, updated_by FROM objects "
            "WHERE kind = ? AND name = ?");
    q.Bind(kind).Bind(name);
    if (q.Next()) return ObjectAt(q);
    if (!q.status().ok()) return q.status();
    return Status::NotFound(kind + " \"" + name + "\" not found");
  }

  Result<std::vector<Object>> ListObjects(const std::string& kind) override {
    Query q(c_, kind.empty() ? "SELECT kind, name, spec, version, updated_at, updated_by FROM "
                               "objects WHERE ? = '' ORDER BY kind, name"
                             : "SELECT kind, name, spec, version, updated_at, updated_by FROM "
                               "objects WHERE kind = ? ORDER BY name");
    q.Bind(kind);
    std::vector<Object> out;
    while (q.Next()) out.push_back(ObjectAt(q));
    if (!q.status().ok()) return q.status();
    return out;
  }

  Result<int64_t> PutObject(const Object& o, int64_t expected) override {
    if (read_only_) return ReadOnly();
    auto current = ObjectVersion(o.kind, o.name);
    if (!current.ok()) return current.status();
    if (Status s = Check(o.kind + " \"" + o.name + "\"", *current, expected); !s.ok()) return s;
    const int64_t version = *current + 1;
    Query q(c_,
            "INSERT INTO objects (kind, name, spec, version, updated_at, updated_by) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, name) DO UPDATE SET spec = "
            "excluded.spec, version = excluded.version, updated_at = excluded.updated_at, "
            "updated_by = excluded.updated_by");
    q.Bind(o.kind)
        .Bind(o.name)
        .Bind(o.spec.dump())
        .Bind(version)
        .Bind(o.updated_at)
        .Bind(o.updated_by);
    if (Status s = q.Run(); !s.ok()) return s;
    return version;
  }

  Status DeleteObject(const std::string& kind, const std::string& name, int64_t expected) override {
    if (read_only_) return ReadOnly();
    auto current = ObjectVersion(kind, name);
    if (!current.ok()) return current.status();
    if (*current == 0) return Status::NotFound(kind + " \"" + name + "\" not found");
    if (Status s = Check(kind + " \"" + name + "\"", *current, expected); !s.ok()) return s;
    Query q(c_, "DELETE FROM objects WHERE kind = ? AND name = ?");
    q.Bind(kind).Bind(name);
    return q.Run();
  }

  Result<int64_t> InsertJob(const JobRecord& j) override {
    if (read_only_) return ReadOnly();
    Query q(
        c_,
        "INSERT INTO jobs (name, project, user, spec, phase, reason, allocation, generation, "
        "version, submitted_at, updated_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)");
    q.Bind(j.name).Bind(j.project).Bind(j.user).Bind(j.spec.dump()).Bind(j.phase).Bind(j.reason);
    q.Bind(j.allocation.dump()).Bind(j.generation).Bind(j.submitted_at).Bind(j.updated_at);
    q.Bind(j.status.dump());
    if (Status s = q.Run(); !s.ok()) return s;
    return static_cast<int64_t>(sqlite3_last_insert_rowid(c_->db()));
  }

  Result<JobRecord> GetJob(int64_t id) override {
    Query q(c_, std::string(kJobColumns) + " WHERE id = ?");
    q.Bind(id);
    if (q.Next()) return JobAt(q);
    if (!q.status().ok()) return q.status();
    return Status::NotFound("job " + std::to_string(id) + " not found");
  }

  Result<std::vector<JobRecord>> ListJobs(const JobFilter& f) override {
    std::string sql = std::string(kJobColumns) + " WHERE id > ?";
    if (f.before_id > 0) sql += " AND id < ?";
    if (!f.projects.empty()) sql += " AND project IN (" + Placeholders(f.projects.size()) + ")";
    if (!f.phases.empty()) sql += " AND phase IN (" + Placeholders(f.phases.size()) + ")";
    if (!f.user.empty()) sql += " AND user = ?";
    sql += f.newest_first ? " ORDER BY id DESC LIMIT ?" : " ORDER BY id LIMIT ?";
    Query q(c_, sql);
    q.Bind(f.after_id);
    if (f.before_id > 0) q.Bind(f.before_id);
    for (const std::string& p : f.projects) q.Bind(p);
    for (const std::string& p : f.phases) q.Bind(p);
    if (!f.user.empty()) q.Bind(f.user);
    q.Bind(static_cast<int64_t>(f.limit));
    std::vector<JobRecord> out;
    size_t bytes = 0;
    while (q.Next()) {
      for (int column : {4, 7, 12}) bytes += q.Bytes(column);  // spec, allocation, status
      out.push_back(JobAt(q));
      if (f.max_bytes > 0 && bytes >= f.max_bytes) break;
    }
    if (f.ended_by_bytes) {
      *f.ended_by_bytes = f.max_bytes > 0 && bytes >= f.max_bytes &&
                          out.size() < static_cast<size_t>(f.limit);
    }
    if (!q.status().ok()) return q.status();
    return out;
  }

  Result<int64_t> UpdateJob(const JobRecord& j, int64_t expected) override {
    if (read_only_) return ReadOnly();
    auto current = JobVersion(j.id);
    if (!current.ok()) return current.status();
    if (*current == 0) return Status::NotFound("job " + std::to_string(j.id) + " not found");
    if (Status s = Check("job " + std::to_string(j.id), *current, expected); !s.ok()) return s;
    Query q(c_,
            "UPDATE jobs SET phase = ?, reason = ?, allocation = ?, generation = ?, version = ?, "
            "updated_at = ?, status = ? WHERE id = ?");
    q.Bind(j.phase).Bind(j.reason).Bind(j.allocation.dump()).Bind(j.generation);
    q.Bind(*current + 1).Bind(j.updated_at).Bind(j.status.dump()).Bind(j.id);
    if (Status s = q.Run(); !s.ok()) return s;
    return *current + 1;
  }

  Result<std::vector<std::pair<std::string, int64_t>>> CountJobsByPhase() override {
    Query q(c_, "SELECT phase, COUNT(*) FROM jobs GROUP BY phase ORDER BY phase");
    std::vector<std::pair<std::string, int64_t>> out;
    while (q.Next()) out.emplace_back(q.Text(0), q.Int(1));
    if (!q.status().ok()) return q.status();
    return out;
  }

  Result<int64_t> AppendEvent(const Event& e) override {
    if (read_only_) return ReadOnly();
    Query q(c_,
            "INSERT INTO events (at, object_kind, object_name, project, type, reason, message) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)");
    q.Bind(e.at).Bind(e.object_kind).Bind(e.object_name).Bind(e.project).Bind(e.type);
    q.Bind(e.reason).Bind(e.message);
    if (Status s = q.Run(); !s.ok()) return s;
    return static_cast<int64_t>(sqlite3_last_insert_rowid(c_->db()));
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
    Query q(c_, sql);
    q.Bind(f.after_seq);
    if (!f.object_kind.empty()) q.Bind(f.object_kind);
    if (!f.object_name.empty()) q.Bind(f.object_name);
    if (!f.all_projects) {
      for (const std::string& p : f.projects) q.Bind(p);
    }
    q.Bind(static_cast<int64_t>(f.limit));
    std::vector<Event> out;
    while (q.Next()) {
      out.push_back(
          {q.Int(0), q.Real(1), q.Text(2), q.Text(3), q.Text(4), q.Text(5), q.Text(6), q.Text(7)});
    }
    if (!q.status().ok()) return q.status();
    return out;
  }

  Result<int64_t> LatestEventSeq() override {
    Query q(c_, "SELECT COALESCE(MAX(seq), 0) FROM events");
    return VersionOf(q);
  }

  Status PutToken(const TokenRecord& t) override {
    if (read_only_) return ReadOnly();
    Query q(c_,
            "INSERT INTO tokens (id, user, secret_hash, description, created_at, expires_at, "
            "revoked) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET revoked = "
            "excluded.revoked, expires_at = excluded.expires_at, description = "
            "excluded.description");
    q.Bind(t.id).Bind(t.user).Bind(t.secret_hash).Bind(t.description).Bind(t.created_at);
    q.Bind(t.expires_at).Bind(t.revoked);
    return q.Run();
  }

  Result<TokenRecord> GetToken(const std::string& id) override {
    Query q(c_, std::string(kTokenColumns) + " WHERE id = ?");
    q.Bind(id);
    if (q.Next()) return TokenAt(q);
    if (!q.status().ok()) return q.status();
    return Status::NotFound("token " + id + " not found");
  }

  Result<std::vector<TokenRecord>> ListTokens(const std::string& user) override {
    Query q(c_, std::string(kTokenColumns) + " WHERE ? = '' OR user = ? ORDER BY created_at, id");
    q.Bind(user).Bind(user);
    std::vector<TokenRecord> out;
    while (q.Next()) out.push_back(TokenAt(q));
    if (!q.status().ok()) return q.status();
    return out;
  }

  Result<int64_t> AppendAudit(const AuditEntry& a) override {
    if (read_only_) return ReadOnly();
    Query q(c_,
            "INSERT INTO audit (at, user, method, path, action, project, code, result, message) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    q.Bind(a.at).Bind(a.user).Bind(a.method).Bind(a.path).Bind(a.action).Bind(a.project);
    q.Bind(a.code).Bind(a.result).Bind(a.message);
    if (Status s = q.Run(); !s.ok()) return s;
    return static_cast<int64_t>(sqlite3_last_insert_rowid(c_->db()));
  }

  Result<std::vector<AuditEntry>> ListAudit(const AuditFilter& f) override {
    std::string sql =
        "SELECT seq, at, user, method, path, action, project, code, result, message FROM audit "
        "WHERE seq > ?";
    if (!f.user.empty()) sql += " AND user = ?";
    if (!f.result.empty()) sql += " AND result = ?";
    sql += f.newest_first ? " ORDER BY seq DESC LIMIT ?" : " ORDER BY seq LIMIT ?";
    Query q(c_, sql);
    q.Bind(f.after_seq);
    if (!f.user.empty()) q.Bind(f.user);
    if (!f.result.empty()) q.Bind(f.result);
    q.Bind(static_cast<int64_t>(f.limit));
    std::vector<AuditEntry> out;
    while (q.Next()) {
      out.push_back({q.Int(0), q.Real(1), q.Text(2), q.Text(3), q.Text(4), q.Text(5), q.Text(6),
                     static_cast<int32_t>(q.Int(7)), q.Text(8), q.Text(9)});
    }
    if (!q.status().ok()) return q.status();
    return out;
  }

  Status PutSample(double at, const Json& sample) override {
    if (read_only_) return ReadOnly();
    Query q(c_, "INSERT OR REPLACE INTO samples (at, sample) VALUES (?, ?)");
    q.Bind(at).Bind(sample.dump());
    return q.Run();
  }

  Result<std::vector<std::pair<double, Json>>> ListSamples(double since) override {
    Query q(c_, "SELECT at, sample FROM samples WHERE at >= ? ORDER BY at");
    q.Bind(since);
    std::vector<std::pair<double, Json>> out;
    while (q.Next()) {
      out.emplace_back(q.Real(0), Json::parse(q.Text(1), nullptr, false));
    }
    if (!q.status().ok()) return q.status();
    return out;
  }

  Status PruneSamples(double before) override {
    if (read_only_) return ReadOnly();
    Query q(c_, "DELETE FROM samples WHERE at < ?");
    q.Bind(before);
    return q.Run();
  }

  Status PutFairShare(const std::vector<FairShareUsage>& usage) override {
    if (read_only_) return ReadOnly();
    if (Status s = Query(c_, "DELETE FROM fair_share").Run(); !s.ok()) return s;
    for (const FairShareUsage& u : usage) {
      Query q(c_, "INSERT INTO fair_share (scope, gpu, cpu, mem, at) VALUES (?, ?, ?, ?, ?)");
      q.Bind(u.scope).Bind(u.gpu).Bind(u.cpu).Bind(u.mem).Bind(u.at);
      if (Status s = q.Run(); !s.ok()) return s;
    }
    return Status::Ok();
  }

  Result<std::vector<FairShareUsage>> ListFairShare() override {
    Query q(c_, "SELECT scope, gpu, cpu, mem, at FROM fair_share ORDER BY scope");
    std::vector<FairShareUsage> out;
    while (q.Next()) out.push_back({q.Text(0), q.Real(1), q.Real(2), q.Real(3), q.Real(4)});
    if (!q.status().ok()) return q.status();
    return out;
  }

  Result<int64_t> AddRevision(const Revision& r) override {
    if (read_only_) return ReadOnly();
    Query q(c_,
            "INSERT INTO revisions (created_at, author, message, documents) VALUES (?, ?, ?, ?)");
    q.Bind(r.created_at).Bind(r.author).Bind(r.message).Bind(r.documents.dump());
    if (Status s = q.Run(); !s.ok()) return s;
    return static_cast<int64_t>(sqlite3_last_insert_rowid(c_->db()));
  }

  Result<Revision> GetRevision(int64_t number) override {
    Query q(c_,
            "SELECT number, created_at, author, message, documents FROM revisions WHERE number "
            "= ?");
    q.Bind(number);
    if (q.Next()) return Revision{q.Int(0), q.Real(1), q.Text(2), q.Text(3), q.JsonAt(4)};
    if (!q.status().ok()) return q.status();
    return Status::NotFound("revision " + std::to_string(number) + " not found");
  }

  Result<std::vector<Revision>> ListRevisions(int32_t limit) override {
    Query q(c_,
            "SELECT number, created_at, author, message FROM revisions ORDER BY number DESC "
            "LIMIT ?");
    q.Bind(static_cast<int64_t>(limit));
    std::vector<Revision> out;
    while (q.Next()) out.push_back({q.Int(0), q.Real(1), q.Text(2), q.Text(3), Json::array()});
    if (!q.status().ok()) return q.status();
    return out;
  }

 private:
  static constexpr const char* kJobColumns =
      "SELECT id, name, project, user, spec, phase, reason, allocation, generation, version, "
      "submitted_at, updated_at, status FROM jobs";
  static constexpr const char* kTokenColumns =
      "SELECT id, user, secret_hash, description, created_at, expires_at, revoked FROM tokens";

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
    Query q(c_, "SELECT version FROM objects WHERE kind = ? AND name = ?");
    q.Bind(kind).Bind(name);
    return VersionOf(q);
  }
  Result<int64_t> JobVersion(int64_t id) {
    Query q(c_, "SELECT version FROM jobs WHERE id = ?");
    q.Bind(id);
    return VersionOf(q);
  }
  static Result<int64_t> VersionOf(Query& q) {
    if (q.Next()) return q.Int(0);
    if (!q.status().ok()) return q.status();
    return int64_t{0};
  }

  static Object ObjectAt(const Query& q) {
    return {q.Text(0), q.Text(1), q.JsonAt(2), q.Int(3), q.Real(4), q.Text(5)};
  }
  static JobRecord JobAt(const Query& q) {
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
    return j;
  }
  static TokenRecord TokenAt(const Query& q) {
    return {q.Text(0), q.Text(1), q.Text(2), q.Text(3), q.Real(4), q.Real(5), q.Int(6) != 0};
  }

  SqliteConnection* c_;
  bool read_only_;
};

// Runs `fn`, turning an exception from a third-party library into a Status so that one bad
// request cannot take the writer thread down.
Status Guarded(const std::function<Status(Tx&)>& fn, Tx& tx) {
  try {
    return fn(tx);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("store transaction failed: ") + e.what());
  }
}

}  // namespace

struct SqliteStore::Pending {
  const std::function<Status(Tx&)>* fn;
  std::promise<Status> done;
};

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  auto store = std::unique_ptr<SqliteStore>(new SqliteStore());
  store->path_ = path;
  auto writer = SqliteConnection::Open(path);
  if (!writer.ok()) return writer.status();
  store->writer_ = std::move(writer.value());
  if (Status s = store->Migrate(); !s.ok()) return s;
  store->writer_thread_ = std::thread([s = store.get()] { s->WriterLoop(); });
  return store;
}

Status SqliteStore::CheckIntegrity(const std::string& path) {
  sqlite3* db = nullptr;
  // Read-write, not read-only: after a crash a read-only connection cannot replay the WAL without
  // its -shm file, and would take a sound database for a damaged one. quick_check writes nothing.
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::string problems;
  if (rc == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(5)", -1, &stmt, nullptr);
    int step = rc == SQLITE_OK ? sqlite3_step(stmt) : rc;
    for (; step == SQLITE_ROW; step = sqlite3_step(stmt)) {
      const char* row = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      const std::string text = row ? row : "";
      if (text != "ok") problems += (problems.empty() ? "" : "; ") + text;
    }
    // A file too damaged to check at all ("file is not a database") fails the step itself.
    if (step != SQLITE_DONE && problems.empty()) problems = sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
  }
  if (rc != SQLITE_OK && problems.empty()) problems = db ? sqlite3_errmsg(db) : "cannot open";
  sqlite3_close(db);
  if (problems.empty()) return Status::Ok();
  return Status(base::StatusCode::kFailedPrecondition, path + ": " + problems);
}

SqliteStore::~SqliteStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (writer_thread_.joinable()) writer_thread_.join();
}

Status SqliteStore::Migrate() {
  SqliteConnection& c = *writer_;
  if (Status s = c.Exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER "
                        "PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)");
      !s.ok()) {
    return s;
  }
  int64_t current = 0;
  {
    Query q(&c, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
    if (q.Next()) current = q.Int(0);
    if (!q.status().ok()) return q.status();
  }
  const int64_t latest = static_cast<int64_t>(std::size(kMigrations));
  if (current > latest) {
    return Status(base::StatusCode::kFailedPrecondition,
                  path_ + ": schema version " + std::to_string(current) +
                      " is newer than this meridian knows (" + std::to_string(latest) + ")");
  }
  for (int64_t v = current; v < latest; ++v) {
    if (Status s = c.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    Status s = c.Exec(kMigrations[v]);
    if (s.ok()) {
      Query q(&c, "INSERT INTO schema_migrations (version) VALUES (?)");
      q.Bind(v + 1);
      s = q.Run();
    }
    if (!s.ok()) {
      (void)c.Exec("ROLLBACK");
      return Status::Io("migration " + std::to_string(v + 1) + " of " + path_ + ": " + s.message());
    }
    if (Status s2 = c.Exec("COMMIT"); !s2.ok()) return s2;
  }
  schema_version_ = static_cast<int32_t>(latest);
  return Status::Ok();
}

Status SqliteStore::Write(const std::function<Status(Tx&)>& fn) {
  Pending p{&fn, {}};
  std::future<Status> done = p.done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Internal("store is closing");
    queue_.push_back(&p);
  }
  cv_.notify_one();
  return done.get();
}

void SqliteStore::WriterLoop() {
  SqliteConnection& c = *writer_;
  SqliteTx tx(&c, false);
  constexpr size_t kMaxBatch = 512;
  for (;;) {
    std::vector<Pending*> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to write
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    std::vector<Status> results(batch.size());
    Status begin = c.Exec("BEGIN IMMEDIATE");
    size_t kept = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!begin.ok()) {
        results[i] = begin;
        continue;
      }
      Status s = c.Exec("SAVEPOINT w");
      if (s.ok()) s = Guarded(*batch[i]->fn, tx);
      if (s.ok()) {
        s = c.Exec("RELEASE w");
        kept += s.ok();
      } else {
        (void)c.Exec("ROLLBACK TO w");
        (void)c.Exec("RELEASE w");
      }
      results[i] = s;
    }
    if (begin.ok()) {
      Status commit = c.Exec("COMMIT");
      if (!commit.ok()) {
        (void)c.Exec("ROLLBACK");
        for (Status& r : results) {
          if (r.ok()) r = commit;
        }
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        ++commits_;
        writes_ += static_cast<int64_t>(kept);
      }
    }
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->done.set_value(results[i]);
  }
}

Status SqliteStore::Read(const std::function<Status(Tx&)>& fn) {
  std::unique_ptr<SqliteConnection> c;
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!idle_readers_.empty()) {
      c = std::move(idle_readers_.back());
      idle_readers_.pop_back();
    }
  }
  if (!c) {
    auto opened = SqliteConnection::Open(path_);
    if (!opened.ok()) return opened.status();
    c = std::move(opened.value());
  }
  Status s = c->Exec("BEGIN");
  if (s.ok()) {
    SqliteTx tx(c.get(), true);
    s = Guarded(fn, tx);
    Status end = c->Exec("COMMIT");
    if (s.ok()) s = end;
  }
  std::lock_guard<std::mutex> lock(readers_mu_);
  idle_readers_.push_back(std::move(c));
  return s;
}

int64_t SqliteStore::commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commits_;
}

int64_t SqliteStore::writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_;
}

}  // namespace meridian::store
