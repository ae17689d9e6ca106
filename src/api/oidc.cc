#include "api/oidc.h"

#include <httplib.h>
#include <jwt.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>

namespace meridian::api {

using base::Status;

namespace {

Status Refused(const std::string& why) { return Status(base::StatusCode::kUnauthenticated, why); }

// RFC 7515's base64url without padding, decoded with OpenSSL's base64 decoder.
bool Base64UrlDecode(const std::string& in, std::string* out) {
  std::string b64 = in;
  for (char& c : b64) {
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
    else if (c == '+' || c == '/' || c == '=')
      return false;
  }
  if (b64.size() % 4 == 1) return false;
  const size_t pad = (4 - b64.size() % 4) % 4;
  b64.append(pad, '=');
  std::string bytes(b64.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(bytes.data()),
                                reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  if (n < 0) return false;
  bytes.resize(static_cast<size_t>(n) - pad);
  *out = std::move(bytes);
  return true;
}

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// Builds a public key from OpenSSL parameters (RSA n, e; EC group and point).
Pkey FromParams(const char* type, const std::function<bool(OSSL_PARAM_BLD*)>& push) {
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM* params = nullptr;
  EVP_PKEY_CTX* ctx = nullptr;
  EVP_PKEY* key = nullptr;
  if (bld && push(bld) && (params = OSSL_PARAM_BLD_to_param(bld)) &&
      (ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr)) &&
      EVP_PKEY_fromdata_init(ctx) == 1) {
    if (EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) != 1) key = nullptr;
  }
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  return Pkey(key);
}

std::string ToPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  std::string pem;
  if (bio && PEM_write_bio_PUBKEY(bio, key) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    pem.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  return pem;
}

// One JWK as a PEM public key; "" with `why` set when it cannot be used.
std::string JwkToPem(const Json& jwk, std::string* why) {
  auto field = [&](const char* name, std::string* bytes) {
    if (!jwk.contains(name) || !jwk.at(name).is_string() ||
        !Base64UrlDecode(jwk.at(name).get<std::string>(), bytes) || bytes->empty()) {
      *why = std::string(name) + ": must be base64url";
      return false;
    }
    return true;
  };
  const std::string kty = jwk.value("kty", "");
  if (kty == "RSA") {
    std::string n, e;
    if (!field("n", &n) || !field("e", &e)) return "";
    BIGNUM* bn_n = BN_bin2bn(reinterpret_cast<const unsigned char*>(n.data()),
                             static_cast<int>(n.size()), nullptr);
    BIGNUM* bn_e = BN_bin2bn(reinterpret_cast<const unsigned char*>(e.data()),
                             static_cast<int>(e.size()), nullptr);
    std::string pem;
    if (bn_n && bn_e && BN_num_bits(bn_n) < 2048) {
      *why = "an RSA key of " + std::to_string(BN_num_bits(bn_n)) + " bits (2048 at least)";
    } else if (bn_n && bn_e) {
      Pkey key = FromParams("RSA", [&](OSSL_PARAM_BLD* b) {
        return OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_N, bn_n) == 1 &&
               OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_E, bn_e) == 1;
      });
      if (key) pem = ToPem(key.get());
      if (pem.empty()) *why = "not a usable RSA key";
    }
    BN_free(bn_n);
    BN_free(bn_e);
    return pem;
  }
  if (kty == "EC") {
    const std::string crv = jwk.value("crv", "");
    const char* group = crv == "P-256"   ? "prime256v1"
                        : crv == "P-384" ? "secp384r1"
                        : crv == "P-521" ? "secp521r1"
                                         : nullptr;
    const size_t size = crv == "P-256" ? 32 : crv == "P-384" ? 48 : 66;
    if (!group) {
      *why = "crv: \"" + crv + "\" is not P-256, P-384 or P-521";
      return "";
    }
    std::string x, y;
    if (!field("x", &x) || !field("y", &y)) return "";
    if (x.size() != size || y.size() != size) {
      *why = "x, y: must be " + std::to_string(size) + " bytes each for " + crv;
      return "";
    }
    const std::string point = std::string(1, '\x04') + x + y;  // SEC 1 uncompressed point
    Pkey key = FromParams("EC", [&](OSSL_PARAM_BLD* b) {
      return OSSL_PARAM_BLD_push_utf8_string(b, OSSL_PKEY_PARAM_GROUP_NAME, group, 0) == 1 &&
             OSSL_PARAM_BLD_push_octet_string(b, OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                              point.size()) == 1;
    });
    const std::string pem = key ? ToPem(key.get()) : "";
    if (pem.empty()) *why = "not a point of " + crv;
    return pem;
  }
  *why = "kty: \"" + kty + "\" is not RSA or EC";
  return "";
}

struct JwtFree {
  void operator()(jwt_t* j) const { jwt_free(j); }
};
using Jwt = std::unique_ptr<jwt_t, JwtFree>;

// A header or claim set of a decoded token as JSON (libjwt hands out JSON text).
Json ClaimsOf(jwt_t* jwt) {
  char* text = jwt_get_grants_json(jwt, nullptr);
  if (!text) return Json::object();
  Json claims = Json::parse(text, nullptr, false);
  free(text);  // libjwt 1.10 hands out malloc()ed text
  return claims.is_object() ? claims : Json::object();
}

const char* AlgName(jwt_alg_t alg) {
  switch (alg) {
    case JWT_ALG_RS256:
      return "RS256";
    case JWT_ALG_RS384:
      return "RS384";
    case JWT_ALG_RS512:
      return "RS512";
    case JWT_ALG_ES256:
      return "ES256";
    case JWT_ALG_ES384:
      return "ES384";
    case JWT_ALG_ES512:
      return "ES512";
    default:
      return nullptr;  // none, HMAC and anything unknown are refused
  }
}

// A NumericDate claim (RFC 7519 2): a finite number of seconds.
bool NumericDate(const Json& claims, const char* name, double* out) {
  if (!claims.contains(name)) return false;
  const Json& v = claims.at(name);
  if (!v.is_number() || !std::isfinite(v.get<double>())) return false;
  *out = v.get<double>();
  return true;
}

}  // namespace

OidcProvider OidcProviderFromSpec(const std::string& name, const Json& spec) {
  OidcProvider p;
  p.name = name;
  p.issuer = spec.value("issuer", "");
  p.client_id = spec.value("clientId", "");
  p.username_claim = spec.value("usernameClaim", "sub");
  if (p.username_claim.empty()) p.username_claim = "sub";
  p.username_prefix = spec.value("usernamePrefix", "");
  if (p.username_prefix.empty()) p.username_prefix = name + ":";
  p.groups_claim = spec.value("groupsClaim", "groups");
  if (p.groups_claim.empty()) p.groups_claim = "groups";
  if (spec.contains("scopes") && spec.at("scopes").is_array()) {
    for (const Json& s : spec.at("scopes")) {
      if (s.is_string()) p.scopes.push_back(s);
    }
  }
  if (p.scopes.empty()) p.scopes = {"openid", "profile", "email"};
  if (spec.contains("groups") && spec.at("groups").is_array()) {
    for (const Json& g : spec.at("groups")) {
      if (!g.is_object()) continue;
      auto roles = ParseRoles(Json{{"roles", g.value("roles", Json::array())}});
      if (roles.ok()) p.groups.emplace_back(g.value("group", ""), *roles);
    }
  }
  return p;
}

namespace {

// scheme://host[:port] and the path, as httplib's client takes them.
base::Result<std::pair<std::string, std::string>> SplitUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.rfind("https://", 0) != 0 && url.rfind("http://", 0) != 0)) {
    return Status(base::StatusCode::kUnavailable, "\"" + url + "\" is not an http(s) URL");
  }
  const size_t slash = url.find('/', scheme + 3);
  if (slash == std::string::npos) return std::pair<std::string, std::string>{url, "/"};
  return std::pair<std::string, std::string>{url.substr(0, slash), url.substr(slash)};
}

base::Result<HttpAnswer> Exchange(const std::string& url, const httplib::Params* form) {
  auto parts = SplitUrl(url);
  if (!parts.ok()) return parts.status();
  try {
    httplib::Client http(parts->first);
    http.set_connection_timeout(5);
    http.set_read_timeout(5);
    http.set_follow_location(false);
    auto r = form ? http.Post(parts->second, *form) : http.Get(parts->second);
    if (!r) {
      return Status(base::StatusCode::kUnavailable,
                    "cannot reach " + url + ": " + httplib::to_string(r.error()));
    }
    if (r->body.size() > (1 << 20)) {
      return Status(base::StatusCode::kUnavailable, url + ": answer larger than 1 MiB");
    }
    return HttpAnswer{r->status, std::move(r->body)};
  } catch (const std::exception& e) {
    return Status(base::StatusCode::kUnavailable, "cannot fetch " + url + ": " + e.what());
  }
}

}  // namespace

base::Result<std::string> HttplibFetcher::Get(const std::string& url) {
  auto r = Exchange(url, nullptr);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return Status(base::StatusCode::kUnavailable,
                  url + " answered HTTP " + std::to_string(r->status));
  }
  return std::move(r->body);
}

base::Result<HttpAnswer> HttplibFetcher::PostForm(
    const std::string& url, const std::vector<std::pair<std::string, std::string>>& form) {
  httplib::Params params;
  for (const auto& [k, v] : form) params.emplace(k, v);
  return Exchange(url, &params);
}

base::Result<std::map<std::string, JwkKey>> ParseJwks(const std::string& text) {
  const Json set = Json::parse(text, nullptr, false);
  if (set.is_discarded() || !set.is_object() || !set.contains("keys") ||
      !set.at("keys").is_array()) {
    return Status::Invalid("keys: a JWK Set is an object with a list of keys");
  }
  std::map<std::string, JwkKey> out;
  for (size_t i = 0; i < set.at("keys").size(); ++i) {
    const Json& jwk = set.at("keys")[i];
    if (!jwk.is_object()) return Status::Invalid("keys[" + std::to_string(i) + "]: not an object");
    // Keys for encryption, and keys no token can name, are of no use here.
    if (jwk.contains("use") && jwk.at("use") != "sig") continue;
    if (!jwk.contains("kid") || !jwk.at("kid").is_string()) continue;
    std::string why;
    JwkKey key;
    key.kty = jwk.value("kty", "");
    key.alg = jwk.contains("alg") && jwk.at("alg").is_string() ? jwk.value("alg", "") : "";
    key.pem = JwkToPem(jwk, &why);
    if (key.pem.empty()) continue;  // a key of a kind we do not verify with: skipped
    out[jwk.at("kid").get<std::string>()] = std::move(key);
  }
  return out;
}

bool LooksLikeJwt(const std::string& text) {
  if (std::count(text.begin(), text.end(), '.') != 2) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

base::Result<Json> OidcVerifier::FetchDiscovery(const std::string& issuer) {
  // OIDC Discovery 4: the issuer with "/.well-known/openid-configuration" appended.
  std::string base = issuer;
  if (!base.empty() && base.back() == '/') base.pop_back();
  const std::string url = base + "/.well-known/openid-configuration";
  auto body = fetcher_->Get(url);
  if (!body.ok()) return body.status();
  const Json discovery = Json::parse(*body, nullptr, false);
  if (discovery.is_discarded() || !discovery.is_object()) {
    return Status(base::StatusCode::kUnavailable, url + ": not a JSON object");
  }
  // OIDC Discovery 4.3: the document must name the issuer it was fetched for, exactly.
  if (discovery.value("issuer", Json()) != Json(issuer)) {
    return Status(base::StatusCode::kUnavailable, url + ": issuer " +
                                                      discovery.value("issuer", Json()).dump() +
                                                      " is not the configured \"" + issuer + "\"");
  }
  if (!discovery.contains("jwks_uri") || !discovery.at("jwks_uri").is_string()) {
    return Status(base::StatusCode::kUnavailable, url + ": jwks_uri is missing");
  }
  return discovery;
}

base::Result<std::map<std::string, JwkKey>> OidcVerifier::Fetch(const std::string& issuer,
                                                                Json* discovery_out) {
  auto found = FetchDiscovery(issuer);
  if (!found.ok()) return found.status();
  const Json& discovery = *found;
  *discovery_out = discovery;
  auto jwks = fetcher_->Get(discovery.at("jwks_uri").get<std::string>());
  if (!jwks.ok()) return jwks.status();
  auto keys = ParseJwks(*jwks);
  if (!keys.ok()) {
    return Status(base::StatusCode::kUnavailable,
                  discovery.at("jwks_uri").get<std::string>() + ": " + keys.status().message());
  }
  return keys;
}

base::Result<JwkKey> OidcVerifier::FindKey(const OidcProvider& provider, const std::string& kid) {
  const double now = clock_->Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    IssuerKeys& cached = issuers_[provider.issuer];
    const bool fresh = cached.fetched_at >= 0 && now - cached.fetched_at < options_.keys_max_age;
    auto it = cached.keys.find(kid);
    if (fresh && it != cached.keys.end()) return it->second;
    // An unknown kid (or a stale set): fetch again, unless that was tried just now.
    if (cached.tried_at >= 0 && now - cached.tried_at < options_.refetch_gap) {
      if (it != cached.keys.end()) return it->second;
      return Refused("unknown kid \"" + kid + "\" (the key set was fetched " +
                     std::to_string(static_cast<int>(now - cached.tried_at)) + " s ago)");
    }
    cached.tried_at = now;
  }
  Json discovery;
  auto keys = Fetch(provider.issuer, &discovery);  // outside the lock: other issuers' go on
  std::lock_guard<std::mutex> lock(mu_);
  IssuerKeys& cached = issuers_[provider.issuer];
  if (discovery.is_object()) {
    cached.discovery = std::move(discovery);
    cached.discovered_at = now;
  }
  if (!keys.ok()) {
    // A provider that is down: the keys at hand still verify what they signed.
    auto it = cached.keys.find(kid);
    if (it != cached.keys.end()) return it->second;
    return keys.status();
  }
  cached.keys = std::move(keys.value());
  cached.fetched_at = now;
  auto it = cached.keys.find(kid);
  if (it == cached.keys.end()) return Refused("unknown kid \"" + kid + "\"");
  return it->second;
}

base::Result<Json> OidcVerifier::Discovery(const std::string& issuer) {
  const double now = clock_->Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    IssuerKeys& cached = issuers_[issuer];
    if (cached.discovered_at >= 0 && now - cached.discovered_at < options_.keys_max_age) {
      return cached.discovery;
    }
    if (cached.discovery_tried_at >= 0 && now - cached.discovery_tried_at < options_.refetch_gap) {
      if (cached.discovery.is_object()) return cached.discovery;
      return Status(base::StatusCode::kUnavailable,
                    "the identity provider " + issuer + " could not be reached just now");
    }
    cached.discovery_tried_at = now;
  }
  auto found = FetchDiscovery(issuer);
  std::lock_guard<std::mutex> lock(mu_);
  IssuerKeys& cached = issuers_[issuer];
  if (!found.ok()) {
    if (cached.discovery.is_object()) return cached.discovery;
    return found.status();
  }
  cached.discovery = *found;
  cached.discovered_at = now;
  return cached.discovery;
}

base::Result<OidcIdentity> OidcVerifier::Verify(const std::string& token,
                                                const std::vector<OidcProvider>& providers) {
  if (token.size() > options_.max_token_bytes) return Refused("token larger than 16 KiB");
  if (!LooksLikeJwt(token)) return Refused("not a JWT");
  // First without a key, to learn the algorithm, the kid and the issuer; nothing of it is
  // trusted until the signature is checked below.
  jwt_t* raw = nullptr;
  if (jwt_decode(&raw, token.c_str(), nullptr, 0) != 0 || !raw) return Refused("malformed JWT");
  Jwt unverified(raw);
  // The header's alg as written: libjwt 1.10 reports alg "none" for any token decoded without
  // a key.
  const char* header_alg = jwt_get_header(unverified.get(), "alg");
  const jwt_alg_t alg = header_alg ? jwt_str_alg(header_alg) : JWT_ALG_INVAL;
  const char* alg_name = AlgName(alg);
  if (!alg_name) {
    return Refused(std::string("algorithm ") + (header_alg ? header_alg : "(none given)") +
                   " is not accepted (RS256/384/512, ES256/384/512 only)");
  }
  const char* kid_c = jwt_get_header(unverified.get(), "kid");
  const char* iss_c = jwt_get_grant(unverified.get(), "iss");
  if (!iss_c) return Refused("no iss claim");
  const std::string iss = iss_c;
  const std::string kid = kid_c ? kid_c : "";
  unverified.reset();
  const OidcProvider* provider = nullptr;
  for (const OidcProvider& p : providers) {
    if (p.issuer == iss) provider = &p;
  }
  if (!provider) return Refused("issuer \"" + iss + "\" is not an IdentityProvider's");
  if (kid.empty()) return Refused("no kid in the header");
  auto key = FindKey(*provider, kid);
  if (!key.ok()) return key.status();
  // The key decides the algorithm's family, so that a token cannot choose how it is checked.
  const bool rsa = alg_name[0] == 'R';
  if ((rsa && key->kty != "RSA") || (!rsa && key->kty != "EC") ||
      (!key->alg.empty() && key->alg != alg_name)) {
    return Refused(std::string("algorithm ") + alg_name + " does not match key \"" + kid + "\"");
  }
  if (jwt_decode(&raw, token.c_str(), reinterpret_cast<const unsigned char*>(key->pem.data()),
                 static_cast<int>(key->pem.size())) != 0 ||
      !raw) {
    return Refused("bad signature (key \"" + kid + "\")");
  }
  Jwt verified(raw);
  if (jwt_get_alg(verified.get()) != alg) return Refused("algorithm changed between decodes");
  const Json claims = ClaimsOf(verified.get());
  verified.reset();

  if (claims.value("iss", Json()) != Json(provider->issuer)) return Refused("wrong issuer");
  // aud: a string or a list that holds our client id; with several, azp must be ours (OIDC Core
  // 3.1.3.7).
  const Json aud = claims.value("aud", Json());
  bool ours = aud == Json(provider->client_id);
  if (aud.is_array()) {
    ours = std::find(aud.begin(), aud.end(), Json(provider->client_id)) != aud.end();
    if (ours && aud.size() > 1 && claims.contains("azp") &&
        claims.at("azp") != Json(provider->client_id)) {
      return Refused("azp is not " + provider->client_id);
    }
  }
  if (!ours) return Refused("wrong audience " + aud.dump() + " (not " + provider->client_id + ")");
  const double now = clock_->Now();
  double exp = 0, nbf = 0, iat = 0;
  if (!NumericDate(claims, "exp", &exp)) return Refused("no exp claim");
  if (exp + options_.leeway <= now) return Refused("expired");
  if (claims.contains("nbf") &&
      (!NumericDate(claims, "nbf", &nbf) || nbf > now + options_.leeway)) {
    return Refused("not valid yet (nbf)");
  }
  if (claims.contains("iat") &&
      (!NumericDate(claims, "iat", &iat) || iat > now + options_.leeway)) {
    return Refused("issued in the future (iat)");
  }
  const Json name = claims.value(provider->username_claim, Json());
  if (!name.is_string() || name.get<std::string>().empty()) {
    return Refused("no " + provider->username_claim + " claim (the username)");
  }
  OidcIdentity id;
  id.provider = provider->name;
  id.user = provider->username_prefix + name.get<std::string>();
  id.expires_at = exp;
  if (claims.contains("nonce") && claims.at("nonce").is_string()) id.nonce = claims.at("nonce");
  const Json groups = claims.value(provider->groups_claim, Json());
  if (groups.is_string()) id.groups.push_back(groups);
  if (groups.is_array()) {
    for (const Json& g : groups) {
      if (g.is_string()) id.groups.push_back(g);
    }
  }
  const std::set<std::string> held(id.groups.begin(), id.groups.end());
  for (const auto& [group, roles] : provider->groups) {
    if (held.count(group)) id.roles.insert(id.roles.end(), roles.begin(), roles.end());
  }
  if (id.roles.empty()) {
    std::string list;
    for (const std::string& g : id.groups) list += (list.empty() ? "" : ", ") + g;
    return Status(base::StatusCode::kPermissionDenied,
                  id.user + " signed in, but none of its groups (" +
                      (list.empty() ? "none in claim " + provider->groups_claim : list) +
                      ") is given a role by IdentityProvider " + provider->name);
  }
  return id;
}

}  // namespace meridian::api
