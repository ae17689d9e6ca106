#include "agent/mps.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

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
           "  echo \"start $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY\" >> "
        << log_
        << "\n"
           "  sleep 1000 < /dev/null > /dev/null 2>&1 &\n"
           "  echo $! > \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\"\n"
           "  exit 0\n"
           "fi\n"
           "read command\n"
           "echo \"$command $CUDA_MPS_PIPE_DIRECTORY\" >> "
        << log_
        << "\n"
           "kill \"$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\")\"\n";
    ASSERT_EQ(::chmod(control_.c_str(), 0755), 0);
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
  const gid_t group = ::getegid();
  auto a = daemons.Acquire(7, 0, "GPU-a", group);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->pipe_dir, root + "/0/7/0/pipe");
  EXPECT_EQ(a->log_dir, root + "/0/7/0/log");
  // The job's second share of the GPU finds its daemon; another job gets one of its own.
  ASSERT_TRUE(daemons.Acquire(7, 0, "GPU-a", group).ok());
  auto b = daemons.Acquire(8, 0, "GPU-a", std::nullopt);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->pipe_dir, root + "/0/8/0/pipe");
  EXPECT_EQ(Log(), "start GPU-a " + root + "/0/7/0/pipe\nstart GPU-a " + root + "/0/8/0/pipe\n");
  // Tasks pass through the agent's folders without listing them; a job's folder is its group's.
  struct stat st {};
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  ASSERT_EQ(::stat((root + "/0/7").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_gid, group);
  ASSERT_EQ(::stat(a->pipe_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0770u);
  ASSERT_EQ(::stat((root + "/0/8").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // a job without a uid of its own
  // Released, it is told to quit; the job's next daemon on the GPU starts in new folders, since
  // the one told to quit may still drain its clients.
  daemons.Release(7, 0);
  daemons.Release(7, 0);  // once only
  auto again = daemons.Acquire(7, 0, "GPU-a", group);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->pipe_dir, root + "/0/7/1/pipe");
  daemons.Release(7, 0);
  daemons.Release(8, 0);
  EXPECT_EQ(Log(), "start GPU-a " + root + "/0/7/0/pipe\nstart GPU-a " + root +
                       "/0/8/0/pipe\nquit " + root + "/0/7/0/pipe\nstart GPU-a " + root +
                       "/0/7/1/pipe\nquit " + root + "/0/7/1/pipe\nquit " + root + "/0/8/0/pipe\n");
}

TEST_F(MpsDaemonsTest, WithoutTheControlProgramTheShareIsNotMadeAndSaysWhy) {
  MpsDaemons daemons(dir_.File("no-such-control"), dir_.File("mps"));
  auto a = daemons.Acquire(7, 0, "GPU-a", std::nullopt);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), dir_.File("no-such-control") + " is not installed on this node");
}

}  // namespace
}  // namespace meridian::agent
