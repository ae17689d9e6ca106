#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/sql/sql_connection.h"
#include "store/store.h"

namespace meridian::store {

// What SQL backends share: one writer connection commits the functions queued meanwhile in one
// transaction, each in its own savepoint (one failing undoes only itself), so that one durable
// commit serves many concurrent writers; reads take a connection of a pool, each in a
// transaction of its own that sees the last committed state and does not block the writer.
// A backend gives its connections and how its transactions begin.
class SqlStore : public Store {
 public:
  ~SqlStore() override;

  base::Status Write(const std::function<base::Status(Tx&)>& fn) override;
  base::Status Read(const std::function<base::Status(Tx&)>& fn) override;
  int32_t SchemaVersion() const override { return schema_version_; }
  uint64_t CredentialsGeneration() const override { return credentials_generation_.load(); }

  // Writes committed and group commits, since the store opened (for the metrics).
  int64_t commits() const;
  int64_t writes() const;

  // Runs `fn` on a connection of its own, outside the writer's group commits and without a
  // transaction (`fn` begins and ends its own). For tools that move whole tables (`meridian
  // store migrate`) while no server uses the store: nothing orders these writes with Write's.
  base::Status WithConnection(const std::function<base::Status(SqlConnection&)>& fn);

 protected:
  struct Dialect {
    std::string begin_write;  // "BEGIN IMMEDIATE": the writer's lock at once
    std::string begin_read;   // a snapshot that does not block the writer
  };
  // Opens a connection: the writer's (one, for the store's life) or a reader's.
  using Connect = std::function<base::Result<std::unique_ptr<SqlConnection>>(bool writer)>;
  SqlStore(Dialect dialect, Connect connect) : dialect_(std::move(dialect)), connect_(connect) {}

  // Opens the writer, applies the pending `migrations` on it (entry k brings the schema from
  // version k to k + 1; each in a transaction of its own, which runs `lock` first when not
  // empty) and starts the writer's thread. `where` names the database in errors.
  base::Status Open(const std::vector<const char*>& migrations, const std::string& where,
                    const std::string& lock);

  // Fences every write transaction (docs/adr/0028): each first runs `fence`, with this store's
  // epoch as its one argument, and goes on only when it returns a row; when it returns none, the
  // store is deposed and every write from then on is refused. Without an epoch (0, not leading
  // yet) writes are refused without asking the database. Set before the first write.
  void FenceWrites(std::string fence) { fence_ = std::move(fence); }
  void SetEpoch(int64_t epoch) { epoch_.store(epoch); }
  int64_t fenced_epoch() const { return epoch_.load(); }
  // Deposes the store (its epoch becomes -1), once, calling `on_deposed` with why.
  void Depose(const std::string& why);
  void SetOnDeposed(std::function<void(const std::string&)> fn) { on_deposed_ = std::move(fn); }

 private:
  struct Pending;
  base::Status Migrate(const std::vector<const char*>& migrations, const std::string& where,
                       const std::string& lock);
  void WriterLoop();
  base::Status Fenced(SqlConnection& c);

  Dialect dialect_;
  Connect connect_;
  std::unique_ptr<SqlConnection> writer_;
  int32_t schema_version_ = 0;
  std::string fence_;
  std::atomic<int64_t> epoch_{0};
  std::atomic<bool> deposed_{false};
  std::atomic<uint64_t> credentials_generation_{0};  // CredentialsGeneration
  std::function<void(const std::string&)> on_deposed_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending*> queue_;
  bool stopping_ = false;
  int64_t commits_ = 0;
  int64_t writes_ = 0;
  std::thread writer_thread_;

  std::mutex readers_mu_;
  std::vector<std::unique_ptr<SqlConnection>> idle_readers_;
};

}  // namespace meridian::store
