#include "agent/cgroups.h"

#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace meridian::agent {

namespace {

constexpr long kCgroup2Magic = 0x63677270;  // CGROUP2_SUPER_MAGIC
constexpr int64_t kPeriodUs = 100000;

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

base::Status WriteControlFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return base::Status::Io("cannot write \"" + text + "\" to " + path);
  return base::Status::Ok();
}

base::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return base::Status::Ok();
  return base::Status::Io("cannot create " + path + ": " + std::strerror(errno));
}

}  // namespace

Cgroups Cgroups::Detect(const std::string& root) {
  Cgroups c;
  c.root_ = root;
  struct statfs fs;
  if (::statfs(root.c_str(), &fs) != 0) return c;
  if (static_cast<long>(fs.f_type) == kCgroup2Magic) {
    c.version_ = Version::kV2;
  } else if (IsDir(root + "/memory") && IsDir(root + "/cpu")) {
    c.version_ = Version::kV1;
  }
  return c;
}

const char* Cgroups::VersionName() const {
  switch (version_) {
    case Version::kV1:
      return "v1";
    case Version::kV2:
      return "v2";
    case Version::kNone:
      break;
  }
  return "none";
}

std::vector<std::string> Cgroups::Dirs(const std::string& name) const {
  if (version_ == Version::kV2) return {root_ + "/meridian/" + name};
  if (version_ == Version::kV1) {
    return {root_ + "/memory/meridian/" + name, root_ + "/cpu/meridian/" + name};
  }
  return {};
}

base::Result<std::vector<std::string>> Cgroups::Create(const std::string& name, int64_t cpu_milli,
                                                       int64_t memory_mib) const {
  if (version_ == Version::kNone) return base::Status::NotFound("no cgroup hierarchy found");
  const std::string quota = cpu_milli > 0 ? std::to_string(cpu_milli * kPeriodUs / 1000) : "";
  const std::string bytes = memory_mib > 0 ? std::to_string(memory_mib << 20) : "";
  std::vector<std::string> procs;
  if (version_ == Version::kV2) {
    const std::string parent = root_ + "/meridian";
    if (base::Status s = MakeDir(parent); !s.ok()) return s;
    // Controllers reach a group only when its parent delegates them.
    (void)WriteControlFile(root_ + "/cgroup.subtree_control", "+cpu +memory");
    (void)WriteControlFile(parent + "/cgroup.subtree_control", "+cpu +memory");
    const std::string dir = parent + "/" + name;
    if (base::Status s = MakeDir(dir); !s.ok()) return s;
    if (!bytes.empty()) {
      if (base::Status s = WriteControlFile(dir + "/memory.max", bytes); !s.ok()) return s;
    }
    if (!quota.empty()) {
      if (base::Status s =
              WriteControlFile(dir + "/cpu.max", quota + " " + std::to_string(kPeriodUs));
          !s.ok()) {
        return s;
      }
    }
    procs.push_back(dir + "/cgroup.procs");
    return procs;
  }
  const std::vector<std::string> dirs = Dirs(name);
  for (const std::string& top : {root_ + "/memory/meridian", root_ + "/cpu/meridian"}) {
    if (base::Status s = MakeDir(top); !s.ok()) return s;
  }
  for (const std::string& dir : dirs) {
    if (base::Status s = MakeDir(dir); !s.ok()) return s;
    procs.push_back(dir + "/cgroup.procs");
  }
  if (!bytes.empty()) {
    if (base::Status s = WriteControlFile(dirs[0] + "/memory.limit_in_bytes", bytes); !s.ok())
      return s;
  }
  if (!quota.empty()) {
    if (base::Status s =
            WriteControlFile(dirs[1] + "/cpu.cfs_period_us", std::to_string(kPeriodUs));
        !s.ok()) {
      return s;
    }
    if (base::Status s = WriteControlFile(dirs[1] + "/cpu.cfs_quota_us", quota); !s.ok()) return s;
  }
  return procs;
}

int64_t Cgroups::OomKills(const std::string& name) const {
  std::string file;
  if (version_ == Version::kV2) file = root_ + "/meridian/" + name + "/memory.events";
  if (version_ == Version::kV1) file = root_ + "/memory/meridian/" + name + "/memory.oom_control";
  if (file.empty()) return 0;
  // Lines of "key value"; the count is "oom_kill N" in both versions.
  std::ifstream in(file);
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return 0;
}

void Cgroups::Remove(const std::string& name) const {
  for (const std::string& dir : Dirs(name)) ::rmdir(dir.c_str());
}

}  // namespace meridian::agent
