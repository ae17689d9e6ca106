#include "domain/quota_bounds.h"

#include <map>

#include "base/strings.h"

namespace meridian::domain {

namespace {

// One quota document as a node of the tree sees it.
struct Entry {
  const Document* doc = nullptr;
  std::string scope;   // "project vision", "team product", "organization acme"
  std::string parent;  // the parent's scope; "" for an organization or a dangling reference
  std::string model;   // "" for any model
  double guaranteed = 0;
  double limit = -1;  // < 0: none
};

std::string Gpus(double v) { return base::Decimal(v) + (v == 1 ? " GPU" : " GPUs"); }

std::string ModelText(const std::string& model) { return model.empty() ? "any model" : model; }

}  // namespace

void CheckQuotaBounds(const std::vector<Document>& docs, const std::set<std::string>& checked,
                      Unbounded unbounded, ErrorList* errors) {
  std::map<std::string, std::string> team_of_project, org_of_team;
  for (const Document& d : docs) {
    if (d.kind == "Project") team_of_project[d.name] = d.spec.value("team", "");
    if (d.kind == "Team") org_of_team[d.name] = d.spec.value("organization", "");
  }
  std::vector<Entry> entries;
  for (const Document& d : docs) {
    if (d.kind != "Quota") continue;
    Entry e;
    e.doc = &d;
    e.model = d.spec.value("gpuModel", "");
    e.guaranteed = d.spec.value("guaranteedGpus", 0.0);
    e.limit = d.spec.value("limitGpus", -1.0);
    if (const std::string p = d.spec.value("project", ""); !p.empty()) {
      e.scope = "project " + p;
      auto t = team_of_project.find(p);
      if (t != team_of_project.end() && !t->second.empty()) e.parent = "team " + t->second;
    } else if (const std::string t = d.spec.value("team", ""); !t.empty()) {
      e.scope = "team " + t;
      auto o = org_of_team.find(t);
      if (o != org_of_team.end() && !o->second.empty()) e.parent = "organization " + o->second;
    } else {
      e.scope = "organization " + d.spec.value("organization", "");
    }
    entries.push_back(e);
  }
  // The parent quota that bounds each entry: the parent's quota for the same model, else its
  // any-model quota.
  auto bound_of = [&](const Entry& child) -> const Entry* {
    const Entry* any = nullptr;
    for (const Entry& p : entries) {
      if (child.parent.empty() || p.scope != child.parent) continue;
      if (p.model == child.model) return &p;
      if (p.model.empty()) any = &p;
    }
    return any;
  };
  auto field_error = [&](const Entry& e, const char* field, const std::string& message) {
    errors->Add({e.doc->file, e.doc->line, 0, std::string("spec.") + field,
                 "Quota \"" + e.doc->name + "\" (" + e.scope + ", " + ModelText(e.model) +
                     "): " + message});
  };
  std::map<const Entry*, std::vector<const Entry*>> children;  // by the parent quota bounding them
  for (const Entry& e : entries) {
    const Entry* parent = bound_of(e);
    const bool mine = checked.count(e.doc->name) > 0;
    if (parent) {
      children[parent].push_back(&e);
      if (!mine && !checked.count(parent->doc->name)) continue;
      // A guarantee within the parent's guarantee is within its limit too (see the sum below).
      if (parent->limit >= 0 && e.limit >= 0 && e.limit > parent->limit) {
        field_error(e, "limitGpus",
                    "a limit of " + Gpus(e.limit) + " exceeds the limit of " + parent->scope +
                        " (" + Gpus(parent->limit) + ", Quota \"" + parent->doc->name + "\")");
      }
    } else if (mine && unbounded == Unbounded::kGuaranteesNothing && e.guaranteed > 0) {
      field_error(e, "guaranteedGpus",
                  "a guarantee of " + Gpus(e.guaranteed) + " is not within any quota of " +
                      (e.parent.empty() ? "its parent" : e.parent) + " for " + ModelText(e.model) +
                      ", which guarantees nothing to hand out");
    }
  }
  for (const auto& [parent, kids] : children) {
    double sum = 0;
    bool involved = checked.count(parent->doc->name) > 0;
    std::string names;
    for (const Entry* k : kids) {
      sum += k->guaranteed;
      involved = involved || checked.count(k->doc->name) > 0;
      names += (names.empty() ? "" : ", ") + k->doc->name + " " + Gpus(k->guaranteed);
    }
    if (!involved || sum <= parent->guaranteed + 1e-9) continue;
    // Reported on a checked child when there is one (what the writer just changed), else on the
    // parent that was lowered beneath its children.
    const Entry* at = parent;
    for (const Entry* k : kids) {
      if (checked.count(k->doc->name)) at = k;
    }
    field_error(*at, "guaranteedGpus",
                "the guarantees within " + parent->scope + " would sum to " + Gpus(sum) + " (" +
                    names + "), beyond its own guarantee of " + Gpus(parent->guaranteed) +
                    " (Quota \"" + parent->doc->name + "\")");
  }
}

}  // namespace meridian::domain
