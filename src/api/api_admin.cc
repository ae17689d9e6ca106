// Users, tokens and the audit log.
#include "api/api_internal.h"

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

}  // namespace

void Api::WhoAmI(Call& call) {
  std::vector<RoleBinding> roles;
  Status s = store_->Read([&](store::Tx& tx) {
    auto user = tx.GetObject("User", call.access.user());
    if (!user.ok()) return user.status();
    auto r = ParseRoles(user->spec);
    if (!r.ok()) return r.status();
    roles = *r;
    return Status::Ok();
  });
  if (!s.ok()) return Fail(call, s);
  Respond(call, 200,
          {{"user", call.access.user()},
           {"roles", RolesToJson(roles)},
           {"projects", call.access.Readable(Config()->projects)}});
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
  Respond(call, 200, {{"items", std::move(items)}});
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
    const Json& e = body->at("expiresIn");
    if (!e.is_number() || e.get<double>() <= 0) {
      return Fail(call, 400, "invalid_argument", "expiresIn: must be a positive number of seconds",
                  "expiresIn");
    }
    expires_at = call.started + e.get<double>();
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
  Respond(call, 200, {{"items", std::move(items)}});
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
  auto after = IntParam(call, "after", 0, 0, INT64_MAX);
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
  Respond(call, 200, {{"items", std::move(items)}});
}

}  // namespace meridian::api
