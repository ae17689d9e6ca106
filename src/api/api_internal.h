#pragma once

// Shared by the API's handler files; not part of the module's interface.

#include <optional>
#include <string>

#include "api/api.h"
#include "domain/spec.h"
#include "net/http.h"

namespace meridian::api {

struct Api::Call {
  const net::Request& req;
  net::Response& res;
  std::string action;
  Access access;
  bool authenticated = false;
  bool audited = false;  // the handler wrote the audit entry in its own transaction
  std::string project;   // the project touched, for the audit log
  std::string audit_message;
  std::string auth_failure;  // why authentication failed, for the audit log only
  std::string token_id;      // the id of the token it authenticated with
  double started = 0;
  std::shared_ptr<const void> pinned;  // what `access` points into
  std::string identity_provider;       // signed in with an ID token of this provider
  double expires_at = 0;               // when the credential expires (0: never)
  // The client's address: the peer's, or the one a follower forwarding the request gives.
  std::string client;

  // The n-th capture of the route's pattern.
  std::string Arg(size_t n) const { return req.matches.size() > n ? req.matches[n] : ""; }
};

std::shared_ptr<Api::AuditState> NewAuditState();

// The body of an error: {"error": {"code", "message", "field"}}, with every field error in
// "details" when there are several.
void Respond(Api::Call& call, int status, const Json& body);
void Fail(Api::Call& call, int status, const std::string& code, const std::string& message,
          const std::string& field = "", const Json& details = nullptr);
// Maps a Status to its HTTP status and error code ("field: message" puts the field apart).
void Fail(Api::Call& call, const base::Status& status);
void FailFields(Api::Call& call, const domain::ErrorList& errors);
int HttpStatus(base::StatusCode code);

// Decodes the request body as JSON; on failure answers 400 and returns nothing.
std::optional<Json> JsonBody(Api::Call& call);
// An integer query parameter within [min, max]; on a bad value answers 400 and returns nothing.
std::optional<int64_t> IntParam(Api::Call& call, const std::string& name, int64_t fallback,
                                int64_t min, int64_t max);
// The n-th capture of the route's pattern as an id (the pattern takes only digits): one too large
// for any id names nothing, and answers 404 "<what> N not found" (and returns nothing).
std::optional<int64_t> IdArg(Api::Call& call, size_t n, const std::string& what);
// One page of a list the server holds whole (nodes, a kind's documents, users, tokens, alerts,
// ...): ?limit (default `default_limit`, 0: all of it; at most `max_page`) and ?continue, the
// position that the previous page's answer gave as its `continue`. Leaves the page in *items
// and the next page's `continue` (null on the last) in *next. Answers 400 itself and returns
// false on a bad value. Every list of the API pages with limit and continue (ADR 0024).
bool PageWhole(Api::Call& call, Json* items, Json* next, int64_t default_limit, int64_t max_page);
// ?order=oldest (the default) or newest; answers 400 itself and returns nullopt otherwise.
std::optional<bool> NewestFirst(Api::Call& call);

// Reads the job named by the route's first capture when the caller may see it; answers 404
// otherwise (whether it exists or not).
std::optional<store::JobRecord> ReadableJob(Api::Call& call, store::Store* store);

// Takes the record by value: a caller done with it moves it in, and its JSON is not copied.
Json JobToJson(store::JobRecord job);
Json ObjectToJson(const store::Object& object);
// Revokes every token of `user` not yet revoked (a node's credential: none may outlive another).
base::Status RevokeTokensOf(store::Tx& tx, const std::string& user);
Json EventToJson(const store::Event& event);

// The plural path segment of a configuration kind ("NodePool" -> "nodepools").
std::string Plural(const std::string& kind);

}  // namespace meridian::api
