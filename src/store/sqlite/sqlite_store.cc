#include "store/sqlite/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "store/sql/sql_tx.h"

namespace meridian::store {

namespace {

using base::Result;
using base::Status;

// Numbered migrations: entry k brings the schema from version k to k + 1. Never edit one that
// has shipped; add the next.
const char* const kSqliteMigrations[] = {
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
    // 5: job arrays: an element's array (its first element's id) and index.
    R"sql(
ALTER TABLE jobs ADD COLUMN array_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN array_index INTEGER NOT NULL DEFAULT -1;
CREATE INDEX jobs_by_array ON jobs (array_id, array_index) WHERE array_id > 0;
)sql",
    // 6: which server leads, and its fencing epoch (docs/adr/0028). SQLite has one server, which
    // always leads; the table keeps both stores' schema versions the same.
    R"sql(
CREATE TABLE leader (
  id INTEGER PRIMARY KEY CHECK (id = 1), epoch INTEGER NOT NULL, url TEXT NOT NULL,
  elected_at REAL NOT NULL);
INSERT INTO leader (id, epoch, url, elected_at) VALUES (1, 0, '', 0);
)sql",
    // 7: submissions by the client's idempotency key (per user), kept a day.
    R"sql(
CREATE TABLE submission_keys (
  owner TEXT NOT NULL, request_key TEXT NOT NULL, job_id INTEGER NOT NULL, at REAL NOT NULL,
  PRIMARY KEY (owner, request_key)) WITHOUT ROWID;
CREATE INDEX submission_keys_by_at ON submission_keys (at);
)sql",
    // 8: accounting: one row per task of each ended run (api/usage.h).
    R"sql(
CREATE TABLE usage (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, job INTEGER NOT NULL, generation INTEGER NOT NULL,
  task INTEGER NOT NULL, project TEXT NOT NULL, user TEXT NOT NULL, cluster TEXT NOT NULL,
  pool TEXT NOT NULL, node TEXT NOT NULL, gpu_model TEXT NOT NULL, gpus REAL NOT NULL,
  cpu_milli INTEGER NOT NULL, memory_mib INTEGER NOT NULL, price_per_gpu_hour REAL NOT NULL,
  started_at REAL NOT NULL, ended_at REAL NOT NULL, outcome TEXT NOT NULL);
CREATE INDEX usage_by_end ON usage (ended_at);
)sql",
    // 9: the servers' shared secret (PostgreSQL's migration 9); one SQLite server shares none.
    R"sql(
ALTER TABLE leader ADD COLUMN peer_secret TEXT NOT NULL DEFAULT '';
)sql",
    // 10: events of one kind in order (the job outcomes /metrics counts, `get events --kind`):
    // without it a page of them was a sort of every event of that kind.
    R"sql(
CREATE INDEX events_by_kind ON events (object_kind, seq);
)sql",
};

Status SqlError(sqlite3* db, const std::string& what) {
  return Status::Io(what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

}  // namespace

// One SQLite connection with its prepared statements, used by one thread at a time.
class SqliteConnection final : public SqlConnection {
 public:
  ~SqliteConnection() override {
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

  Status Exec(const std::string& sql) override {
    // One statement (BEGIN, COMMIT, a pragma) is prepared once and kept, as queries are: a
    // read's BEGIN and COMMIT parsed each time cost as much as its query. A script of several
    // (a migration) goes through sqlite3_exec.
    if (sql.find(';') == std::string::npos) {
      auto stmt = Prepare(sql);
      if (!stmt.ok()) return Status::Io(sql.substr(0, 40) + ": " + stmt.status().message());
      int rc = SQLITE_ROW;
      while (rc == SQLITE_ROW) rc = sqlite3_step(*stmt);
      const std::string message = rc == SQLITE_DONE ? "" : sqlite3_errmsg(db_);
      sqlite3_reset(*stmt);
      if (rc != SQLITE_DONE) return Status::Io(sql.substr(0, 40) + ": " + message);
      return Status::Ok();
    }
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
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
  std::unique_ptr<SqlQuery> Query(const std::string& sql) override;

 private:
  SqliteConnection() = default;
  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*> cache_;
};

namespace {

// Binds arguments by position and steps a statement.
class SqliteQuery final : public SqlQuery {
 public:
  SqliteQuery(SqliteConnection* c, const std::string& sql) : c_(c) {
    auto s = c->Prepare(sql);
    if (s.ok()) {
      stmt_ = *s;
    } else {
      status_ = s.status();
    }
  }
  ~SqliteQuery() override {
    if (stmt_) sqlite3_reset(stmt_);
  }
  using SqlQuery::Bind;
  SqlQuery& Bind(const std::string& v) override {
    if (stmt_) {
      sqlite3_bind_text(stmt_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    }
    return *this;
  }
  SqlQuery& Bind(int64_t v) override {
    if (stmt_) sqlite3_bind_int64(stmt_, ++n_, v);
    return *this;
  }
  SqlQuery& Bind(double v) override {
    if (stmt_) sqlite3_bind_double(stmt_, ++n_, v);
    return *this;
  }

  bool Next() override {
    if (!stmt_) return false;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) status_ = SqlError(c_->db(), "query");
    return false;
  }
  const Status& status() const override { return status_; }

  std::string Text(int i) const override {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t ? std::string(reinterpret_cast<const char*>(t),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, i)))
             : std::string();
  }
  int64_t Int(int i) const override { return sqlite3_column_int64(stmt_, i); }
  size_t Bytes(int i) const override { return static_cast<size_t>(sqlite3_column_bytes(stmt_, i)); }
  double Real(int i) const override { return sqlite3_column_double(stmt_, i); }

 private:
  SqliteConnection* c_;
  sqlite3_stmt* stmt_ = nullptr;
  int n_ = 0;
  Status status_;
};

}  // namespace

std::unique_ptr<SqlQuery> SqliteConnection::Query(const std::string& sql) {
  return std::make_unique<SqliteQuery>(this, sql);
}

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  auto store = std::unique_ptr<SqliteStore>(new SqliteStore(path));
  if (Status s = store->SqlStore::Open({std::begin(kSqliteMigrations), std::end(kSqliteMigrations)},
                                       path, "");
      !s.ok()) {
    return s;
  }
  return store;
}

SqliteStore::SqliteStore(const std::string& path)
    : SqlStore({"BEGIN IMMEDIATE", "BEGIN"},
               [path](bool) -> Result<std::unique_ptr<SqlConnection>> {
                 auto c = SqliteConnection::Open(path);
                 if (!c.ok()) return c.status();
                 return std::unique_ptr<SqlConnection>(std::move(c.value()));
               }) {}

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

Status SqliteStore::Backup(const std::string& from, const std::string& to) {
  const std::string partial = to + ".partial";
  std::remove(partial.c_str());
  sqlite3* src = nullptr;
  sqlite3* dst = nullptr;
  // Read-write, as CheckIntegrity: a read-only connection cannot read a WAL database whose -shm
  // file it may not create. The backup writes nothing to `from`.
  int rc =
      sqlite3_open_v2(from.c_str(), &src, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  Status s = rc == SQLITE_OK ? Status::Ok() : SqlError(src, "opening " + from);
  if (s.ok()) {
    sqlite3_busy_timeout(src, 10000);
    rc = sqlite3_open_v2(partial.c_str(), &dst,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) s = SqlError(dst, "creating " + partial);
  }
  if (s.ok()) {
    sqlite3_backup* b = sqlite3_backup_init(dst, "main", src, "main");
    if (!b) {
      s = SqlError(dst, "backing up " + from);
    } else {
      // -1: every page in one step, in one read transaction, so that the copy is one snapshot
      // (a writer's commit during the step comes after it; in steps, it would restart the copy).
      do {
        rc = sqlite3_backup_step(b, -1);
        if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) sqlite3_sleep(20);
      } while (rc == SQLITE_BUSY || rc == SQLITE_LOCKED || rc == SQLITE_OK);
      sqlite3_backup_finish(b);
      if (rc != SQLITE_DONE) s = SqlError(dst, "backing up " + from);
    }
  }
  sqlite3_close(src);
  if (dst && sqlite3_close(dst) != SQLITE_OK && s.ok()) s = Status::Io("closing " + partial);
  if (s.ok()) {
    // SQLite synced the pages at the backup's commit; the rename is made durable by its folder.
    if (std::rename(partial.c_str(), to.c_str()) != 0) {
      s = Status::Io("cannot rename " + partial + " to " + to);
    } else {
      const std::string folder = to.find('/') == std::string::npos
                                     ? std::string(".")
                                     : to.substr(0, std::max<size_t>(to.rfind('/'), 1));
      const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
    }
  }
  if (!s.ok()) std::remove(partial.c_str());
  return s;
}

}  // namespace meridian::store
