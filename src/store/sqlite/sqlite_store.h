#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"

struct sqlite3;

namespace meridian::store {

class SqliteConnection;

// The embedded default store: one SQLite file in WAL mode with synchronous=FULL, so that a
// commit is on disk before Write returns. Writes go through one writer thread that commits the
// functions queued meanwhile in one transaction (each in its own savepoint, so one failing
// undoes only itself): one fsync serves many concurrent writers. Reads use a pool of
// connections that see the last committed state and do not block the writer.
class SqliteStore final : public Store {
 public:
  // Opens (creating when missing) the database at `path` and applies pending migrations.
  static base::Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  // Runs SQLite's quick_check on the database at `path` (which must exist; nothing is written): Ok
  // when the file is a whole database, otherwise an error quoting the first problems found.
  // quick_check reads every page but skips matching indexes to tables, so it stays linear in
  // the file's size: fit for every start.
  static base::Status CheckIntegrity(const std::string& path);
  ~SqliteStore() override;

  base::Status Write(const std::function<base::Status(Tx&)>& fn) override;
  base::Status Read(const std::function<base::Status(Tx&)>& fn) override;
  int32_t SchemaVersion() const override { return schema_version_; }

  // Writes committed and group commits, since the store opened (for the metrics).
  int64_t commits() const;
  int64_t writes() const;

 private:
  struct Pending;
  SqliteStore() = default;
  base::Status Migrate();
  void WriterLoop();

  std::string path_;
  std::unique_ptr<SqliteConnection> writer_;
  int32_t schema_version_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending*> queue_;
  bool stopping_ = false;
  int64_t commits_ = 0;
  int64_t writes_ = 0;
  std::thread writer_thread_;

  std::mutex readers_mu_;
  std::vector<std::unique_ptr<SqliteConnection>> idle_readers_;
};

}  // namespace meridian::store
