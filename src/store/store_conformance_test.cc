// The conformance suite every Store backend must pass. A backend joins by adding a factory to
// kBackends: SQLite on a file, PostgreSQL on a real server that the suite starts.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <set>
#include <thread>

#include "base/testing/temp_dir.h"
#include "store/postgres/postgres_store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/store.h"
#include "store/testing/postgres_server.h"

namespace meridian::store {
namespace {

using base::Status;

Object Doc(const std::string& kind, const std::string& name) {
  Object o;
  o.kind = kind;
  o.name = name;
  return o;
}
using base::StatusCode;

struct Backend {
  const char* name;
  // Opens the store kept under `dir`; opening again must find what was written.
  std::function<base::Result<std::unique_ptr<Store>>(const std::string& dir)> open;
};

// One PostgreSQL server for the whole suite, started by the first case that needs it.
testing::PostgresServer& SharedPostgres(std::string* error) {
  static testing::PostgresServer server;
  static const std::string started = server.Start();
  *error = started;
  return server;
}

const Backend kBackends[] = {
    {"sqlite",
     [](const std::string& dir) -> base::Result<std::unique_ptr<Store>> {
       auto s = SqliteStore::Open(dir + "/meridian.db");
       if (!s.ok()) return s.status();
       return std::unique_ptr<Store>(std::move(s.value()));
     }},
    // A database per case, named after the case's folder: opening again finds it.
    {"postgres",
     [](const std::string& dir) -> base::Result<std::unique_ptr<Store>> {
       std::string error;
       testing::PostgresServer& server = SharedPostgres(&error);
       if (!error.empty()) return base::Status(base::StatusCode::kUnavailable, error);
       const std::string db = "t" + std::to_string(std::hash<std::string>{}(dir));
       const std::string conninfo = server.Database(db, &error);
       if (!error.empty()) return base::Status(base::StatusCode::kUnavailable, error);
       auto s = PostgresStore::Open(conninfo);
       if (!s.ok()) return s.status();
       // One server on the database: it leads, and may write.
       auto leads = (*s)->Campaign("http://127.0.0.1:1");
       if (!leads.ok()) return leads.status();
       if (!*leads) return base::Status::Internal("another store leads " + db);
       return std::unique_ptr<Store>(std::move(s.value()));
     }},
};

class StoreConformance : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    auto s = GetParam().open(dir_.path());
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(s.value());
  }
  void Reopen() {
    store_.reset();
    auto s = GetParam().open(dir_.path());
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(s.value());
  }
  int64_t Submit(const std::string& project, const std::string& user = "alice") {
    int64_t id = 0;
    Status s = store_->Write([&](Tx& tx) {
      JobRecord j;
      j.name = "job";
      j.project = project;
      j.user = user;
      j.spec = {{"gpus", 1}};
      auto r = tx.InsertJob(j);
      if (!r.ok()) return r.status();
      id = *r;
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s.message();
    return id;
  }

  base::testing::TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreConformance, ObjectsHaveVersionsAndOptimisticConcurrency) {
  Object o{"Project", "vision", {{"team", "product"}}, 0, 10, "admin"};
  int64_t v1 = 0;
  ASSERT_TRUE(store_
                  ->Write([&](Tx& tx) {
                    auto r = tx.PutObject(o, kMustNotExist);
                    if (r.ok()) v1 = *r;
                    return r.status();
                  })
                  .ok());
  EXPECT_EQ(v1, 1);
  // Creating it again, or writing over a version that moved, fails and changes nothing.
  Status again = store_->Write([&](Tx& tx) { return tx.PutObject(o, kMustNotExist).status(); });
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  o.spec["team"] = "lab";
  ASSERT_TRUE(store_->Write([&](Tx& tx) { return tx.PutObject(o, v1).status(); }).ok());
  Status stale = store_->Write([&](Tx& tx) { return tx.PutObject(o, v1).status(); });
  EXPECT_EQ(stale.code(), StatusCode::kConflict) << stale.message();
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto got = tx.GetObject("Project", "vision");
                    EXPECT_TRUE(got.ok());
                    EXPECT_EQ(got->version, 2);
                    EXPECT_EQ(got->spec["team"], "lab");
                    EXPECT_EQ(got->updated_by, "admin");
                    EXPECT_EQ(tx.GetObject("Project", "none").status().code(),
                              StatusCode::kNotFound);
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(store_->Write([&](Tx& tx) { return tx.DeleteObject("Project", "vision", 1); }).code(),
            StatusCode::kConflict);
  ASSERT_TRUE(store_->Write([&](Tx& tx) { return tx.DeleteObject("Project", "vision", 2); }).ok());
  EXPECT_EQ(store_->Write([&](Tx& tx) { return tx.DeleteObject("Project", "vision", kAnyVersion); })
                .code(),
            StatusCode::kNotFound);
}

TEST_P(StoreConformance, ListsObjectsByKindAndName) {
  ASSERT_TRUE(store_
                  ->Write([&](Tx& tx) {
                    for (const char* n : {"b", "a", "c"}) {
                      if (auto r = tx.PutObject(Doc("Team", n), kAnyVersion); !r.ok()) {
                        return r.status();
                      }
                    }
                    return tx.PutObject(Doc("Organization", "acme"), kAnyVersion).status();
                  })
                  .ok());
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto teams = tx.ListObjects("Team");
                    EXPECT_TRUE(teams.ok());
                    std::vector<std::string> names;
                    for (const Object& o : *teams) names.push_back(o.name);
                    EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c"}));
                    EXPECT_EQ(tx.ListObjects("")->size(), 4u);
                    return Status::Ok();
                  })
                  .ok());
}

TEST_P(StoreConformance, AFailingWriteKeepsNothingOfWhatItDid) {
  Status s = store_->Write([&](Tx& tx) {
    if (auto r = tx.PutObject(Doc("Team", "half"), kAnyVersion); !r.ok()) return r.status();
    return Status::Invalid("second document is bad");
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    EXPECT_EQ(tx.GetObject("Team", "half").status().code(), StatusCode::kNotFound);
                    return Status::Ok();
                  })
                  .ok());
}

TEST_P(StoreConformance, SamplesInTimeOrderReplacedAndPruned) {
  ASSERT_TRUE(store_
                  ->Write([&](Tx& tx) {
                    for (double at : {30.0, 10.0, 20.0}) {
                      if (Status s = tx.PutSample(at, {{"v", at}}); !s.ok()) return s;
                    }
                    return tx.PutSample(20, {{"v", "again"}});
                  })
                  .ok());
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto from15 = tx.ListSamples(15);
                    EXPECT_EQ(from15->size(), 2u);
                    EXPECT_EQ((*from15)[0].first, 20);
                    EXPECT_EQ((*from15)[0].second["v"], "again");
                    EXPECT_EQ((*from15)[1].first, 30);
                    EXPECT_EQ(tx.ListSamples(0)->size(), 3u);
                    EXPECT_FALSE(tx.PutSample(40, {}).ok());  // a read cannot write
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_TRUE(store_->Write([&](Tx& tx) { return tx.PruneSamples(25); }).ok());
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto left = tx.ListSamples(0);
                    EXPECT_EQ(left->size(), 1u);
                    EXPECT_EQ(left->front().first, 30);
                    return Status::Ok();
                  })
                  .ok());
}

TEST_P(StoreConformance, FairShareUsageIsReplacedWhole) {
  std::vector<FairShareUsage> first = {{"research", 1e6, 2e6, 3e6, 100}, {"lab", 5, 6, 7, 100}};
  ASSERT_TRUE(store_->Write([&](Tx& tx) { return tx.PutFairShare(first); }).ok());
  std::vector<FairShareUsage> second = {{"vision", 8, 9, 10, 200}, {"research", 11, 12, 13, 200}};
  ASSERT_TRUE(store_->Write([&](Tx& tx) { return tx.PutFairShare(second); }).ok());
  auto got = ReadValue(*store_, [](Tx& tx) { return tx.ListFairShare(); });
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 2u) << "lab was not in the second write";
  EXPECT_EQ((*got)[0].scope, "research");
  EXPECT_DOUBLE_EQ((*got)[0].gpu, 11);
  EXPECT_DOUBLE_EQ((*got)[0].mem, 13);
  EXPECT_DOUBLE_EQ((*got)[0].at, 200);
  EXPECT_EQ((*got)[1].scope, "vision");
  EXPECT_FALSE(store_->Read([&](Tx& tx) { return tx.PutFairShare(first); }).ok());
}

// Accounting records: every field kept, listed by seq, by the window they overlap, in pages;
// kept across a reopening; a read cannot append one.
TEST_P(StoreConformance, UsageRecordsAreKeptAndListedByTheWindowTheyOverlap) {
  auto record = [](int64_t job, double start, double end) {
    UsageRecord u;
    u.job = job;
    u.generation = 2;
    u.task = 1;
    u.project = "research";
    u.user = "alice";
    u.cluster = "cloud";
    u.pool = "h200";
    u.node = "h200-abc";
    u.gpu_model = "H200-141GB";
    u.gpus = 0.5;
    u.cpu_milli = 4000;
    u.memory_mib = 8192;
    u.price_per_gpu_hour = 6.25;
    u.started_at = start;
    u.ended_at = end;
    u.outcome = "Requeued";
    return u;
  };
  ASSERT_TRUE(store_
                  ->Write([&](Tx& tx) {
                    for (const UsageRecord& u :
                         {record(1, 100, 200), record(2, 150, 400), record(3, 500, 600)}) {
                      auto seq = tx.AppendUsage(u);
                      if (!seq.ok()) return seq.status();
                    }
                    return Status::Ok();
                  })
                  .ok());
  Reopen();
  auto list = [&](double from, double to, int64_t after, int32_t limit) {
    UsageFilter f;
    f.from = from;
    f.to = to;
    f.after_seq = after;
    f.limit = limit;
    auto got = ReadValue(*store_, [&](Tx& tx) { return tx.ListUsage(f); });
    EXPECT_TRUE(got.ok()) << got.status().message();
    std::vector<int64_t> jobs;
    for (const UsageRecord& u : got.value()) jobs.push_back(u.job);
    return std::make_pair(jobs, got.value());
  };
  auto [all, records] = list(0, 0, 0, 100);
  EXPECT_EQ(all, (std::vector<int64_t>{1, 2, 3}));
  const UsageRecord& first = records.at(0);
  EXPECT_GT(first.seq, 0);
  EXPECT_EQ(first.generation, 2);
  EXPECT_EQ(first.task, 1);
  EXPECT_EQ(first.user, "alice");
  EXPECT_EQ(first.pool, "h200");
  EXPECT_EQ(first.node, "h200-abc");
  EXPECT_EQ(first.gpu_model, "H200-141GB");
  EXPECT_DOUBLE_EQ(first.gpus, 0.5);
  EXPECT_EQ(first.cpu_milli, 4000);
  EXPECT_EQ(first.memory_mib, 8192);
  EXPECT_DOUBLE_EQ(first.price_per_gpu_hour, 6.25);
  EXPECT_DOUBLE_EQ(first.started_at, 100);
  EXPECT_DOUBLE_EQ(first.ended_at, 200);
  EXPECT_EQ(first.outcome, "Requeued");
  // Overlapping [300, 550): the second (ended after 300) and the third (started before 550).
  EXPECT_EQ(list(300, 550, 0, 100).first, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(list(200, 0, 0, 100).first, (std::vector<int64_t>{2, 3})) << "ended at 200: before";
  // By project.
  UsageFilter vision;
  vision.projects = {"vision", "other"};
  auto none = ReadValue(*store_, [&](Tx& tx) { return tx.ListUsage(vision); });
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->empty());
  UsageFilter research;
  research.projects = {"research"};
  auto mine = ReadValue(*store_, [&](Tx& tx) { return tx.ListUsage(research); });
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  EXPECT_EQ(mine->size(), 3u);
  // Pages by seq.
  EXPECT_EQ(list(0, 0, 0, 2).first, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(list(0, 0, records.at(1).seq, 2).first, (std::vector<int64_t>{3}));
  EXPECT_FALSE(store_->Read([&](Tx& tx) { return tx.AppendUsage(record(4, 1, 2)).status(); }).ok());
}

TEST_P(StoreConformance, SubmissionKeysAreOnePerUserAndKeptADay) {
  auto put = [&](const std::string& user, const std::string& key, int64_t job, double at) {
    return store_->Write([&](Tx& tx) { return tx.PutSubmission(user, key, job, at); });
  };
  auto find = [&](const std::string& user, const std::string& key, double now) {
    return ReadValue(*store_, [&](Tx& tx) { return tx.FindSubmission(user, key, now); });
  };
  ASSERT_TRUE(put("alice", "k1", 7, 1000).ok());
  ASSERT_TRUE(put("bob", "k1", 8, 1000).ok()) << "keys are per user";
  EXPECT_FALSE(put("alice", "k1", 9, 1001).ok()) << "a key names one submission";
  auto alice = find("alice", "k1", 1002);
  ASSERT_TRUE(alice.ok()) << alice.status().message();
  EXPECT_EQ(*alice, 7);
  EXPECT_EQ(*find("bob", "k1", 1002), 8);
  EXPECT_EQ(find("alice", "k2", 1002).status().code(), base::StatusCode::kNotFound);
  // A day later the key is forgotten, and the next write drops it.
  const double later = 1000 + kSubmissionKeySeconds + 1;
  EXPECT_EQ(find("alice", "k1", later).status().code(), base::StatusCode::kNotFound);
  ASSERT_TRUE(put("carol", "k3", 10, later).ok());
  ASSERT_TRUE(put("alice", "k1", 11, later).ok()) << "the old one was dropped";
  EXPECT_EQ(*find("alice", "k1", later), 11);
  EXPECT_FALSE(store_->Read([&](Tx& tx) { return tx.PutSubmission("x", "y", 1, 1); }).ok());
}

TEST_P(StoreConformance, ReadsCannotWrite) {
  Status s =
      store_->Read([&](Tx& tx) { return tx.PutObject(Doc("Team", "x"), kAnyVersion).status(); });
  EXPECT_FALSE(s.ok());
}

TEST_P(StoreConformance, JobsFilterPaginateAndUpdateWithVersions) {
  for (int i = 0; i < 5; ++i) Submit(i % 2 ? "a" : "b", i < 3 ? "alice" : "bob");
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    JobFilter f;
                    f.projects = {"b"};
                    auto b = tx.ListJobs(f);
                    EXPECT_EQ(b->size(), 3u);
                    f = {};
                    f.limit = 2;
                    auto page1 = tx.ListJobs(f);
                    EXPECT_EQ(page1->size(), 2u);
                    f.after_id = page1->back().id;
                    auto page2 = tx.ListJobs(f);
                    EXPECT_EQ(page2->size(), 2u);
                    EXPECT_GT(page2->front().id, page1->back().id);
                    f = {};
                    f.user = "bob";
                    EXPECT_EQ(tx.ListJobs(f)->size(), 2u);
                    f = {};
                    f.limit = 2;
                    f.newest_first = true;
                    auto newest = tx.ListJobs(f);
                    EXPECT_EQ(newest->size(), 2u);
                    EXPECT_EQ(newest->front().id, 5);
                    EXPECT_EQ(newest->back().id, 4);
                    f.before_id = newest->back().id;  // the next page, newest first
                    auto older = tx.ListJobs(f);
                    EXPECT_EQ(older->size(), 2u);
                    EXPECT_EQ(older->empty() ? 0 : older->front().id, 3);
                    // A byte bound ends the list at the job that reaches it, and says so.
                    f = {};
                    bool ended = false;
                    f.ended_by_bytes = &ended;
                    f.max_bytes = 1;
                    EXPECT_EQ(tx.ListJobs(f)->size(), 1u);
                    EXPECT_TRUE(ended);
                    f.max_bytes = 1 << 20;
                    EXPECT_EQ(tx.ListJobs(f)->size(), 5u);
                    EXPECT_FALSE(ended);
                    return Status::Ok();
                  })
                  .ok());
  JobRecord j;
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto r = tx.GetJob(1);
                    if (r.ok()) j = *r;
                    return r.status();
                  })
                  .ok());
  EXPECT_EQ(j.phase, "Pending");
  EXPECT_EQ(j.version, 1);
  EXPECT_EQ(j.spec["gpus"], 1);
  j.phase = "Running";
  j.allocation = Json::array({{{"node", "n1"}}});
  j.generation = 1;
  EXPECT_EQ(j.status, Json::object());
  j.status = {{"tasks", Json::array({{{"state", "Running"}}})}};
  ASSERT_TRUE(store_->Write([&](Tx& tx) { return tx.UpdateJob(j, 1).status(); }).ok());
  EXPECT_EQ(store_->Write([&](Tx& tx) { return tx.UpdateJob(j, 1).status(); }).code(),
            StatusCode::kConflict);
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto r = tx.GetJob(1);
                    EXPECT_EQ(r->phase, "Running");
                    EXPECT_EQ(r->allocation[0]["node"], "n1");
                    EXPECT_EQ(r->generation, 1);
                    EXPECT_EQ(r->status["tasks"][0]["state"], "Running");
                    EXPECT_EQ(r->version, 2);
                    EXPECT_EQ(tx.GetJob(99).status().code(), StatusCode::kNotFound);
                    JobFilter running;
                    running.phases = {"Running"};
                    EXPECT_EQ(tx.ListJobs(running)->size(), 1u);
                    auto counts = tx.CountJobsByPhase();
                    EXPECT_EQ(counts->size(), 2u);
                    return Status::Ok();
                  })
                  .ok());
}

// An array's elements: the first one's id is the array's; listings can take an array as one
// row, list its elements or find one by index, and count them by phase.
TEST_P(StoreConformance, ArraysAreListedWholeOrByElementAndCounted) {
  const int64_t before = Submit("p1");
  std::vector<int64_t> ids;
  ASSERT_TRUE(store_
                  ->Write([&](Tx& tx) {
                    for (int64_t i = 0; i < 5; ++i) {
                      JobRecord j;
                      j.project = "p1";
                      j.phase = i < 2 ? "Running" : "Pending";
                      j.array_id = i == 0 ? kNewArray : ids.front();
                      j.array_index = 10 + i;
                      auto id = tx.InsertJob(j);
                      if (!id.ok()) return id.status();
                      ids.push_back(*id);
                    }
                    return Status::Ok();
                  })
                  .ok());
  const int64_t after = Submit("p1");
  auto first = ReadValue(*store_, [&](Tx& tx) { return tx.GetJob(ids[0]); });
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->array_id, ids[0]);
  EXPECT_EQ(first->array_index, 10);
  JobFilter whole;
  whole.arrays_as_one = true;
  auto listed = ReadValue(*store_, [&](Tx& tx) { return tx.ListJobs(whole); });
  ASSERT_TRUE(listed.ok());
  std::vector<int64_t> got;
  for (const JobRecord& j : *listed) got.push_back(j.id);
  EXPECT_EQ(got, (std::vector<int64_t>{before, ids[0], after}));
  // With phases, an array is listed when any of its elements is in one of them.
  whole.phases = {"Running"};
  listed = ReadValue(*store_, [&](Tx& tx) { return tx.ListJobs(whole); });
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().id, ids[0]);
  whole.phases = {"Succeeded"};
  listed = ReadValue(*store_, [&](Tx& tx) { return tx.ListJobs(whole); });
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  JobFilter elements;
  elements.array_id = ids[0];
  auto all = ReadValue(*store_, [&](Tx& tx) { return tx.ListJobs(elements); });
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ(all->back().array_index, 14);
  elements.array_index = 13;
  auto one = ReadValue(*store_, [&](Tx& tx) { return tx.ListJobs(elements); });
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(one->front().id, ids[3]);
  auto counts = ReadValue(*store_, [&](Tx& tx) { return tx.CountArrayByPhase(ids[0]); });
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts,
            (std::vector<std::pair<std::string, int64_t>>{{"Pending", 3}, {"Running", 2}}));
  auto none = ReadValue(*store_, [&](Tx& tx) { return tx.CountArrayByPhase(before); });
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << "a job that is no array has no elements";
}

TEST_P(StoreConformance, EventsAreOrderedAndScopedByProject) {
  ASSERT_TRUE(store_
                  ->Write([&](Tx& tx) {
                    for (const char* p : {"a", "b", "", "a"}) {
                      Event e;
                      e.object_kind = "Job";
                      e.object_name = "1";
                      e.project = p;
                      e.reason = "Submitted";
                      if (auto r = tx.AppendEvent(e); !r.ok()) return r.status();
                    }
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    EventFilter all;
                    auto events = tx.ListEvents(all);
                    EXPECT_EQ(events->size(), 4u);
                    EXPECT_LT((*events)[0].seq, (*events)[1].seq);
                    EventFilter only_a;
                    only_a.all_projects = false;
                    only_a.projects = {"a"};
                    EXPECT_EQ(tx.ListEvents(only_a)->size(), 2u);
                    EventFilter none;
                    none.all_projects = false;
                    EXPECT_EQ(tx.ListEvents(none)->size(), 0u);
                    EventFilter after;
                    after.after_seq = (*events)[2].seq;
                    EXPECT_EQ(tx.ListEvents(after)->size(), 1u);
                    EXPECT_EQ(*tx.LatestEventSeq(), (*events)[3].seq);
                    return Status::Ok();
                  })
                  .ok());
}

// What authentication keeps in memory holds while the credentials generation stands: it moves
// by the time a write of a token or a User returns, and only then.
TEST_P(StoreConformance, TheCredentialsGenerationMovesWithTokensAndUsersOnly) {
  uint64_t seen = store_->CredentialsGeneration();
  auto write = [&](const std::function<Status(Tx&)>& fn) {
    EXPECT_TRUE(store_->Write(fn).ok());
    const uint64_t now = store_->CredentialsGeneration();
    const bool moved = now != seen;
    seen = now;
    return moved;
  };
  EXPECT_TRUE(write([](Tx& tx) { return tx.PutToken({"t1", "alice", "h1", "", 1, 0, false}); }));
  EXPECT_TRUE(write([](Tx& tx) { return tx.PutToken({"t1", "alice", "h1", "", 1, 0, true}); }));
  const Object user{"User", "alice", {{"roles", Json::array()}}, 0, 1, "admin"};
  EXPECT_TRUE(write([&](Tx& tx) { return tx.PutObject(user, kAnyVersion).status(); }));
  EXPECT_TRUE(write([](Tx& tx) { return tx.DeleteObject("User", "alice", kAnyVersion); }));
  // Other writes leave it.
  const Object team{"Team", "vision", Json::object(), 0, 1, "admin"};
  EXPECT_FALSE(write([&](Tx& tx) { return tx.PutObject(team, kAnyVersion).status(); }));
  EXPECT_FALSE(write([](Tx& tx) { return tx.PutSample(5, Json::object()); }));
  EXPECT_FALSE(write([](Tx& tx) { return tx.DeleteObject("Team", "vision", kAnyVersion); }));
}

TEST_P(StoreConformance, TokensAuditAndRevisions) {
  ASSERT_TRUE(
      store_
          ->Write([&](Tx& tx) {
            if (Status s = tx.PutToken({"t1", "alice", "h1", "laptop", 1, 0, false}); !s.ok()) {
              return s;
            }
            if (Status s = tx.PutToken({"t2", "bob", "h2", "", 2, 100, false}); !s.ok()) {
              return s;
            }
            AuditEntry a;
            a.user = "alice";
            a.action = "jobs.create";
            a.code = 201;
            a.result = "allowed";
            if (auto r = tx.AppendAudit(a); !r.ok()) return r.status();
            a.result = "denied";
            a.code = 403;
            if (auto r = tx.AppendAudit(a); !r.ok()) return r.status();
            Revision rev;
            rev.author = "alice";
            rev.documents = Json::array({{{"kind", "Team"}, {"name", "x"}}});
            return tx.AddRevision(rev).status();
          })
          .ok());
  TokenRecord revoked{"t1", "alice", "h1", "laptop", 1, 0, true};
  ASSERT_TRUE(store_->Write([&](Tx& tx) { return tx.PutToken(revoked); }).ok());
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto t = tx.GetToken("t1");
                    EXPECT_TRUE(t->revoked);
                    EXPECT_EQ(t->secret_hash, "h1");
                    EXPECT_EQ(tx.ListTokens("bob")->size(), 1u);
                    EXPECT_EQ(tx.ListTokens("")->size(), 2u);
                    AuditFilter denied;
                    denied.result = "denied";
                    auto a = tx.ListAudit(denied);
                    EXPECT_EQ(a->size(), 1u);
                    EXPECT_EQ((*a)[0].code, 403);
                    AuditFilter newest;
                    newest.limit = 1;
                    newest.newest_first = true;
                    auto last = tx.ListAudit(newest);
                    EXPECT_EQ(last->size(), 1u);
                    EXPECT_EQ((*last)[0].code, 403);
                    auto revs = tx.ListRevisions(10);
                    EXPECT_EQ(revs->size(), 1u);
                    EXPECT_EQ((*revs)[0].number, 1);
                    auto rev = tx.GetRevision(1);
                    EXPECT_EQ(rev->documents[0]["name"], "x");
                    EXPECT_EQ(tx.GetRevision(2).status().code(), StatusCode::kNotFound);
                    return Status::Ok();
                  })
                  .ok());
}

TEST_P(StoreConformance, WhatWasAcknowledgedSurvivesReopening) {
  const int64_t id = Submit("a");
  Reopen();
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    auto j = tx.GetJob(id);
                    EXPECT_TRUE(j.ok());
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_GT(store_->SchemaVersion(), 0);
  EXPECT_GT(Submit("a"), id);  // ids are never reused
}

TEST_P(StoreConformance, ConcurrentWritersAllLandWithDistinctIds) {
  constexpr int kThreads = 8, kEach = 50;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<int64_t> ids;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        int64_t id = Submit("p");
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(id);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ids.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(ids.count(0), 0u);
  ASSERT_TRUE(store_
                  ->Read([&](Tx& tx) {
                    JobFilter f;
                    f.limit = 1000;
                    EXPECT_EQ(tx.ListJobs(f)->size(), static_cast<size_t>(kThreads * kEach));
                    return Status::Ok();
                  })
                  .ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreConformance, ::testing::ValuesIn(kBackends),
                         [](const auto& info) { return std::string(info.param.name); });

// PostgreSQL only: a restart of its server (a failover, an upgrade) is not the store's end.
// Connections it closed are reconnected before their next transaction, and what was
// acknowledged before is there after.
TEST(PostgresStore, ResumesAfterItsServerRestarts) {
  testing::PostgresServer server;
  ASSERT_EQ(server.Start(), "");
  std::string error;
  const std::string conninfo = server.Database("restarts", &error);
  ASSERT_EQ(error, "");
  auto opened = PostgresStore::Open(conninfo);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  auto leads = (*opened)->Campaign("http://127.0.0.1:1");
  ASSERT_TRUE(leads.ok() && *leads);
  Store& store = **opened;
  auto insert = [&] { return store.Write([](Tx& tx) { return tx.InsertJob({}).status(); }); };
  auto count = [&] {
    auto jobs = ReadValue(store, [](Tx& tx) { return tx.ListJobs({}); });
    return jobs.ok() ? static_cast<int>(jobs->size()) : -1;
  };
  ASSERT_TRUE(insert().ok());
  ASSERT_EQ(count(), 1);
  ASSERT_EQ(server.Restart(), "");
  Status written = insert();
  EXPECT_TRUE(written.ok()) << written.message();
  EXPECT_EQ(count(), 2);
  // Down: refused as unavailable, with where, and nothing half done; up again: on it goes.
  ASSERT_EQ(server.Stop(), "");
  written = insert();
  EXPECT_EQ(written.code(), StatusCode::kUnavailable) << written.message();
  EXPECT_NE(written.message().find("PostgreSQL at " + server.socket_dir()), std::string::npos)
      << written.message();
  ASSERT_EQ(server.Start(), "");
  written = insert();
  EXPECT_TRUE(written.ok()) << written.message();
  EXPECT_EQ(count(), 3);
}

// Runs `sql` on a connection of its own; its first value, or "" (an error goes to the test).
std::string Sql(const std::string& conninfo, const std::string& sql) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  PGresult* r = PQexec(c, sql.c_str());
  EXPECT_TRUE(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK)
      << sql << ": " << PQresultErrorMessage(r);
  std::string first = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && PQnfields(r) > 0
                          ? PQgetvalue(r, 0, 0)
                          : "";
  PQclear(r);
  PQfinish(c);
  return first;
}

// Ends the leader's session, as PostgreSQL does when the leader's server is killed, while the
// leader's writer connection lives on (the late write of a leader that was paused or cut off).
void EndLeaderSession(const std::string& conninfo) {
  EXPECT_EQ(Sql(conninfo,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = "
                "'advisory' AND granted"),
            "1");
}

// Campaigns until `store` leads (the ended session's lock is released as its backend exits).
bool LeadsWithin(PostgresStore& store, const std::string& url, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto leads = store.Campaign(url);
    if (leads.ok() && *leads) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

Status InsertNamed(Store& store, const std::string& name) {
  return store.Write([&](Tx& tx) {
    JobRecord j;
    j.name = name;
    return tx.InsertJob(j).status();
  });
}

std::multiset<std::string> JobNames(Store& store) {
  std::multiset<std::string> names;
  auto jobs = ReadValue(store, [](Tx& tx) { return tx.ListJobs({}); });
  EXPECT_TRUE(jobs.ok()) << jobs.status().message();
  if (jobs.ok()) {
    for (const JobRecord& j : *jobs) names.insert(j.name);
  }
  return names;
}

// PostgreSQL only: two stores on one database (two servers). One leads and writes; the other's
// writes are refused until it leads. Once it has taken over, a late write of the first (its
// leader session gone, its writer connection not) is refused by the database, not by timing,
// and nothing of it is stored.
TEST(PostgresStore, ADeposedLeadersLateWriteIsRefusedByTheDatabase) {
  testing::PostgresServer server;
  ASSERT_EQ(server.Start(), "");
  std::string error;
  const std::string conninfo = server.Database("leaders", &error);
  ASSERT_EQ(error, "");
  auto a = PostgresStore::Open(conninfo);
  auto b = PostgresStore::Open(conninfo);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::string> deposed;
  (*a)->OnDeposed([&](const std::string& why) { deposed.push_back(why); });

  Status w = InsertNamed(**a, "before");
  EXPECT_EQ(w.code(), StatusCode::kUnavailable) << w.message();
  EXPECT_NE(w.message().find("not the leader"), std::string::npos) << w.message();
  auto leads = (*a)->Campaign("http://a:7070");
  ASSERT_TRUE(leads.ok() && *leads) << leads.status().message();
  EXPECT_EQ((*a)->epoch(), 1);
  leads = (*b)->Campaign("http://b:7070");
  ASSERT_TRUE(leads.ok()) << leads.status().message();
  EXPECT_FALSE(*leads);
  ASSERT_TRUE(InsertNamed(**a, "a1").ok());
  w = InsertNamed(**b, "b0");
  EXPECT_EQ(w.code(), StatusCode::kUnavailable) << w.message();
  auto leader = (*b)->Leader();
  ASSERT_TRUE(leader.ok()) << leader.status().message();
  EXPECT_EQ(leader->epoch, 1);
  EXPECT_EQ(leader->url, "http://a:7070");

  EndLeaderSession(conninfo);
  ASSERT_TRUE(LeadsWithin(**b, "http://b:7070", std::chrono::seconds(10)));
  EXPECT_EQ((*b)->epoch(), 2);
  EXPECT_EQ((*b)->Leader()->url, "http://b:7070");
  // `a` has not been told; the database refuses its write.
  EXPECT_EQ((*a)->epoch(), 1);
  w = InsertNamed(**a, "a-late");
  EXPECT_EQ(w.code(), StatusCode::kUnavailable) << w.message();
  EXPECT_NE(w.message().find("deposed: this server led at epoch 1"), std::string::npos)
      << w.message();
  EXPECT_EQ((*a)->epoch(), -1);
  ASSERT_EQ(deposed.size(), 1u);
  // Deposed for good: neither its writes nor its campaigns go through again.
  EXPECT_EQ(InsertNamed(**a, "a-later").code(), StatusCode::kUnavailable);
  EXPECT_FALSE((*a)->Campaign("http://a:7070").ok());
  EXPECT_FALSE((*a)->CheckLeading().ok());
  ASSERT_TRUE(InsertNamed(**b, "b1").ok());
  EXPECT_TRUE((*b)->CheckLeading().ok());
  EXPECT_EQ(JobNames(**b), (std::multiset<std::string>{"a1", "b1"}));
  EXPECT_EQ(deposed.size(), 1u);
}

// PostgreSQL only: the new leader's epoch bump waits for the old leader's write in flight, which
// then commits (it was made under its epoch), and the old leader's next write is refused: no
// write of the old leader commits after the new one leads.
TEST(PostgresStore, TheEpochBumpWaitsForTheOldLeadersWriteInFlight) {
  testing::PostgresServer server;
  ASSERT_EQ(server.Start(), "");
  std::string error;
  const std::string conninfo = server.Database("inflight", &error);
  ASSERT_EQ(error, "");
  auto a = PostgresStore::Open(conninfo);
  auto b = PostgresStore::Open(conninfo);
  ASSERT_TRUE(a.ok() && b.ok());
  auto leads = (*a)->Campaign("http://a:7070");
  ASSERT_TRUE(leads.ok() && *leads);

  std::promise<void> entered, release;
  std::future<Status> in_flight = std::async(std::launch::async, [&] {
    return (*a)->Write([&](Tx& tx) {
      entered.set_value();
      release.get_future().wait();
      JobRecord j;
      j.name = "in-flight";
      return tx.InsertJob(j).status();
    });
  });
  entered.get_future().wait();
  EndLeaderSession(conninfo);
  std::future<bool> takeover = std::async(std::launch::async, [&] {
    return LeadsWithin(**b, "http://b:7070", std::chrono::seconds(20));
  });
  // The bump is blocked on the leader row, which the write in flight holds.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string waiting = "0";
  while (waiting == "0" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    waiting = Sql(conninfo,
                  "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                  "query LIKE 'UPDATE leader%'");
  }
  ASSERT_EQ(waiting, "1");
  EXPECT_EQ(takeover.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  release.set_value();
  Status w = in_flight.get();
  EXPECT_TRUE(w.ok()) << w.message();
  ASSERT_TRUE(takeover.get());
  EXPECT_EQ((*b)->epoch(), 2);
  w = InsertNamed(**a, "after");
  EXPECT_NE(w.message().find("deposed"), std::string::npos) << w.message();
  EXPECT_EQ(JobNames(**b), (std::multiset<std::string>{"in-flight"}));
}

// SQLite only: the writer commits concurrent writes together, and refuses a schema from the
// future rather than corrupting it.
TEST(SqliteStore, GroupCommitsConcurrentWriters) {
  base::testing::TempDir dir;
  auto s = SqliteStore::Open(dir.File("m.db"));
  ASSERT_TRUE(s.ok());
  SqliteStore& store = **s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        ASSERT_TRUE(store.Write([](Tx& tx) { return tx.InsertJob({}).status(); }).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.writes(), 640);
  EXPECT_LE(store.commits(), 640);
}

TEST(SqliteStore, RefusesASchemaNewerThanItKnows) {
  base::testing::TempDir dir;
  {
    auto s = SqliteStore::Open(dir.File("m.db"));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Write([](Tx& tx) { return tx.InsertJob({}).status(); }).ok());
  }
  // A later meridian added migration 99.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.File("m.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO schema_migrations (version) VALUES (99)", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = SqliteStore::Open(dir.File("m.db"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("newer"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace meridian::store
