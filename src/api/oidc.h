#pragma once

// Single sign-on with OpenID Connect (docs/adr/0021-single-sign-on.md): ID tokens of the
// identity providers that IdentityProvider documents name are accepted as bearer credentials.
// JWT parsing and signature checks are libjwt's; OpenSSL turns a JWK into the PEM key libjwt
// takes; the claims (issuer, audience, expiry, not-before) and the groups-to-roles rule are
// checked here.

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "api/auth.h"
#include "base/clock.h"
#include "base/status.h"

namespace meridian::api {

// An IdentityProvider document, decoded. Its spec was validated when it was applied
// (domain/documents.cc), so this reads the canonical form and fills in the defaults.
struct OidcProvider {
  std::string name;
  std::string issuer;     // compared with the token's iss byte for byte
  std::string client_id;  // the token's aud must hold it
  std::string username_claim = "sub";
  std::string username_prefix;  // default "<name>:", so that no sign-in user is a stored one
  std::string groups_claim = "groups";
  std::vector<std::string> scopes;  // what clients ask for: default openid, profile, email
  // The rule: a user holds the roles of every group listed here that its token names.
  std::vector<std::pair<std::string, std::vector<RoleBinding>>> groups;
};
OidcProvider OidcProviderFromSpec(const std::string& name, const Json& spec);

// Who a verified ID token signs in, and with what.
struct OidcIdentity {
  std::string provider;
  std::string user;  // prefix + the username claim
  std::vector<std::string> groups;
  std::vector<RoleBinding> roles;
  double expires_at = 0;
  std::string nonce;  // the token's nonce claim, for a sign-in that sent one
};

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// Talks to an identity provider over http(s): fetches discovery documents and key sets, and
// posts forms to its token endpoint. Thread-safe.
class HttpFetcher {
 public:
  virtual ~HttpFetcher() = default;
  // The body of a 200 answer; kUnavailable for anything else.
  virtual base::Result<std::string> Get(const std::string& url) = 0;
  // An application/x-www-form-urlencoded POST, answered with any status (a token endpoint's
  // errors are 400s with a JSON body); kUnavailable when there is no answer.
  virtual base::Result<HttpAnswer> PostForm(
      const std::string& url, const std::vector<std::pair<std::string, std::string>>& form) = 0;
};

// An HttpFetcher on cpp-httplib's client: 5 s to connect and to read, the system's CAs for https,
// no redirects, answers of 1 MiB at most.
class HttplibFetcher final : public HttpFetcher {
 public:
  base::Result<std::string> Get(const std::string& url) override;
  base::Result<HttpAnswer> PostForm(
      const std::string& url,
      const std::vector<std::pair<std::string, std::string>>& form) override;
};

// A public key of a JWK Set, as libjwt takes it.
struct JwkKey {
  std::string kty;  // RSA | EC
  std::string alg;  // the JWK's alg, when it names one
  std::string pem;  // SubjectPublicKeyInfo
};
// Reads a JWK Set ({"keys": [...]}): RSA keys (n, e; 2048 bits at least) and EC keys (P-256,
// P-384, P-521) meant for signatures, by kid. Other keys are skipped; a malformed set is an error.
base::Result<std::map<std::string, JwkKey>> ParseJwks(const std::string& text);

// Whether a bearer credential is shaped as a compact JWS: three base64url parts.
bool LooksLikeJwt(const std::string& text);

struct OidcOptions {
  double leeway = 60;          // clock skew allowed on exp, nbf and iat, in seconds
  double keys_max_age = 3600;  // a key set older than this is fetched again before use
  double refetch_gap = 2;      // an unknown kid fetches the key set at most this often
  size_t max_token_bytes = 16384;
};

// Verifies ID tokens. Discovery documents and key sets are fetched on first use of an issuer and
// cached; a token whose kid the cached set lacks fetches it again (the provider rotated its
// keys), at most once per `refetch_gap` per issuer, so that tokens with made-up kids cannot make
// the server flood the provider. Thread-safe; fetches run outside the lock.
class OidcVerifier {
 public:
  OidcVerifier(HttpFetcher* fetcher, const base::Clock* clock, OidcOptions options = {})
      : fetcher_(fetcher), clock_(clock), options_(options) {}

  // The identity a token signs in, checked against the provider whose issuer it names:
  // algorithm (RS256/384/512, ES256/384/512 only: never none, never an HMAC keyed with a public
  // key), kid, signature, iss, aud (and azp when several audiences), exp, nbf, iat, and the
  // username claim. kUnauthenticated says why a token is refused (for the audit log: callers
  // answer every refusal alike); kPermissionDenied, a valid token none of whose groups maps to a
  // role; kUnavailable, a provider that cannot be reached.
  base::Result<OidcIdentity> Verify(const std::string& token,
                                    const std::vector<OidcProvider>& providers);
  // The issuer's discovery document (its endpoints), cached as its keys are and fetched at most
  // once per `refetch_gap` when it is not at hand. kUnavailable when it cannot be had.
  base::Result<Json> Discovery(const std::string& issuer);

 private:
  struct IssuerKeys {
    std::map<std::string, JwkKey> keys;
    double fetched_at = -1;
    double tried_at = -1;
    Json discovery;
    double discovered_at = -1;
    double discovery_tried_at = -1;
  };
  base::Result<JwkKey> FindKey(const OidcProvider& provider, const std::string& kid);
  // Discovery, checked to name the issuer it was fetched for.
  base::Result<Json> FetchDiscovery(const std::string& issuer);
  // Discovery, then the key set it names (the discovery document is kept too).
  base::Result<std::map<std::string, JwkKey>> Fetch(const std::string& issuer, Json* discovery);

  HttpFetcher* fetcher_;
  const base::Clock* clock_;
  OidcOptions options_;
  std::mutex mu_;
  std::map<std::string, IssuerKeys> issuers_;
};

}  // namespace meridian::api
