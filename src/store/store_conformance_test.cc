// The conformance suite every Store backend must pass. A backend joins by adding a factory to
// kBackends; PostgreSQL will run the same cases against a real server.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <set>
#include <thread>

#include "base/testing/temp_dir.h"
#include "store/sqlite/sqlite_store.h"
#include "store/store.h"

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

const Backend kBackends[] = {
    {"sqlite",
     [](const std::string& dir) -> base::Result<std::unique_ptr<Store>> {
       auto s = SqliteStore::Open(dir + "/meridian.db");
       if (!s.ok()) return s.status();
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
