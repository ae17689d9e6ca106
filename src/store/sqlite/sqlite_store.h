#pragma once

#include <memory>
#include <string>

#include "store/sql/sql_store.h"

namespace meridian::store {

// The embedded default store: one SQLite file in WAL mode with synchronous=FULL, so that a
// commit is on disk before Write returns. Writes go through one writer thread that commits the
// functions queued meanwhile in one transaction (store/sql/sql_store.h): one fsync serves many
// concurrent writers. Reads use a pool of connections that see the last committed state and do
// not block the writer.
class SqliteStore final : public SqlStore {
 public:
  // Opens (creating when missing) the database at `path` and applies pending migrations.
  static base::Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  // Runs SQLite's quick_check on the database at `path` (which must exist; nothing is written): Ok
  // when the file is a whole database, otherwise an error quoting the first problems found.
  // quick_check reads every page but skips matching indexes to tables, so it stays linear in
  // the file's size: fit for every start.
  static base::Status CheckIntegrity(const std::string& path);
  // Copies the database at `from` (which must exist) into a new file `to` through SQLite's
  // online backup API, in one step: one snapshot of `from`, taken while its writers go on (WAL
  // readers do not block writers), of every transaction committed before it began. The copy is
  // written beside `to` and renamed over it once whole and on disk: `to` is never half written.
  static base::Status Backup(const std::string& from, const std::string& to);

 private:
  explicit SqliteStore(const std::string& path);
};

}  // namespace meridian::store
