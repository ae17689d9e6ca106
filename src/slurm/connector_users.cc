// The users a Slurm connector's jobs run as (ConnectorOptions::run_as; ADR 0037, "Whose jobs
// they are"): resolving them, the folders their jobs write in, finding their jobs in Slurm.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/clock.h"
#include "base/log.h"
#include "slurm/connector.h"
#include "slurm/job_files.h"

extern char** environ;

namespace meridian::slurm {

using base::Status;
namespace fs = std::filesystem;

namespace {

// A user from the passwd database by `lookup(entry, buffer, size, &found)` (getpwnam_r or
// getpwuid_r with their key bound); nullopt when there is none.
template <typename Lookup>
std::optional<JobUser> PasswdUser(Lookup lookup) {
  std::vector<char> buffer(16384);
  struct passwd pw {};
  struct passwd* found = nullptr;
  if (lookup(&pw, buffer.data(), buffer.size(), &found) != 0 || !found) return std::nullopt;
  return JobUser{found->pw_name, found->pw_uid, found->pw_gid, found->pw_dir};
}

std::optional<JobUser> UserByName(const std::string& name) {
  return PasswdUser([&](passwd* pw, char* buf, size_t size, passwd** found) {
    return ::getpwnam_r(name.c_str(), pw, buf, size, found);
  });
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// The folder `path` made afresh (an error if something is there), then given to uid:gid with
// `mode` through a descriptor opened without following a link.
Status MakeOwnedFolder(const std::string& path, uint32_t uid, uint32_t gid, mode_t mode) {
  if (::mkdir(path.c_str(), 0700) != 0) return Status::Io(Errno(path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::Io(Errno(path));
  Status s = Status::Ok();
  if (::fchown(fd, uid, gid) != 0 || ::fchmod(fd, mode) != 0) s = Status::Io(Errno(path));
  ::close(fd);
  return s;
}

}  // namespace

std::optional<JobUser> UserByUid(uint32_t uid) {
  return PasswdUser([&](passwd* pw, char* buf, size_t size, passwd** found) {
    return ::getpwuid_r(uid, pw, buf, size, found);
  });
}

Status SlurmConnector::ResolveUsers() {
  std::map<uint32_t, std::vector<std::string>> projects_of;  // uid -> the projects it runs
  for (const auto& [project, name] : o_.run_as) {
    const std::string flag = "--run-as " + (project == "*" ? "" : project + "=") + name;
    const std::optional<JobUser> user = UserByName(name);
    if (!user)
      return Status::Invalid(flag + ": no such user here (Slurm's nodes must know it too)");
    if (user->uid == 0 && own_.uid == 0) {
      return Status::Invalid(flag + ": a project's jobs never run as root");
    }
    if (user->uid != own_.uid && own_.uid != 0) {
      return Status::Invalid(flag +
                             ": only root may submit Slurm jobs as another user (sbatch "
                             "--uid), and the connector runs as uid " +
                             std::to_string(own_.uid));
    }
    projects_of[user->uid].push_back(project == "*" ? "every project not named" : project);
    run_as_[project] = *user;
  }
  for (const auto& [uid, projects] : projects_of) {
    // "*" is many projects by itself.
    const auto every = run_as_.find("*");
    if (projects.size() > 1 || (every != run_as_.end() && every->second.uid == uid)) {
      base::log::Warn("{} run as one user, uid {}: they can reach each other's work",
                      fmt::join(projects, ", "), uid);
    }
  }
  for (const auto& [project, user] : run_as_) {
    base::log::Info("{}: Slurm jobs run as {} (uid {})",
                    project == "*" ? "every project not named" : "project " + project, user.name,
                    user.uid);
  }
  const bool others = std::any_of(run_as_.begin(), run_as_.end(),
                                  [&](const auto& u) { return u.second.uid != own_.uid; });
  if (!others) {
    if (own_.uid == 0) {
      base::log::Warn(
          "every project's Slurm jobs run as root, the connector's user: give each project a "
          "user with --run-as PROJECT=USER so that they cannot reach each other");
    }
    return Status::Ok();
  }
  // Each job's user passes through the work directory to its script and its folder, and no one
  // but root may change what lies on the way (a folder swapped for a link would point the
  // connector's chown elsewhere): the work directory, its runs/ and credentials/ root's and
  // written by no one else; every folder above it the same, or sticky (/tmp); all of them
  // searchable by others. Checked on the path with its links resolved.
  std::error_code ec;
  for (const char* sub : {"/runs", "/credentials"}) fs::create_directories(o_.work_dir + sub, ec);
  const fs::path real = fs::canonical(o_.work_dir, ec);
  if (ec) return Status::Invalid("--work-dir " + o_.work_dir + ": " + ec.message());
  auto refuse = [&](const fs::path& p, const struct stat& st, const std::string& why) {
    return Status::Invalid("--work-dir " + o_.work_dir + ": " + p.string() + " (owner uid " +
                           std::to_string(st.st_uid) + ", mode " +
                           fmt::format("{:04o}", st.st_mode & 07777) + ") " + why +
                           ", and the jobs' users (--run-as) must not change what lies above "
                           "their folders");
  };
  for (const char* sub : {"/runs", "/credentials", ""}) {
    const fs::path p = real.string() + sub;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
        (st.st_mode & (S_IWGRP | S_IWOTH))) {
      return refuse(p, st, "is not a folder of root's that no one else may write");
    }
  }
  for (fs::path p = real; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      if (!(st.st_mode & S_IXOTH)) {
        return Status::Invalid("--work-dir " + o_.work_dir + ": " + p.string() +
                               " is not searchable by other users (mode " +
                               fmt::format("{:04o}", st.st_mode & 07777) +
                               "), and the jobs' users (--run-as) must pass through it");
      }
      if (st.st_uid != 0 || ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))) {
        return refuse(p, st, "is not root's alone");
      }
    }
    if (p == p.root_path()) break;
  }
  // A filesystem that squashes root (NFS's root_squash) cannot give a folder to a user.
  const JobUser& probe_user = std::find_if(run_as_.begin(), run_as_.end(), [&](const auto& u) {
                                return u.second.uid != own_.uid;
                              })->second;
  const std::string probe = o_.work_dir + "/runs/.probe-" + std::to_string(::getpid());
  ::rmdir(probe.c_str());  // a crashed start's
  Status given = MakeOwnedFolder(probe, probe_user.uid, probe_user.gid, 0700);
  ::rmdir(probe.c_str());
  if (!given.ok()) {
    return Status::Invalid("--work-dir " + o_.work_dir + ": cannot give a folder to " +
                           probe_user.name + " (" + given.message() +
                           "); jobs run as other users (--run-as) need a filesystem where root "
                           "may (not NFS with root_squash)");
  }
  return Status::Ok();
}

const JobUser* SlurmConnector::UserOf(const std::string& project) const {
  return ForProject(run_as_, project);
}

std::set<uint32_t> SlurmConnector::OtherUsers() const {
  std::set<uint32_t> uids;
  for (const auto& [project, user] : run_as_) uids.insert(user.uid);
  for (const auto& [tag, run] : runs_) {
    if (run.user) uids.insert(run.user->uid);
  }
  for (const auto& [tag, watch] : unanswered_) uids.insert(watch.uid);
  uids.erase(own_.uid);
  for (auto it = uids.begin(); it != uids.end();) {
    if (UserByUid(*it)) {
      ++it;
      continue;
    }
    base::log::Warn(
        "uid {} is not known here: its Slurm jobs cannot be seen, and its runs are "
        "left as they were",
        *it);
    it = uids.erase(it);
  }
  return uids;
}

void SlurmConnector::FindUnanswered() {
  const double now = base::WallClockNow();
  std::map<uint32_t, std::vector<std::string>> names;  // by uid
  for (const auto& [tag, run] : runs_) {
    if (run.user && run.submitted && run.slurm_id <= 0 && run.slurm_state == "SUBMITTING") {
      names[run.user->uid].push_back(TagName(tag, o_.instance));
    }
  }
  for (auto it = unanswered_.begin(); it != unanswered_.end();) {
    if (it->second.until < now || runs_.count(it->first)) {
      it = unanswered_.erase(it);
      continue;
    }
    names[it->second.uid].push_back(TagName(it->first, o_.instance));
    ++it;
  }
  for (const auto& [uid, asked] : names) {
    auto found = slurm_.JobsNamed(uid, asked);
    if (!found.ok()) {
      base::log::Warn("looking for unanswered submissions of uid {}: {}", uid,
                      found.status().message());
      continue;
    }
    // One job per run: the newest of a name is taken, and any other of that name (a job of the
    // same user named so, to be taken instead) cancelled, so that nothing of it runs unseen.
    std::map<std::string, int64_t> newest;
    for (const auto& [id, name] : *found) newest[name] = std::max(newest[name], id);
    for (const auto& [id, name] : *found) {
      if (id == newest[name]) continue;
      Status s = slurm_.Cancel(id);
      base::log::Warn("Slurm job {} of uid {} is named {} as a newer one is: cancelled{}", id, uid,
                      name, s.ok() ? "" : " (" + s.message() + ")");
    }
    for (const auto& [name, id] : newest) {
      auto parsed = ParseTagName(name);
      if (!parsed || parsed->instance != o_.instance) continue;
      auto watched = unanswered_.find(parsed->tag);
      if (watched != unanswered_.end()) {
        // Given back and gone, yet Slurm took it: taken up again, listed by no answer, fenced.
        RunState& run = runs_[parsed->tag];
        run.tag = parsed->tag;
        run.submitted = true;
        run.user = UserByUid(uid).value_or(JobUser{std::to_string(uid), uid, 0, "/"});
        run.slurm_id = id;
        run.slurm_state = "GONE";
        unanswered_.erase(watched);
        base::log::Warn(
            "Slurm took job {} generation {} after all (Slurm job {}), after it was "
            "given back",
            parsed->tag.job, parsed->tag.generation, id);
        continue;
      }
      auto it = runs_.find(parsed->tag);
      if (it == runs_.end() || it->second.slurm_id > 0) continue;
      it->second.slurm_id = id;
      // Recorded, as sbatch's answer would have been: found again after a restart by its ID.
      const std::string record = RunDir(parsed->tag) + "/slurm-job";
      if (fs::exists(record)) {
        Status s = WriteFileAs(record, std::to_string(id) + "\n", own_.uid, own_.gid, 0644);
        if (!s.ok()) base::log::Warn("{}", s.message());
      }
    }
  }
}

Status SlurmConnector::MakeRunFolder(const std::string& dir, const std::string& files,
                                     const std::string& script, const JobUser& user) const {
  // Made afresh: what an attempt that did not submit left (a job folder its user could fill,
  // or plant a file in for another user's output) goes first.
  int64_t budget = 100000;
  auto removed = RemoveTree(dir, &budget);
  if (!removed.ok()) return removed.status();
  if (!*removed) return Status(base::StatusCode::kUnavailable, dir + ": still being removed");
  // Closed to all while its script is written, then passed through (0711), never listed.
  if (Status s = MakeOwnedFolder(dir, own_.uid, own_.gid, 0700); !s.ok()) return s;
  if (Status s = MakeOwnedFolder(files, user.uid, user.gid, 0700); !s.ok()) return s;
  if (Status s = WriteFileAs(dir + "/task.sh", script, user.uid, user.gid, 0500); !s.ok()) {
    return s;
  }
  if (::chmod(dir.c_str(), 0711) != 0) return Status::Io(Errno(dir));
  return Status::Ok();
}

std::map<std::string, std::string> SlurmConnector::JobEnv(const JobUser& user) const {
  std::map<std::string, std::string> env = sbatch_env_;
  env["HOME"] = user.home;
  env["USER"] = user.name;
  env["LOGNAME"] = user.name;
  return env;
}

std::map<std::string, std::string> SlurmConnector::SbatchEnv() {
  const char* path = std::getenv("PATH");
  std::map<std::string, std::string> env = {{"PATH", path ? path : "/usr/local/bin:/usr/bin:/bin"},
                                            {"LANG", "C.UTF-8"}};
  // How Slurm's commands find the cluster when --slurm-conf does not say (SLURM_CONF, and
  // SLURM_CONF_SERVER for a configless site), and the operator's sbatch defaults
  // (SBATCH_PARTITION, SBATCH_QOS, ...): settings, not secrets.
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = kv.substr(0, eq);
    if (name.rfind("SBATCH_", 0) == 0 || name == "SLURM_CONF" || name == "SLURM_CONF_SERVER") {
      env[name] = kv.substr(eq + 1);
    }
  }
  return env;
}

}  // namespace meridian::slurm
