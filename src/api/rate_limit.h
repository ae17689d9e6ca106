#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace meridian::api {

// Token buckets by key (a token's id, a client's address): each holds up to `burst` requests
// and refills at `rate` per second. A rate of 0 turns the limiter off. At most `max_keys` are
// remembered: past that, the buckets that have refilled (as good as new) are forgotten first,
// then the ones touched longest ago. Thread-safe.
class RateLimiter {
 public:
  RateLimiter(double rate, double burst, size_t max_keys = 100000);

  // Takes one request from `key`'s bucket at time `now` (seconds). Returns 0 when it was
  // allowed; otherwise the seconds until the bucket holds one again (nothing is taken).
  double Take(const std::string& key, double now);
  // The same answer as Take, taking nothing: whether `key` is out of requests now. A bucket
  // found refilled is forgotten; with none remembered this takes no lock (it is asked of every
  // request, and most keys never fail).
  double Wait(const std::string& key, double now);

  bool on() const { return rate_ > 0; }
  double rate() const { return rate_; }
  double burst() const { return burst_; }

 private:
  struct Bucket {
    double level = 0;  // requests it holds
    double at = 0;     // when `level` was last brought up to date
  };
  Bucket& Refilled(const std::string& key, double now);
  void Forget(double now);

  const double rate_;
  const double burst_;
  const size_t max_keys_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
  std::atomic<size_t> remembered_{0};  // buckets_.size(), read without the lock
};

// How many of something each key holds at once (a token's open long polls and watches), at
// most `limit` each (0: no limit). Thread-safe.
class ConcurrencyLimit {
 public:
  explicit ConcurrencyLimit(int limit) : limit_(limit) {}
  // One for `key`, given back when the last copy of the handle is destroyed; nullptr when
  // `key` holds `limit` already.
  std::shared_ptr<void> Acquire(const std::string& key);
  int limit() const { return limit_; }

 private:
  const int limit_;
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::map<std::string, int>> held_ =
      std::make_shared<std::map<std::string, int>>();
};

}  // namespace meridian::api
