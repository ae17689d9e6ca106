#include "agent/task_uids.h"

#include <charconv>
#include <limits>

namespace meridian::agent {

namespace {

constexpr uint32_t kLowest = 1000;
constexpr uint32_t kHighest = std::numeric_limits<int32_t>::max() - 1;

std::optional<uint32_t> ParseUid(std::string_view text) {
  uint64_t v = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || v > kHighest) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(v);
}

}  // namespace

base::Result<UidRange> ParseUidRange(const std::string& text) {
  const std::string usage = "--task-uids " + text + ": expected FIRST-LAST (e.g. " +
                            kDefaultTaskUids.ToString() + "), or off";
  const size_t dash = text.find('-');
  if (dash == std::string::npos) return base::Status::Invalid(usage);
  const std::optional<uint32_t> first = ParseUid(std::string_view(text).substr(0, dash));
  const std::optional<uint32_t> last = ParseUid(std::string_view(text).substr(dash + 1));
  if (!first || !last) return base::Status::Invalid(usage);
  if (*first < kLowest) {
    return base::Status::Invalid("--task-uids " + text + ": uids below " + std::to_string(kLowest) +
                                 " belong to the system");
  }
  if (*last < *first) return base::Status::Invalid("--task-uids " + text + ": LAST < FIRST");
  return UidRange{*first, *last};
}

std::optional<uint32_t> ChooseTaskUid(const UidRange& range, int64_t job,
                                      const std::map<uint32_t, int64_t>& held,
                                      const std::set<uint32_t>& busy) {
  for (const auto& [uid, holder] : held) {
    if (holder == job && range.Contains(uid)) return uid;
  }
  const uint64_t size = range.size();
  const uint64_t start = static_cast<uint64_t>(job < 0 ? -(job + 1) : job) % size;
  for (uint64_t i = 0; i < size; ++i) {
    const uint32_t uid = static_cast<uint32_t>(range.first + (start + i) % size);
    if (!held.count(uid) && !busy.count(uid)) return uid;
  }
  return std::nullopt;
}

}  // namespace meridian::agent
