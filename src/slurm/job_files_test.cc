#include "slurm/job_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/files.h"
#include "base/testing/temp_dir.h"

namespace meridian::slurm {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

TEST(JobFiles, AJobFileIsReadOnlyAsARegularFileOfItsUser) {
  base::testing::TempDir dir;
  const uint32_t me = ::geteuid();
  Write(dir.File("out"), "0123456789");
  int64_t size = 0;
  EXPECT_EQ(ReadJobFile(dir.File("out"), me, 2, 4, &size), "2345");
  EXPECT_EQ(size, 10);
  EXPECT_EQ(ReadJobFile(dir.File("out"), me, 8, 100), "89");
  EXPECT_EQ(ReadJobFile(dir.File("out"), me, 20, 100), "");  // past its end: nothing new
  EXPECT_EQ(ReadJobFile(dir.File("missing"), me), std::nullopt);
  // Another user's file (a hard link to it, or the file itself): not the job's.
  EXPECT_EQ(ReadJobFile(dir.File("out"), me + 1), std::nullopt);
  // A link where the output was, to a secret of the connector's: never followed.
  Write(dir.File("secret"), "root:*:20228:0:99999:7:::");
  fs::create_symlink(dir.File("secret"), dir.File("link"));
  EXPECT_EQ(ReadJobFile(dir.File("link"), me), std::nullopt);
  // A FIFO with no writer: refused at once, not waited on.
  ASSERT_EQ(::mkfifo(dir.File("fifo").c_str(), 0600), 0);
  EXPECT_EQ(ReadJobFile(dir.File("fifo"), me), std::nullopt);
  fs::create_directory(dir.File("folder"));
  EXPECT_EQ(ReadJobFile(dir.File("folder"), me), std::nullopt);
}

TEST(JobFiles, AFileIsWrittenAsItsUsersWithoutFollowingALinkLeftWhereItsTemporaryGoes) {
  base::testing::TempDir dir;
  Write(dir.File("secret"), "root's");
  // A link where the temporary file goes, to a file of root's: replaced, not written through.
  fs::create_symlink(dir.File("secret"), dir.File("task.sh.tmp"));
  const uint32_t user = 65534;  // nobody
  ASSERT_TRUE(WriteFileAs(dir.File("task.sh"), "echo hi\n", user, user, 0500).ok());
  EXPECT_EQ(base::ReadWholeFile(dir.File("secret")), "root's");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir.File("task.sh.tmp"))));
  struct stat st {};
  ASSERT_EQ(::lstat(dir.File("task.sh").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_uid, user) << "the tests run as root";
  EXPECT_EQ(st.st_mode & 07777, 0500u);
  EXPECT_EQ(ReadJobFile(dir.File("task.sh"), user), "echo hi\n");
}

TEST(JobFiles, ATreeIsRemovedWithoutFollowingItsLinks) {
  base::testing::TempDir dir;
  // What lies outside the job's folder, which its links point at.
  fs::create_directories(dir.File("outside/deep"));
  Write(dir.File("outside/keep"), "kept");
  Write(dir.File("outside/deep/keep"), "kept");
  const std::string job = dir.File("job");
  fs::create_directories(job + "/a/b/c");
  Write(job + "/a/b/c/f", "x");
  Write(job + "/top", "x");
  fs::create_directory_symlink(dir.File("outside"), job + "/to-outside");
  fs::create_directory_symlink(dir.File("outside/deep"), job + "/a/to-deep");
  fs::create_symlink(dir.File("outside/keep"), job + "/a/b/to-file");
  ASSERT_EQ(::mkfifo((job + "/a/fifo").c_str(), 0600), 0);
  int64_t budget = 1000;
  auto done = RemoveTree(job, &budget);
  ASSERT_TRUE(done.ok()) << done.status().message();
  EXPECT_TRUE(*done);
  EXPECT_FALSE(fs::exists(fs::symlink_status(job)));
  EXPECT_TRUE(fs::exists(dir.File("outside/keep")));
  EXPECT_TRUE(fs::exists(dir.File("outside/deep/keep")));
  // Gone already, or a link in its place: removed as what it is.
  done = RemoveTree(job, &budget);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  fs::create_directory_symlink(dir.File("outside"), job);
  done = RemoveTree(job, &budget);
  ASSERT_TRUE(done.ok()) << done.status().message();
  EXPECT_FALSE(fs::exists(fs::symlink_status(job)));
  EXPECT_TRUE(fs::exists(dir.File("outside/keep")));
}

TEST(JobFiles, AFolderOfAnotherOwnerMovedIntoAUsersFolderIsLeft) {
  // A user's folder S holds R, root's, with a file the user may not remove; the user moves S
  // into its job's folder for root to remove. Root's folders above job/ are walked.
  base::testing::TempDir dir;
  const uint32_t user = 65534;  // nobody
  const std::string run = dir.File("run");
  fs::create_directories(run + "/job/S/R");
  Write(run + "/job/S/R/policy", "kept");
  Write(run + "/job/mine", "x");
  ASSERT_EQ(::chown((run + "/job").c_str(), user, user), 0) << "the tests run as root";
  ASSERT_EQ(::chown((run + "/job/S").c_str(), user, user), 0);
  int64_t budget = 1000;
  auto r = RemoveTree(run, &budget);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("uid 0's, in a folder of uid 65534"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(fs::exists(run + "/job/S/R/policy"));
}

TEST(JobFiles, AFolderOfManyFilesIsRemovedABudgetAtATime) {
  base::testing::TempDir dir;
  const std::string job = dir.File("job");
  fs::create_directories(job + "/sub");
  for (int i = 0; i < 250; ++i) Write(job + "/sub/f" + std::to_string(i), "");
  int calls = 0;
  for (bool done = false; !done; ++calls) {
    ASSERT_LT(calls, 10);
    int64_t budget = 100;
    auto r = RemoveTree(job, &budget);
    ASSERT_TRUE(r.ok()) << r.status().message();
    done = *r;
  }
  EXPECT_EQ(calls, 3);
  EXPECT_FALSE(fs::exists(job));
}

TEST(JobFiles, AFolderTooDeepIsLeftSayingSo) {
  base::testing::TempDir dir;
  std::string deep = dir.File("job");
  for (int i = 0; i < 140; ++i) deep += "/d";
  fs::create_directories(deep);
  int64_t budget = 1000;
  auto r = RemoveTree(dir.File("job"), &budget);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("folders deep"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace meridian::slurm
