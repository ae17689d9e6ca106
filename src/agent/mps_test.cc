#include "agent/mps.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "agent/task_uids.h"
#include "base/testing/temp_dir.h"

namespace meridian::agent {
namespace {

// A FAKE nvidia-cuda-mps-control (MPS needs an NVIDIA GPU): `-d` writes a pid file, as the real
// daemon does, of a process that lives on; a command on stdin is logged with the pipe folder.
class MpsDaemonsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = dir_.File("control.log");
    control_ = dir_.File("control");
    std::ofstream(control_)
        << "#!/bin/sh\n"
           "if [ \"$1\" = -d ]; then\n"
           "  echo \"start $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY $(id -u)\" >> "
        << log_
        << "\n"
           "  sleep 1000 < /dev/null > /dev/null 2>&1 &\n"
           "  echo $! > \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\"\n"
           "  exit 0\n"
           "fi\n"
           "read command\n"
           "echo \"$command $CUDA_MPS_PIPE_DIRECTORY $(id -u)\" >> "
        << log_
        << "\n"
           "kill \"$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\")\"\n";
    ASSERT_EQ(::chmod(control_.c_str(), 0755), 0);
    // A daemon of a job's uid runs the program and writes its log: through the test's folder.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    std::ofstream{log_};
    ASSERT_EQ(::chmod(log_.c_str(), 0666), 0);
  }
  std::string Log() {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  base::testing::TempDir dir_;
  std::string log_;
  std::string control_;
};

TEST_F(MpsDaemonsTest, OneDaemonPerJobAndGpuInFoldersOfItsOwn) {
  const std::string root = dir_.File("mps");
  MpsDaemons daemons(control_, root);
  // As root (CI), the job's daemon runs as the job's uid, one of the task range.
  const std::optional<uint32_t> uid =
      ::geteuid() == 0 ? std::optional<uint32_t>(kDefaultTaskUids.first + 4242) : std::nullopt;
  auto a = daemons.Acquire(7, 0, "GPU-a", uid);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->pipe_dir, root + "/0/7/0/pipe");
  EXPECT_EQ(a->log_dir, root + "/0/7/0/log");
  // The job's second share of the GPU finds its daemon; another job gets one of its own.
  ASSERT_TRUE(daemons.Acquire(7, 0, "GPU-a", uid).ok());
  auto b = daemons.Acquire(8, 0, "GPU-a", std::nullopt);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->pipe_dir, root + "/0/8/0/pipe");
  EXPECT_EQ(Log(), "start GPU-a " + root + "/0/7/0/pipe " + std::to_string(uid.value_or(0)) +
                       "\nstart GPU-a " + root + "/0/8/0/pipe 0\n");
  // Tasks pass through the agent's folders without listing them; a daemon's pipe and log
  // folders are its job's alone.
  struct stat st {};
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  ASSERT_EQ(::stat((root + "/0/7").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  for (const std::string& own : {a->pipe_dir, a->log_dir}) {
    ASSERT_EQ(::stat(own.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, uid ? 0700u : 0755u) << own;
    EXPECT_EQ(st.st_uid, uid.value_or(::geteuid())) << own;
  }
  ASSERT_EQ(::stat(b->pipe_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // a job without a uid of its own
  // Released, it is told to quit; the job's next daemon on the GPU starts in new folders, since
  // the one told to quit may still drain its clients.
  daemons.Release(7, 0, uid);
  daemons.Release(7, 0, uid);  // once only
  auto again = daemons.Acquire(7, 0, "GPU-a", uid);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->pipe_dir, root + "/0/7/1/pipe");
  const std::string id = std::to_string(uid.value_or(0));
  EXPECT_EQ(Log(), "start GPU-a " + root + "/0/7/0/pipe " + id + "\nstart GPU-a " + root +
                       "/0/8/0/pipe 0\nquit " + root + "/0/7/0/pipe " + id + "\nstart GPU-a " +
                       root + "/0/7/1/pipe " + id + "\n");
  // The agent restarted: its next life takes the daemons still running again (an adopted run
  // shares the GPU on), and tells those of ended runs to quit.
  MpsDaemons next(control_, root);
  auto adopted = next.Acquire(7, 0, "GPU-a", uid);
  ASSERT_TRUE(adopted.ok());
  EXPECT_EQ(adopted->pipe_dir, root + "/0/7/1/pipe");
  next.Release(7, 0, uid);
  next.Release(8, 0, std::nullopt);
  EXPECT_EQ(Log(), "start GPU-a " + root + "/0/7/0/pipe " + id + "\nstart GPU-a " + root +
                       "/0/8/0/pipe 0\nquit " + root + "/0/7/0/pipe " + id + "\nstart GPU-a " +
                       root + "/0/7/1/pipe " + id + "\nquit " + root + "/0/7/1/pipe " + id +
                       "\nquit " + root + "/0/8/0/pipe 0\n");
}

TEST_F(MpsDaemonsTest, WithoutTheControlProgramTheShareIsNotMadeAndSaysWhy) {
  MpsDaemons daemons(dir_.File("no-such-control"), dir_.File("mps"));
  auto a = daemons.Acquire(7, 0, "GPU-a", std::nullopt);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), dir_.File("no-such-control") + " is not installed on this node");
}

}  // namespace
}  // namespace meridian::agent
