#include "domain/admission.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "domain/gpu_model.h"

namespace meridian::domain {

namespace {

// One node's offer of one GPU model (a node with GPUs of two models offers each alone: a task's
// GPUs are of one model), or of none.
struct Offer {
  std::string cluster;
  std::string model;  // empty: no GPU
  int gpus = 0;
  int64_t gpu_memory_mib = 0;  // 0: unknown (a model outside the catalogue)
  const GpuModel* known = nullptr;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

void AddOffers(const Node& n, std::vector<Offer>* out) {
  std::map<std::string, int> by_model;
  for (const GpuDevice& d : n.gpus) ++by_model[d.model];
  if (by_model.empty()) by_model[""] = 0;
  for (const auto& [model, count] : by_model) {
    Offer o{n.cluster, model, count, 0, nullptr, n.cpu_milli, n.memory_mib};
    if (!model.empty()) {
      o.known = GpuCatalog::Builtin().Find(model);
      o.gpu_memory_mib = o.known ? o.known->memory_mib : 0;
    }
    out->push_back(std::move(o));
  }
}

std::string Joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

template <class F>
std::set<std::string> Names(const std::vector<Offer>& offers, F&& name) {
  std::set<std::string> out;
  for (const Offer& o : offers) {
    if (std::string n = name(o); !n.empty()) out.insert(std::move(n));
  }
  return out;
}

const char* GpuField(const GpuRequest& g) {
  switch (g.kind) {
    case GpuRequest::Kind::kFraction:
      return "spec.gpuMilli";
    case GpuRequest::Kind::kMig:
      return "spec.migProfile";
    default:
      return "spec.gpus";
  }
}

}  // namespace

std::optional<FieldError> NeverHeld(const JobSpec& spec, const std::vector<Cluster>& clusters,
                                    const std::vector<Node>& nodes,
                                    const std::vector<Node>& pool_shapes) {
  auto refuse = [](std::string field, std::string message) {
    FieldError e;
    e.field = std::move(field);
    e.message = std::move(message);
    return e;
  };
  std::set<std::string> cluster_names;
  for (const Cluster& c : clusters) cluster_names.insert(c.name);
  for (size_t i = 0; i < spec.clusters.size(); ++i) {
    if (!cluster_names.count(spec.clusters[i])) {
      return refuse("spec.clusters[" + std::to_string(i) + "]",
                    "cluster \"" + spec.clusters[i] +
                        "\" does not exist (clusters: " + Joined(cluster_names) + ")");
    }
  }
  std::set<std::string> allowed(spec.clusters.begin(), spec.clusters.end());
  // A checkpoint folder lives on a site's storage: only sites that keep checkpoints will do.
  if (spec.checkpoint) {
    std::set<std::string> keeping;
    for (const Cluster& c : clusters) {
      if (!c.storage.checkpoints.empty() && (allowed.empty() || allowed.count(c.name))) {
        keeping.insert(c.name);
      }
    }
    if (keeping.empty()) {
      return refuse("spec.checkpoint",
                    "no cluster" + (allowed.empty() ? std::string() : " it may use") +
                        " keeps checkpoints (a Cluster's spec.storage.checkpoints)");
    }
    allowed = std::move(keeping);
  }
  std::vector<Offer> offers;
  for (const std::vector<Node>* list : {&nodes, &pool_shapes}) {
    for (const Node& n : *list) {
      if (allowed.empty() || allowed.count(n.cluster)) AddOffers(n, &offers);
    }
  }
  const std::string where =
      allowed.empty() ? ""
                      : (allowed.size() == 1 ? " of cluster " : " of clusters ") + Joined(allowed);
  if (offers.empty()) {
    return refuse(allowed.empty() ? "spec" : "spec.clusters",
                  "no node or node pool" + where + " exists to run it");
  }
  // Keeps the offers that pass; false when none does.
  auto narrow = [&](const std::function<bool(const Offer&)>& keep) {
    std::vector<Offer> left;
    std::copy_if(offers.begin(), offers.end(), std::back_inserter(left), keep);
    if (left.empty()) return false;
    offers = std::move(left);
    return true;
  };
  auto models = [&] { return Names(offers, [](const Offer& o) { return o.model; }); };
  const GpuRequest& g = spec.gpu;
  std::string with;  // what the offers left have been narrowed to, for the messages below
  if (g.kind != GpuRequest::Kind::kNone) {
    if (!narrow([](const Offer& o) { return o.gpus > 0; })) {
      return refuse(GpuField(g), "asks for a GPU, but no node or node pool" + where + " has one");
    }
    if (!spec.gpu_models.empty()) {
      const std::set<std::string> wanted(spec.gpu_models.begin(), spec.gpu_models.end());
      const std::set<std::string> here = models();
      if (!narrow([&](const Offer& o) { return wanted.count(o.model) > 0; })) {
        return refuse("spec.gpuModels", "no node or node pool" + where + " has GPUs of model " +
                                            Joined(wanted) + " (models there: " + Joined(here) +
                                            ")");
      }
    }
    with = spec.gpu_models.empty() ? "" : " with GPUs of model " + Joined(models());
    if (g.kind == GpuRequest::Kind::kMig) {
      const std::set<std::string> here = models();
      if (!narrow(
              [&](const Offer& o) { return o.known && o.known->FindMigProfile(g.mig_profile); })) {
        return refuse("spec.migProfile", "\"" + g.mig_profile +
                                             "\" is not a MIG profile of any GPU" + where +
                                             " (models there: " + Joined(here) + ")");
      }
      with = " with GPUs that offer " + g.mig_profile;
    }
    int most = 0;
    for (const Offer& o : offers) most = std::max(most, o.gpus);
    if (!narrow([&](const Offer& o) { return o.gpus >= g.count; })) {
      return refuse("spec.gpus", std::to_string(g.count) +
                                     " GPUs per task, but the most any node or node pool" + where +
                                     with + " has is " + std::to_string(most));
    }
    if (g.kind == GpuRequest::Kind::kFraction && g.memory_mib > 0) {
      int64_t largest = 0;
      for (const Offer& o : offers) largest = std::max(largest, o.gpu_memory_mib);
      if (!narrow([&](const Offer& o) {
            return o.gpu_memory_mib == 0 || o.gpu_memory_mib >= g.memory_mib;
          })) {
        return refuse("spec.gpuMemoryMib", std::to_string(g.memory_mib) +
                                               " MiB of GPU memory, but the largest GPU" + where +
                                               with + " has " + std::to_string(largest) + " MiB");
      }
    }
  }
  if (g.kind != GpuRequest::Kind::kNone && with.empty()) with = " with GPUs";
  struct Dimension {
    const char* field;
    const char* unit;
    int64_t Offer::*have;
    int64_t want;
  };
  for (const Dimension& d :
       {Dimension{"spec.cpuMilli", " CPU millicores", &Offer::cpu_milli, spec.cpu_milli},
        Dimension{"spec.memoryMib", " MiB of memory", &Offer::memory_mib, spec.memory_mib}}) {
    int64_t most = 0;
    for (const Offer& o : offers) most = std::max(most, o.*d.have);
    if (!narrow([&](const Offer& o) { return o.*d.have >= d.want; })) {
      return refuse(d.field, std::to_string(d.want) + d.unit +
                                 " per task, but the most any node or node pool" + where + with +
                                 " has is " + std::to_string(most));
    }
  }
  return std::nullopt;
}

}  // namespace meridian::domain
