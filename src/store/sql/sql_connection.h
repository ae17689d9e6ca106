#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "store/store.h"

namespace meridian::store {

// One statement of a SQL backend, its arguments bound by position in the order of the `?` in
// its text (a backend whose placeholders differ rewrites them), its rows read in turn.
class SqlQuery {
 public:
  virtual ~SqlQuery() = default;
  virtual SqlQuery& Bind(const std::string& v) = 0;
  virtual SqlQuery& Bind(int64_t v) = 0;
  virtual SqlQuery& Bind(double v) = 0;
  SqlQuery& Bind(const char* v) { return Bind(std::string(v)); }
  SqlQuery& Bind(int32_t v) { return Bind(static_cast<int64_t>(v)); }
  SqlQuery& Bind(bool v) { return Bind(static_cast<int64_t>(v ? 1 : 0)); }

  // True while there is a row; an error ends the rows and is left in status().
  virtual bool Next() = 0;
  virtual const base::Status& status() const = 0;
  base::Status Run() {
    Next();
    return status();
  }

  virtual std::string Text(int column) const = 0;
  virtual int64_t Int(int column) const = 0;
  virtual double Real(int column) const = 0;
  virtual size_t Bytes(int column) const = 0;
  Json JsonAt(int column) const { return Json::parse(Text(column), nullptr, false); }
};

// A connection of a SQL backend, used by one thread at a time.
class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  virtual std::unique_ptr<SqlQuery> Query(const std::string& sql) = 0;
  // Runs statements that return no rows (BEGIN, SAVEPOINT, DDL).
  virtual base::Status Exec(const std::string& sql) = 0;
  // Whether the connection can still be used; a backend whose server may go away reconnects
  // here, and says why it could not.
  virtual base::Status Usable() { return base::Status::Ok(); }
};

}  // namespace meridian::store
