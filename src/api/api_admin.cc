// Users, tokens and the audit log.
#include <map>
#include <optional>

#include "api/api_internal.h"
#include "base/duration.h"

namespace meridian::api {

using base::Status;

namespace {

Json TokenToJson(const store::TokenRecord& t) {
  return {{"id", t.id},
          {"user", t.user},
          {"description", t.description},
          {"createdAt", t.created_at},
          {"expiresAt", t.expires_at > 0 ? Json(t.expires_at) : Json()},
          {"revoked", t.revoked}};
}

// A string field of a provider's answer; "" when it is missing or not a string (the answer comes
// from the network: a wrong type is a refusal, not an exception).
std::string StringField(const Json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_string()) return "";
  return object.at(key).get<std::string>();
}

}  // namespace

void Api::WhoAmI(Call& call) {
  // The roles the caller was authenticated with: a stored user's, read with its token, or those
  // an identity provider's groups give (a signed-in user has no User object).
  Json out = {{"user", call.access.user()},
              {"roles", RolesToJson(call.access.roles())},
              {"projects", call.access.Readable(Config()->projects)}};
  if (!call.identity_provider.empty()) out["identityProvider"] = call.identity_provider;
  if (call.expires_at > 0) out["expiresAt"] = call.expires_at;
  Respond(call, 200, out);
}

void Api::AuthProviders(Call& call) {
  Json items = Json::array();
  for (const OidcProvider& p : Config()->identity_providers) {
    Json item = {
        {"name", p.name}, {"issuer", p.issuer}, {"clientId", p.client_id}, {"scopes", p.scopes}};
    // Where a browser signs in: the dashboard cannot read the provider's discovery document
    // itself (its page may connect to its own origin only). Cached, fetched at most every 2 s.
    auto discovery = oidc_->Discovery(p.issuer);
    if (discovery.ok() && discovery->contains("authorization_endpoint") &&
        discovery->at("authorization_endpoint").is_string()) {
      item["authorizationEndpoint"] = discovery->at("authorization_endpoint");
    }
    items.push_back(std::move(item));
  }
  Respond(call, 200, {{"items", std::move(items)}});
}

void Api::ExchangeCode(Call& call) {
  auto body = JsonBody(call);
  if (!body) return;
  if (!body->is_object()) return Fail(call, 400, "invalid_argument", "body: must be an object");
  std::map<std::string, std::string> in;
  for (const char* k : {"provider", "code", "codeVerifier", "redirectUri", "nonce"}) {
    if (!body->contains(k) || !body->at(k).is_string() || body->at(k).get<std::string>().empty()) {
      return Fail(call, 400, "invalid_argument", std::string(k) + ": is required", k);
    }
    in[k] = body->at(k).get<std::string>();
  }
  for (const auto& [k, v] : body->items()) {
    if (!in.count(k)) return Fail(call, 400, "invalid_argument", k + ": unknown field", k);
  }
  std::optional<OidcProvider> provider;
  for (const OidcProvider& p : Config()->identity_providers) {
    if (p.name == in["provider"]) provider = p;
  }
  if (!provider) {
    return Fail(call, 404, "not_found", "provider: no IdentityProvider \"" + in["provider"] + "\"",
                "provider");
  }
  auto discovery = oidc_->Discovery(provider->issuer);
  if (!discovery.ok()) return Fail(call, discovery.status());
  const std::string endpoint = StringField(*discovery, "token_endpoint");
  if (endpoint.empty()) {
    return Fail(call, 503, "unavailable", provider->issuer + " names no token_endpoint");
  }
  // RFC 6749 4.1.3 with RFC 7636's verifier: the code is good only with the verifier of the
  // browser that asked for it.
  auto answer = oidc_fetcher_->PostForm(endpoint, {{"grant_type", "authorization_code"},
                                                   {"code", in["code"]},
                                                   {"redirect_uri", in["redirectUri"]},
                                                   {"client_id", provider->client_id},
                                                   {"code_verifier", in["codeVerifier"]}});
  if (!answer.ok()) return Fail(call, answer.status());
  const Json tokens = Json::parse(answer->body, nullptr, false);
  const std::string id_token = StringField(tokens, "id_token");
  if (answer->status != 200 || id_token.empty()) {
    const std::string said = StringField(tokens, "error");
    const std::string error = !said.empty() ? said : tokens.is_object() ? "no id_token" : "no JSON";
    return Fail(call, 401, "unauthenticated",
                "the identity provider refused the sign-in: " + error + " (HTTP " +
                    std::to_string(answer->status) + ")");
  }
  auto identity = oidc_->Verify(id_token, {*provider});
  if (!identity.ok()) {
    call.audit_message = "ID token refused: " + identity.status().message();
    return Fail(
        call, identity.status().code() == base::StatusCode::kPermissionDenied ? 403 : 401,
        identity.status().code() == base::StatusCode::kPermissionDenied ? "permission_denied"
                                                                        : "unauthenticated",
        identity.status().code() == base::StatusCode::kPermissionDenied
            ? identity.status().message()
            : "the identity provider's ID token was refused: " + identity.status().message());
  }
  // The nonce binds the token to this browser's sign-in (OIDC Core 3.1.3.7, 11).
  if (identity->nonce != in["nonce"]) {
    return Fail(call, 401, "unauthenticated", "the ID token's nonce is not this sign-in's");
  }
  Respond(call, 200,
          {{"idToken", id_token}, {"user", identity->user}, {"expiresAt", identity->expires_at}});
}

void Api::ListUsers(Call& call) {
  if (!call.access.ManagesUsers()) {
    return Fail(call, 403, "permission_denied", call.access.user() + " may not list users");
  }
  auto users = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.ListObjects("User"); });
  if (!users.ok()) return Fail(call, users.status());
  // A team lead or org-admin sees the users it manages: those holding a role it could grant,
  // with only those roles.
  Json items = Json::array();
  for (store::Object& u : *users) {
    if (!call.access.IsAdmin()) {
      auto roles = ParseRoles(u.spec);
      if (!roles.ok()) continue;
      std::vector<RoleBinding> mine;
      for (const RoleBinding& b : *roles) {
        if (call.access.CanGrant(b)) mine.push_back(b);
      }
      if (mine.empty()) continue;
      u.spec["roles"] = RolesToJson(mine);
    }
    items.push_back(ObjectToJson(u));
  }
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

void Api::PutUser(Call& call) {
  if (!call.access.ManagesUsers()) {
    return Fail(call, 403, "permission_denied", call.access.user() + " may not manage users");
  }
  const std::string name = call.Arg(1);
  if (!domain::IsValidName(name)) {
    return Fail(call, 400, "invalid_argument", "\"" + name + "\" is not a valid user name",
                "metadata.name");
  }
  auto body = JsonBody(call);
  if (!body) return;
  const Json spec = body->is_object() && body->contains("spec") ? body->at("spec") : Json();
  auto roles = ParseRoles(spec.is_null() ? Json::object() : spec);
  if (!roles.ok()) return Fail(call, roles.status());
  for (const RoleBinding& b : *roles) {
    if (!call.access.CanGrant(b)) {
      return Fail(call, 403, "permission_denied",
                  call.access.user() + " may not grant " + RoleName(b.role) + " " +
                      RolesToJson({b})[0].dump());
    }
  }
  store::Object user{"User", name, Json::object(), 0, call.started, call.access.user()};
  Status s = store_->Write([&](store::Tx& tx) {
    // The roles the caller may not grant stay as they are: a team lead replaces only the
    // roles below it.
    std::vector<RoleBinding> kept;
    std::string description = spec.value("description", "");
    auto existing = tx.GetObject("User", name);
    if (existing.ok()) {
      auto old = ParseRoles(existing->spec);
      if (!old.ok()) return old.status();
      for (const RoleBinding& b : *old) {
        if (!call.access.CanGrant(b)) kept.push_back(b);
      }
      // The description is the whole user's: only who manages every role the user holds may
      // rewrite it (a team lead may not relabel the admin, or a user of another team).
      if (!kept.empty()) description = existing->spec.value("description", "");
    } else if (existing.status().code() != base::StatusCode::kNotFound) {
      return existing.status();
    }
    kept.insert(kept.end(), roles->begin(), roles->end());
    user.spec = {{"roles", RolesToJson(kept)}, {"description", description}};
    auto v = tx.PutObject(user, store::kAnyVersion);
    if (!v.ok()) return v.status();
    user.version = *v;
    return Status::Ok();
  });
  if (!s.ok()) return Fail(call, s);
  call.audit_message = "user " + name + ": " + user.spec["roles"].dump();
  Respond(call, user.version == 1 ? 201 : 200, ObjectToJson(user));
}

void Api::CreateToken(Call& call) {
  auto body = JsonBody(call);
  if (!body) return;
  if (!body->is_object()) return Fail(call, 400, "invalid_argument", "body: must be an object");
  for (const auto& [k, v] : body->items()) {
    if (k != "user" && k != "description" && k != "expiresIn") {
      return Fail(call, 400, "invalid_argument", k + ": unknown field", k);
    }
  }
  const std::string user = body->value("user", call.access.user());
  // A node's credential is issued by its registration only, one at a time.
  if (!call.access.BoundNode().empty()) {
    return Fail(call, 403, "permission_denied", "a node's credential may not create tokens");
  }
  if (user != call.access.user() && !call.access.IsAdmin()) {
    return Fail(call, 403, "permission_denied",
                call.access.user() + " may not create tokens for " + user);
  }
  double expires_at = 0;
  if (body->contains("expiresIn")) {
    // Seconds, or a duration with units as documents take them ("30d", "12h").
    const Json& e = body->at("expiresIn");
    auto seconds = e.is_string()   ? base::ParseDuration(e.get<std::string>())
                   : e.is_number() ? base::Result<double>(e.get<double>())
                                   : base::Result<double>(Status::Invalid("not a duration"));
    if (!seconds.ok() || *seconds <= 0) {
      return Fail(call, 400, "invalid_argument",
                  "expiresIn: must be a positive number of seconds or a duration (30d, 12h, 90m)",
                  "expiresIn");
    }
    expires_at = call.started + *seconds;
  }
  NewToken t = GenerateToken(*entropy_);
  store::TokenRecord record{t.id,         user,       t.secret_hash, body->value("description", ""),
                            call.started, expires_at, false};
  Status s = store_->Write([&](store::Tx& tx) {
    if (auto u = tx.GetObject("User", user); !u.ok()) return u.status();
    return tx.PutToken(record);
  });
  if (!s.ok()) return Fail(call, s);
  call.audit_message = "token " + t.id + " for " + user;
  Json out = TokenToJson(record);
  out["token"] = t.text;  // shown once: only its hash is kept
  Respond(call, 201, out);
}

void Api::ListTokens(Call& call) {
  std::string user = call.req.get_param_value("user");
  if (user.empty() && !call.access.IsAdmin()) user = call.access.user();
  if (user != call.access.user() && !call.access.IsAdmin()) {
    return Fail(call, 403, "permission_denied",
                call.access.user() + " may not list tokens of " + user);
  }
  auto tokens_read = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.ListTokens(user); });
  if (!tokens_read.ok()) return Fail(call, tokens_read.status());
  std::vector<store::TokenRecord> tokens = std::move(tokens_read.value());
  Json items = Json::array();
  for (const store::TokenRecord& t : tokens) items.push_back(TokenToJson(t));
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

Status RevokeTokensOf(store::Tx& tx, const std::string& user) {
  auto all = tx.ListTokens(user);
  if (!all.ok()) return all.status();
  for (store::TokenRecord r : *all) {
    if (r.revoked) continue;
    r.revoked = true;
    if (Status p = tx.PutToken(r); !p.ok()) return p;
  }
  return Status::Ok();
}

void Api::RevokeToken(Call& call) {
  const std::string id = call.Arg(1);
  store::TokenRecord token;
  std::string node;  // the node whose credential it is, if it is one
  Status s = store_->Write([&](store::Tx& tx) {
    auto t = tx.GetToken(id);
    if (!t.ok()) return t.status();
    token = *t;
    if (token.user != call.access.user() && !call.access.IsAdmin()) {
      // Someone else's token is reported as missing: its id tells nothing then.
      return Status::NotFound("token " + id + " not found");
    }
    token.revoked = true;
    if (Status p = tx.PutToken(token); !p.ok()) return p;
    // A node's credential: every token of it goes (a node holds one; none may outlive it).
    auto user = tx.GetObject("User", token.user);
    auto roles =
        user.ok() ? ParseRoles(user->spec) : base::Result<std::vector<RoleBinding>>(user.status());
    if (!roles.ok()) return Status::Ok();
    for (const RoleBinding& b : *roles) {
      if (b.role == Role::kNode) node = b.node;
    }
    if (node.empty()) return Status::Ok();
    return RevokeTokensOf(tx, token.user);
  });
  if (!s.ok()) return Fail(call, s);
  call.audit_message = "token " + id + " of " + token.user;
  // A node whose credential is revoked is not trusted to run work: it is cordoned, and stays so
  // (also after it registers again with a bootstrap token) until an operator uncordons it.
  if (!node.empty() && node_ops_) {
    auto cordoned = node_ops_->Cordon(node, call.access.user(), true);
    if (cordoned.ok()) call.audit_message += "; node " + node + " cordoned";
  }
  Respond(call, 200, TokenToJson(token));
}

void Api::ListAudit(Call& call) {
  if (!call.access.IsAdmin()) {
    return Fail(call, 403, "permission_denied", call.access.user() + " may not read the audit log");
  }
  // Failed authentications still being counted are written first, so that the log is current.
  FlushFailedAuths(true);
  // ?continue, the answer's, as on every list; ?after, its old name, still works.
  auto after =
      IntParam(call, call.req.has_param("continue") ? "continue" : "after", 0, 0, INT64_MAX);
  if (!after) return;
  auto limit = IntParam(call, "limit", 100, 1, options_.max_page);
  if (!limit) return;
  store::AuditFilter f;
  f.after_seq = *after;
  f.limit = static_cast<int32_t>(*limit);
  f.user = call.req.get_param_value("user");
  f.result = call.req.get_param_value("result");
  auto newest = NewestFirst(call);
  if (!newest) return;
  f.newest_first = *newest;
  auto entries_read = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.ListAudit(f); });
  if (!entries_read.ok()) return Fail(call, entries_read.status());
  std::vector<store::AuditEntry> entries = std::move(entries_read.value());
  Json items = Json::array();
  for (const store::AuditEntry& a : entries) {
    items.push_back({{"seq", a.seq},
                     {"at", a.at},
                     {"user", a.user},
                     {"method", a.method},
                     {"path", a.path},
                     {"action", a.action},
                     {"project", a.project},
                     {"code", a.code},
                     {"result", a.result},
                     {"message", a.message}});
  }
  // Oldest first, a full page continues after its last entry; newest first lists the newest
  // entries only, and ends there.
  Json next = !f.newest_first && entries.size() == static_cast<size_t>(f.limit)
                  ? Json(entries.back().seq)
                  : Json();
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

}  // namespace meridian::api
