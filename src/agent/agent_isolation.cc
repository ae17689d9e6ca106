// The agent's side of task isolation (docs/adr/0016-task-isolation.md): which uid a task runs
// under, its folder, and what is removed once it is gone. The shim does the rest (shim.cc).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "agent/agent.h"
#include "agent/task_isolation.h"
#include "base/log.h"

namespace meridian::agent {

using base::Status;

namespace {}  // namespace

Status Agent::SetUpIsolation() {
  const uid_t self = ::geteuid();
  std::string line;
  if (o_.task_uids && self == 0) {
    if (Status s = CheckRangeIsUnused(*o_.task_uids); !s.ok()) return s;
    if (Status s = CheckReachableByTasks(o_.work_dir); !s.ok()) return s;
    isolated_ = true;
    std::error_code ec;
    claim_owner_ = std::filesystem::canonical(o_.work_dir, ec).string();
    line = "task isolation on: each job's tasks run as a uid of their own from " +
           o_.task_uids->ToString() + " (its gid the same, no supplementary groups)";
  } else if (o_.task_uids && o_.task_uids_asked) {
    return Status(base::StatusCode::kFailedPrecondition,
                  "--task-uids " + o_.task_uids->ToString() + ": the agent runs as uid " +
                      std::to_string(self) +
                      ", not root, and cannot switch uids; run it as root, or leave out "
                      "--task-uids to run every task as uid " +
                      std::to_string(self));
  } else if (o_.task_uids) {
    line = "task isolation is off: the agent runs as uid " + std::to_string(self) +
           ", not root, so it cannot switch uids and every task runs as uid " +
           std::to_string(self) + " (task folders are 0700)";
  } else {
    line = "task isolation is off (--task-uids off): every task runs as uid " +
           std::to_string(self) + ", the agent's (task folders are 0700)";
  }
  // Tasks pass through to their own folders; none can list the others.
  const std::string tasks = o_.work_dir + "/tasks";
  if (::chmod(tasks.c_str(), isolated_ ? 0711 : 0700) != 0) {
    return Status::Io("--work-dir " + o_.work_dir + ": cannot set the mode of " + tasks + ": " +
                      std::strerror(errno));
  }
  base::log::Info("{}", line);
  return Status::Ok();
}

Status Agent::PrepareFolder(Task& t) {
  if (isolated_ && !t.uid) {
    std::map<uint32_t, int64_t> held;
    for (const auto& [key, other] : tasks_) {
      if (other.uid) held[*other.uid] = other.job;
    }
    // Another agent of the machine may claim a uid between the choice and the claim: again.
    for (int attempt = 0; attempt < 8 && !t.uid; ++attempt) {
      std::set<uint32_t> busy = ProcessUids();
      busy.merge(claims_.HeldByOthers(claim_owner_));
      const std::optional<uint32_t> uid = ChooseTaskUid(*o_.task_uids, t.job, held, busy);
      if (!uid) {
        return Status::Invalid("every uid of --task-uids " + o_.task_uids->ToString() +
                               " is taken on node " + o_.node);
      }
      std::string error;
      if (claims_.Claim(*uid, claim_owner_, t.job, &error)) t.uid = uid;
      if (!error.empty()) return Status::Io(error);
    }
    if (!t.uid) {
      return Status(base::StatusCode::kUnavailable,
                    "the task uids of this machine are being claimed");
    }
  }
  // root:GID 0710 — only root and the task's own group enter; 0700 without a uid of its own.
  const uid_t uid = t.uid ? *t.uid : ::geteuid();
  const gid_t gid = t.uid ? *t.uid : ::getegid();
  if (Status s = MakeFolder(t.dir, ::geteuid(), gid, t.uid ? 0710 : 0700); !s.ok()) return s;
  std::error_code ec;
  for (const char* stale : {"/exit.json", "/stop", "/notice", "/staging.json"}) {
    std::filesystem::remove(t.dir + stale, ec);
  }
  if (Status s =
          WritePrivateFile(t.dir + "/assignment.json", protocol::ToJson(t.assignment).dump(), 0600);
      !s.ok()) {
    return s;
  }
  if (Status s = WritePrivateFile(t.dir + "/restarts", std::to_string(t.restarts), 0600); !s.ok()) {
    return s;
  }
  if (t.uid) {
    if (Status s = WritePrivateFile(t.dir + "/uid", std::to_string(*t.uid), 0600); !s.ok()) {
      return s;
    }
  }
  // Its output: the task's (it may reopen its stdout), read by the agent as root to upload it.
  const std::string output = t.dir + "/output.log";
  const int fd =
      ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Io("cannot create " + output + ": " + std::strerror(errno));
  const bool owned = ::fchown(fd, uid, gid) == 0 && ::fchmod(fd, 0600) == 0;
  ::close(fd);
  if (!owned) return Status::Io("cannot give " + output + " to uid " + std::to_string(uid));
  // Its work directory, home and TMPDIR; kept across restarts in place.
  return MakeFolder(t.dir + "/work", uid, gid, 0700);
}

void Agent::RemoveFolder(const Task& t) {
  if (t.dir.empty()) return;
  const bool shared = std::any_of(tasks_.begin(), tasks_.end(), [&](const auto& other) {
    return &other.second != &t && other.second.uid == t.uid;
  });
  if (t.uid && !shared) {
    // The job's last task here: nothing of its uid may outlive it (a daemon it left, files in
    // /tmp), since the uid goes to another job next.
    KillProcessesOf(*t.uid);
    cgroups_.Remove(CgroupName(t));  // a v1 group that such a process kept busy
  }
  if (t.uid) {
    RemoveFilesOf(*t.uid, *t.uid, {t.dir + "/work"},
                  shared ? SharedFiles::kKeep : SharedFiles::kRemove);
  }
  std::error_code ec;
  std::filesystem::remove_all(t.dir, ec);
  if (t.uid && !shared && isolated_) claims_.Release(*t.uid, claim_owner_);
}

}  // namespace meridian::agent
