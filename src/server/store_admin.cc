#include "server/store_admin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "base/dir_lock.h"
#include "store/copy/store_copy.h"
#include "store/postgres/postgres_store.h"
#include "store/sqlite/sqlite_store.h"

namespace meridian::server {

using base::Status;

namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The database of a data dir that must hold one; `flag` names where the dir came from.
base::Result<std::string> ExistingDatabase(const std::string& dir, const std::string& flag) {
  if (dir.empty()) return Status::Invalid(flag + ": a data dir is required");
  const std::string db = dir + "/meridian.db";
  if (!Exists(db)) {
    const std::string named = flag + (flag.back() == ':' ? "" : " ") + dir;
    return Status::Invalid(named + ": no meridian.db there (is it a server's data dir?)");
  }
  return db;
}

}  // namespace

Status MigrateStore(const MigrateOptions& o) {
  auto print = [&](const std::string& line) {
    if (o.print) o.print(line);
  };
  if (o.from.rfind("sqlite:", 0) != 0) {
    return Status::Invalid("--from: expected sqlite:DIR (a server's data dir), not \"" + o.from +
                           "\"");
  }
  if (o.to.rfind("postgresql://", 0) != 0 && o.to.rfind("postgres://", 0) != 0) {
    return Status::Invalid("--to: expected a postgresql:// URL, as `server --store` takes");
  }
  const std::string dir = o.from.substr(7);
  auto db = ExistingDatabase(dir, "--from sqlite:");
  if (!db.ok()) return db.status();
  base::DirLock lock;
  if (Status s = lock.Acquire(dir, "--from sqlite:"); !s.ok()) return s;
  if (Status s = store::SqliteStore::CheckIntegrity(*db); !s.ok()) {
    return Status(s.code(), "--from: " + s.message());
  }
  // Opening brings an older source to this binary's schema, as a server's start would, and
  // refuses one newer than it knows.
  auto from = store::SqliteStore::Open(*db);
  if (!from.ok()) return Status(from.status().code(), "--from: " + from.status().message());
  auto to = store::PostgresStore::Open(o.to);
  if (!to.ok()) return Status(to.status().code(), "--to: " + to.status().message());
  print("migrating " + *db + " (schema version " + std::to_string((*from)->SchemaVersion()) +
        ") to PostgreSQL");
  store::CopyOptions copy;
  copy.batch_rows = o.batch_rows;
  copy.progress = [&](const std::string& table, int64_t copied, int64_t total) {
    print("  " + table + ": " + std::to_string(copied) + "/" + std::to_string(total));
  };
  auto copied = store::CopySqliteToPostgres(**from, **to, copy);
  if (!copied.ok()) return copied.status();
  int64_t rows = 0;
  std::string counts;
  for (const store::CopiedTable& t : *copied) {
    rows += t.rows;
    counts += (counts.empty() ? "" : ", ") + t.name + " " + std::to_string(t.rows);
    if (t.next_id > 0) counts += " (next id " + std::to_string(t.next_id) + ")";
  }
  print("verified: " + std::to_string(rows) + " rows in " + std::to_string(copied->size()) +
        " tables, the same counts in both: " + counts);
  print(
      "start the server with --store and the same --data-dir (it keeps the admin token and "
      "the jobs' logs)");
  return Status::Ok();
}

Status BackupSqlite(const std::string& data_dir, const std::string& to) {
  auto db = ExistingDatabase(data_dir, "--data");
  if (!db.ok()) return db.status();
  if (to.empty()) return Status::Invalid("--to: a file to write is required");
  if (Exists(to)) {
    return Status(base::StatusCode::kAlreadyExists,
                  "--to " + to +
                      " exists: a backup does not overwrite a file; remove it or "
                      "choose another name");
  }
  if (Status s = store::SqliteStore::Backup(*db, to); !s.ok()) {
    return Status(s.code(), "backup: " + s.message());
  }
  return Status::Ok();
}

Status RestoreSqlite(const std::string& from, const std::string& data_dir) {
  if (from.empty() || !Exists(from)) return Status::Invalid("--from " + from + ": no such file");
  if (data_dir.empty()) return Status::Invalid("--data: a data dir is required");
  if (Status s = store::SqliteStore::CheckIntegrity(from); !s.ok()) {
    return Status(s.code(), "--from: not a whole meridian backup: " + s.message());
  }
  if (!Exists(data_dir)) {
    std::error_code ec;
    std::filesystem::create_directories(data_dir, ec);
    if (ec) return Status::Io("--data " + data_dir + ": " + ec.message());
    ::chmod(data_dir.c_str(), 0700);
  }
  base::DirLock lock;
  if (Status s = lock.Acquire(data_dir, "--data"); !s.ok()) return s;
  const std::string db = data_dir + "/meridian.db";
  const std::string staged = db + ".restoring";
  std::remove(staged.c_str());
  if (Status s = store::SqliteStore::Backup(from, staged); !s.ok()) {
    return Status(s.code(), "restore: " + s.message());
  }
  // The old database's WAL belongs to it alone: left beside the restored file, SQLite would
  // replay its frames onto pages they were never written for.
  for (const char* suffix : {"-wal", "-shm"}) std::remove((db + suffix).c_str());
  if (std::rename(staged.c_str(), db.c_str()) != 0) {
    return Status::Io("restore: cannot rename " + staged + " to " + db);
  }
  return Status::Ok();
}

}  // namespace meridian::server
