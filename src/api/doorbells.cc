#include "api/doorbells.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

namespace meridian::api {

net::Response VersionAnswer(uint64_t version) {
  net::Response res;
  res.status = 200;
  res.set_content(nlohmann::json{{"version", version}}.dump() + "\n", "application/json");
  return res;
}

Doorbells::Bell& Doorbells::BellLocked(const std::string& node) {
  auto [it, added] = bells_.try_emplace(node);
  if (added) it->second.version = next_;
  return it->second;
}

uint64_t Doorbells::Version(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  return BellLocked(node).version;
}

void Doorbells::Ring(const std::string& node) {
  std::vector<std::shared_ptr<net::Later>> waits;
  uint64_t version = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Bell& bell = BellLocked(node);
    bell.version = ++next_;
    version = bell.version;
    waits.swap(bell.waits);
  }
  for (const auto& later : waits) later->Answer(VersionAnswer(version));
}

void Doorbells::Wait(const std::string& node, uint64_t seen, std::shared_ptr<net::Later> later) {
  uint64_t version = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Bell& bell = BellLocked(node);
    if (bell.version == seen) {
      // Waits answered by their timeout, or whose agent went away, go as new ones come.
      auto& waits = bell.waits;
      waits.erase(
          std::remove_if(waits.begin(), waits.end(), [](const auto& w) { return !w->waiting(); }),
          waits.end());
      waits.push_back(std::move(later));
      return;
    }
    version = bell.version;
  }
  later->Answer(VersionAnswer(version));
}

size_t Doorbells::waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [node, bell] : bells_) {
    n += std::any_of(bell.waits.begin(), bell.waits.end(),
                     [](const auto& w) { return w->waiting(); });
  }
  return n;
}

}  // namespace meridian::api
