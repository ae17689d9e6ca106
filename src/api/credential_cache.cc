#include "api/credential_cache.h"

#include <chrono>

namespace meridian::api {

CredentialCache::CredentialCache(std::function<double()> now) : now_(std::move(now)) {
  if (!now_) {
    now_ = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
}

std::optional<CredentialCache::Entry> CredentialCache::Find(const std::string& id,
                                                            uint64_t generation) {
  const double now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(id);
  if (it == held_.end()) return std::nullopt;
  if (it->second.generation != generation || now - it->second.read_at >= kSeconds) {
    held_.erase(it);
    return std::nullopt;
  }
  return it->second.entry;
}

void CredentialCache::Put(const std::string& id, uint64_t generation, double read_at, Entry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_.size() >= kMaxEntries && !held_.contains(id)) held_.clear();
  held_[id] = Held{std::move(entry), generation, read_at};
}

void CredentialCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  held_.clear();
}

}  // namespace meridian::api
