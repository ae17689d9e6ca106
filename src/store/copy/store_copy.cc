#include "store/copy/store_copy.h"

#include <algorithm>
#include <map>

namespace meridian::store {

namespace {

using base::Result;
using base::Status;

// A column as SQLite declares it: its values are read (and sent) as that type, so that a REAL
// keeps all 17 digits (SQLite's own text form of a double keeps 15).
struct Column {
  std::string name;
  std::string type;  // INTEGER | REAL | TEXT
  bool key = false;
};

struct Table {
  std::string name;
  std::vector<Column> columns;
  int64_t rows = 0;
  int64_t last_id = 0;  // SQLite's AUTOINCREMENT high-water mark (sqlite_sequence), or 0
};

std::string Quoted(const std::string& identifier) { return "\"" + identifier + "\""; }

Status Fail(const std::string& what, const Status& s) {
  return Status(s.code(), what + ": " + s.message());
}

// The tables of the source's schema, their columns and row counts, in the read transaction.
// Not copied: the schema's own bookkeeping, and `leader` (who leads is elected afresh on the
// target; its one row, from the migration, is the same on both).
Result<std::vector<Table>> Describe(SqlConnection& c) {
  std::vector<Table> tables;
  auto q = c.Query(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND "
      "name NOT IN ('schema_migrations', 'leader') ORDER BY name");
  while (q->Next()) tables.push_back({q->Text(0), {}, 0, 0});
  if (!q->status().ok()) return Fail("listing the source's tables", q->status());
  std::map<std::string, int64_t> sequences;
  auto seq = c.Query("SELECT name, seq FROM sqlite_sequence");
  while (seq->Next()) sequences[seq->Text(0)] = seq->Int(1);
  if (!seq->status().ok()) return Fail("reading the source's sqlite_sequence", seq->status());
  for (Table& t : tables) {
    auto cols = c.Query("SELECT name, UPPER(type), pk FROM pragma_table_info(?) ORDER BY cid");
    cols->Bind(t.name);
    while (cols->Next()) t.columns.push_back({cols->Text(0), cols->Text(1), cols->Int(2) > 0});
    if (!cols->status().ok()) return Fail("reading the columns of " + t.name, cols->status());
    for (const Column& col : t.columns) {
      if (col.type != "INTEGER" && col.type != "REAL" && col.type != "TEXT") {
        return Status::Internal("table " + t.name + ", column " + col.name + ": type " + col.type +
                                " is not one the copy knows");
      }
    }
    auto count = c.Query("SELECT COUNT(*) FROM " + Quoted(t.name));
    if (count->Next()) t.rows = count->Int(0);
    if (!count->status().ok()) return Fail("counting " + t.name, count->status());
    if (auto it = sequences.find(t.name); it != sequences.end()) t.last_id = it->second;
  }
  return tables;
}

// Refuses a target that holds any row: a copy into it would mix two estates' ids.
Status CheckEmpty(SqlConnection& c, const std::vector<Table>& tables) {
  for (const Table& t : tables) {
    auto q = c.Query("SELECT COUNT(*) FROM " + Quoted(t.name));
    int64_t rows = 0;
    if (q->Next()) rows = q->Int(0);
    if (!q->status().ok()) return Fail("counting " + t.name + " in the target", q->status());
    if (rows > 0) {
      return Status(base::StatusCode::kFailedPrecondition,
                    "the target database is not empty: table " + t.name + " holds " +
                        std::to_string(rows) +
                        " rows. store migrate copies into an empty database only (create a new "
                        "one, or drop this one's tables)");
    }
  }
  return Status::Ok();
}

// One multi-row INSERT of `rows` rows of `t`.
std::string InsertSql(const Table& t, size_t rows) {
  std::string columns, row = "(";
  for (size_t i = 0; i < t.columns.size(); ++i) {
    columns += (i ? ", " : "") + Quoted(t.columns[i].name);
    row += i ? ", ?" : "?";
  }
  row += ")";
  std::string sql = "INSERT INTO " + Quoted(t.name) + " (" + columns + ") VALUES ";
  for (size_t r = 0; r < rows; ++r) sql += (r ? ", " : "") + row;
  return sql;
}

// One row's values, typed as their columns are declared.
struct Value {
  int64_t i = 0;
  double d = 0;
  std::string s;
};

Status CopyTable(SqlConnection& from, SqlConnection& to, const Table& t,
                 const CopyOptions& options) {
  std::string columns;
  for (size_t i = 0; i < t.columns.size(); ++i) {
    columns += (i ? ", " : "") + Quoted(t.columns[i].name);
  }
  // PostgreSQL takes at most 65535 parameters a statement.
  const size_t per_insert =
      std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(options.batch_rows, 1)),
                                           60000 / std::max<size_t>(t.columns.size(), 1)));
  std::vector<std::vector<Value>> batch;
  int64_t copied = 0;
  auto flush = [&]() -> Status {
    if (batch.empty()) return Status::Ok();
    auto insert = to.Query(InsertSql(t, batch.size()));
    for (const auto& row : batch) {
      for (size_t i = 0; i < t.columns.size(); ++i) {
        const std::string& type = t.columns[i].type;
        if (type == "INTEGER") {
          insert->Bind(row[i].i);
        } else if (type == "REAL") {
          insert->Bind(row[i].d);
        } else {
          insert->Bind(row[i].s);
        }
      }
    }
    if (Status s = insert->Run(); !s.ok()) return Fail("writing " + t.name, s);
    copied += static_cast<int64_t>(batch.size());
    batch.clear();
    if (options.progress) options.progress(t.name, copied, t.rows);
    return Status::Ok();
  };
  auto rows = from.Query("SELECT " + columns + " FROM " + Quoted(t.name));
  while (rows->Next()) {
    std::vector<Value> row(t.columns.size());
    for (size_t i = 0; i < t.columns.size(); ++i) {
      const std::string& type = t.columns[i].type;
      if (type == "INTEGER") {
        row[i].i = rows->Int(static_cast<int>(i));
      } else if (type == "REAL") {
        row[i].d = rows->Real(static_cast<int>(i));
      } else {
        row[i].s = rows->Text(static_cast<int>(i));
      }
    }
    batch.push_back(std::move(row));
    if (batch.size() >= per_insert) {
      if (Status s = flush(); !s.ok()) return s;
    }
  }
  if (!rows->status().ok()) return Fail("reading " + t.name, rows->status());
  if (Status s = flush(); !s.ok()) return s;
  if (copied == 0 && options.progress) options.progress(t.name, 0, t.rows);
  return Status::Ok();
}

// Moves the identity sequence of `t`'s integer key (when it has one) past every id SQLite gave:
// the next id is one past the larger of its AUTOINCREMENT high-water mark and its largest key.
Result<int64_t> AdvanceSequence(SqlConnection& to, const Table& t) {
  const Column* key = nullptr;
  int keys = 0;
  for (const Column& c : t.columns) {
    if (c.key) {
      key = &c;
      ++keys;
    }
  }
  if (keys != 1 || key->type != "INTEGER") return int64_t{0};
  auto identity = to.Query("SELECT COALESCE(pg_get_serial_sequence(?, ?), '')");
  identity->Bind(t.name).Bind(key->name);
  std::string sequence;
  if (identity->Next()) sequence = identity->Text(0);
  if (!identity->status().ok())
    return Fail("finding the sequence of " + t.name, identity->status());
  if (sequence.empty()) return int64_t{0};
  auto max = to.Query("SELECT COALESCE(MAX(" + Quoted(key->name) + "), 0) FROM " + Quoted(t.name));
  int64_t largest = 0;
  if (max->Next()) largest = max->Int(0);
  if (!max->status().ok()) return Fail("reading the largest key of " + t.name, max->status());
  const int64_t next = std::max(largest, t.last_id) + 1;
  auto set = to.Query("SELECT setval(CAST(? AS regclass), ?, false)");
  set->Bind(sequence).Bind(next);
  if (Status s = set->Run(); !s.ok()) return Fail("moving the sequence of " + t.name, s);
  return next;
}

}  // namespace

Result<std::vector<CopiedTable>> CopySqliteToPostgres(SqliteStore& from, PostgresStore& to,
                                                      const CopyOptions& options) {
  if (from.SchemaVersion() != to.SchemaVersion()) {
    return Status(base::StatusCode::kFailedPrecondition,
                  "the source's schema is version " + std::to_string(from.SchemaVersion()) +
                      " and the target's " + std::to_string(to.SchemaVersion()) +
                      ": both must be this meridian's");
  }
  std::vector<CopiedTable> copied;
  Status done = from.WithConnection([&](SqlConnection& source) -> Status {
    // One snapshot of the source: WAL readers see the last commit before BEGIN's first read.
    if (Status s = source.Exec("BEGIN"); !s.ok()) return s;
    auto tables = Describe(source);
    if (!tables.ok()) {
      (void)source.Exec("ROLLBACK");
      return tables.status();
    }
    Status s = to.WithConnection([&](SqlConnection& target) -> Status {
      if (Status b = target.Exec("BEGIN"); !b.ok()) return b;
      Status t = CheckEmpty(target, *tables);
      for (const Table& table : *tables) {
        if (!t.ok()) break;
        t = CopyTable(source, target, table, options);
        if (!t.ok()) break;
        auto next = AdvanceSequence(target, table);
        if (!next.ok()) {
          t = next.status();
          break;
        }
        copied.push_back({table.name, table.rows, *next});
      }
      // The counts, read back in the transaction: it commits only when every table matches.
      for (size_t i = 0; t.ok() && i < copied.size(); ++i) {
        auto q = target.Query("SELECT COUNT(*) FROM " + Quoted(copied[i].name));
        int64_t rows = -1;
        if (q->Next()) rows = q->Int(0);
        t = q->status();
        if (t.ok() && rows != copied[i].rows) {
          t = Status::Internal("table " + copied[i].name + ": " + std::to_string(rows) +
                               " rows in the target after the copy, " +
                               std::to_string(copied[i].rows) + " in the source");
        }
      }
      if (!t.ok()) {
        (void)target.Exec("ROLLBACK");
        return t;
      }
      return target.Exec("COMMIT");
    });
    (void)source.Exec("ROLLBACK");
    return s;
  });
  if (!done.ok()) return done;
  return copied;
}

}  // namespace meridian::store
