// Single sign-on end to end: a real `meridian server` on loopback, the real CLI, and a TEST
// ISSUER (tests/oidc_test_issuer.py: a small OpenID Connect provider over real HTTP, the one
// fake here) that signs ID tokens as a provider would, and forges the ones a provider would not.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <ctime>
#include <functional>
#include <iostream>
#include <regex>
#include <thread>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;
const std::string kIssuerScript = std::string(MERIDIAN_SOURCE_DIR) + "/tests/oidc_test_issuer.py";

const char* kEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: product}
spec: {organization: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: vision}
spec: {team: product}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 1, gpusPerNode: 8, gpuModel: H100-80GB, cpuMilli: 128000}
---
kind: IdentityProvider
metadata: {name: corp}
spec:
  issuer: ISSUER
  clientId: meridian
  usernameClaim: preferred_username
  groups:
    - group: ml-research
      roles: [{role: member, project: research}]
    - group: platform
      roles: [{role: admin}]
)";

class OidcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string port_file = dir_.File("issuer.port");
    issuer_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"/usr/bin/python3", kIssuerScript, "--port-file", port_file,
                                 "--client-id", "meridian", "--users",
                                 R"({"alice": ["ml-research", "unmapped"], "root": ["platform"],
                                     "bob": ["sales"]})"},
        dir_.File("issuer.log"));
    ASSERT_TRUE(Eventually([&] { return !ReadFile(port_file).empty(); }, 60))
        << ReadFile(dir_.File("issuer.log"));
    issuer_port_ = std::stoi(ReadFile(port_file));
    issuer_url_ = "http://127.0.0.1:" + std::to_string(issuer_port_);
    // The rotation test polls through refusals until the server fetches the new key set: with
    // the failed-authentication limit on, its own polls would be held off.
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"),
                                              std::vector<std::string>{"--failed-auth-limit", "0"});
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    const std::string estate =
        std::regex_replace(std::string(kEstate), std::regex("ISSUER"), issuer_url_);
    CliResult r = Cli(kBinary, "apply -f " + WriteTestFile(dir_.File("estate.yaml"), estate),
                      server_->url(), admin_);
    ASSERT_EQ(r.code, 0) << r.output;
  }

  // The test issuer's own endpoints.
  Json Issuer(const std::string& method, const std::string& path, const Json& body = nullptr) {
    httplib::Client c("127.0.0.1", issuer_port_);
    c.set_read_timeout(30);
    auto r = method == "GET"
                 ? c.Get(path)
                 : c.Post(path, body.is_null() ? "{}" : body.dump(), "application/json");
    if (!r) return nullptr;
    return Json::parse(r->body, nullptr, false);
  }
  std::string Mint(const Json& request) {
    return Issuer("POST", "/test/mint", request).value("token", "");
  }
  HttpResult Do(const std::string& method, const std::string& path, const std::string& token,
                const Json& body = nullptr) {
    return Http(*server_, method, path, token, body.is_null() ? "" : body.dump());
  }
  int JwksFetches() { return Issuer("GET", "/test/stats").value("jwksFetches", -1); }

  base::testing::TempDir dir_;
  std::unique_ptr<ChildProcess> issuer_;
  int issuer_port_ = 0;
  std::string issuer_url_;
  std::unique_ptr<ServerProcess> server_;
  std::string admin_;
};

std::vector<std::string> Names(const Json& listing) {
  std::vector<std::string> out;
  for (const Json& o : listing.value("items", Json::array())) {
    out.push_back(o["metadata"].value("name", ""));
  }
  return out;
}

TEST_F(OidcTest, AValidIdTokenSignsInWithTheMappedRoleAndSeesOnlyItsScopes) {
  // What a client needs to sign in is public.
  HttpResult providers = Do("GET", "/api/v1/auth/providers", "");
  ASSERT_EQ(providers.status, 200) << providers.text;
  ASSERT_EQ(providers.body["items"].size(), 1u);
  EXPECT_EQ(providers.body["items"][0]["issuer"], issuer_url_);
  EXPECT_EQ(providers.body["items"][0]["clientId"], "meridian");

  const std::string alice = Mint({{"user", "alice"}});
  HttpResult me = Do("GET", "/api/v1/whoami", alice);
  ASSERT_EQ(me.status, 200) << me.text;
  EXPECT_EQ(me.body["user"], "corp:alice");
  EXPECT_EQ(me.body["identityProvider"], "corp");
  EXPECT_EQ(me.body["roles"], Json::parse(R"([{"role": "member", "project": "research"}])"));
  EXPECT_EQ(me.body["projects"], Json::parse(R"(["research"])"));
  // Only its scopes: its project, not the other team's.
  EXPECT_EQ(Names(Do("GET", "/api/v1/projects", alice).body), std::vector<std::string>{"research"});
  EXPECT_EQ(Do("GET", "/api/v1/projects/vision", alice).status, 404);
  const Json job = {{"metadata", {{"name", "train"}, {"project", "research"}}},
                    {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
  HttpResult submitted = Do("POST", "/api/v1/jobs", alice, job);
  EXPECT_EQ(submitted.status, 201) << submitted.text;
  Json elsewhere = job;
  elsewhere["metadata"]["project"] = "vision";
  EXPECT_EQ(Do("POST", "/api/v1/jobs", alice, elsewhere).status, 404);
  EXPECT_EQ(Do("GET", "/api/v1/users", alice).status, 403);
  EXPECT_EQ(Do("GET", "/api/v1/identityproviders", alice).body["items"].size(), 0u);
  // The job is the signed-in user's, and the audit log names who.
  EXPECT_EQ(Do("GET", "/api/v1/jobs/" + std::to_string(submitted.body.value("id", 0)), alice)
                .body["metadata"]["user"],
            "corp:alice");
  // A group mapped to admin is an admin.
  HttpResult root = Do("GET", "/api/v1/users", Mint({{"user", "root"}}));
  EXPECT_EQ(root.status, 200) << root.text;
  // A valid token whose groups map to no role signs in no one, and says why.
  HttpResult bob = Do("GET", "/api/v1/whoami", Mint({{"user", "bob"}}));
  EXPECT_EQ(bob.status, 403) << bob.text;
  EXPECT_NE(bob.text.find("none of its groups (sales)"), std::string::npos) << bob.text;
  // API tokens stay for automation, beside sign-in.
  EXPECT_EQ(Do("GET", "/api/v1/whoami", admin_).body["user"], "admin");
}

TEST_F(OidcTest, ForgedAndStaleTokensAreRefusedWith401Alike) {
  ASSERT_EQ(Do("GET", "/api/v1/whoami", Mint({{"user", "alice"}})).status, 200);
  const double now = static_cast<double>(std::time(nullptr));
  const struct {
    const char* name;
    Json mint;
  } cases[] = {
      {"expired", {{"claims", {{"exp", now - 3600}, {"iat", now - 7200}}}}},
      {"not yet valid", {{"claims", {{"nbf", now + 3600}}}}},
      {"wrong audience", {{"claims", {{"aud", "another-app"}}}}},
      {"wrong issuer", {{"claims", {{"iss", "http://127.0.0.1:1"}}}}},
      {"bad signature", {{"tamper", true}}},
      {"signed by a key the issuer never published", {{"key", "foreign"}}},
      {"unknown kid", {{"kid", "no-such-key"}}},
      {"alg none", {{"alg", "none"}}},
      {"no expiry", {{"drop", {"exp"}}}},
  };
  // Whatever is wrong, the answer is the one an unknown API token gets.
  const HttpResult unknown =
      Do("GET", "/api/v1/whoami", "mrd_0123456789abcdef_0123456789abcdef0123456789abcdef01234567");
  ASSERT_EQ(unknown.status, 401);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string token = Mint(c.mint);
    ASSERT_FALSE(token.empty());
    HttpResult r = Do("GET", "/api/v1/whoami", token);
    EXPECT_EQ(r.status, 401) << r.text;
    EXPECT_EQ(r.body, unknown.body);
    EXPECT_EQ(Do("POST", "/api/v1/jobs", token, Json::object()).status, 401);
  }
  // The audit log tells the operator which it was (aggregated per address, ADR 0013).
  const std::string audit = Do("GET", "/api/v1/audit?result=denied&limit=100", admin_).text;
  for (const char* why : {"expired", "wrong audience", "bad signature", "unknown kid",
                          "algorithm none", "not valid yet", "is not an IdentityProvider"}) {
    EXPECT_NE(audit.find(why), std::string::npos) << why << " in " << audit;
  }
}

TEST_F(OidcTest, KeyRotationIsFollowedAndMadeUpKidsDoNotFloodTheIssuer) {
  const std::string old_token = Mint({{"user", "alice"}});
  ASSERT_EQ(Do("GET", "/api/v1/whoami", old_token).status, 200);
  const int fetched = JwksFetches();
  EXPECT_EQ(fetched, 1);
  // The issuer rotates to k2 and withdraws k1.
  EXPECT_EQ(Issuer("POST", "/test/rotate", {{"retire", true}}).value("kid", ""), "k2");
  const std::string new_token = Mint({{"user", "alice"}});
  // The server fetches the set again on the unknown kid (at most once every 2 s).
  EXPECT_TRUE(Eventually([&] { return Do("GET", "/api/v1/whoami", new_token).status == 200; }, 10));
  EXPECT_EQ(Do("GET", "/api/v1/whoami", old_token).status, 401);  // k1 left the set
  // 30 tokens with made-up kids at once cost the issuer at most one more fetch.
  const int before = JwksFetches();
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(Do("GET", "/api/v1/whoami", Mint({{"kid", "made-up-" + std::to_string(i)}})).status,
              401);
  }
  const int after = JwksFetches();
  EXPECT_LE(after - before, 1);
  std::cout << "jwks fetches: " << fetched << " at first sign-in, " << before << " after rotation, "
            << after << " after 30 made-up kids\n";
}

// The dashboard's sign-in, without a browser: a code from the test issuer's sign-in page,
// redeemed through the server only with the verifier it was asked with and the nonce sent.
TEST_F(OidcTest, TheServerRedeemsACodeOnlyWithItsVerifierAndNonce) {
  const std::string verifier = std::string(43, 'v');
  // base64url(SHA-256(verifier)), as the browser computes it (RFC 7636 4.2).
  unsigned char digest[32];
  unsigned int size = 0;
  EVP_Digest(verifier.data(), verifier.size(), digest, &size, EVP_sha256(), nullptr);
  std::string challenge(45, '\0');
  challenge.resize(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(challenge.data()), digest, 32));
  while (challenge.back() == '=') challenge.pop_back();
  for (char& c : challenge) c = c == '+' ? '-' : c == '/' ? '_' : c;
  const std::string redirect = server_->url() + "/";
  auto code_for = [&](const std::string& nonce) {
    httplib::Client c("127.0.0.1", issuer_port_);
    auto r = c.Post("/authorize", httplib::Params{{"login", "alice"},
                                                  {"redirect_uri", redirect},
                                                  {"code_challenge", challenge},
                                                  {"nonce", nonce},
                                                  {"state", "s"}});
    if (!r || r->status != 302) return std::string();
    std::smatch m;
    const std::string location = r->get_header_value("Location");
    return std::regex_search(location, m, std::regex("code=([^&]+)")) ? m[1].str() : "";
  };
  auto redeem = [&](const std::string& code, const std::string& with_verifier,
                    const std::string& nonce) {
    return Do("POST", "/api/v1/auth/token", "",
              {{"provider", "corp"},
               {"code", code},
               {"codeVerifier", with_verifier},
               {"redirectUri", redirect},
               {"nonce", nonce}});
  };
  // Another verifier than the one the code was asked with: the provider refuses it.
  HttpResult wrong = redeem(code_for("n1"), std::string(43, 'w'), "n1");
  EXPECT_EQ(wrong.status, 401) << wrong.text;
  EXPECT_NE(wrong.text.find("invalid_grant"), std::string::npos) << wrong.text;
  // A token made for another sign-in (its nonce is not the one this browser sent).
  HttpResult replayed = redeem(code_for("n2"), verifier, "not-n2");
  EXPECT_EQ(replayed.status, 401) << replayed.text;
  EXPECT_NE(replayed.text.find("nonce"), std::string::npos) << replayed.text;
  // The right verifier and nonce: the ID token, which signs in.
  const std::string code = code_for("n3");
  HttpResult ok = redeem(code, verifier, "n3");
  ASSERT_EQ(ok.status, 200) << ok.text;
  EXPECT_EQ(ok.body["user"], "corp:alice");
  EXPECT_EQ(Do("GET", "/api/v1/whoami", ok.body.value("idToken", "")).body["user"], "corp:alice");
  // The same code twice: a code is good once.
  EXPECT_EQ(redeem(code, verifier, "n3").status, 401);
  // A body that is not what the endpoint takes is a 400 naming the field.
  HttpResult missing = Do("POST", "/api/v1/auth/token", "", {{"provider", "corp"}});
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(missing.body["error"]["field"], "code");
}

// Guessing codes is guessing credentials: a refused exchange counts against the address as a
// failed authentication does (60 a minute by default), and past that the address is held off
// with 429 before the issuer is asked.
TEST_F(OidcTest, RefusedCodeExchangesAreHeldOffLikeFailedAuthentications) {
  // The fixture's server runs without the limit (its rotation test polls through refusals).
  server_->Stop();
  server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
  int refused = 0;
  HttpResult last;
  for (int i = 0; i < 80; ++i) {
    last = Do("POST", "/api/v1/auth/token", "",
              {{"provider", "corp"},
               {"code", "made-up-" + std::to_string(i)},
               {"codeVerifier", std::string(43, 'v')},
               {"redirectUri", server_->url() + "/"},
               {"nonce", "n"}});
    if (last.status != 401) break;
    ++refused;
  }
  EXPECT_EQ(last.status, 429) << last.text;
  EXPECT_EQ(last.body["error"]["code"], "rate_limited") << last.text;
  EXPECT_EQ(refused, 60);
}

// Runs `meridian login --sso` as a user would, approving (or denying) the code it prints at the
// test issuer as the user's browser would.
CliResult DeviceLogin(const std::string& log, std::vector<std::string> args,
                      const std::function<void(const std::string& code)>& approve) {
  CliResult result;
  std::thread login([&] { result = RunToExit(kBinary, args, log, 90); });
  std::smatch m;
  std::string code;
  const std::regex shown("enter the code ([0-9A-F]{4}-[0-9A-F]{4})");
  const bool printed = Eventually(
      [&] {
        const std::string text = ReadFile(log);
        if (!std::regex_search(text, m, shown)) return false;
        code = m[1];
        return true;
      },
      60);
  if (printed) approve(code);
  login.join();
  return result;
}

TEST_F(OidcTest, TheCliSignsInWithTheDeviceFlowAndKeepsTheIdToken) {
  const std::string config = dir_.File("client.json");
  const std::vector<std::string> args = {"login",        "--sso",    "--server",
                                         server_->url(), "--config", config};
  CliResult r = DeviceLogin(dir_.File("login.log"), args, [&](const std::string& code) {
    EXPECT_EQ(Issuer("GET", "/device?user_code=" + code + "&login=alice").value("approved", false),
              true);
  });
  // Once, under load in a full ASan run, the CLI printed nothing for 90 s: what the issuer saw
  // says which call hung.
  ASSERT_EQ(r.code, 0) << r.output << "\nthe issuer's log:\n" << ReadFile(dir_.File("issuer.log"));
  EXPECT_NE(r.output.find("open " + issuer_url_ + "/device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Logged in to " + server_->url() + " as corp:alice with corp"),
            std::string::npos)
      << r.output;
  // The ID token is kept as the token is, and every later verb uses it.
  const Json saved = Json::parse(ReadFile(config), nullptr, false);
  ASSERT_TRUE(saved.is_object());
  const std::string token = saved.value("token", "");
  EXPECT_EQ(std::count(token.begin(), token.end(), '.'), 2) << token;
  CliResult get =
      RunToExit(kBinary, {"get", "projects", "--config", config}, dir_.File("get.log"), 30);
  EXPECT_EQ(get.code, 0) << get.output;
  EXPECT_NE(get.output.find("research"), std::string::npos) << get.output;
  EXPECT_EQ(get.output.find("vision"), std::string::npos) << get.output;

  // A denied sign-in fails with the authentication exit code and keeps no token.
  const std::string other = dir_.File("denied.json");
  CliResult denied = DeviceLogin(
      dir_.File("denied.log"), {"login", "--sso", "--server", server_->url(), "--config", other},
      [&](const std::string& code) {
        Issuer("GET", "/device?user_code=" + code + "&login=alice&deny=1");
      });
  EXPECT_EQ(denied.code, 4) << denied.output;
  EXPECT_NE(denied.output.find("access_denied"), std::string::npos) << denied.output;
  EXPECT_TRUE(ReadFile(other).empty());
}

}  // namespace
}  // namespace meridian::testing
