#include "agent/staging.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/task_isolation.h"
#include "base/clock.h"
#include "domain/spec.h"

namespace meridian::agent {

namespace {

constexpr int kAttempts = 3;

std::string Replace(std::string word, const std::string& from, const std::string& to) {
  for (size_t at = word.find(from); at != std::string::npos; at = word.find(from, at + to.size())) {
    word.replace(at, from.size(), to);
  }
  return word;
}

// The last line of what the command wrote, for the error: where it says what went wrong.
std::string LastLine(const std::string& output, int64_t from) {
  std::ifstream in(output, std::ios::binary);
  in.seekg(from);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.size() > 300 ? last.substr(last.size() - 300) : last;
}

// Starts `argv` in a process group of its own, its output appended to `output`.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& output) {
  const pid_t pid = fork();
  if (pid > 0) setpgid(pid, pid);  // here too: a stop right after the fork reaches its group
  if (pid != 0) return pid;
  setpgid(0, 0);
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  ChildIoTo(output);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  _exit(127);
}

void Say(const std::string& output, const std::string& line) {
  std::ofstream(output, std::ios::app) << "meridian: " << line << "\n";
}

// The site's cache, made root's alone (0700) when the shim creates it. One that others may write
// in is refused: a tenant could plant a "copy" there, or a link where a copy goes.
base::Status CacheFolder(const std::filesystem::path& cache) {
  std::error_code ec;
  std::filesystem::create_directories(cache.parent_path(), ec);
  if (::mkdir(cache.c_str(), 0700) != 0 && errno != EEXIST) {
    return base::Status::Io("cannot create the cache " + cache.string() + ": " +
                            std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(cache.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return base::Status::Invalid("the cache " + cache.string() + " is not a folder");
  }
  if (st.st_uid != 0 && ::geteuid() == 0) {
    return base::Status::Invalid("the cache " + cache.string() + " is not root's");
  }
  if (st.st_mode & 022) {
    return base::Status::Invalid("the cache " + cache.string() +
                                 " may be written by others than its owner: a task could plant a "
                                 "copy there (make it 0700 or 0755)");
  }
  return base::Status::Ok();
}

// A folder the server named for eviction, as this cache holds it: a dataset's copy, directly in
// the cache, a real folder (not a link).
bool EvictableCopy(const std::filesystem::path& cache, const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.parent_path() != cache.lexically_normal()) return false;
  if (!domain::IsValidName(p.filename().string())) return false;
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// One node of a site copies a dataset at a time; the others wait for its copy. The lock is a file
// in the cache whose holder dates it at least every second while it copies: one left undated for
// kStaleLock seconds (its holder died) is taken over. Removed when its holder is done.
constexpr double kStaleLock = 60;

class CopyLock {
 public:
  explicit CopyLock(std::string path) : path_(std::move(path)) {}
  ~CopyLock() {
    if (held_) ::unlink(path_.c_str());
  }
  CopyLock(const CopyLock&) = delete;
  CopyLock& operator=(const CopyLock&) = delete;

  // Takes the lock, or says why not: the copy appeared meanwhile, or a stop came.
  enum class Outcome { kHeld, kCopied, kStopped };
  Outcome Take(const std::string& target, const std::function<std::string()>& stop_reason,
               const std::function<void()>& waiting, std::string* stopped) {
    bool said = false;
    for (;;) {
      const int fd =
          ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      std::error_code ec;
      if (fd >= 0 || errno != EEXIST) {  // no lock to be had at all: copy without one
        if (fd >= 0) {
          const std::string who = std::to_string(static_cast<int64_t>(::getpid())) + "\n";
          (void)!::write(fd, who.data(), who.size());
          ::close(fd);
          held_ = true;
        }
        // The holder before it may have finished the copy just now.
        return std::filesystem::is_directory(target, ec) ? Outcome::kCopied : Outcome::kHeld;
      }
      if (std::filesystem::is_directory(target, ec)) return Outcome::kCopied;
      struct stat st {};
      if (::lstat(path_.c_str(), &st) == 0 &&
          base::WallClockNow() - static_cast<double>(st.st_mtime) > kStaleLock) {
        ::unlink(path_.c_str());  // its holder is gone
        continue;
      }
      if (std::string why = stop_reason(); !why.empty()) {
        *stopped = why;
        return Outcome::kStopped;
      }
      if (!said) waiting();
      said = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  void Renew() const {
    if (held_) ::utimensat(AT_FDCWD, path_.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
  }

 private:
  std::string path_;
  bool held_ = false;
};

}  // namespace

int64_t FolderBytes(const std::string& path) {
  std::error_code ec;
  int64_t bytes = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) bytes += static_cast<int64_t>(size);
    }
  }
  return bytes;
}

std::vector<std::string> StagingArgv(const std::vector<std::string>& command,
                                     const std::string& source) {
  std::vector<std::string> argv =
      command.empty() ? std::vector<std::string>{"cp", "-a", "{source}", "{target}"} : command;
  for (std::string& w : argv) w = Replace(w, "{source}", source);
  return argv;
}

StagingResult StageDatasets(const std::vector<protocol::ShimSpec::Stage>& stages,
                            const std::string& output, const std::string& progress_file,
                            const std::function<std::string()>& stop_reason) {
  std::vector<protocol::StagingProgress> progress(stages.size());
  auto publish = [&] {
    nlohmann::json list = nlohmann::json::array();
    for (const protocol::StagingProgress& p : progress) list.push_back(protocol::ToJson(p));
    (void)WritePrivateFile(progress_file, list.dump(), 0600);
  };
  for (size_t i = 0; i < stages.size(); ++i) {
    const protocol::ShimSpec::Stage& st = stages[i];
    protocol::StagingProgress& p = progress[i];
    p.dataset = st.dataset;
    p.total_bytes = st.bytes;
    std::error_code ec;
    if (std::filesystem::is_directory(st.target, ec)) {
      p.state = "cached";
      p.done_bytes = st.bytes;
      publish();
      continue;
    }
    const std::filesystem::path cache = std::filesystem::path(st.target).parent_path();
    if (base::Status s = CacheFolder(cache); !s.ok()) {
      p.state = "failed";
      p.error = s.message();
      publish();
      return {"", "staging dataset " + st.dataset + ": " + s.message()};
    }
    CopyLock lock((cache / (".lock-" + st.dataset)).string());
    std::string stopped;
    const CopyLock::Outcome taken = lock.Take(
        st.target, stop_reason,
        [&] {
          Say(output, "waiting for another node of the site, which stages dataset " + st.dataset);
          p.state = "copying";
          publish();
        },
        &stopped);
    if (taken == CopyLock::Outcome::kStopped) return {stopped, ""};
    if (taken == CopyLock::Outcome::kCopied) {
      p.state = "cached";
      p.done_bytes = st.bytes;
      publish();
      continue;
    }
    for (const std::string& old : st.evict) {
      // Only copies in this cache: the server names them, the shim still checks.
      if (old == st.target || !EvictableCopy(cache, old)) continue;
      lock.Renew();
      std::filesystem::remove_all(old, ec);
      if (ec) continue;
      p.evicted.push_back(old);
      Say(output, "evicted " + old + " from the cache to make room for " + st.dataset);
    }
    // The copy is made in a folder of its own that only root enters, then moved into place.
    std::string scratch = (cache / ".staging-XXXXXX").string();
    if (::mkdtemp(scratch.data()) == nullptr) {
      return {"", "staging dataset " + st.dataset + ": cannot create a folder in the cache " +
                      cache.string() + ": " + std::strerror(errno)};
    }
    const std::string tmp = scratch + "/" + st.dataset;
    const double began = base::WallClockNow();
    for (int attempt = 1; attempt <= kAttempts; ++attempt) {
      std::filesystem::remove_all(tmp, ec);
      std::vector<std::string> argv = st.argv;
      for (std::string& w : argv) w = Replace(w, "{target}", tmp);
      p.state = "copying";
      p.attempt = attempt;
      p.done_bytes = 0;
      publish();
      Say(output, "staging dataset " + st.dataset + " (attempt " + std::to_string(attempt) +
                      " of " + std::to_string(kAttempts) + ")");
      std::error_code size_ec;
      const int64_t output_at = static_cast<int64_t>(std::filesystem::file_size(output, size_ec));
      const pid_t pid = Spawn(argv, output);
      if (pid < 0) {
        std::filesystem::remove_all(scratch, ec);
        return {"", "cannot start the staging command for " + st.dataset};
      }
      int status = 0;
      double published = base::WallClockNow();
      for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        if (std::string why = stop_reason(); !why.empty()) {
          kill(-pid, SIGKILL);
          waitpid(pid, &status, 0);
          std::filesystem::remove_all(scratch, ec);
          return {why, ""};
        }
        const double now = base::WallClockNow();
        if (now - published >= 1.0) {
          lock.Renew();
          p.done_bytes = FolderBytes(tmp);
          p.seconds = now - began;
          publish();
          published = now;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      kill(-pid, SIGKILL);  // whatever it left running in its group
      lock.Renew();
      const bool exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      struct stat made {};
      const bool folder = ::lstat(tmp.c_str(), &made) == 0 && S_ISDIR(made.st_mode);
      // Only root changes a cached copy, whoever owned its source and whatever its modes.
      const base::Status sealed =
          exited_ok && folder ? GiveToRootReadOnly(tmp) : base::Status::Ok();
      if (exited_ok && folder && sealed.ok()) {
        std::filesystem::rename(tmp, st.target, ec);
        struct stat placed {};
        if (ec && (::lstat(st.target.c_str(), &placed) != 0 || !S_ISDIR(placed.st_mode))) {
          std::filesystem::remove_all(scratch, ec);
          return {"", "staging dataset " + st.dataset + ": cannot move the copy to " + st.target +
                          ": " + ec.message()};
        }
        // Renamed, or another node of the site staged it meanwhile: theirs is as good.
        std::filesystem::remove_all(scratch, ec);
        p.state = "staged";
        p.done_bytes = FolderBytes(st.target);
        p.seconds = base::WallClockNow() - began;
        p.error.clear();
        publish();
        Say(output, "staged dataset " + st.dataset + " into " + st.target);
        break;
      }
      std::filesystem::remove_all(tmp, ec);
      std::string why = !WIFEXITED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                        : !exited_ok       ? "exit code " + std::to_string(WEXITSTATUS(status))
                        : !folder          ? "it exited 0 but wrote no folder at {target}"
                                           : sealed.message();
      const std::string said = LastLine(output, output_at);
      if (!said.empty() && !exited_ok) why += ": " + said;
      p.error = why;
      if (attempt == kAttempts) {
        std::filesystem::remove_all(scratch, ec);
        p.state = "failed";
        publish();
        return {"", "staging dataset " + st.dataset + " from " + st.source + " failed " +
                        std::to_string(kAttempts) + " times; the last: " + why};
      }
      // Again after a pause that grows, unless a stop comes meanwhile.
      const double again_at = base::WallClockNow() + (1 << attempt);
      while (base::WallClockNow() < again_at) {
        lock.Renew();
        if (std::string stop = stop_reason(); !stop.empty()) {
          std::filesystem::remove_all(scratch, ec);
          return {stop, ""};
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  return {};
}

}  // namespace meridian::agent
