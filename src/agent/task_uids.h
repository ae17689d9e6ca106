#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "base/status.h"

namespace meridian::agent {

// The uids (each with the gid of the same number) that a node's tasks run under, one per job:
// `--task-uids FIRST-LAST`. Pure values and functions: the agent gathers what is in use.
struct UidRange {
  uint32_t first = 0;
  uint32_t last = 0;
  uint64_t size() const { return uint64_t{last} - first + 1; }
  bool Contains(uint32_t uid) const { return uid >= first && uid <= last; }
  std::string ToString() const { return std::to_string(first) + "-" + std::to_string(last); }
};

// The default range: 65,536 uids above those of ordinary accounts and of the usual
// /etc/subuid ranges (100000-165535 for the first user), below systemd's container range.
inline constexpr UidRange kDefaultTaskUids{200000, 265535};

// "FIRST-LAST" (inclusive, FIRST >= 1000, LAST < 2^31 - 1: no system account, and no uid that
// reads as negative or as (uid_t)-1 anywhere).
base::Result<UidRange> ParseUidRange(const std::string& text);

// The uid for a task of `job`: the one a task of the same job on this node holds already (in
// `held`, uid -> job), otherwise the first free one from FIRST + job mod size on, wrapping. Free:
// held by no job and not in `busy` (uids that own a process on the machine: what a task left
// behind, or another agent's task on the same machine). The same job always gets the same uid
// while any of its tasks is here, two jobs never share one, and with sequential job ids the
// choice is the job's own number in the range unless it is taken. None: every uid is taken.
std::optional<uint32_t> ChooseTaskUid(const UidRange& range, int64_t job,
                                      const std::map<uint32_t, int64_t>& held,
                                      const std::set<uint32_t>& busy);

}  // namespace meridian::agent
