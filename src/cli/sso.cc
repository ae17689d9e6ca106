// `meridian login --sso`: the OAuth 2.0 device authorization grant (RFC 8628) against the
// identity provider the server names, for an ID token that the CLI then sends as its bearer
// token (docs/adr/0021-single-sign-on.md).
#include <httplib.h>

#include <chrono>
#include <thread>

#include "cli/verbs.h"

namespace meridian::cli {

namespace {

using base::Status;

// An https or http URL split as httplib's client takes it.
struct Url {
  std::string origin;
  std::string path;
};
base::Result<Url> SplitUrl(const std::string& url, const std::string& what) {
  const size_t scheme = url.find("://");
  if ((url.rfind("https://", 0) != 0 && url.rfind("http://", 0) != 0) ||
      scheme == std::string::npos) {
    return Status::Invalid(what + ": \"" + url + "\" is not an http(s) URL");
  }
  const size_t slash = url.find('/', scheme + 3);
  if (slash == std::string::npos) return Url{url, "/"};
  return Url{url.substr(0, slash), url.substr(slash)};
}

std::unique_ptr<httplib::Client> ClientFor(const Url& url, const ClientConfig& config) {
  auto http = std::make_unique<httplib::Client>(url.origin);
  http->set_connection_timeout(5);
  http->set_read_timeout(30);
  http->enable_server_certificate_verification(!config.insecure);
  return http;
}

// A JSON answer of the provider, or why there is none.
base::Result<Json> Answer(const httplib::Result& r, const std::string& url) {
  if (!r) {
    return Status(base::StatusCode::kIoError, "cannot reach the identity provider at " + url +
                                                  ": " + httplib::to_string(r.error()));
  }
  Json body = Json::parse(r->body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return Status(base::StatusCode::kIoError,
                  url + " answered HTTP " + std::to_string(r->status) + " without a JSON object");
  }
  body["_status"] = r->status;
  return body;
}

base::Result<Json> GetJson(const std::string& url, const ClientConfig& config) {
  auto u = SplitUrl(url, "url");
  if (!u.ok()) return u.status();
  return Answer(ClientFor(*u, config)->Get(u->path), url);
}

base::Result<Json> PostForm(const std::string& url, const httplib::Params& form,
                            const ClientConfig& config) {
  auto u = SplitUrl(url, "url");
  if (!u.ok()) return u.status();
  return Answer(ClientFor(*u, config)->Post(u->path, form), url);
}

int Problem(Context& c, const std::string& message, int code) {
  c.err << "meridian: " << message << "\n";
  return code;
}

int Steps(Context& c, const SsoFlags& f) {
  // 1. Which provider: the server says (GET /api/v1/auth/providers needs no token).
  auto listed = c.client.Call("GET", "/api/v1/auth/providers");
  if (!listed.ok()) return Problem(c, listed.status().message(), kExitUnavailable);
  if (listed->status != 200) return Problem(c, ErrorMessage(*listed), ExitCodeFor(listed->status));
  const Json items = listed->body.value("items", Json::array());
  Json provider;
  std::string names;
  for (const Json& p : items) {
    names += (names.empty() ? "" : ", ") + p.value("name", "");
    if (f.provider.empty() ? items.size() == 1 : p.value("name", "") == f.provider) provider = p;
  }
  if (provider.is_null()) {
    if (items.empty()) {
      return Problem(c, c.client.config().server + " has no IdentityProvider: sign in with a token",
                     kExitUsage);
    }
    return Problem(c,
                   f.provider.empty() ? "the server has several identity providers (" + names +
                                            "): choose one with --provider NAME"
                                      : "--provider: \"" + f.provider + "\" is not one of " + names,
                   kExitUsage);
  }
  const std::string issuer = provider.value("issuer", "");
  const std::string client_id = provider.value("clientId", "");
  std::string scope;
  for (const Json& s : provider.value("scopes", Json::array())) {
    if (s.is_string()) scope += (scope.empty() ? "" : " ") + s.get<std::string>();
  }
  // 2. The provider's endpoints (OIDC Discovery); the document must name its own issuer.
  std::string base = issuer;
  if (!base.empty() && base.back() == '/') base.pop_back();
  auto discovery = GetJson(base + "/.well-known/openid-configuration", c.client.config());
  if (!discovery.ok()) return Problem(c, discovery.status().message(), kExitUnavailable);
  if (discovery->value("issuer", "") != issuer) {
    return Problem(c,
                   "the identity provider's discovery document names issuer \"" +
                       discovery->value("issuer", "") + "\", not \"" + issuer + "\"",
                   kExitError);
  }
  const std::string device_url = discovery->value("device_authorization_endpoint", "");
  const std::string token_url = discovery->value("token_endpoint", "");
  if (device_url.empty() || token_url.empty()) {
    return Problem(c, issuer + " offers no device authorization endpoint (RFC 8628)", kExitError);
  }
  // 3. A device code and a user code.
  auto device =
      PostForm(device_url, {{"client_id", client_id}, {"scope", scope}}, c.client.config());
  if (!device.ok()) return Problem(c, device.status().message(), kExitUnavailable);
  if (device->value("_status", 0) != 200 || !device->contains("device_code")) {
    return Problem(c,
                   "the identity provider refused the device authorization: " +
                       device->value("error", std::string("HTTP ") +
                                                  std::to_string(device->value("_status", 0))),
                   kExitAuth);
  }
  const std::string device_code = device->value("device_code", "");
  const std::string uri = device->value("verification_uri", "");
  const std::string complete = device->value("verification_uri_complete", "");
  double interval = device->value("interval", 5.0);
  const double expires_in = device->value("expires_in", 600.0);
  c.out << "To sign in, open " << uri << " and enter the code " << device->value("user_code", "")
        << "\n";
  if (!complete.empty()) c.out << "(or open " << complete << ")\n";
  c.out << "Waiting for the sign-in..." << std::endl;
  // 4. Poll until the user has approved, denied, or the code expired (RFC 8628 3.4, 3.5).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(expires_in);
  std::string id_token;
  while (id_token.empty()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Problem(c, "the code expired before the sign-in was approved: run login again",
                     kExitAuth);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    auto token = PostForm(token_url,
                          {{"grant_type", "urn:ietf:params:oauth:grant-type:device_code"},
                           {"device_code", device_code},
                           {"client_id", client_id}},
                          c.client.config());
    if (!token.ok()) return Problem(c, token.status().message(), kExitUnavailable);
    const std::string error = token->value("error", "");
    if (error == "authorization_pending") continue;
    if (error == "slow_down") {
      interval += 5;
      continue;
    }
    if (!error.empty()) {
      return Problem(
          c,
          "sign-in failed: " + error +
              (error == "access_denied" ? " (the request was denied)" : "") +
              (token->contains("error_description") ? ": " + token->value("error_description", "")
                                                    : ""),
          kExitAuth);
    }
    id_token = token->value("id_token", "");
    if (id_token.empty()) {
      return Problem(c,
                     "the identity provider answered no id_token (is \"openid\" among the "
                     "IdentityProvider's scopes?)",
                     kExitError);
    }
  }
  // 5. The ID token is the bearer token from now on: checked, then kept as a token is.
  ClientConfig config = c.client.config();
  config.token = id_token;
  const Client signed_in(config);
  auto me = signed_in.Call("GET", "/api/v1/whoami");
  if (!me.ok()) return Problem(c, me.status().message(), kExitUnavailable);
  if (me->status != 200) return Problem(c, ErrorMessage(*me), ExitCodeFor(me->status));
  if (f.save) {
    if (Status s = SaveConfig(c.config_path, config); !s.ok()) {
      return Problem(c, s.message(), kExitError);
    }
  }
  c.out << "Logged in to " << config.server << " as " << me->body.value("user", "") << " with "
        << provider.value("name", "") << (f.save ? " (saved in " + c.config_path + ")" : "")
        << ".\n";
  return kExitOk;
}

}  // namespace

int LoginSso(Context& c, const SsoFlags& f) {
  // The provider's and the server's answers are read by field: one of the wrong type (a number
  // where a URL belongs) is a message, not a crash.
  try {
    return Steps(c, f);
  } catch (const Json::exception& e) {
    return Problem(c,
                   std::string("an answer of the identity provider or the server is not as "
                               "OpenID Connect says: ") +
                       e.what(),
                   kExitError);
  }
}

}  // namespace meridian::cli
