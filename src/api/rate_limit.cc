#include "api/rate_limit.h"

#include <algorithm>
#include <vector>

namespace meridian::api {

namespace {
// A bucket that holds one request, but for the rounding of its refills.
constexpr double kOne = 1 - 1e-9;
}  // namespace

RateLimiter::RateLimiter(double rate, double burst, size_t max_keys)
    : rate_(std::max(0.0, rate)),
      burst_(std::max(1.0, burst)),
      max_keys_(std::max<size_t>(1, max_keys)) {}

RateLimiter::Bucket& RateLimiter::Refilled(const std::string& key, double now) {
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_keys_) Forget(now);
    it = buckets_.emplace(key, Bucket{burst_, now}).first;
    remembered_ = buckets_.size();
  }
  Bucket& b = it->second;
  if (now > b.at) {
    b.level = std::min(burst_, b.level + (now - b.at) * rate_);
    b.at = now;
  }
  return b;
}

void RateLimiter::Forget(double now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    const Bucket& b = it->second;
    const bool full = b.level + (now - b.at) * rate_ >= burst_;
    it = full ? buckets_.erase(it) : std::next(it);
  }
  if (buckets_.size() < max_keys_) return;
  // Still full of live buckets: the least recently touched half goes (they may come back with
  // a fresh bucket; an attacker with that many keys is held by the per-address limit).
  std::vector<std::pair<double, std::string>> by_age;
  by_age.reserve(buckets_.size());
  for (const auto& [key, b] : buckets_) by_age.emplace_back(b.at, key);
  std::sort(by_age.begin(), by_age.end());
  for (size_t i = 0; i < by_age.size() / 2 + 1 && i < by_age.size(); ++i) {
    buckets_.erase(by_age[i].second);
  }
  remembered_ = buckets_.size();
}

double RateLimiter::Take(const std::string& key, double now) {
  if (!on()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = Refilled(key, now);
  if (b.level >= kOne) {
    b.level = std::max(0.0, b.level - 1);
    return 0;
  }
  return (1 - b.level) / rate_;
}

double RateLimiter::Wait(const std::string& key, double now) {
  if (!on() || remembered_.load() == 0) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) return 0;
  const Bucket& b = Refilled(key, now);
  if (b.level < kOne) return (1 - b.level) / rate_;
  if (b.level >= burst_) {
    buckets_.erase(it);  // as good as new
    remembered_ = buckets_.size();
  }
  return 0;
}

namespace {

// One held by a key; given back as it is destroyed. It keeps the count alive, so it may outlive
// the limit (a stream still open as the server stops).
struct Hold {
  std::shared_ptr<std::mutex> mu;
  std::shared_ptr<std::map<std::string, int>> held;
  std::string key;
  ~Hold() {
    if (!mu) return;
    std::lock_guard<std::mutex> lock(*mu);
    auto it = held->find(key);
    if (it != held->end() && --it->second <= 0) held->erase(it);
  }
};

}  // namespace

std::shared_ptr<void> ConcurrencyLimit::Acquire(const std::string& key) {
  std::lock_guard<std::mutex> lock(*mu_);
  int& n = (*held_)[key];
  if (limit_ > 0 && n >= limit_) return nullptr;
  ++n;
  auto hold = std::make_shared<Hold>();
  hold->mu = mu_;
  hold->held = held_;
  hold->key = key;
  return hold;
}

}  // namespace meridian::api
