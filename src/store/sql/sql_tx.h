#pragma once

#include <memory>

#include "store/sql/sql_connection.h"
#include "store/store.h"

namespace meridian::store {

// The Tx of every SQL backend: the queries of the Store interface, written once in the SQL that
// SQLite and PostgreSQL both speak (`?` placeholders, ON CONFLICT, RETURNING, "user" quoted),
// over `connection` inside the transaction its store has begun. Writes through a read-only one
// fail. `credentials_written`, when given, is set once a token or a User is written (even where
// the savepoint is then rolled back).
std::unique_ptr<Tx> MakeSqlTx(SqlConnection* connection, bool read_only,
                              bool* credentials_written = nullptr);

}  // namespace meridian::store
