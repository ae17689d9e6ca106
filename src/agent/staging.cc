#include "agent/staging.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/task_isolation.h"
#include "base/clock.h"

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
  char host[256] = {};
  gethostname(host, sizeof host - 1);
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
    for (const std::string& old : st.evict) {
      // Only folders of this cache: the server names them, the shim still checks.
      if (std::filesystem::path(old).parent_path() != cache || old == st.target) continue;
      std::filesystem::remove_all(old, ec);
      p.evicted.push_back(old);
      Say(output, "evicted " + old + " from the cache to make room for " + st.dataset);
    }
    std::filesystem::create_directories(cache, ec);
    const std::string tmp =
        st.target + ".staging-" + host + "-" + std::to_string(static_cast<int64_t>(getpid()));
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
      if (pid < 0) return {"", "cannot start the staging command for " + st.dataset};
      int status = 0;
      double published = base::WallClockNow();
      for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        if (std::string why = stop_reason(); !why.empty()) {
          kill(-pid, SIGKILL);
          waitpid(pid, &status, 0);
          std::filesystem::remove_all(tmp, ec);
          return {why, ""};
        }
        const double now = base::WallClockNow();
        if (now - published >= 1.0) {
          p.done_bytes = FolderBytes(tmp);
          p.seconds = now - began;
          publish();
          published = now;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      kill(-pid, SIGKILL);  // whatever it left running in its group
      const bool exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (exited_ok && std::filesystem::is_directory(tmp, ec)) {
        std::filesystem::rename(tmp, st.target, ec);
        // Another node of the site staged it meanwhile: theirs is as good.
        if (ec) std::filesystem::remove_all(tmp, ec);
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
                        : exited_ok        ? "it exited 0 but wrote no folder at {target}"
                                           : "exit code " + std::to_string(WEXITSTATUS(status));
      const std::string said = LastLine(output, output_at);
      if (!said.empty() && !exited_ok) why += ": " + said;
      p.error = why;
      if (attempt == kAttempts) {
        p.state = "failed";
        publish();
        return {"", "staging dataset " + st.dataset + " from " + st.source + " failed " +
                        std::to_string(kAttempts) + " times; the last: " + why};
      }
      // Again after a pause that grows, unless a stop comes meanwhile.
      const double again_at = base::WallClockNow() + (1 << attempt);
      while (base::WallClockNow() < again_at) {
        if (std::string stop = stop_reason(); !stop.empty()) return {stop, ""};
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  return {};
}

}  // namespace meridian::agent
