#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/postgres/postgres_store.h"
#include "store/sqlite/sqlite_store.h"

namespace meridian::store {

struct CopyOptions {
  int32_t batch_rows = 1000;  // rows a progress line stands for (and at most per INSERT)
  // Called after every batch and at the end of every table: "jobs 3000/12000".
  std::function<void(const std::string& table, int64_t copied, int64_t total)> progress;
};

struct CopiedTable {
  std::string name;
  int64_t rows = 0;
  int64_t next_id = 0;  // for a table whose key the store assigns: the next one it will give
};

// Copies every row of every table of the SQLite store `from` (but its schema_migrations, which
// the target has from its own migrations) into the PostgreSQL store `to`, keys as they are, and
// moves PostgreSQL's identity sequences past SQLite's (sqlite_sequence), so that the ids of jobs,
// events, audit entries and revisions that agents and clients hold stay valid and new ones come
// after. Both stores must be at the same schema version; `to` must hold no row in any table
// (kFailedPrecondition, naming the first table that does). One snapshot of `from` is read and
// one transaction of `to` written, committed only once every table's row count in `to` equals
// its count in `from`: a copy that fails leaves `to` empty. Nothing else may write to either
// meanwhile (the caller holds their locks).
base::Result<std::vector<CopiedTable>> CopySqliteToPostgres(SqliteStore& from, PostgresStore& to,
                                                            const CopyOptions& options);

}  // namespace meridian::store
