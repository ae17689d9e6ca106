// libFuzzer target: the OIDC token path (api/oidc). Each input is tried three ways: as a bearer
// token (header, claims and signature as an attacker sends them), as a JWK Set a provider
// answers, and, when it is a JSON object, as the claims of a token signed with the provider's
// real key, so that the claim checks behind the signature are explored too.
#include <jwt.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "api/oidc.h"

namespace {

using meridian::api::Json;

class FixedFetcher final : public meridian::api::HttpFetcher {
 public:
  meridian::base::Result<std::string> Get(const std::string& url) override {
    auto it = bodies.find(url);
    if (it == bodies.end()) {
      return meridian::base::Status(meridian::base::StatusCode::kUnavailable, "no " + url);
    }
    return it->second;
  }
  meridian::base::Result<meridian::api::HttpAnswer> PostForm(
      const std::string& url, const std::vector<std::pair<std::string, std::string>>&) override {
    return meridian::base::Status(meridian::base::StatusCode::kUnavailable, "no " + url);
  }
  std::map<std::string, std::string> bodies;
};

std::string B64Url(const unsigned char* data, size_t size) {
  std::string out(4 * ((size + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(size));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

struct World {
  FixedFetcher fetcher;
  meridian::base::FakeClock clock{1.8e9};
  std::unique_ptr<meridian::api::OidcVerifier> verifier;
  std::vector<meridian::api::OidcProvider> providers;
  std::string private_pem;

  World() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    private_pem.assign(data, static_cast<size_t>(n));
    BIO_free(bio);
    unsigned char point[65];
    size_t size = 0;
    EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point, &size);
    EVP_PKEY_free(key);
    const Json jwk = {{"kty", "EC"},
                      {"crv", "P-256"},
                      {"kid", "k1"},
                      {"x", B64Url(point + 1, 32)},
                      {"y", B64Url(point + 33, 32)}};
    fetcher.bodies["https://idp.fuzz/.well-known/openid-configuration"] =
        Json{{"issuer", "https://idp.fuzz"}, {"jwks_uri", "https://idp.fuzz/jwks"}}.dump();
    fetcher.bodies["https://idp.fuzz/jwks"] = Json{{"keys", {jwk}}}.dump();
    verifier = std::make_unique<meridian::api::OidcVerifier>(&fetcher, &clock);
    providers.push_back(meridian::api::OidcProviderFromSpec(
        "corp", Json{{"issuer", "https://idp.fuzz"},
                     {"clientId", "meridian"},
                     {"groups", {{{"group", "ml"}, {"roles", {{{"role", "admin"}}}}}}}}));
  }

  std::string Sign(const std::string& claims) {
    jwt_t* jwt = nullptr;
    if (jwt_new(&jwt) != 0) return "";
    std::string out;
    if (jwt_add_grants_json(jwt, claims.c_str()) == 0 && jwt_add_header(jwt, "kid", "k1") == 0 &&
        jwt_set_alg(jwt, JWT_ALG_ES256, reinterpret_cast<const unsigned char*>(private_pem.data()),
                    static_cast<int>(private_pem.size())) == 0) {
      char* text = jwt_encode_str(jwt);
      if (text) out = text;
      free(text);  // libjwt 1.10 hands out malloc()ed text
    }
    jwt_free(jwt);
    return out;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World world;
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)meridian::api::LooksLikeJwt(text);
  (void)world.verifier->Verify(text, world.providers);
  (void)meridian::api::ParseJwks(text);
  const Json claims = Json::parse(text, nullptr, false);
  if (claims.is_object()) {
    const std::string token = world.Sign(claims.dump());
    if (!token.empty()) (void)world.verifier->Verify(token, world.providers);
  }
  return 0;
}
