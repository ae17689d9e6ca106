#include "domain/documents.h"

#include <algorithm>
#include <map>
#include <set>

#include "domain/agent_timing.h"
#include "domain/alert_rules.h"
#include "domain/budget.h"
#include "domain/gpu_health.h"
#include "domain/gpu_model.h"
#include "domain/gpu_warnings.h"
#include "domain/idle_policy.h"
#include "domain/job_spec.h"

namespace meridian::domain {

namespace {

constexpr int64_t kMaxGpusPerNode = 64;
constexpr int64_t kMaxNodesPerPool = 100000;
constexpr double kMaxSeconds = 365.0 * 24 * 3600;
constexpr double kMaxTimeout = 24 * 3600.0;  // agentLease, nodeLostTimeout

void OrganizationSpec(FieldReader& s) { s.String("description", false); }

void TeamSpec(FieldReader& s) {
  s.Name("organization", true);
  s.String("description", false);
}

void ProjectSpec(FieldReader& s) {
  s.Name("team", true);
  s.Number("weight", 0.001, 1e6, 1.0);
  s.String("description", false);
}

void QuotaSpec(FieldReader& s) {
  int scopes = 0;
  for (const char* k : {"organization", "team", "project"}) {
    if (s.Has(k)) ++scopes;
    s.Name(k, false);
  }
  if (scopes != 1) s.Error("project", "exactly one of organization, team or project is required");
  s.String("gpuModel", false);
  const double guaranteed = s.Number("guaranteedGpus", 0, 1e6, 0);
  const bool limited = s.Has("limitGpus");
  const double limit = s.Number("limitGpus", 0, 1e6, -1);
  if (limited && limit < guaranteed) s.Error("limitGpus", "must not be below guaranteedGpus");
}

// A taint of a pool's nodes, or a job's toleration of one: a key and, optionally, a value (a
// toleration without one tolerates every value of its key).
void KeyValueItem(FieldReader& s) {
  if (s.String("key", true).empty() && s.Has("key")) s.Error("key", "must not be empty");
  s.String("value", false);
}

// One scope of the tenancy tree, as a user's roles name them: exactly one of organization, team
// or project.
void ScopeItem(FieldReader& s) {
  int scopes = 0;
  for (const char* k : {"organization", "team", "project"}) {
    if (s.Has(k)) ++scopes;
    s.Name(k, false);
  }
  if (scopes != 1) s.Error("project", "exactly one of organization, team or project is required");
}

void PriorityClassSpec(FieldReader& s) {
  s.Int("value", -1000000, 1000000, 0, true);
  s.Bool("preempting", true);
  // Who may submit with the class: admins, and jobs of the projects within these scopes. Left
  // out, a non-preempting class is open to everyone and a preempting one to admins only; an
  // empty list keeps any class to admins.
  s.ObjectList("allowedScopes", ScopeItem);
  s.String("description", false);
}

void ClusterSpec(FieldReader& s) {
  s.Enum("type", {"on-prem", "cloud"}, "on-prem");
  s.String("region", false);
  s.Enum("backend", {"agent", "slurm", "kubernetes"}, "agent");
  s.NumberMap("prices", 0);
  // A job's speed on each model relative to 1: what burst planning weighs prices by.
  for (const auto& [model, factor] : s.NumberMap("speedFactors", 0)) {
    if (!(factor > 0 && factor <= 100)) {
      s.Error("speedFactors", model + ": must be above 0 and at most 100");
    }
  }
  s.StringList("datasets");
  // What leaves the site costs, and how fast it reaches the others: the data score's inputs.
  if (s.Has("network")) {
    FieldReader n = s.Nested("network");
    n.Number("egressPricePerGib", 0, 1e6, 0);
    for (const auto& [site, gbps] : n.NumberMap("bandwidthGbps", 0)) {
      if (!(gbps > 0 && gbps <= 1e6)) n.Error("bandwidthGbps", site + ": must be above 0");
    }
    n.Finish();
  }
  if (s.Has("storage")) {
    FieldReader st = s.Nested("storage");
    for (const char* key : {"checkpoints", "cache"}) {
      const std::string path = st.String(key, false);
      if (!path.empty() && path.front() != '/') st.Error(key, "must be an absolute path");
    }
    st.Number("cacheCapacityGib", 0, 1e9, 0);
    const std::vector<std::string> words = st.StringList("stagingCommand");
    if (words.size() > 64) st.Error("stagingCommand", "must have at most 64 words");
    bool source = false, target = false;
    for (const std::string& w : words) {
      source = source || w.find("{source}") != std::string::npos;
      target = target || w.find("{target}") != std::string::npos;
    }
    if (!words.empty() && !(source && target)) {
      st.Error("stagingCommand", "must name both {source} and {target}");
    }
    st.Finish();
  }
}

// A dataset jobs read: its size, and where it lives (a path on a site's shared filesystem, or an
// object-store URL in a site's region), one location per replica.
void DatasetLocationItem(FieldReader& s) {
  s.Name("cluster", true);
  const bool path = s.Has("path"), url = s.Has("url");
  const std::string p = s.String("path", false);
  const std::string u = s.String("url", false);
  if (path == url) s.Error("path", "give exactly one of path and url");
  if (path && (p.empty() || p.front() != '/')) s.Error("path", "must be an absolute path");
  if (url && u.find("://") == std::string::npos) {
    s.Error("url", "\"" + u + "\" must be a URL (s3://bucket/prefix, gs://..., https://...)");
  }
}

void DatasetSpec(FieldReader& s) {
  if (!s.Has("sizeGib")) s.Error("sizeGib", "is required: what a copy of it moves");
  s.Number("sizeGib", 0, 1e9, 0);
  if (s.ObjectList("locations", DatasetLocationItem) == 0) {
    s.Error("locations", "is required: at least one place where the dataset lives");
  }
  // Sites whose cache keeps a staged copy however long it goes unread (never evicted).
  s.StringList("pinnedIn");
  s.String("description", false);
}

// The elastic part of a NodePool: its bounds, the provisioner that adds and removes its nodes,
// what an instance costs, how long one takes to join and how long one may stay idle.
void ElasticSpec(FieldReader& s, int64_t declared) {
  if (!s.Has("maxNodes")) {
    s.Error("maxNodes", "is required when a pool is elastic (minNodes, provisioner)");
  }
  const int64_t max_nodes = s.Int("maxNodes", 1, kMaxNodesPerPool, 1);
  const int64_t min_nodes = s.Int("minNodes", 0, kMaxNodesPerPool, 0);
  if (min_nodes > max_nodes) s.Error("minNodes", "must not be above maxNodes");
  if (declared > 0) {
    s.Error("nodes", "a pool either declares its nodes or is elastic (maxNodes), not both");
  }
  s.Name("provisioner", true);
  s.String("region", false);
  s.Duration("bootDelay", 0, 3600, 60);
  s.Duration("idleTimeout", 0, 30 * 24 * 3600.0, 600);
  // An instance not registered by then is deleted (default: bootDelay + max(60 s, bootDelay)).
  if (s.Has("joinTimeout")) s.Duration("joinTimeout", 1, 24 * 3600.0, 120);
  // Per GPU-hour; the cluster's price of the model when left out.
  if (s.Has("price")) {
    FieldReader p = s.Nested("price");
    p.Number("onDemand", 0, 1e6, 0);
    p.Number("spot", 0, 1e6, 0);
    p.Finish();
  }
}

void NodePoolSpec(FieldReader& s) {
  s.Name("cluster", true);
  s.Enum("purpose", {"any", "training", "inference", "interactive"}, "any");
  s.Enum("gpuSharing", {"mps", "time-slicing", "exclusive"}, "mps");
  s.Bool("spot", false);
  const int64_t declared = s.Int("nodes", 0, kMaxNodesPerPool, 0);
  const std::string model = s.String("gpuModel", false);
  const int64_t gpus = s.Int("gpusPerNode", 0, kMaxGpusPerNode, 0);
  if (gpus > 0 && model.empty()) s.Error("gpuModel", "is required when gpusPerNode > 0");
  s.Int("cpuMilli", 1, 1LL << 40, 64000);
  s.Int("memoryMib", 1, 1LL << 40, 512 * 1024);
  s.Int("nvlinkDomainSize", 0, kMaxGpusPerNode, 0);
  s.Int("rackSize", 0, kMaxNodesPerPool, 0);
  // Every node of the pool carries these, declared or registered by an agent (its own labels
  // win); only jobs that tolerate every taint run there.
  s.StringMap("labels");
  s.ObjectList("taints", KeyValueItem);
  // Elastic: a provisioner adds nodes between minNodes and maxNodes (docs/adr/0039). Read only
  // when given, so that the canonical form of a fixed pool stays as it was.
  if (s.Has("maxNodes") || s.Has("minNodes") || s.Has("provisioner")) ElasticSpec(s, declared);
}

void PolicySpec(FieldReader& s) {
  s.Enum("placement",
         {"meridian", "fgd", "best-fit", "random", "dotprod", "gpu-packing", "gpu-clustering"},
         "meridian");
  s.Enum("queueOrder", {"meridian", "fifo", "sjf", "las"}, "meridian");
  s.Bool("preemption", true);
  s.Bool("backfill", true);
  s.Duration("fairShareHalfLife", 1, kMaxSeconds, 3600);
  s.Duration("reserveAfter", 0, kMaxSeconds, 3600);
  // How long a GPU keeps a MIG layout the scheduler gave it before it may change it again.
  s.Duration("migReconfigureInterval", 0, kMaxSeconds, 60);
  s.Duration("starvationHorizon", 0, kMaxSeconds, 24 * 3600.0);
  // The meridian order across tenants: a job's estimate counts (1 + usageStretch × hours of the
  // whole estate its tenant received lately) times over (docs/adr/0034-deep-queues.md).
  s.Number("usageStretch", 0, 100, 0.36);
  // The meridian order: a job that has waited firstStartWithin and never ran goes before the rest
  // of its priority class and may stop jobs of its class (those that borrow, or its project's)
  // that have run firstStartPreemptsAfter. 0: off (docs/adr/0034-deep-queues.md, "First starts").
  s.Duration("firstStartWithin", 0, kMaxSeconds, 1800);
  s.Duration("firstStartPreemptsAfter", 0, kMaxSeconds, 600);
  s.Duration("cycleInterval", 0.01, 3600, 1.0);
  // Agents heartbeat this often. An agent that has not reached the server for agentLease stops
  // its tasks (SIGTERM at once, SIGKILL at most fenceGrace later), and a node silent for
  // nodeLostTimeout is lost and its jobs run elsewhere: domain/agent_timing.h has the rule that
  // keeps the two apart, so that a task never runs twice at once.
  const double heartbeat = s.Duration("heartbeatInterval", 0.05, 600, kDefaultHeartbeatInterval);
  const double lost = s.Duration("nodeLostTimeout", 0.5, kMaxTimeout, kDefaultNodeLostTimeout);
  TimingGiven given{s.Has("agentLease"), s.Has("fenceGrace")};
  AgentTiming t;
  t.heartbeat_interval = heartbeat;
  t.node_lost_timeout = lost;
  t.fence_grace = s.Duration("fenceGrace", 0, 3600, DefaultFenceGrace(lost));
  t.agent_lease = s.Duration("agentLease", 0.05, kMaxTimeout,
                             DefaultAgentLease(lost, t.fence_grace, heartbeat));
  for (const TimingProblem& p : CheckAgentTiming(t, given)) s.Error(p.field, p.message);
  // What the agent runs on a GPU cordoned for a fault before probing it and putting it back
  // (domain/gpu_health.h), and how many faults in a window keep a GPU out.
  if (s.Has("gpuHealth")) {
    FieldReader health = s.Nested("gpuHealth");
    const std::vector<std::string> remediation = health.StringList("remediation");
    if (remediation.size() > 64) health.Error("remediation", "must have at most 64 words");
    health.Int("maxFaults", 1, 1000, GpuHealthPolicy{}.max_faults);
    health.Duration("faultWindow", 60, 30 * 24 * 3600.0, GpuHealthPolicy{}.fault_window);
    health.Finish();
  }
  // Warnings before failures, and nodes that fail jobs of many projects (gpu_warnings.h).
  if (s.Has("gpuWarnings")) {
    const GpuWarningPolicy d;
    FieldReader w = s.Nested("gpuWarnings");
    w.Number("temperatureMargin", 0, 50, d.temperature_margin);
    w.Number("slowdownTemperature", 30, 150, d.slowdown_temperature);
    w.Int("eccCorrected", 1, 1000000000, d.ecc_corrected);
    w.Int("nvlinkCrcErrors", 1, 1000000000, d.nvlink_crc_errors);
    w.Duration("window", 10, 30 * 24 * 3600.0, d.window);
    w.Finish();
  }
  if (s.Has("failingNodes")) {
    const FailingNodePolicy d;
    FieldReader f = s.Nested("failingNodes");
    f.Duration("window", 10, 30 * 24 * 3600.0, d.window);
    f.Int("minFailures", 1, 1000000, d.min_failures);
    f.Int("minProjects", 1, 10000, d.min_projects);
    f.Bool("cordon", d.cordon);
    f.Finish();
  }
}

// An issuer URL: https, or http on a loopback address (a test issuer, or an identity provider
// reached through a local proxy). Tokens are checked against it byte for byte (OIDC Discovery
// 4.3), so a trailing slash is kept as written.
bool IsIssuerUrl(const std::string& url) {
  if (url.rfind("https://", 0) == 0) return url.size() > 8;
  for (const char* local : {"http://127.0.0.1", "http://localhost", "http://[::1]"}) {
    const std::string l = local;
    if (url.rfind(l, 0) == 0 &&
        (url.size() == l.size() || url[l.size()] == ':' || url[l.size()] == '/')) {
      return true;
    }
  }
  return false;
}

// One role a group of the identity provider gives (docs/adr/0021-single-sign-on.md): the roles
// of users, without the machine identities (agent, node, metrics), which sign in with tokens.
void GroupRoleItem(FieldReader& s) {
  const std::string role =
      s.Enum("role", {"admin", "org-admin", "team-lead", "member", "viewer"}, "");
  if (!s.Has("role")) s.Error("role", "is required (admin, org-admin, team-lead, member, viewer)");
  int scopes = 0;
  for (const char* k : {"organization", "team", "project"}) {
    if (s.Has(k)) ++scopes;
    s.Name(k, false);
  }
  const char* needs = role == "org-admin"   ? "organization"
                      : role == "team-lead" ? "team"
                      : role == "member"    ? "project"
                                            : nullptr;
  if (role == "admin" && scopes != 0) s.Error("role", "admin is global and takes no scope");
  if (needs && (scopes != 1 || !s.Has(needs))) {
    s.Error(needs, role + " needs exactly its " + needs);
  }
  if (role == "viewer" && scopes != 1) {
    s.Error("project", "viewer needs one of organization, team or project");
  }
}

void GroupItem(FieldReader& s) {
  if (s.String("group", true).empty() && s.Has("group")) s.Error("group", "must not be empty");
  if (s.ObjectList("roles", GroupRoleItem) == 0 && !s.Has("roles")) {
    s.Error("roles", "is required: the roles members of the group hold");
  }
}

// An OpenID Connect identity provider whose ID tokens sign users in, and the rule that maps the
// groups of a token to Meridian roles: a user holds the roles of every listed group it is in.
void IdentityProviderSpec(FieldReader& s) {
  const std::string issuer = s.String("issuer", true);
  if (s.Has("issuer") && !IsIssuerUrl(issuer)) {
    s.Error("issuer",
            "\"" + issuer + "\" must be an https:// URL (http:// only on a loopback address)");
  }
  if (s.String("clientId", true).empty() && s.Has("clientId")) {
    s.Error("clientId", "must not be empty");
  }
  const std::string claim = s.String("usernameClaim", false, "sub");
  if (claim.empty()) s.Error("usernameClaim", "must not be empty");
  s.String("usernamePrefix", false, "");
  if (s.String("groupsClaim", false, "groups").empty()) {
    s.Error("groupsClaim", "must not be empty");
  }
  std::vector<std::string> scopes = s.StringList("scopes");
  if (s.Has("scopes") && std::find(scopes.begin(), scopes.end(), "openid") == scopes.end()) {
    s.Error("scopes", "must include \"openid\" (without it there is no ID token)");
  }
  s.ObjectList("groups", GroupItem);
  s.String("description", false);
}

using SpecReader = void (*)(FieldReader&);

const std::map<std::string, SpecReader>& Readers() {
  static const std::map<std::string, SpecReader> kReaders = {
      {"Organization", OrganizationSpec},
      {"Team", TeamSpec},
      {"Project", ProjectSpec},
      {"Quota", QuotaSpec},
      {"PriorityClass", PriorityClassSpec},
      {"Cluster", ClusterSpec},
      {"NodePool", NodePoolSpec},
      {"Policy", PolicySpec},
      {"AlertReceiver", ReadAlertReceiverSpec},
      {"IdlePolicy", ReadIdlePolicySpec},
      {"Budget", ReadBudgetSpec},
      // AlertRule's reader takes the document's name (ValidateDocument): a built-in's name
      // gives its defaults.
      {"AlertRule", nullptr},
      {"IdentityProvider", IdentityProviderSpec},
      {"Dataset", DatasetSpec},
  };
  return kReaders;
}

// The envelope: kind (checked by the caller), metadata.name, spec. Returns the name.
std::string Envelope(const SourceDoc& src, ErrorList* errors, const std::string& kind,
                     Json* spec_out, const std::function<void(FieldReader&)>& spec_reader,
                     std::string* project) {
  Json envelope = Json::object();
  FieldReader top(src, src.value, "", errors, &envelope);
  top.String("kind", false);
  top.String("apiVersion", false);
  Json meta_out;
  FieldReader meta = top.Object("metadata", &meta_out);
  if (!top.Has("metadata")) top.Error("metadata", "is required (metadata.name)");
  const std::string name = meta.Name("name", true);
  if (project) *project = meta.Name("project", true);
  meta.StringMap("labels");
  meta.Finish();
  FieldReader spec = top.Object("spec", spec_out);
  if (!top.Has("spec") && kind != "Organization" && kind != "Policy") {
    top.Error("spec", "is required");
  }
  spec_reader(spec);
  spec.Finish();
  top.Finish();
  return name;
}

}  // namespace

const std::vector<std::string>& ConfigKinds() {
  static const std::vector<std::string> kKinds = {
      "Organization",     "Team",       "Project", "PriorityClass", "Cluster",
      "NodePool",         "Quota",      "Policy",  "AlertReceiver", "AlertRule",
      "IdentityProvider", "IdlePolicy", "Budget",  "Dataset",
  };
  return kKinds;
}

std::optional<Document> ValidateDocument(const SourceDoc& src, ErrorList* errors) {
  const size_t before = errors->size();
  if (!src.value.is_object()) {
    errors->Add(src, "", "a document must be a mapping with kind, metadata and spec");
    return std::nullopt;
  }
  const Json* kind = src.value.contains("kind") ? &src.value.at("kind") : nullptr;
  if (!kind || !kind->is_string()) {
    errors->Add(src, "kind",
                "is required (one of Organization, Team, Project, Quota, "
                "PriorityClass, Cluster, NodePool, Policy, AlertRule, AlertReceiver, "
                "IdentityProvider, IdlePolicy, Budget, Dataset)");
    return std::nullopt;
  }
  auto reader = Readers().find(kind->get<std::string>());
  if (reader == Readers().end()) {
    errors->Add(src, "kind", "unknown kind \"" + kind->get<std::string>() + "\"");
    return std::nullopt;
  }
  Document doc;
  doc.kind = reader->first;
  doc.file = src.file;
  auto mark = src.marks.find("");
  if (mark != src.marks.end()) doc.line = mark->second.first;
  if (doc.kind == "AlertRule") {
    // The name is read from the document as it is (the envelope checks it): a bad one only
    // means no built-in's defaults.
    std::string name;
    const Json& meta = src.value.contains("metadata") ? src.value.at("metadata") : Json();
    if (meta.is_object() && meta.contains("name") && meta.at("name").is_string()) {
      name = meta.at("name").get<std::string>();
    }
    doc.name = Envelope(
        src, errors, doc.kind, &doc.spec, [&](FieldReader& s) { ReadAlertRuleSpec(s, name); },
        nullptr);
  } else {
    doc.name = Envelope(src, errors, doc.kind, &doc.spec, reader->second, nullptr);
  }
  if (errors->size() != before) return std::nullopt;
  return doc;
}

void ValidateDesiredState(const std::vector<Document>& docs, ErrorList* errors) {
  std::map<std::string, std::set<std::string>> names;
  for (const Document& d : docs) {
    if (!names[d.kind].insert(d.name).second) {
      errors->Add(
          {d.file, d.line, 0, "metadata.name", d.kind + " \"" + d.name + "\" is defined twice"});
    }
  }
  auto refers = [&](const Document& d, const char* field, const char* kind) {
    if (!d.spec.contains(field)) return;
    const std::string target = d.spec.at(field).get<std::string>();
    if (!target.empty() && !names[kind].count(target)) {
      errors->Add({d.file, d.line, 0, std::string("spec.") + field,
                   std::string(kind) + " \"" + target + "\" does not exist"});
    }
  };
  CheckIdlePolicies(docs, errors);
  for (const Document& d : docs) {
    if (d.kind == "Team") refers(d, "organization", "Organization");
    if (d.kind == "Project") refers(d, "team", "Team");
    if (d.kind == "NodePool") refers(d, "cluster", "Cluster");
    if (d.kind == "AlertRule" || d.kind == "IdlePolicy") refers(d, "project", "Project");
    if (d.kind == "Dataset" && d.spec.contains("pinnedIn")) {
      for (const Json& c : d.spec.at("pinnedIn")) {
        if (c.is_string() && !names["Cluster"].count(c.get<std::string>())) {
          errors->Add({d.file, d.line, 0, "spec.pinnedIn",
                       "Cluster \"" + c.get<std::string>() + "\" does not exist"});
        }
      }
    }
    if (d.kind == "Dataset" && d.spec.contains("locations")) {
      const Json& at = d.spec.at("locations");
      for (size_t i = 0; i < at.size(); ++i) {
        const std::string c = at[i].value("cluster", "");
        if (!c.empty() && !names["Cluster"].count(c)) {
          errors->Add({d.file, d.line, 0, "spec.locations[" + std::to_string(i) + "].cluster",
                       "Cluster \"" + c + "\" does not exist"});
        }
      }
    }
    if (d.kind == "Cluster" && d.spec.contains("network") &&
        d.spec.at("network").contains("bandwidthGbps")) {
      for (const auto& [site, gbps] : d.spec.at("network").at("bandwidthGbps").items()) {
        if (!names["Cluster"].count(site)) {
          errors->Add({d.file, d.line, 0, "spec.network.bandwidthGbps." + site,
                       "Cluster \"" + site + "\" does not exist"});
        }
      }
    }
    if (d.kind == "Budget" && d.spec.contains("clusters")) {
      for (const Json& c : d.spec.at("clusters")) {
        if (c.is_string() && !names["Cluster"].count(c.get<std::string>())) {
          errors->Add({d.file, d.line, 0, "spec.clusters",
                       "Cluster \"" + c.get<std::string>() + "\" does not exist"});
        }
      }
    }
    if (d.kind == "Quota" || d.kind == "Budget") {
      refers(d, "organization", "Organization");
      refers(d, "team", "Team");
      refers(d, "project", "Project");
    }
    if (d.kind == "PriorityClass" && d.spec.contains("allowedScopes") &&
        d.spec.at("allowedScopes").is_array()) {
      const Json& scopes = d.spec.at("allowedScopes");
      for (size_t i = 0; i < scopes.size(); ++i) {
        if (!scopes[i].is_object()) continue;  // reported by ValidateDocument
        for (const auto& [field, kind] :
             {std::pair{"organization", "Organization"}, std::pair{"team", "Team"},
              std::pair{"project", "Project"}}) {
          const std::string target = scopes[i].value(field, "");
          if (!target.empty() && !names[kind].count(target)) {
            errors->Add({d.file, d.line, 0,
                         "spec.allowedScopes[" + std::to_string(i) + "]." + field,
                         std::string(kind) + " \"" + target + "\" does not exist"});
          }
        }
      }
    }
    if (d.kind == "IdentityProvider" && d.spec.contains("groups") &&
        d.spec.at("groups").is_array()) {
      const Json& groups = d.spec.at("groups");
      for (size_t g = 0; g < groups.size(); ++g) {
        const Json roles = groups[g].is_object() ? groups[g].value("roles", Json::array()) : Json();
        for (size_t i = 0; roles.is_array() && i < roles.size(); ++i) {
          for (const auto& [field, kind] :
               {std::pair{"organization", "Organization"}, std::pair{"team", "Team"},
                std::pair{"project", "Project"}}) {
            const std::string target = roles[i].is_object() ? roles[i].value(field, "") : "";
            if (!target.empty() && !names[kind].count(target)) {
              errors->Add({d.file, d.line, 0,
                           "spec.groups[" + std::to_string(g) + "].roles[" + std::to_string(i) +
                               "]." + field,
                           std::string(kind) + " \"" + target + "\" does not exist"});
            }
          }
        }
      }
    }
    if (d.kind == "Policy" && d.name != "default") {
      errors->Add({d.file, d.line, 0, "metadata.name",
                   "the Policy must be named \"default\" (there is one policy)"});
    }
  }
}

std::optional<JobDocument> ValidateJobDocument(const SourceDoc& src, ErrorList* errors) {
  const size_t before = errors->size();
  if (!src.value.is_object()) {
    errors->Add(src, "", "a job must be a mapping with metadata and spec");
    return std::nullopt;
  }
  if (src.value.contains("kind") &&
      !(src.value.at("kind").is_string() && src.value.at("kind") == "Job")) {
    errors->Add(src, "kind", "must be Job");
    return std::nullopt;
  }
  JobDocument job;
  job.name = Envelope(
      src, errors, "Job", &job.spec, [&](FieldReader& s) { job.typed = ReadJobSpec(s); },
      &job.project);
  // Labels in a job's metadata were never kept; policies read spec.labels (an IdlePolicy's
  // exemption). Refused, so that a label meant to exempt a job is not silently dropped.
  const Json& meta = src.value.contains("metadata") ? src.value.at("metadata") : Json();
  if (meta.is_object() && meta.contains("labels")) {
    errors->Add(src, "metadata.labels", "a job's labels go in spec.labels");
  }
  // Without an image (whose entrypoint runs) there is nothing to run: said at submission, not
  // by the agent after the job waited for its GPUs. (Only here: a stored spec decodes as before.)
  if (errors->size() == before && job.typed.command.empty() && job.typed.image.empty()) {
    errors->Add(src, "spec.command",
                "is required: the program to run and its arguments (or an image to run)");
  }
  if (errors->size() != before) return std::nullopt;
  return job;
}

Cluster ClusterOfSpec(const std::string& name, const Json& spec) {
  Cluster c;
  c.name = name;
  c.kind = spec.value("type", "on-prem") == "cloud" ? SiteKind::kCloud : SiteKind::kOnPrem;
  c.region = spec.value("region", "");
  const std::string backend = spec.value("backend", "agent");
  c.backend = backend == "slurm"        ? Backend::kSlurm
              : backend == "kubernetes" ? Backend::kKubernetes
                                        : Backend::kAgent;
  if (spec.contains("prices")) {
    for (const auto& [model, price] : spec.at("prices").items()) {
      c.price_per_gpu_hour[model] = price.get<double>();
    }
  }
  if (spec.contains("datasets")) {
    for (const Json& d : spec.at("datasets")) c.datasets.push_back(d.get<std::string>());
  }
  if (spec.contains("network")) {
    const Json& n = spec.at("network");
    c.egress_per_gib = n.value("egressPricePerGib", 0.0);
    if (n.contains("bandwidthGbps")) {
      for (const auto& [site, gbps] : n.at("bandwidthGbps").items()) {
        c.bandwidth_gbps[site] = gbps.get<double>();
      }
    }
  }
  if (spec.contains("storage")) {
    const Json& st = spec.at("storage");
    c.storage.checkpoints = st.value("checkpoints", "");
    c.storage.cache = st.value("cache", "");
    c.storage.cache_capacity_gib = st.value("cacheCapacityGib", 0.0);
    c.storage.staging_command = st.value("stagingCommand", std::vector<std::string>{});
  }
  return c;
}

Dataset DatasetOfSpec(const std::string& name, const Json& spec) {
  Dataset d;
  d.name = name;
  d.size_gib = spec.value("sizeGib", 0.0);
  for (const Json& at : spec.value("locations", Json::array())) {
    d.locations.push_back({at.value("cluster", ""), at.value("path", ""), at.value("url", "")});
  }
  d.pinned_in = spec.value("pinnedIn", std::vector<std::string>{});
  return d;
}

Node DeclaredPoolNode(const std::string& pool, const Json& spec, int64_t i) {
  const int64_t gpus = spec.value("gpusPerNode", 0);
  const int64_t rack_size = spec.value("rackSize", 0);
  const int64_t domain_size = spec.value("nvlinkDomainSize", 0);
  Node n;
  n.name = pool + "-" + std::to_string(i);
  n.cluster = spec.value("cluster", "");
  n.pool = pool;
  n.rack = pool + "-r" + std::to_string(rack_size > 0 ? i / rack_size : 0);
  n.cpu_milli = spec.value("cpuMilli", 64000);
  n.memory_mib = spec.value("memoryMib", 512 * 1024);
  for (int64_t g = 0; g < gpus; ++g) {
    GpuDevice d;
    d.uuid = "GPU-" + n.name + "-" + std::to_string(g);
    d.model = spec.value("gpuModel", "");
    d.nvlink_domain = domain_size > 0 ? static_cast<int>(g / domain_size) : 0;
    n.gpus.push_back(d);
  }
  return n;
}

}  // namespace meridian::domain
