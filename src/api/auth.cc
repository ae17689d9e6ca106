#include "api/auth.h"

#include <openssl/evp.h>

#include <algorithm>

namespace meridian::api {

NewToken GenerateToken(base::Entropy& entropy) {
  NewToken t;
  t.id = base::Hex(entropy.Bytes(8));
  t.secret = base::Hex(entropy.Bytes(24));
  t.secret_hash = Sha256Hex(t.secret);
  t.text = "mrd_" + t.id + "_" + t.secret;
  return t;
}

bool ParseToken(const std::string& text, std::string* id, std::string* secret) {
  if (text.size() != 4 + 16 + 1 + 48 || text.compare(0, 4, "mrd_") != 0 || text[20] != '_') {
    return false;
  }
  *id = text.substr(4, 16);
  *secret = text.substr(21);
  for (char c : *id + *secret) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr);
  return base::Hex(std::string(reinterpret_cast<const char*>(digest), size));
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

const char* RoleName(Role r) {
  switch (r) {
    case Role::kAgent:
      return "agent";
    case Role::kNode:
      return "node";
    case Role::kMetrics:
      return "metrics";
    case Role::kViewer:
      return "viewer";
    case Role::kMember:
      return "member";
    case Role::kTeamLead:
      return "team-lead";
    case Role::kOrgAdmin:
      return "org-admin";
    case Role::kAdmin:
      return "admin";
  }
  return "viewer";
}

base::Result<std::vector<RoleBinding>> ParseRoles(const Json& spec) {
  std::vector<RoleBinding> out;
  if (!spec.is_object()) return base::Status::Invalid("spec: must be a mapping");
  for (const auto& [k, v] : spec.items()) {
    if (k != "roles" && k != "description") {
      return base::Status::Invalid("spec." + k + ": unknown field");
    }
  }
  if (!spec.contains("roles")) return out;
  const Json& roles = spec.at("roles");
  if (!roles.is_array()) return base::Status::Invalid("spec.roles: must be a list");
  for (size_t i = 0; i < roles.size(); ++i) {
    const std::string at = "spec.roles[" + std::to_string(i) + "]";
    const Json& r = roles[i];
    if (!r.is_object() || !r.contains("role") || !r.at("role").is_string()) {
      return base::Status::Invalid(at + ".role: is required");
    }
    RoleBinding b;
    const std::string name = r.at("role");
    std::string scope_field;
    if (name == "admin") {
      b.role = Role::kAdmin;
    } else if (name == "agent") {
      b.role = Role::kAgent;
    } else if (name == "node") {
      b.role = Role::kNode;
      scope_field = "node";
    } else if (name == "metrics") {
      b.role = Role::kMetrics;
    } else if (name == "org-admin") {
      b.role = Role::kOrgAdmin;
      scope_field = "organization";
    } else if (name == "team-lead") {
      b.role = Role::kTeamLead;
      scope_field = "team";
    } else if (name == "member") {
      b.role = Role::kMember;
      scope_field = "project";
    } else if (name == "viewer") {
      b.role = Role::kViewer;
    } else {
      return base::Status::Invalid(
          at + ".role: \"" + name +
          "\" is not one of admin, org-admin, team-lead, member, viewer, agent, node, metrics");
    }
    int scopes = 0;
    for (const auto& [k, v] : r.items()) {
      if (k == "role") continue;
      if (k != "organization" && k != "team" && k != "project" &&
          !(k == "node" && b.role == Role::kNode)) {
        return base::Status::Invalid(at + "." + k + ": unknown field");
      }
      if (!v.is_string() || v.get<std::string>().empty()) {
        return base::Status::Invalid(at + "." + k + ": must be a name");
      }
      ++scopes;
      (k == "organization" ? b.organization
       : k == "team"       ? b.team
       : k == "node"       ? b.node
                           : b.project) = v;
    }
    if ((b.role == Role::kAdmin || b.role == Role::kAgent || b.role == Role::kMetrics) &&
        scopes != 0) {
      return base::Status::Invalid(at + ": " + name + " is global and takes no scope");
    }
    if (!scope_field.empty() && (scopes != 1 || !r.contains(scope_field))) {
      return base::Status::Invalid(at + "." + scope_field + ": " + name + " needs exactly its " +
                                   scope_field);
    }
    if (b.role == Role::kViewer && scopes != 1) {
      return base::Status::Invalid(at + ": viewer needs one of organization, team or project");
    }
    out.push_back(b);
  }
  return out;
}

Json RolesToJson(const std::vector<RoleBinding>& roles) {
  Json out = Json::array();
  for (const RoleBinding& b : roles) {
    Json r = {{"role", RoleName(b.role)}};
    if (!b.organization.empty()) r["organization"] = b.organization;
    if (!b.team.empty()) r["team"] = b.team;
    if (!b.project.empty()) r["project"] = b.project;
    if (!b.node.empty()) r["node"] = b.node;
    out.push_back(r);
  }
  return out;
}

std::string Tenancy::TeamOf(const std::string& project) const {
  auto it = team_of_project.find(project);
  return it == team_of_project.end() ? "" : it->second;
}

std::string Tenancy::OrgOfProject(const std::string& project) const {
  auto it = org_of_team.find(TeamOf(project));
  return it == org_of_team.end() ? "" : it->second;
}

bool Tenancy::Contains(const Scope& scope, const std::string& project) const {
  if (!scope.project.empty()) return scope.project == project;
  if (!scope.team.empty()) return scope.team == TeamOf(project);
  if (!scope.organization.empty()) return scope.organization == OrgOfProject(project);
  return false;
}

std::string Scope::ToString() const {
  if (!project.empty()) return "project " + project;
  if (!team.empty()) return "team " + team;
  return "organization " + organization;
}

ClassUse ClassUseOf(const std::string& name, const Json& spec) {
  ClassUse use;
  use.name = name;
  use.preempting = spec.value("preempting", true);
  // The spec was validated when it was applied (domain/documents.cc), so fields are well typed.
  if (spec.contains("allowedScopes") && spec.at("allowedScopes").is_array()) {
    use.scoped = true;
    for (const Json& s : spec.at("allowedScopes")) {
      use.scopes.push_back(
          {s.value("organization", ""), s.value("team", ""), s.value("project", "")});
    }
  }
  return use;
}

std::string Access::ClassRefusal(const ClassUse& use, const std::string& project) const {
  if (IsAdmin()) return "";
  if (!use.scoped && !use.preempting) return "";
  for (const Scope& scope : use.scopes) {
    if (tenancy_ && tenancy_->Contains(scope, project)) return "";
  }
  std::string why =
      user_ + " may not use priority class \"" + use.name + "\" in project " + project + ": ";
  if (!use.scoped) {
    return why + "it preempts other jobs and names no allowedScopes, so only admins may";
  }
  if (use.scopes.empty()) return why + "it names no allowedScopes, so only admins may";
  std::string list;
  for (const Scope& scope : use.scopes) list += (list.empty() ? "" : ", ") + scope.ToString();
  return why + "it is allowed only in " + list;
}

bool Access::IsAdmin() const {
  for (const RoleBinding& b : roles_) {
    if (b.role == Role::kAdmin) return true;
  }
  return false;
}

bool Access::RunsNodes() const {
  for (const RoleBinding& b : roles_) {
    if (b.role == Role::kAdmin || b.role == Role::kAgent || b.role == Role::kNode) return true;
  }
  return false;
}

bool Access::Bootstraps() const {
  for (const RoleBinding& b : roles_) {
    if (b.role == Role::kAdmin || b.role == Role::kAgent) return true;
  }
  return false;
}

bool Access::OnlyRunsNodes() const {
  return !roles_.empty() && std::all_of(roles_.begin(), roles_.end(), [](const RoleBinding& b) {
    return b.role == Role::kAgent || b.role == Role::kNode;
  });
}

bool Access::ActsFor(const std::string& node) const {
  for (const RoleBinding& b : roles_) {
    if (b.role == Role::kAdmin || (b.role == Role::kNode && b.node == node)) return true;
  }
  return false;
}

std::string Access::BoundNode() const {
  for (const RoleBinding& b : roles_) {
    if (b.role == Role::kNode) return b.node;
  }
  return "";
}

std::string NodeUser(const std::string& node) { return "node-" + node; }

bool Access::ScrapesMetrics() const {
  for (const RoleBinding& b : roles_) {
    if (b.role == Role::kAdmin || b.role == Role::kMetrics) return true;
  }
  return false;
}

bool Access::Holds(Role at_least, const std::string& project) const {
  const std::string team = tenancy_ ? tenancy_->TeamOf(project) : "";
  const std::string org = tenancy_ ? tenancy_->OrgOfProject(project) : "";
  for (const RoleBinding& b : roles_) {
    if (b.role < at_least) continue;
    if (b.role == Role::kAdmin) return true;
    if (!b.project.empty() && b.project == project) return true;
    if (!b.team.empty() && !team.empty() && b.team == team) return true;
    if (!b.organization.empty() && !org.empty() && b.organization == org) return true;
  }
  return false;
}

bool Access::CanRead(const std::string& project) const { return Holds(Role::kViewer, project); }

bool Access::CanSubmit(const std::string& project) const { return Holds(Role::kMember, project); }

bool Access::CanManageJob(const std::string& project, const std::string& owner) const {
  if (Holds(Role::kTeamLead, project)) return true;
  return owner == user_ && Holds(Role::kMember, project);
}

bool Access::ManagesWithin(const Scope& scope) const {
  // The team and organization the scope lies in, from the live tenancy.
  std::string team = scope.team;
  if (!scope.project.empty()) team = tenancy_ ? tenancy_->TeamOf(scope.project) : "";
  std::string org = scope.organization;
  if (org.empty() && !team.empty() && tenancy_) {
    auto it = tenancy_->org_of_team.find(team);
    if (it != tenancy_->org_of_team.end()) org = it->second;
  }
  for (const RoleBinding& b : roles_) {
    if (b.role == Role::kAdmin) return true;
    if (b.role == Role::kOrgAdmin && !org.empty() && org == b.organization) return true;
    if (b.role == Role::kTeamLead && scope.organization.empty() && !team.empty() &&
        team == b.team) {
      return true;
    }
  }
  return false;
}

bool Access::CanManageQuota(const Scope& scope) const {
  if (!scope.project.empty()) {
    const std::string team = tenancy_ ? tenancy_->TeamOf(scope.project) : "";
    return team.empty() ? IsAdmin() : ManagesWithin({"", team, ""});
  }
  if (!scope.team.empty()) {
    std::string org;
    if (tenancy_) {
      auto it = tenancy_->org_of_team.find(scope.team);
      if (it != tenancy_->org_of_team.end()) org = it->second;
    }
    return org.empty() ? IsAdmin() : ManagesWithin({org, "", ""});
  }
  return IsAdmin();
}

bool Access::SeesScope(const Scope& scope) const {
  if (IsAdmin()) return true;
  if (!scope.project.empty() && CanRead(scope.project)) return true;
  if (tenancy_) {
    for (const auto& [project, team] : tenancy_->team_of_project) {
      if ((!scope.team.empty() && team == scope.team) ||
          (!scope.organization.empty() && tenancy_->OrgOfProject(project) == scope.organization)) {
        if (CanRead(project)) return true;
      }
    }
  }
  // A scope a role names, or one above it: a team lead's team, a team's organization.
  std::string team_org;
  if (!scope.team.empty() && tenancy_) {
    auto it = tenancy_->org_of_team.find(scope.team);
    if (it != tenancy_->org_of_team.end()) team_org = it->second;
  }
  for (const RoleBinding& b : roles_) {
    if (b.role < Role::kViewer) continue;
    if (!scope.team.empty() && b.team == scope.team) return true;
    if (!scope.team.empty() && !team_org.empty() && b.organization == team_org) return true;
    if (!scope.organization.empty() && b.organization == scope.organization) return true;
    if (!scope.organization.empty() && !b.team.empty() && tenancy_) {
      auto it = tenancy_->org_of_team.find(b.team);
      if (it != tenancy_->org_of_team.end() && it->second == scope.organization) return true;
    }
  }
  return false;
}

bool Access::ManagesUsers() const {
  for (const RoleBinding& b : roles_) {
    if (b.role >= Role::kTeamLead) return true;
  }
  return false;
}

bool Access::CanGrant(const RoleBinding& b) const {
  if (IsAdmin()) return true;
  if (b.role == Role::kAdmin || b.role == Role::kOrgAdmin || b.role == Role::kAgent ||
      b.role == Role::kNode || b.role == Role::kMetrics) {
    return false;
  }
  const std::string team = !b.team.empty() ? b.team : tenancy_ ? tenancy_->TeamOf(b.project) : "";
  std::string org = b.organization;
  if (org.empty() && tenancy_) {
    auto it = tenancy_->org_of_team.find(team);
    if (it != tenancy_->org_of_team.end()) org = it->second;
  }
  for (const RoleBinding& mine : roles_) {
    if (mine.role == Role::kOrgAdmin && !org.empty() && org == mine.organization) return true;
    if (mine.role == Role::kTeamLead && b.role != Role::kTeamLead && !team.empty() &&
        b.organization.empty() && team == mine.team) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> Access::Readable(const std::vector<std::string>& all) const {
  std::vector<std::string> out;
  for (const std::string& p : all) {
    if (CanRead(p)) out.push_back(p);
  }
  return out;
}

}  // namespace meridian::api
