#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "agent/task_uids.h"
#include "base/status.h"
#include "protocol/agent_protocol.h"

// What the agent and the shim do on the machine to keep tasks of different jobs apart
// (docs/adr/0016-task-isolation.md): the uid a task runs under, files only it and root can read,
// and nothing left of a uid once its job is gone. Everything here needs root, except
// WritePrivateFile and CloseFdsFrom; none of it keeps state, and all of it is safe to call from
// several processes at once.
namespace meridian::agent {

// Leaves root for `uid` and `gid` with no supplementary group, for good: setgroups, setgid,
// setuid, then checks that every id is the new one and that root cannot be had back. Called in
// a child process that is about to exec (or to do one thing as the task's user and exit).
base::Status DropPrivileges(uint32_t uid, uint32_t gid);

// Puts /dev/null over each of `nodes` (device nodes of GPUs the task was not given), binds each
// source of `read_only` (a dataset's folder) read-only at its target (an empty folder), and, with
// `devices_dir` (/dev/nvidia-caps on a MIG machine), puts an empty folder of its own there with
// only `devices` in it (its own MIG instances' capabilities), read-only, so that no node can be
// added (nvidia-modprobe makes them on demand), all in a mount namespace of the calling
// process's own, whose mounts follow the host's (a slave of /). Called in the task's process
// before it leaves root: without CAP_SYS_ADMIN it cannot undo them. Nothing to do: no namespace.
base::Status IsolateMounts(const std::vector<std::string>& nodes,
                           const std::vector<std::pair<std::string, std::string>>& read_only = {},
                           const std::vector<std::pair<std::string, std::string>>& read_write = {},
                           const std::string& devices_dir = "",
                           const std::vector<protocol::ShimSpec::Device>& devices = {});

// A folder the agent makes inside a folder of its own (never one a task may write in), with
// `owner` and `mode` whatever was there before: a link or a file in its place is refused.
base::Status MakeFolder(const std::string& path, uid_t owner, gid_t group, mode_t mode);

// Gives the folder `path` and everything below it to `uid`:`gid`, walking by file descriptors
// (openat with O_NOFOLLOW): a link swapped in for a folder midway, by a task that writes there at
// the same time, is never followed, and a file with other hard links is left as it is. What
// vanishes during the walk is skipped. `path` itself must be a folder, not a link.
base::Status ChownTree(const std::string& path, uint32_t uid, uint32_t gid);

// Makes everything from `path` down root's, without write permission for group and others and
// without set-uid, set-gid or sticky bits (a staged dataset: only root changes it, whoever owned
// its source), by the same walk. Fails on anything it could not change.
base::Status GiveToRootReadOnly(const std::string& path);

// Closes every file descriptor from `first` on, so that an exec'd program inherits no socket
// or file of the agent's (its connection to the server, above all).
void CloseFdsFrom(int first);

// In a child about to exec: stdin from /dev/null, stdout and stderr appended to `output` (a link
// put in its place is not followed), and no other descriptor of its parent's.
void ChildIoTo(const std::string& output);

// Writes `text` to `path` whole or not at all (a temporary file renamed over it), with `mode`
// whatever the umask, never following a link planted at the temporary name.
base::Status WritePrivateFile(const std::string& path, const std::string& text, int mode);

// Machine-wide claims on task uids, so that agents sharing a machine (a dev estate, tests) never
// give one uid to two jobs, and one never ends another's processes when it sweeps a uid: a file
// per uid in `dir` (root's, 0700) that names the claiming agent's work dir and the job. A claim
// whose work dir is gone is stale and may be taken. Claim and Release are atomic on the file
// (O_EXCL, unlink), so several agents may call them at once.
class UidClaims {
 public:
  explicit UidClaims(std::string dir = "/run/meridian/task-uids") : dir_(std::move(dir)) {}
  // Uids that other work dirs than `owner` hold; stale claims found on the way are removed.
  std::set<uint32_t> HeldByOthers(const std::string& owner) const;
  // Claims `uid` for `owner`'s `job`: false when another work dir holds it (or, with a reason in
  // `error`, when no claim can be written at all).
  bool Claim(uint32_t uid, const std::string& owner, int64_t job, std::string* error) const;
  void Release(uint32_t uid, const std::string& owner) const;

 private:
  std::string File(uint32_t uid) const { return dir_ + "/" + std::to_string(uid); }
  std::string dir_;
};

// The uids that own a process on the machine now (real, effective, saved and filesystem ids).
std::set<uint32_t> ProcessUids();

// Refuses a range that holds an account or a group of this machine's (from the passwd and group
// databases): its files and processes would be a task's.
base::Status CheckRangeIsUnused(const UidRange& range);

// Whether a process of another uid can reach `dir`: every folder above it must let others
// through (o+x). Says which one does not, and what to do.
base::Status CheckReachableByTasks(const std::string& dir);

// Ends every process of `uid` (SIGKILL from a child that has become `uid`, so that no other
// process can be hit), again until none is left or `rounds` have passed.
void KillProcessesOf(uint32_t uid, int rounds = 10);

// Empties the folders `paths` (a task's work dir) and, with kRemove, removes what `uid` owns at
// the top of /tmp, /var/tmp and /dev/shm, as `uid` (in a child that has become it, only when
// there is something to remove): a link the task planted there leads nowhere it could not
// delete itself. What it cannot remove, and the folders themselves, are left for root.
enum class SharedFiles { kKeep, kRemove };
void RemoveFilesOf(uint32_t uid, uint32_t gid, const std::vector<std::string>& paths,
                   SharedFiles shared);

}  // namespace meridian::agent
