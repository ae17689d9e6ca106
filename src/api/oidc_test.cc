#include "api/oidc.h"

#include <gtest/gtest.h>
#include <jwt.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdlib>
#include <map>

namespace meridian::api {
namespace {

// Serves fixed bodies by URL, and counts what was asked: a stand-in for the provider's HTTP
// endpoints (the end-to-end test, tests/oidc_test.cc, runs a real HTTP test issuer).
class MapFetcher final : public HttpFetcher {
 public:
  base::Result<std::string> Get(const std::string& url) override {
    ++gets[url];
    auto it = bodies.find(url);
    if (it == bodies.end()) return base::Status(base::StatusCode::kUnavailable, "no " + url);
    return it->second;
  }
  base::Result<HttpAnswer> PostForm(
      const std::string& url, const std::vector<std::pair<std::string, std::string>>&) override {
    return base::Status(base::StatusCode::kUnavailable, "no " + url);
  }
  std::map<std::string, std::string> bodies;
  std::map<std::string, int> gets;
};

std::string B64Url(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

std::string BnBytes(EVP_PKEY* key, const char* param) {
  BIGNUM* bn = nullptr;
  EVP_PKEY_get_bn_param(key, param, &bn);
  std::string out(static_cast<size_t>(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(out.data()));
  BN_free(bn);
  return out;
}

// A signing key of the test: its private PEM and its public JWK.
struct TestKey {
  std::string private_pem;
  Json jwk;
};

TestKey MakeKey(const std::string& kid, bool ec = false) {
  EVP_PKEY* key = ec ? EVP_EC_gen("P-256") : EVP_RSA_gen(2048);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  TestKey k;
  k.private_pem.assign(data, static_cast<size_t>(n));
  BIO_free(bio);
  if (ec) {
    unsigned char point[133];
    size_t size = 0;
    EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point, &size);
    const std::string p(reinterpret_cast<char*>(point) + 1, size - 1);  // after 0x04
    k.jwk = {{"kty", "EC"},
             {"crv", "P-256"},
             {"kid", kid},
             {"use", "sig"},
             {"x", B64Url(p.substr(0, 32))},
             {"y", B64Url(p.substr(32))}};
  } else {
    k.jwk = {{"kty", "RSA"},
             {"kid", kid},
             {"use", "sig"},
             {"alg", "RS256"},
             {"n", B64Url(BnBytes(key, OSSL_PKEY_PARAM_RSA_N))},
             {"e", B64Url(BnBytes(key, OSSL_PKEY_PARAM_RSA_E))}};
  }
  EVP_PKEY_free(key);
  return k;
}

// Signs `claims` with libjwt as a provider would.
std::string Sign(const Json& claims, const std::string& kid, jwt_alg_t alg,
                 const std::string& key) {
  jwt_t* jwt = nullptr;
  jwt_new(&jwt);
  jwt_add_grants_json(jwt, claims.dump().c_str());
  if (!kid.empty()) jwt_add_header(jwt, "kid", kid.c_str());
  jwt_set_alg(jwt, alg, key.empty() ? nullptr : reinterpret_cast<const unsigned char*>(key.data()),
              static_cast<int>(key.size()));
  char* text = jwt_encode_str(jwt);
  std::string out = text ? text : "";
  free(text);  // libjwt 1.10 hands out malloc()ed text
  jwt_free(jwt);
  return out;
}

constexpr double kNow = 1.8e9;
const char* kIssuer = "https://idp.test";

class OidcVerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = MakeKey("k1");
    other_ = MakeKey("k1");  // the same kid, another key: what a forger holds
    ec_ = MakeKey("e1", true);
    Publish({key_.jwk, ec_.jwk});
    provider_ = OidcProviderFromSpec("corp", Json::parse(R"({
      "issuer": "https://idp.test", "clientId": "meridian", "usernameClaim": "preferred_username",
      "groups": [{"group": "ml", "roles": [{"role": "member", "project": "research"}]},
                 {"group": "ops", "roles": [{"role": "admin"}]}]})"));
  }
  void Publish(const std::vector<Json>& keys) {
    fetcher_.bodies[std::string(kIssuer) + "/.well-known/openid-configuration"] =
        Json{{"issuer", kIssuer}, {"jwks_uri", std::string(kIssuer) + "/jwks"}}.dump();
    fetcher_.bodies[std::string(kIssuer) + "/jwks"] = Json{{"keys", keys}}.dump();
  }
  Json Claims() const {
    return {{"iss", kIssuer},        {"aud", "meridian"},
            {"sub", "u-1"},          {"preferred_username", "alice"},
            {"groups", {"ml", "x"}}, {"iat", kNow - 10},
            {"exp", kNow + 600}};
  }
  base::Result<OidcIdentity> Verify(const std::string& token) {
    return verifier_.Verify(token, {provider_});
  }

  MapFetcher fetcher_;
  base::FakeClock clock_{kNow};
  OidcVerifier verifier_{&fetcher_, &clock_};
  OidcProvider provider_;
  TestKey key_, other_, ec_;
};

TEST_F(OidcVerifierTest, AValidTokenSignsInWithTheRolesOfItsGroups) {
  auto id = Verify(Sign(Claims(), "k1", JWT_ALG_RS256, key_.private_pem));
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(id->user, "corp:alice");
  EXPECT_EQ(id->provider, "corp");
  EXPECT_EQ(id->expires_at, kNow + 600);
  ASSERT_EQ(id->roles.size(), 1u);
  EXPECT_EQ(id->roles[0].role, Role::kMember);
  EXPECT_EQ(id->roles[0].project, "research");
  // An EC key (ES256) verifies too; an audience list holding ours is ours.
  Json claims = Claims();
  claims["aud"] = {"other", "meridian"};
  claims["azp"] = "meridian";
  claims["groups"] = {"ml", "ops"};
  id = Verify(Sign(claims, "e1", JWT_ALG_ES256, ec_.private_pem));
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(id->roles.size(), 2u);
  // Discovery and keys were fetched once for both tokens.
  EXPECT_EQ(fetcher_.gets[std::string(kIssuer) + "/jwks"], 1);
}

TEST_F(OidcVerifierTest, EveryForgedOrStaleTokenIsRefusedAsUnauthenticated) {
  const std::string good = Sign(Claims(), "k1", JWT_ALG_RS256, key_.private_pem);
  auto with = [&](const char* field, const Json& value) {
    Json c = Claims();
    if (value.is_null())
      c.erase(field);
    else
      c[field] = value;
    return Sign(c, "k1", JWT_ALG_RS256, key_.private_pem);
  };
  // The signature's middle byte changed: the token says the same, its signature does not match.
  std::string tampered = good;
  tampered[good.rfind('.') + 40] = tampered[good.rfind('.') + 40] == 'A' ? 'B' : 'A';
  // A payload swapped in under a good header and signature.
  const std::string other_payload = with("preferred_username", "mallory");
  const size_t d1 = good.find('.'), d2 = good.rfind('.');
  const std::string swapped =
      good.substr(0, d1) +
      other_payload.substr(other_payload.find('.'),
                           other_payload.rfind('.') - other_payload.find('.')) +
      good.substr(d2);
  // The public key's PEM as an HMAC secret: the algorithm-confusion forgery.
  std::string public_pem;
  {
    auto keys = ParseJwks(Json{{"keys", {key_.jwk}}}.dump());
    ASSERT_TRUE(keys.ok());
    public_pem = keys->at("k1").pem;
  }
  const struct {
    const char* name;
    std::string token;
    const char* why;
  } cases[] = {
      {"expired", with("exp", kNow - 3600), "expired"},
      {"no exp", with("exp", nullptr), "no exp"},
      {"not yet valid", with("nbf", kNow + 3600), "nbf"},
      {"issued in the future", with("iat", kNow + 3600), "iat"},
      {"wrong audience", with("aud", "someone-else"), "wrong audience"},
      {"audience list without us", with("aud", {"a", "b"}), "wrong audience"},
      {"wrong issuer", with("iss", "https://evil.test"), "issuer"},
      {"no username", with("preferred_username", nullptr), "username"},
      {"signed by another key", Sign(Claims(), "k1", JWT_ALG_RS256, other_.private_pem),
       "bad signature"},
      {"tampered signature", tampered, "bad signature"},
      {"swapped payload", swapped, "bad signature"},
      {"unknown kid", Sign(Claims(), "k9", JWT_ALG_RS256, key_.private_pem), "unknown kid"},
      {"no kid", Sign(Claims(), "", JWT_ALG_RS256, key_.private_pem), "no kid"},
      {"alg none", Sign(Claims(), "k1", JWT_ALG_NONE, ""), "not accepted"},
      {"HS256 keyed with the public key", Sign(Claims(), "k1", JWT_ALG_HS256, public_pem),
       "not accepted"},
      {"RS256 under an EC key's kid", Sign(Claims(), "e1", JWT_ALG_RS256, key_.private_pem),
       "does not match"},
      {"not a JWT", "a.b", "not a JWT"},
      {"garbage parts", "aaa.bbb.ccc", "malformed"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_FALSE(c.token.empty());
    auto id = Verify(c.token);
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), base::StatusCode::kUnauthenticated);
    EXPECT_NE(id.status().message().find(c.why), std::string::npos) << id.status().message();
  }
  EXPECT_TRUE(Verify(good).ok());  // the good one still is
}

TEST_F(OidcVerifierTest, AValidTokenWithoutAMappedGroupIsDenied) {
  Json claims = Claims();
  claims["groups"] = {"sales"};
  auto id = Verify(Sign(claims, "k1", JWT_ALG_RS256, key_.private_pem));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), base::StatusCode::kPermissionDenied);
  EXPECT_NE(id.status().message().find("(sales)"), std::string::npos) << id.status().message();
}

TEST_F(OidcVerifierTest, AnUnknownKidFetchesTheKeysAgainAtMostOncePerGap) {
  ASSERT_TRUE(Verify(Sign(Claims(), "k1", JWT_ALG_RS256, key_.private_pem)).ok());
  const std::string jwks = std::string(kIssuer) + "/jwks";
  EXPECT_EQ(fetcher_.gets[jwks], 1);
  // The provider rotates: k2 is published, k1 withdrawn.
  const TestKey k2 = MakeKey("k2");
  Publish({k2.jwk});
  clock_.Advance(5);
  const std::string new_token = Sign(Claims(), "k2", JWT_ALG_RS256, k2.private_pem);
  ASSERT_TRUE(Verify(new_token).ok());
  EXPECT_EQ(fetcher_.gets[jwks], 2);
  // Made-up kids right after: no fetch within the gap, however many.
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(
        Verify(Sign(Claims(), "x" + std::to_string(i), JWT_ALG_RS256, k2.private_pem)).ok());
  }
  EXPECT_EQ(fetcher_.gets[jwks], 2);
  // The withdrawn key no longer verifies: the set was replaced.
  auto old = Verify(Sign(Claims(), "k1", JWT_ALG_RS256, key_.private_pem));
  EXPECT_FALSE(old.ok());
  // A provider that cannot be reached is unavailable, not the caller's fault.
  fetcher_.bodies.clear();
  clock_.Advance(10);
  auto down = Verify(Sign(Claims(), "k3", JWT_ALG_RS256, k2.private_pem));
  EXPECT_EQ(down.status().code(), base::StatusCode::kUnavailable);
  // ...while the keys at hand still verify what they signed.
  EXPECT_TRUE(Verify(new_token).ok());
}

TEST(Jwks, KeysOfOtherKindsAreSkippedAndMalformedSetsRefused) {
  const TestKey rsa = MakeKey("r");
  Json enc = rsa.jwk;
  enc["kid"] = "enc";
  enc["use"] = "enc";
  Json small = {{"kty", "RSA"}, {"kid", "small"}, {"n", "AQAB"}, {"e", "AQAB"}};
  Json oct = {{"kty", "oct"}, {"kid", "hmac"}, {"k", "c2VjcmV0"}};
  auto keys = ParseJwks(Json{{"keys", {rsa.jwk, enc, small, oct}}}.dump());
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 1u);
  EXPECT_EQ(keys->count("r"), 1u);
  EXPECT_FALSE(ParseJwks("{}").ok());
  EXPECT_FALSE(ParseJwks("[1]").ok());
  EXPECT_FALSE(ParseJwks(R"({"keys": [1]})").ok());
}

}  // namespace
}  // namespace meridian::api
