#include "agent/task_isolation.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace meridian::agent {

namespace {

// Runs `work` in a child process that has become `uid`:`gid`, and waits for it.
template <class Work>
void AsUser(uint32_t uid, uint32_t gid, Work work) {
  const pid_t child = fork();
  if (child == 0) {
    if (!DropPrivileges(uid, gid).ok()) _exit(1);
    work();
    _exit(0);
  }
  if (child > 0) {
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

base::Status DropPrivileges(uint32_t uid, uint32_t gid) {
  const std::string who = "uid " + std::to_string(uid) + ", gid " + std::to_string(gid);
  if (setgroups(0, nullptr) != 0) {
    return base::Status::Internal("cannot drop supplementary groups: " +
                                  std::string(strerror(errno)));
  }
  if (setresgid(gid, gid, gid) != 0) {
    return base::Status::Internal("cannot become " + who + ": " + std::string(strerror(errno)));
  }
  if (setresuid(uid, uid, uid) != 0) {
    return base::Status::Internal("cannot become " + who + ": " + std::string(strerror(errno)));
  }
  uid_t ru = 0, eu = 0, su = 0;
  gid_t rg = 0, eg = 0, sg = 0;
  const bool ids_ok = getresuid(&ru, &eu, &su) == 0 && getresgid(&rg, &eg, &sg) == 0 && ru == uid &&
                      eu == uid && su == uid && rg == gid && eg == gid && sg == gid &&
                      getgroups(0, nullptr) == 0;
  // A uid of the range is never root: root must not be had back (uid 0 is refused by the range).
  if (!ids_ok || setuid(0) == 0) {
    return base::Status::Internal("did not become " + who + " for good");
  }
  return base::Status::Ok();
}

base::Status IsolateMounts(const std::vector<std::string>& nodes,
                           const std::vector<std::pair<std::string, std::string>>& read_only,
                           const std::vector<std::pair<std::string, std::string>>& read_write,
                           const std::string& devices_dir,
                           const std::vector<protocol::ShimSpec::Device>& devices) {
  if (nodes.empty() && read_only.empty() && read_write.empty() && devices_dir.empty()) {
    return base::Status::Ok();
  }
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
    return base::Status::Internal("cannot make a mount namespace for the task: " +
                                  std::string(strerror(errno)));
  }
  for (const std::string& n : nodes) {
    if (mount("/dev/null", n.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return base::Status::Internal("cannot hide " + n + ": " + strerror(errno));
    }
  }
  // A bind takes the source's flags; read-only (and no set-uid programs or devices either way)
  // needs a second, remounting pass (mount(2)).
  auto bind = [](const std::string& source, const std::string& target, unsigned long flags) {
    if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | flags,
              nullptr) != 0) {
      return base::Status::Internal("cannot mount " + source + " at " + target + ": " +
                                    strerror(errno));
    }
    return base::Status::Ok();
  };
  for (const auto& [source, target] : read_only) {
    if (base::Status s = bind(source, target, MS_RDONLY); !s.ok()) return s;
  }
  for (const auto& [source, target] : read_write) {
    if (base::Status s = bind(source, target, 0); !s.ok()) return s;
  }
  if (!devices_dir.empty()) {
    const unsigned long flags = MS_NOSUID | MS_NOEXEC;
    if (mount("tmpfs", devices_dir.c_str(), "tmpfs", flags, "mode=0755,size=64k") != 0) {
      return base::Status::Internal("cannot make " + devices_dir + " anew: " + strerror(errno));
    }
    for (const protocol::ShimSpec::Device& d : devices) {
      const std::string path = devices_dir + "/" + d.name;
      if (d.name.empty() || d.name.find('/') != std::string::npos ||
          mknod(path.c_str(), S_IFCHR | static_cast<mode_t>(d.mode & 0666),
                makedev(static_cast<unsigned>(d.major), static_cast<unsigned>(d.minor))) != 0 ||
          chmod(path.c_str(), static_cast<mode_t>(d.mode & 0666)) != 0) {
        return base::Status::Internal("cannot make " + path + ": " + strerror(errno));
      }
    }
    if (mount(nullptr, devices_dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | flags, nullptr) !=
        0) {
      return base::Status::Internal("cannot make " + devices_dir +
                                    " read-only: " + strerror(errno));
    }
  }
  return base::Status::Ok();
}

namespace {

// Calls `visit(dir, name, st)` for every entry below the folder open at `dir`, never following a
// link: folders are entered through openat(O_NOFOLLOW | O_DIRECTORY) relative to their parent.
template <class Visit>
base::Status Walk(int dir, const std::string& where, int depth, const Visit& visit) {
  if (depth > 256) return base::Status::Invalid(where + ": folders nested too deep");
  const int listing = ::dup(dir);
  DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
  if (!d) {
    if (listing >= 0) ::close(listing);
    return base::Status::Io("cannot list " + where + ": " + strerror(errno));
  }
  base::Status result = base::Status::Ok();
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
    if (base::Status s = visit(dir, name, st); !s.ok()) {
      result = s;
      break;
    }
    if (!S_ISDIR(st.st_mode)) continue;
    const int sub = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;  // gone, or no longer a folder
    result = Walk(sub, where + "/" + name, depth + 1, visit);
    ::close(sub);
    if (!result.ok()) break;
  }
  ::closedir(d);
  return result;
}

template <class Visit>
base::Status WalkFolder(const std::string& path, const Visit& visit) {
  const int top = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) return base::Status::Io("cannot open folder " + path + ": " + strerror(errno));
  base::Status s = Walk(top, path, 0, visit);
  ::close(top);
  return s;
}

}  // namespace

base::Status ChownTree(const std::string& path, uint32_t uid, uint32_t gid) {
  const int top = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0 || ::fchown(top, uid, gid) != 0) {
    if (top >= 0) ::close(top);
    return base::Status::Io("cannot give " + path + " to uid " + std::to_string(uid) + ": " +
                            strerror(errno));
  }
  ::close(top);
  return WalkFolder(path, [&](int dir, const std::string& name, const struct stat& st) {
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) return base::Status::Ok();  // shared elsewhere
    if (::fchownat(dir, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0 && errno != ENOENT) {
      return base::Status::Io("cannot give " + path + "/.../" + name + " to uid " +
                              std::to_string(uid) + ": " + strerror(errno));
    }
    return base::Status::Ok();
  });
}

base::Status GiveToRootReadOnly(const std::string& path) {
  const int top = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) return base::Status::Io("cannot open folder " + path + ": " + strerror(errno));
  struct stat st {};
  const bool ok =
      ::fstat(top, &st) == 0 && ::fchown(top, 0, 0) == 0 && ::fchmod(top, st.st_mode & 0755) == 0;
  ::close(top);
  if (!ok) return base::Status::Io("cannot make " + path + " root's: " + strerror(errno));
  return WalkFolder(path, [&](int dir, const std::string& name, const struct stat& entry) {
    if (::fchownat(dir, name.c_str(), 0, 0, AT_SYMLINK_NOFOLLOW) != 0) {
      return base::Status::Io("cannot make " + path + "/.../" + name +
                              " root's: " + strerror(errno));
    }
    // Links have no mode of their own.
    if (S_ISLNK(entry.st_mode) || (entry.st_mode & 07022) == 0) return base::Status::Ok();
    if (::fchmodat(dir, name.c_str(), entry.st_mode & 0755, 0) != 0) {
      return base::Status::Io("cannot change the mode of " + path + "/.../" + name + ": " +
                              strerror(errno));
    }
    return base::Status::Ok();
  });
}

void CloseFdsFrom(int first) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0) == 0) return;
#endif
  const long max = sysconf(_SC_OPEN_MAX);
  for (long fd = first; fd < (max > 0 ? max : 65536); ++fd) close(static_cast<int>(fd));
}

base::Status MakeFolder(const std::string& path, uid_t owner, gid_t group, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return base::Status::Io("cannot create " + path + ": " + strerror(errno));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return base::Status::Io(path + " is not a folder");
  }
  if (::lchown(path.c_str(), owner, group) != 0 || ::chmod(path.c_str(), mode) != 0) {
    return base::Status::Io("cannot set the owner and mode of " + path + ": " + strerror(errno));
  }
  return base::Status::Ok();
}

void ChildIoTo(const std::string& output) {
  const int out = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
  const int in = ::open("/dev/null", O_RDONLY);
  if (out >= 0) {
    dup2(out, 1);
    dup2(out, 2);
    close(out);
  }
  if (in >= 0) {
    dup2(in, 0);
    close(in);
  }
  CloseFdsFrom(3);
}

base::Status WritePrivateFile(const std::string& path, const std::string& text, int mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        static_cast<mode_t>(mode));
  if (fd < 0) return base::Status::Io("cannot write " + tmp + ": " + strerror(errno));
  const bool written = ::fchmod(fd, static_cast<mode_t>(mode)) == 0 &&
                       ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return base::Status::Io("cannot write " + path + ": " + strerror(errno));
  }
  return base::Status::Ok();
}

namespace {

// A claim's work dir, or "" when the file cannot be read.
std::string ClaimOwner(const std::string& file) {
  std::ifstream in(file);
  std::string owner;
  std::getline(in, owner);
  return owner;
}

bool Stale(const std::string& owner) {
  struct stat st {};
  return owner.empty() || ::stat((owner + "/tasks").c_str(), &st) != 0;
}

}  // namespace

std::set<uint32_t> UidClaims::HeldByOthers(const std::string& owner) const {
  std::set<uint32_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string holder = ClaimOwner(e.path());
    if (holder == owner) continue;
    if (Stale(holder)) {
      ::unlink(e.path().c_str());  // its agent's work dir is gone (a test's, a removed node's)
    } else {
      out.insert(static_cast<uint32_t>(std::stoul(name)));
    }
  }
  return out;
}

bool UidClaims::Claim(uint32_t uid, const std::string& owner, int64_t job,
                      std::string* error) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || ::chmod(dir_.c_str(), 0700) != 0) {
    *error = "cannot keep claims on task uids in " + dir_ + ": " +
             (ec ? ec.message() : std::string(strerror(errno)));
    return false;
  }
  const std::string file = File(uid);
  // Written whole under a name of its own, then linked to the uid's: link() fails if the uid's
  // exists, so the claim is atomic and never seen half written.
  const std::string tmp = dir_ + "/." + std::to_string(uid) + "." + std::to_string(::getpid());
  if (base::Status s = WritePrivateFile(tmp, owner + "\n" + std::to_string(job) + "\n", 0600);
      !s.ok()) {
    *error = s.message();
    return false;
  }
  bool claimed = false;
  for (int attempt = 0; attempt < 2 && !claimed; ++attempt) {
    if (::link(tmp.c_str(), file.c_str()) == 0) {
      claimed = true;
      break;
    }
    if (errno != EEXIST) {
      *error = "cannot write " + file + ": " + strerror(errno);
      break;
    }
    const std::string holder = ClaimOwner(file);
    if (holder == owner) {
      claimed = true;  // this agent's, from before a restart
      break;
    }
    if (!Stale(holder)) break;
    ::unlink(file.c_str());
  }
  ::unlink(tmp.c_str());
  return claimed;
}

void UidClaims::Release(uint32_t uid, const std::string& owner) const {
  if (ClaimOwner(File(uid)) == owner) ::unlink(File(uid).c_str());
}

std::set<uint32_t> ProcessUids() {
  std::set<uint32_t> uids;
  DIR* proc = opendir("/proc");
  if (!proc) return uids;
  while (const dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    // A zombie can do nothing more, and waits only for its parent to reap it.
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos) break;
      if (line.rfind("Uid:", 0) != 0) continue;
      std::istringstream ids(line.substr(4));
      for (uint32_t id = 0; ids >> id;) uids.insert(id);
      break;
    }
  }
  closedir(proc);
  return uids;
}

base::Status CheckRangeIsUnused(const UidRange& range) {
  std::string taken;
  setpwent();
  while (const passwd* p = getpwent()) {
    if (range.Contains(p->pw_uid) && taken.empty()) {
      taken = "user " + std::string(p->pw_name) + " (uid " + std::to_string(p->pw_uid) + ")";
    }
  }
  endpwent();
  setgrent();
  while (const group* g = getgrent()) {
    if (range.Contains(g->gr_gid) && taken.empty()) {
      taken = "group " + std::string(g->gr_name) + " (gid " + std::to_string(g->gr_gid) + ")";
    }
  }
  endgrent();
  if (taken.empty()) return base::Status::Ok();
  return base::Status::Invalid("--task-uids " + range.ToString() + " holds " + taken +
                               " of this machine; tasks would run as it. Choose a range that no "
                               "account or group uses");
}

base::Status CheckReachableByTasks(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::canonical(dir, ec);
  if (ec) return base::Status::Io(dir + ": " + ec.message());
  for (; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return base::Status::Io(p.string() + ": " + strerror(errno));
    if (!(st.st_mode & S_IXOTH)) {
      return base::Status(
          base::StatusCode::kFailedPrecondition,
          "tasks run under uids of their own (--task-uids) and must reach their folders in " + dir +
              ", but " + p.string() + " has mode " + Octal(st.st_mode) +
              ": let others through it (chmod o+x " + p.string() +
              ") or choose another --work-dir; the task folders themselves stay closed to others");
    }
    if (p == p.root_path()) break;
  }
  return base::Status::Ok();
}

void KillProcessesOf(uint32_t uid, int rounds) {
  for (int i = 0; i < rounds && ProcessUids().count(uid); ++i) {
    AsUser(uid, uid, [] { kill(-1, SIGKILL); });
  }
}

void RemoveFilesOf(uint32_t uid, uint32_t gid, const std::vector<std::string>& paths,
                   SharedFiles shared) {
  // Found as root (looking changes nothing), removed as the uid; no child process when there is
  // nothing to remove, as for most jobs (an empty work dir, nothing in /tmp).
  std::vector<std::string> doomed;
  std::error_code ec;
  for (const std::string& p : paths) {
    if (std::filesystem::exists(p, ec) && !std::filesystem::is_empty(p, ec)) doomed.push_back(p);
  }
  if (shared == SharedFiles::kRemove) {
    for (const char* top : {"/tmp", "/var/tmp", "/dev/shm"}) {
      for (const auto& e : std::filesystem::directory_iterator(top, ec)) {
        struct stat st {};
        if (::lstat(e.path().c_str(), &st) == 0 && st.st_uid == uid) doomed.push_back(e.path());
      }
    }
  }
  if (doomed.empty()) return;
  AsUser(uid, gid, [&] {
    std::error_code ignored;
    for (const std::string& p : doomed) {
      // A work dir is emptied (its folder is in root's, which root removes), the rest removed.
      if (std::find(paths.begin(), paths.end(), p) != paths.end()) {
        for (const auto& e : std::filesystem::directory_iterator(p, ignored)) {
          std::filesystem::remove_all(e.path(), ignored);
        }
      } else {
        std::filesystem::remove_all(p, ignored);
      }
    }
  });
}

}  // namespace meridian::agent
