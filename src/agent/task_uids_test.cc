#include "agent/task_uids.h"

#include <gtest/gtest.h>

namespace meridian::agent {
namespace {

TEST(TaskUids, ParsesARangeAndRefusesWhatIsNotOne) {
  auto r = ParseUidRange("200000-265535");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->first, 200000u);
  EXPECT_EQ(r->last, 265535u);
  EXPECT_EQ(r->size(), 65536u);
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"200000", "expected FIRST-LAST"},
           {"200000-", "expected FIRST-LAST"},
           {"a-b", "expected FIRST-LAST"},
           {"-5-10", "expected FIRST-LAST"},
           {"2000 -3000", "expected FIRST-LAST"},
           {"0-65535", "uids below 1000 belong to the system"},
           {"999-2000", "uids below 1000 belong to the system"},
           {"300000-200000", "LAST < FIRST"},
           {"200000-4294967295", "expected FIRST-LAST"},  // (uid_t)-1
           {"200000-2147483647", "expected FIRST-LAST"},  // reads as -1 as int32_t
       }) {
    auto bad = ParseUidRange(c.text);
    ASSERT_FALSE(bad.ok()) << c.text;
    EXPECT_NE(bad.status().message().find(c.says), std::string::npos)
        << c.text << ": " << bad.status().message();
  }
  EXPECT_TRUE(ParseUidRange("1000-1000").ok());
}

TEST(TaskUids, OneUidPerJobTheSameForAllItsTasksNeverSharedWithAnotherJob) {
  const UidRange range{200000, 200009};  // 10 uids
  struct Case {
    const char* name;
    int64_t job;
    std::map<uint32_t, int64_t> held;
    std::set<uint32_t> busy;
    std::optional<uint32_t> want;
  };
  for (const Case& c : std::vector<Case>{
           {"a job's own number in the range", 3, {}, {}, 200003},
           {"wrapping", 13, {}, {}, 200003},
           {"job 0", 0, {}, {}, 200000},
           {"a task of the job holds one: the same", 3, {{200007, 3}}, {}, 200007},
           {"it holds one, busy with its own processes", 3, {{200007, 3}}, {200007}, 200007},
           {"taken by another job: the next", 13, {{200003, 3}}, {}, 200004},
           {"a process left on the uid: the next", 3, {}, {200003}, 200004},
           {"taken at the end: wraps to the start", 9, {{200009, 19}}, {}, 200000},
           {"held outside the range (an older --task-uids): not reused", 3, {{100, 3}}, {}, 200003},
           {"the last free one",
            5,
            {{200000, 10}, {200001, 11}, {200002, 12}, {200003, 13}, {200004, 14}, {200006, 16}},
            {200005, 200007, 200008},
            200009},
       }) {
    EXPECT_EQ(ChooseTaskUid(range, c.job, c.held, c.busy), c.want) << c.name;
  }
  std::map<uint32_t, int64_t> all;
  for (uint32_t u = range.first; u <= range.last; ++u) all[u] = 100 + u;
  EXPECT_EQ(ChooseTaskUid(range, 7, all, {}), std::nullopt) << "every uid taken";
  // Ten concurrent jobs whose ids collide in the range get ten different uids.
  std::map<uint32_t, int64_t> held;
  for (int64_t job : {1, 11, 21, 31, 2, 12, 22, 3, 4, 5}) {
    const std::optional<uint32_t> uid = ChooseTaskUid(range, job, held, {});
    ASSERT_TRUE(uid) << job;
    EXPECT_FALSE(held.count(*uid)) << job;
    held[*uid] = job;
    EXPECT_EQ(ChooseTaskUid(range, job, held, {}), uid) << "the job's next task, job " << job;
  }
  EXPECT_EQ(held.size(), 10u);
}

}  // namespace
}  // namespace meridian::agent
