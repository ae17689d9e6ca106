#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace meridian::store {

// The leader among the servers on one database, as the database records it.
struct LeaderRecord {
  int64_t epoch = 0;      // raised by every new leader; 0: none has led yet
  std::string url;        // the leader's advertised URL, where followers redirect writes
  double elected_at = 0;  // Unix seconds, on the database's clock
};

// Leader election among the `meridian server` replicas on one database, with a fencing epoch
// that the database enforces (docs/adr/0028-several-servers-one-leader.md). A store that
// implements it refuses writes until Campaign has made it leader, and for good once it has been
// deposed: every write transaction first locks the leader row at this store's epoch, so that a
// write of a deposed leader is refused by the database however late it arrives, and a new
// leader's epoch bump waits for the old leader's writes in flight. Thread-safe.
class Election {
 public:
  virtual ~Election() = default;

  // Tries once, without waiting for another leader to go: true when this store leads now (its
  // epoch is the one just taken, `url` is recorded as the leader's), false when another server
  // holds the leadership. Once leading, it checks that the leadership is still held (as
  // CheckLeading). A store that was deposed never leads again: its server starts afresh.
  virtual base::Result<bool> Campaign(const std::string& url) = 0;
  // Ok while this store leads and its leader session is alive; otherwise why not. A lost
  // session deposes the store (another server may take over at once).
  virtual base::Status CheckLeading() = 0;
  // The leader the database records now (epoch 0: none yet).
  virtual base::Result<LeaderRecord> Leader() = 0;
  // The secret that the servers on this database share (made by a migration, never changed):
  // a follower's forwarded requests carry it, so that the leader trusts the client address
  // they give.
  virtual base::Result<std::string> PeerSecret() = 0;
  // This store's epoch: 0 before it leads, -1 once deposed.
  virtual int64_t epoch() const = 0;
  // Called once, from the thread that found it, when this store is deposed (its write refused,
  // or its leader session lost). Set it before the first Campaign.
  virtual void OnDeposed(std::function<void(const std::string& why)> fn) = 0;
};

}  // namespace meridian::store
