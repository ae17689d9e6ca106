#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/auth.h"
#include "store/store.h"

namespace meridian::api {

// Tokens the server has read from the store, each with its user's roles, so that a request is
// authenticated without a store read (at thousands of agents, the largest part of a
// heartbeat's cost: docs/benchmarks.md). An entry holds while the store's credentials
// generation has not moved since it was read, so that a token revoked or a user changed
// through this server counts at once; and for kSeconds at most, the bound on a change made by
// another server on the same PostgreSQL or by the `meridian store` tools. The caller still
// checks the secret against the hash, the revocation and the expiry at every request.
class CredentialCache {
 public:
  static constexpr double kSeconds = 10;
  static constexpr size_t kMaxEntries = 100000;  // past it, the cache starts empty again

  struct Entry {
    store::TokenRecord token;
    std::vector<RoleBinding> roles;
  };

  // `now`: a monotonic clock in seconds; the steady clock unless a test gives its own.
  explicit CredentialCache(std::function<double()> now = nullptr);

  // The entry of token `id` read at `generation`, while it holds.
  std::optional<Entry> Find(const std::string& id, uint64_t generation);
  // `generation`: the store's, read before the store read that gave `entry`; `read_at`: Now()
  // taken then too, so that the bound counts from before the read.
  void Put(const std::string& id, uint64_t generation, double read_at, Entry entry);
  void Clear();
  double Now() const { return now_(); }

 private:
  struct Held {
    Entry entry;
    uint64_t generation = 0;
    double read_at = 0;
  };
  std::function<double()> now_;
  std::mutex mu_;
  std::unordered_map<std::string, Held> held_;
};

}  // namespace meridian::api
