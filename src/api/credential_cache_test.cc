#include "api/credential_cache.h"

#include <gtest/gtest.h>

namespace meridian::api {
namespace {

CredentialCache::Entry Token(const std::string& id, const std::string& user) {
  CredentialCache::Entry e;
  e.token.id = id;
  e.token.user = user;
  e.token.secret_hash = "hash-of-" + id;
  e.roles = {{Role::kMember, "", "", "research", ""}};
  return e;
}

// An entry holds while the store's credentials have not moved, and never past kSeconds.
TEST(CredentialCache, HoldsUntilTheStoreMovesOrItsTimeIsUp) {
  double now = 1000;
  CredentialCache cache([&] { return now; });
  EXPECT_FALSE(cache.Find("a", 0).has_value());
  cache.Put("a", 7, now, Token("a", "alice"));
  auto held = cache.Find("a", 7);
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->token.user, "alice");
  EXPECT_EQ(held->token.secret_hash, "hash-of-a");
  ASSERT_EQ(held->roles.size(), 1u);
  EXPECT_EQ(held->roles[0].project, "research");
  // A token or user written through this server: the generation moved, the entry is gone.
  EXPECT_FALSE(cache.Find("a", 8).has_value());
  EXPECT_FALSE(cache.Find("a", 7).has_value());
  // Written elsewhere: at most kSeconds.
  cache.Put("b", 8, now, Token("b", "bob"));
  now += CredentialCache::kSeconds - 0.5;
  EXPECT_TRUE(cache.Find("b", 8).has_value());
  now += 0.5;
  EXPECT_FALSE(cache.Find("b", 8).has_value());
  // The bound counts from before the store read that gave the entry, not from its arrival.
  cache.Put("c", 8, now - 4, Token("c", "carol"));
  now += CredentialCache::kSeconds - 4;
  EXPECT_FALSE(cache.Find("c", 8).has_value());
  // A server that takes over as leader forgets all it read while following.
  cache.Put("d", 8, now, Token("d", "dave"));
  cache.Clear();
  EXPECT_FALSE(cache.Find("d", 8).has_value());
}

// Bounded: a flood of distinct tokens does not grow it past kMaxEntries.
TEST(CredentialCache, StartsEmptyAgainPastItsBound) {
  CredentialCache cache([] { return 0.0; });
  for (size_t i = 0; i < CredentialCache::kMaxEntries; ++i) {
    cache.Put("t" + std::to_string(i), 1, 0, Token("t", "u"));
  }
  EXPECT_TRUE(cache.Find("t0", 1).has_value());
  cache.Put("one-more", 1, 0, Token("one-more", "u"));
  EXPECT_FALSE(cache.Find("t0", 1).has_value());
  EXPECT_TRUE(cache.Find("one-more", 1).has_value());
}

}  // namespace
}  // namespace meridian::api
