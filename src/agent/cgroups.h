#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace meridian::agent {

// CPU and memory limits for one task through Linux control groups, v2 (unified) or v1 (separate
// cpu and memory hierarchies), whichever the host mounts at `root`.
class Cgroups {
 public:
  enum class Version { kNone, kV1, kV2 };

  // Looks at `root` (normally /sys/fs/cgroup): cgroup2fs is v2; a tmpfs with memory/ and cpu/
  // hierarchies is v1 (hybrid hosts whose unified mount holds no controllers count as v1).
  static Cgroups Detect(const std::string& root = "/sys/fs/cgroup");

  Version version() const { return version_; }
  const char* VersionName() const;

  // Creates the group `meridian/<name>` with the limits (0: unlimited); returns the files a
  // process's pid is written to so that it joins the group.
  base::Result<std::vector<std::string>> Create(const std::string& name, int64_t cpu_milli,
                                                int64_t memory_mib) const;
  // How often the kernel's OOM killer killed in the group (memory.events on v2,
  // memory.oom_control on v1); 0 when unknown. Read before Remove.
  int64_t OomKills(const std::string& name) const;
  // Removes the group once its processes have gone.
  void Remove(const std::string& name) const;

 private:
  std::vector<std::string> Dirs(const std::string& name) const;
  Version version_ = Version::kNone;
  std::string root_;
};

}  // namespace meridian::agent
