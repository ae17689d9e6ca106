#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/entropy.h"
#include "base/status.h"

namespace meridian::api {

using Json = nlohmann::json;

// API tokens look like "mrd_<id>_<secret>": the id finds the stored record, the secret is
// checked against its SHA-256 (the secret itself is never stored, as GitHub does it). Both parts
// are random hex, so the hash needs no salt or stretching.
struct NewToken {
  std::string id;
  std::string secret;
  std::string secret_hash;
  std::string text;  // what the user keeps: shown once
};
NewToken GenerateToken(base::Entropy& entropy);
// Splits a token into id and secret; false when it is not shaped like one of ours.
bool ParseToken(const std::string& text, std::string* id, std::string* secret);
std::string Sha256Hex(const std::string& data);
// Compares in time independent of where the strings differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// Ordered by what a role may do within the tenancy tree. Agent (a node agent's identity) and
// metrics (a Prometheus scraper's) may do nothing there: agents only register nodes and report on
// them, scrapers only read /metrics.
// agent is a bootstrap identity (what an operator gives a new machine: it registers nodes);
// node is the credential a registration returns, bound to that one node.
enum class Role { kAgent, kNode, kMetrics, kViewer, kMember, kTeamLead, kOrgAdmin, kAdmin };
const char* RoleName(Role r);

// A role in a scope: admin is global; org-admin names an organization; team-lead a team;
// member a project; viewer a project, a team or an organization.
struct RoleBinding {
  Role role = Role::kViewer;
  std::string organization;
  std::string team;
  std::string project;
  std::string node;  // kNode: the node it speaks for
};

// The user that holds a node's credential (a role binding {role: node, node: NAME}).
std::string NodeUser(const std::string& node);

// Checks a User's spec ({roles: [{role, organization|team|project}]}); returns its bindings or
// an error naming the field.
base::Result<std::vector<RoleBinding>> ParseRoles(const Json& user_spec);
Json RolesToJson(const std::vector<RoleBinding>& roles);

// A scope of the tenancy tree as documents name it: exactly one of organization, team or
// project (as in a user's role bindings and in quotas).
struct Scope {
  std::string organization;
  std::string team;
  std::string project;
  std::string ToString() const;  // "team product"
};

// Who may submit jobs with a priority class, from its spec. Admins always may; others when the
// job's project lies within one of `scopes`. A class that names no scopes (allowedScopes left
// out) is open to everyone when it does not preempt, and kept to admins when it does: a class
// that may stop other people's work is handed out, not taken.
struct ClassUse {
  std::string name;
  bool preempting = true;
  bool scoped = false;  // the spec lists allowedScopes (perhaps none)
  std::vector<Scope> scopes;
};
ClassUse ClassUseOf(const std::string& name, const Json& priority_class_spec);

// Who owns what in the tenancy tree, from the live Team and Project documents.
struct Tenancy {
  std::map<std::string, std::string> team_of_project;
  std::map<std::string, std::string> org_of_team;
  std::string OrgOfProject(const std::string& project) const;
  std::string TeamOf(const std::string& project) const;
  // Whether `project` is the scope's project, or in its team or organization.
  bool Contains(const Scope& scope, const std::string& project) const;
};

// What one authenticated user may do. Every handler asks it before touching anything, and a
// project the user may not read is reported as not found, so that its existence does not leak.
class Access {
 public:
  Access() = default;
  Access(std::string user, std::vector<RoleBinding> roles, const Tenancy* tenancy)
      : user_(std::move(user)), roles_(std::move(roles)), tenancy_(tenancy) {}

  const std::string& user() const { return user_; }
  const std::vector<RoleBinding>& roles() const { return roles_; }
  bool IsAdmin() const;
  // Registers nodes and reports what runs on them: agents and admins.
  bool RunsNodes() const;
  // Registers a new node with a bootstrap identity: agents and admins.
  bool Bootstraps() const;
  // A node agent's identity (a bootstrap token or a node's credential) and nothing more: what
  // agents do is bounded by the protocol, not by the per-token write rate.
  bool OnlyRunsNodes() const;
  // Heartbeats, reports and uploads output for `node`: its own credential, or an admin.
  bool ActsFor(const std::string& node) const;
  // The node a node credential is bound to; empty for every other identity.
  std::string BoundNode() const;
  // Reads /metrics, which names every project and its quota use: scrapers and admins.
  bool ScrapesMetrics() const;
  // Jobs, events, logs and explanations of the project.
  bool CanRead(const std::string& project) const;
  bool CanSubmit(const std::string& project) const;
  // Submit to `project` with the priority class `use` describes (see ClassUse). Empty when
  // allowed; otherwise why not, naming the class and this user.
  std::string ClassRefusal(const ClassUse& use, const std::string& project) const;
  // Cancel: team leads and above in scope for any job, members for their own.
  bool CanManageJob(const std::string& project, const std::string& owner) const;
  // Whether this user manages what lies within `scope` of the tenancy tree: admins everything;
  // an org-admin its organization, its teams and their projects; a team lead its team and the
  // team's projects. A Team document lies within its organization, a Project within its team.
  bool ManagesWithin(const Scope& scope) const;
  // Quotas of an organization, team or project (exactly one given): they are handed out from
  // above, so they are managed by who manages the scope's parent. A team lead sets the quotas of
  // its team's projects, not its team's; an org-admin those of its teams, not its organization's;
  // only admins set an organization's.
  bool CanManageQuota(const Scope& scope) const;
  // Whether the scope is one this user may see: it or a scope below it holds a project the user
  // may read, or a role of the user names it or a scope above it (a team lead sees its team
  // before it has projects). What is not visible is answered as not found.
  bool SeesScope(const Scope& scope) const;
  // Whether this user may give or take `binding`: admins any; an org-admin member, viewer and
  // team-lead roles within its organization; a team lead member and viewer roles on its team
  // and its projects ("manages the members below it").
  bool CanGrant(const RoleBinding& binding) const;
  // Admins, org-admins and team leads manage users; members and viewers do not.
  bool ManagesUsers() const;
  // The projects among `all` this user may read.
  std::vector<std::string> Readable(const std::vector<std::string>& all) const;

 private:
  bool Holds(Role at_least, const std::string& project) const;

  std::string user_;
  std::vector<RoleBinding> roles_;
  const Tenancy* tenancy_ = nullptr;
};

}  // namespace meridian::api
