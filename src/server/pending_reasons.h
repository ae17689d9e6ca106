#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

// Why each pending job waits, as the controller last said it. It has its own lock, apart from
// the controller's: a read of one job, or a listing of thousands, takes it briefly and never
// waits for a scheduling cycle (which holds the controller's lock while it takes in 50,000
// submissions). Written by the controller's thread; read by the API's threads.
namespace meridian::server {

class PendingReasons {
 public:
  void Set(int64_t job, std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    reasons_[job] = std::move(why);
  }
  void Erase(int64_t job) {
    std::lock_guard<std::mutex> lock(mu_);
    reasons_.erase(job);
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    reasons_.clear();
  }
  // One cycle's outcome under one lock: the jobs that still wait, with why, and those started.
  void Update(const std::vector<std::pair<int64_t, std::string>>& waiting,
              const std::vector<int64_t>& started) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [job, why] : waiting) reasons_[job] = why;
    for (int64_t job : started) reasons_.erase(job);
  }
  std::optional<std::string> Get(int64_t job) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reasons_.find(job);
    if (it == reasons_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<int64_t, std::string> reasons_;
};

}  // namespace meridian::server
