#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "store/election.h"
#include "store/sql/sql_store.h"

namespace meridian::store {

class PostgresConnection;

// The store on a PostgreSQL server (15 or later), through libpq, for estates that outgrow one
// machine. SQLite's shape and queries (store/sql/): one writer connection group-commits the
// writes queued meanwhile, each in its own savepoint, so that one commit (one WAL flush, with
// PostgreSQL's default synchronous_commit=on) serves many writers; reads use a pool of
// connections, each in a REPEATABLE READ, READ ONLY transaction: a consistent snapshot that never
// blocks the writer. A connection the server dropped (a restart) is reset before its next use;
// the write or read that found it broken fails with kUnavailable.
//
// Several servers may open one database; one of them leads (Election): it holds a session
// advisory lock on a connection of its own and has raised the epoch in the `leader` row. Its
// writes are fenced by that epoch; the others' writes are refused until they lead.
class PostgresStore final : public SqlStore, public Election {
 public:
  // Connects to `conninfo` (a libpq connection string, "host=/run/pg dbname=meridian", or a
  // postgresql:// URL) and applies pending migrations, under an advisory lock so that servers
  // starting together migrate once. The store does not lead, and refuses writes, until Campaign.
  static base::Result<std::unique_ptr<PostgresStore>> Open(const std::string& conninfo);
  ~PostgresStore() override;

  base::Result<bool> Campaign(const std::string& url) override;
  base::Status CheckLeading() override;
  base::Result<LeaderRecord> Leader() override;
  base::Result<std::string> PeerSecret() override;
  int64_t epoch() const override { return fenced_epoch(); }
  void OnDeposed(std::function<void(const std::string& why)> fn) override {
    SetOnDeposed(std::move(fn));
  }

 private:
  explicit PostgresStore(const std::string& conninfo);
  base::Status CheckLeadingLocked();
  base::Status LeaderConnection();

  std::string conninfo_;
  std::mutex leader_mu_;
  // The leader's session: it holds the leader lock for as long as this store leads.
  std::unique_ptr<PostgresConnection> leader_;
  std::string peer_secret_;  // read once (it never changes)
};

}  // namespace meridian::store
