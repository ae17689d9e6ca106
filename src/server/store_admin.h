#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace meridian::server {

// What `meridian store migrate` and `meridian admin backup|restore` do: whole-store operations
// on a server's state, run while the server is stopped (migrate, restore) or running (backup).

struct MigrateOptions {
  std::string from;  // sqlite:DIR (a server's --data-dir)
  std::string to;    // postgresql://... or postgres://..., as `server --store` takes
  int32_t batch_rows = 1000;
  std::function<void(const std::string& line)> print;  // progress and the final counts
};

// Copies the SQLite estate of a data dir into an empty PostgreSQL database, ids and sequences
// as they are (store/copy/store_copy.h), with a progress line a batch and the counts at the end.
// Refuses a data dir a server runs on, one with no database, a database whose schema is newer
// than this binary's, and a target that holds anything.
base::Status MigrateStore(const MigrateOptions& options);

// Writes a consistent copy of DIR/meridian.db to `to` through SQLite's online backup API; safe
// while a server runs on DIR and writes.
base::Status BackupSqlite(const std::string& data_dir, const std::string& to);

// Replaces DIR/meridian.db with the backup `from` (checked whole first), creating DIR (mode 0700)
// when missing. Refused while a server runs on DIR.
base::Status RestoreSqlite(const std::string& from, const std::string& data_dir);

}  // namespace meridian::server
