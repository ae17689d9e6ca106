#include "store/sql/sql_store.h"

#include <future>

#include "store/sql/sql_tx.h"

namespace meridian::store {

using base::Result;
using base::Status;

namespace {

// Runs `fn`, turning an exception from a third-party library into a Status so that one bad
// request cannot take the writer thread down.
Status Guarded(const std::function<Status(Tx&)>& fn, Tx& tx) {
  try {
    return fn(tx);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("store transaction failed: ") + e.what());
  }
}

// Begins a transaction on `c`. A connection found broken here (its server restarted while it
// was idle) is reconnected and tried once more: nothing has been done on it yet.
Status Begin(SqlConnection& c, const std::string& begin) {
  Status s = c.Usable();
  if (s.ok()) s = c.Exec(begin);
  if (s.code() == base::StatusCode::kUnavailable && c.Usable().ok()) s = c.Exec(begin);
  return s;
}

}  // namespace

struct SqlStore::Pending {
  const std::function<Status(Tx&)>* fn;
  std::promise<Status> done;
};

SqlStore::~SqlStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (writer_thread_.joinable()) writer_thread_.join();
}

Status SqlStore::Open(const std::vector<const char*>& migrations, const std::string& where,
                      const std::string& lock) {
  auto writer = connect_(true);
  if (!writer.ok()) return writer.status();
  writer_ = std::move(writer.value());
  if (Status s = Migrate(migrations, where, lock); !s.ok()) return s;
  writer_thread_ = std::thread([this] { WriterLoop(); });
  return Status::Ok();
}

Status SqlStore::Migrate(const std::vector<const char*>& migrations, const std::string& where,
                         const std::string& lock) {
  SqlConnection& c = *writer_;
  if (Status s = c.Exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER "
                        "PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)");
      !s.ok()) {
    return s;
  }
  const int64_t latest = static_cast<int64_t>(migrations.size());
  for (;;) {
    if (Status s = c.Exec(dialect_.begin_write); !s.ok()) return s;
    Status s = lock.empty() ? Status::Ok() : c.Exec(lock);
    // Read under the lock: another server may have migrated meanwhile.
    int64_t current = 0;
    if (s.ok()) {
      auto q = c.Query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
      if (q->Next()) current = q->Int(0);
      s = q->status();
    }
    if (s.ok() && current > latest) {
      (void)c.Exec("ROLLBACK");
      return Status(base::StatusCode::kFailedPrecondition,
                    where + ": schema version " + std::to_string(current) +
                        " is newer than this meridian knows (" + std::to_string(latest) + ")");
    }
    if (s.ok() && current == latest) {
      if (Status end = c.Exec("COMMIT"); !end.ok()) return end;
      break;
    }
    if (s.ok()) s = c.Exec(migrations[static_cast<size_t>(current)]);
    if (s.ok()) {
      s = c.Query("INSERT INTO schema_migrations (version) VALUES (?)")->Bind(current + 1).Run();
    }
    if (!s.ok()) {
      (void)c.Exec("ROLLBACK");
      return Status::Io("migration " + std::to_string(current + 1) + " of " + where + ": " +
                        s.message());
    }
    if (Status end = c.Exec("COMMIT"); !end.ok()) return end;
  }
  schema_version_ = static_cast<int32_t>(latest);
  return Status::Ok();
}

Status SqlStore::Write(const std::function<Status(Tx&)>& fn) {
  Pending p{&fn, {}};
  std::future<Status> done = p.done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Internal("store is closing");
    queue_.push_back(&p);
  }
  cv_.notify_one();
  return done.get();
}

void SqlStore::WriterLoop() {
  SqlConnection& c = *writer_;
  bool credentials_written = false;  // by this batch
  std::unique_ptr<Tx> tx = MakeSqlTx(&c, false, &credentials_written);
  constexpr size_t kMaxBatch = 512;
  for (;;) {
    std::vector<Pending*> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to write
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    std::vector<Status> results(batch.size());
    credentials_written = false;
    Status begin = Begin(c, dialect_.begin_write);
    if (begin.ok()) {
      begin = Fenced(c);
      if (!begin.ok()) (void)c.Exec("ROLLBACK");
    }
    size_t kept = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!begin.ok()) {
        results[i] = begin;
        continue;
      }
      Status s = c.Exec("SAVEPOINT w");
      if (s.ok()) s = Guarded(*batch[i]->fn, *tx);
      if (s.ok()) {
        s = c.Exec("RELEASE w");
        kept += s.ok();
      } else {
        (void)c.Exec("ROLLBACK TO w");
        (void)c.Exec("RELEASE w");
      }
      results[i] = s;
    }
    if (begin.ok()) {
      Status commit = c.Exec("COMMIT");
      if (!commit.ok()) {
        (void)c.Exec("ROLLBACK");
        for (Status& r : results) {
          if (r.ok()) r = commit;
        }
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        ++commits_;
        writes_ += static_cast<int64_t>(kept);
      }
      // After the commit, before any writer hears of it: a reader that saw the old value may
      // have read the state before this commit.
      if (credentials_written) credentials_generation_.fetch_add(1);
    }
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->done.set_value(results[i]);
  }
}

Status SqlStore::Fenced(SqlConnection& c) {
  if (fence_.empty()) return Status::Ok();
  const int64_t epoch = epoch_.load();
  if (epoch == 0) {
    return Status(base::StatusCode::kUnavailable,
                  "this server is not the leader: writes go to the leader");
  }
  if (epoch < 0) {
    return Status(base::StatusCode::kUnavailable,
                  "deposed: another server leads now, and this one writes no more");
  }
  // The leader row locked at our epoch (FOR SHARE): a new leader's epoch bump waits for this
  // transaction, and once it has moved no row comes back.
  auto q = c.Query(fence_);
  q->Bind(epoch);
  const bool held = q->Next();
  if (!q->status().ok()) return q->status();
  if (held) return Status::Ok();
  const std::string why = "deposed: this server led at epoch " + std::to_string(epoch) +
                          ", and another server has taken over since; the database refused its "
                          "write";
  Depose(why);
  return Status(base::StatusCode::kUnavailable, why);
}

void SqlStore::Depose(const std::string& why) {
  epoch_.store(-1);
  if (deposed_.exchange(true)) return;
  if (on_deposed_) on_deposed_(why);
}

Status SqlStore::Read(const std::function<Status(Tx&)>& fn) {
  std::unique_ptr<SqlConnection> c;
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!idle_readers_.empty()) {
      c = std::move(idle_readers_.back());
      idle_readers_.pop_back();
    }
  }
  if (!c) {
    auto opened = connect_(false);
    if (!opened.ok()) return opened.status();
    c = std::move(opened.value());
  }
  Status s = Begin(*c, dialect_.begin_read);
  if (s.ok()) {
    s = Guarded(fn, *MakeSqlTx(c.get(), true));
    Status end = c->Exec("COMMIT");
    if (s.ok()) s = end;
  }
  std::lock_guard<std::mutex> lock(readers_mu_);
  idle_readers_.push_back(std::move(c));
  return s;
}

Status SqlStore::WithConnection(const std::function<Status(SqlConnection&)>& fn) {
  auto c = connect_(false);
  if (!c.ok()) return c.status();
  try {
    return fn(**c);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("store connection: ") + e.what());
  }
}

int64_t SqlStore::commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commits_;
}

int64_t SqlStore::writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_;
}

}  // namespace meridian::store
