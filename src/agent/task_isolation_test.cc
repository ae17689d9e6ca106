// The root-only steps of task isolation, each in a child process (they cannot be undone in the
// test's own). These need root, as the agent does in production and CI: they fail, saying so,
// rather than skip.
#include "agent/task_isolation.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/testing/temp_dir.h"

namespace meridian::agent {
namespace {

constexpr uint32_t kUid = 265535;  // the default range's last: no test of the suite uses it

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `check` in a child process; its exit code (0: every check held; the check's number else).
template <class Check>
int InChild(Check check) {
  const pid_t pid = fork();
  if (pid == 0) _exit(check());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST(TaskIsolation, DroppingRootIsForGoodAndLeavesNoGroup) {
  ASSERT_EQ(::geteuid(), 0u) << "this test switches uids, which needs root (as the agent does)";
  base::testing::TempDir dir;
  const std::string secret = dir.File("secret");
  ASSERT_TRUE(WritePrivateFile(secret, "root's", 0600).ok());
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);
  EXPECT_EQ(InChild([&] {
              if (!DropPrivileges(kUid, kUid).ok()) return 1;
              if (getuid() != kUid || geteuid() != kUid || getgid() != kUid) return 2;
              if (getgroups(0, nullptr) != 0) return 3;
              if (setuid(0) == 0 || seteuid(0) == 0 || setgid(0) == 0) return 4;
              if (::open(secret.c_str(), O_RDONLY) >= 0) return 5;  // root's 0600 file
              if (::kill(1, 0) == 0) return 6;                      // another uid's process
              return 0;
            }),
            0);
  // Dropping twice fails rather than seeming to work: a task never runs as root by mistake.
  EXPECT_EQ(InChild([&] {
              if (!DropPrivileges(kUid, kUid).ok()) return 1;
              return DropPrivileges(kUid - 1, kUid - 1).ok() ? 2 : 0;
            }),
            0);
}

TEST(TaskIsolation, HiddenDevicesAreNullInTheTasksNamespaceOnlyAndStaySo) {
  ASSERT_EQ(::geteuid(), 0u) << "this test makes a mount namespace, which needs root";
  base::testing::TempDir dir;
  // A stand-in for /dev/nvidia1 (no GPU here): a file that reads as something.
  const std::string gpu = dir.File("nvidia1");
  std::ofstream(gpu) << "a GPU";
  ASSERT_EQ(::chmod(gpu.c_str(), 0666), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);
  EXPECT_EQ(InChild([&] {
              if (!IsolateMounts({gpu}).ok()) return 1;
              if (!Read(gpu).empty()) return 2;  // /dev/null now
              if (!DropPrivileges(kUid, kUid).ok()) return 3;
              if (!Read(gpu).empty()) return 4;
              if (::umount(gpu.c_str()) == 0) return 5;  // a task cannot undo it
              return Read(gpu).empty() ? 0 : 6;
            }),
            0);
  EXPECT_EQ(Read(gpu), "a GPU") << "the host's view is unchanged";
  EXPECT_TRUE(IsolateMounts({}).ok()) << "nothing to hide: no namespace";
}

// A folder of device nodes made anew in the task's namespace (/dev/nvidia-caps on a MIG
// machine): only the nodes given are there, as devices, and none can be added, even by root
// (nvidia-modprobe, setuid, makes them on demand).
TEST(TaskIsolation, AFolderOfDevicesMadeAnewHoldsItsOwnNodesOnly) {
  ASSERT_EQ(::geteuid(), 0u) << "this test makes a mount namespace, which needs root";
  base::testing::TempDir dir;
  const std::string caps = dir.File("nvidia-caps");
  ASSERT_EQ(::mkdir(caps.c_str(), 0755), 0);
  std::ofstream(caps + "/nvidia-cap1") << "mig/config";  // stand-ins for the host's nodes
  std::ofstream(caps + "/nvidia-cap147") << "another job's instance";
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);
  // Its own instance's nodes, as /dev/null's numbers (1:3) stand in for nvidia-caps'.
  const std::vector<protocol::ShimSpec::Device> own = {{"nvidia-cap138", 1, 3, 0444},
                                                       {"nvidia-cap139", 1, 3, 0444}};
  EXPECT_EQ(InChild([&] {
              if (!IsolateMounts({}, {}, {}, caps, own).ok()) return 1;
              std::vector<std::string> names;
              for (const auto& e : std::filesystem::directory_iterator(caps)) {
                names.push_back(e.path().filename());
              }
              std::sort(names.begin(), names.end());
              if (names != std::vector<std::string>{"nvidia-cap138", "nvidia-cap139"}) return 2;
              struct stat st {};
              if (::stat((caps + "/nvidia-cap139").c_str(), &st) != 0 || !S_ISCHR(st.st_mode) ||
                  major(st.st_rdev) != 1 || minor(st.st_rdev) != 3 || (st.st_mode & 0777) != 0444) {
                return 3;
              }
              // Root cannot add a node: the folder is read-only.
              if (::mknod((caps + "/nvidia-cap1").c_str(), S_IFCHR | 0444, makedev(1, 3)) == 0 ||
                  errno != EROFS) {
                return 4;
              }
              if (!DropPrivileges(kUid, kUid).ok()) return 5;
              return ::umount(caps.c_str()) == 0 ? 6 : 0;  // a task cannot undo it
            }),
            0);
  EXPECT_EQ(Read(caps + "/nvidia-cap147"), "another job's instance") << "the host's view";
}

TEST(TaskIsolation, WhatAUidLeavesIsKilledAndRemovedAsThatUid) {
  ASSERT_EQ(::geteuid(), 0u) << "this test runs processes as another uid, which needs root";
  // A process left behind by a task: it ignores everything but SIGKILL.
  const pid_t left = fork();
  if (left == 0) {
    if (!DropPrivileges(kUid, kUid).ok()) _exit(1);
    signal(SIGTERM, SIG_IGN);
    for (;;) pause();
  }
  ASSERT_GT(left, 0);
  for (int i = 0; i < 200 && !ProcessUids().count(kUid); ++i) usleep(10000);
  ASSERT_TRUE(ProcessUids().count(kUid));
  KillProcessesOf(kUid);
  int status = 0;
  ASSERT_EQ(waitpid(left, &status, 0), left);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(ProcessUids().count(kUid));
  // Its files in /tmp go; root's, and a link it planted to root's, do not.
  base::testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);
  const std::string root_file = dir.File("root's");
  std::ofstream(root_file) << "keep";
  const std::string mine = "/tmp/meridian-task-isolation-test-" + std::to_string(getpid());
  const std::string work = dir.File("work");
  ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  ASSERT_EQ(::chown(work.c_str(), kUid, kUid), 0);
  ASSERT_EQ(InChild([&] {
              if (!DropPrivileges(kUid, kUid).ok()) return 1;
              if (::mkdir(mine.c_str(), 0700) != 0) return 2;
              std::ofstream(mine + "/file") << "x";
              std::ofstream(work + "/file") << "x";
              if (::symlink(root_file.c_str(), (work + "/link").c_str()) != 0) return 3;
              return ::symlink(root_file.c_str(), (mine + "/link").c_str()) == 0 ? 0 : 4;
            }),
            0);
  RemoveFilesOf(kUid, kUid, {work}, SharedFiles::kRemove);
  EXPECT_FALSE(std::filesystem::exists(mine));
  // The work dir's folder is in root's (the task's folder): root removes that afterwards.
  EXPECT_TRUE(std::filesystem::is_empty(work));
  EXPECT_EQ(Read(root_file), "keep");
}

TEST(TaskIsolation, UidClaimsKeepTwoAgentsOfAMachineApart) {
  base::testing::TempDir dir;
  const UidClaims claims(dir.File("claims"));
  const std::string a = dir.File("agent-a"), b = dir.File("agent-b");
  for (const std::string& w : {a, b}) std::filesystem::create_directories(w + "/tasks");
  std::string error;
  EXPECT_TRUE(claims.Claim(200001, a, 1, &error)) << error;
  EXPECT_TRUE(claims.Claim(200001, a, 1, &error)) << "its own claim, again (a restart)";
  EXPECT_FALSE(claims.Claim(200001, b, 7, &error));
  EXPECT_EQ(error, "");
  EXPECT_EQ(claims.HeldByOthers(b), (std::set<uint32_t>{200001}));
  EXPECT_TRUE(claims.HeldByOthers(a).empty());
  claims.Release(200001, b);  // not b's to release
  EXPECT_FALSE(claims.Claim(200001, b, 7, &error));
  claims.Release(200001, a);
  EXPECT_TRUE(claims.Claim(200001, b, 7, &error)) << error;
  // An agent whose work dir is gone holds nothing.
  std::filesystem::remove_all(b);
  EXPECT_TRUE(claims.Claim(200001, a, 2, &error)) << error;
}

}  // namespace
}  // namespace meridian::agent
