#include "sched/registry.h"

#include "sched/plugins/best_fit/best_fit.h"
#include "sched/plugins/cluster_constraint/cluster_constraint.h"
#include "sched/plugins/cost/cost.h"
#include "sched/plugins/cpu_stranding/cpu_stranding.h"
#include "sched/plugins/data_locality/data_locality.h"
#include "sched/plugins/dot_product/dot_product.h"
#include "sched/plugins/fragmentation/fragmentation.h"
#include "sched/plugins/gpu_clustering/gpu_clustering.h"
#include "sched/plugins/gpu_packing/gpu_packing.h"
#include "sched/plugins/gpu_sharing/gpu_sharing.h"
#include "sched/plugins/model_reserve/model_reserve.h"
#include "sched/plugins/multi_gpu_reserve/multi_gpu_reserve.h"
#include "sched/plugins/node_resources/node_resources.h"
#include "sched/plugins/node_selector/node_selector.h"
#include "sched/plugins/on_prem_first/on_prem_first.h"
#include "sched/plugins/pool_purpose/pool_purpose.h"
#include "sched/plugins/reservation/reservation.h"
#include "sched/plugins/spread/spread.h"
#include "sched/plugins/taint_toleration/taint_toleration.h"
#include "sched/plugins/topology/topology.h"

namespace meridian::sched {

base::Status Registry::RegisterFilter(const std::string& name, FilterFactory factory) {
  if (!filters_.emplace(name, std::move(factory)).second) {
    return base::Status::Invalid("filter plugin \"" + name + "\" is registered twice");
  }
  return base::Status::Ok();
}

base::Status Registry::RegisterScore(const std::string& name, ScoreFactory factory) {
  if (!scores_.emplace(name, std::move(factory)).second) {
    return base::Status::Invalid("score plugin \"" + name + "\" is registered twice");
  }
  return base::Status::Ok();
}

base::Result<Profile> Registry::Build(const ProfileSpec& spec, const PluginArgs& args) const {
  Profile p;
  p.name = spec.name;
  p.device_choice = spec.device_choice;
  p.quantize_scores = spec.quantize_scores;
  p.tie_break = spec.tie_break;
  p.max_feasible_nodes = spec.max_feasible_nodes;
  for (const std::string& name : spec.filters) {
    auto it = filters_.find(name);
    if (it == filters_.end()) {
      return base::Status::Invalid("profile " + spec.name + ": unknown filter plugin \"" + name +
                                   "\"");
    }
    p.filters.push_back(it->second(args));
  }
  for (const auto& [name, weight] : spec.scores) {
    auto it = scores_.find(name);
    if (it == scores_.end()) {
      return base::Status::Invalid("profile " + spec.name + ": unknown score plugin \"" + name +
                                   "\"");
    }
    auto plugin = it->second(args);
    if (!plugin.ok()) return plugin.status();
    p.scores.push_back({std::move(*plugin), weight});
  }
  return p;
}

std::vector<std::string> Registry::FilterNames() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : filters_) out.push_back(name);
  return out;
}

std::vector<std::string> Registry::ScoreNames() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : scores_) out.push_back(name);
  return out;
}

namespace {

template <class T, class... A>
ScoreFactory Simple(A... a) {
  return [=](const PluginArgs&) -> base::Result<std::unique_ptr<ScorePlugin>> {
    return std::unique_ptr<ScorePlugin>(std::make_unique<T>(a...));
  };
}

ScoreFactory FragmentationFactory(plugins::Fragmentation::Mode mode) {
  return [mode](const PluginArgs& args) -> base::Result<std::unique_ptr<ScorePlugin>> {
    if (!args.fragmentation) {
      return base::Status::Invalid("the fragmentation score needs a workload mix (typical shapes)");
    }
    return std::unique_ptr<ScorePlugin>(
        std::make_unique<plugins::Fragmentation>(args.fragmentation, mode));
  };
}

// A score built from the workload mix alone (its constructor takes the FragmentationModel).
template <typename T>
ScoreFactory FromMix(const char* name) {
  return [name](const PluginArgs& args) -> base::Result<std::unique_ptr<ScorePlugin>> {
    if (!args.fragmentation) {
      return base::Status::Invalid(std::string("the ") + name +
                                   " score needs a workload mix (typical shapes)");
    }
    return std::unique_ptr<ScorePlugin>(std::make_unique<T>(*args.fragmentation));
  };
}

Registry MakeBuiltin() {
  using plugins::BestFit;
  using plugins::Fragmentation;
  Registry r;
  auto must = [](base::Status s) {
    if (!s.ok()) std::abort();  // a programming error in the list below, caught by every test
  };
  must(r.RegisterFilter("node-resources", [](const PluginArgs&) {
    return std::make_unique<plugins::NodeResources>();
  }));
  must(r.RegisterFilter(
      "cluster", [](const PluginArgs&) { return std::make_unique<plugins::ClusterConstraint>(); }));
  must(r.RegisterFilter("pool-purpose", [](const PluginArgs&) {
    return std::make_unique<plugins::PoolPurposeMatch>();
  }));
  must(r.RegisterFilter("gpu-sharing", [](const PluginArgs&) {
    return std::make_unique<plugins::GpuSharingMatch>();
  }));
  must(r.RegisterFilter("node-selector", [](const PluginArgs&) {
    return std::make_unique<plugins::NodeSelector>();
  }));
  must(r.RegisterFilter(
      "reservation", [](const PluginArgs&) { return std::make_unique<plugins::Reservation>(); }));
  must(r.RegisterFilter("taint-toleration", [](const PluginArgs&) {
    return std::make_unique<plugins::TaintToleration>();
  }));
  must(r.RegisterScore("best-fit", Simple<BestFit>(BestFit::Normalization::kNodeCapacity)));
  must(r.RegisterScore("best-fit-absolute", Simple<BestFit>(BestFit::Normalization::kAbsolute)));
  must(r.RegisterScore("spread", Simple<plugins::Spread>()));
  must(r.RegisterScore("fragmentation", FragmentationFactory(Fragmentation::Mode::kExact)));
  must(r.RegisterScore("fgd", FragmentationFactory(Fragmentation::Mode::kPaper)));
  must(r.RegisterScore("cpu-stranding", FromMix<plugins::CpuStranding>("cpu-stranding")));
  must(r.RegisterScore("model-reserve", FromMix<plugins::ModelReserve>("model-reserve")));
  must(
      r.RegisterScore("multi-gpu-reserve", FromMix<plugins::MultiGpuReserve>("multi-gpu-reserve")));
  must(r.RegisterScore("topology", Simple<plugins::Topology>()));
  must(r.RegisterScore("data-locality", Simple<plugins::DataLocality>()));
  must(r.RegisterScore("cost", Simple<plugins::Cost>()));
  must(r.RegisterScore("on-prem-first", Simple<plugins::OnPremFirst>()));
  must(r.RegisterScore("dot-product", Simple<plugins::DotProduct>()));
  must(r.RegisterScore("gpu-packing", Simple<plugins::GpuPacking>()));
  must(r.RegisterScore("gpu-clustering", Simple<plugins::GpuClustering>()));
  return r;
}

// Every policy filters alike: the policies differ only in how they rank what is feasible.
const std::vector<std::string> kFilters = {"cluster",       "pool-purpose",     "gpu-sharing",
                                           "node-selector", "taint-toleration", "node-resources",
                                           "reservation"};

}  // namespace

const Registry& BuiltinRegistry() {
  static const Registry registry = MakeBuiltin();
  return registry;
}

std::vector<std::string> PolicyNames() {
  return {"random", "dotprod", "gpu-packing", "gpu-clustering", "best-fit", "fgd", "meridian"};
}

base::Result<ProfileSpec> PolicySpec(std::string_view policy) {
  ProfileSpec s;
  s.name = std::string(policy);
  s.filters = kFilters;
  s.device_choice = DeviceChoice::kBestFit;
  s.quantize_scores = true;
  // The artifact's results are reproduced when equal scores go to the node listed first (see
  // docs/adr/0003-fgd-reproduction.md); with uniform random ties its FGD loses 8-GPU tasks early.
  s.tie_break = TieBreak::kNodeOrder;
  if (policy == "random") {
    s.tie_break = TieBreak::kRandom;
    s.device_choice = DeviceChoice::kRandom;  // no score: every feasible node ties
  } else if (policy == "dotprod") {
    s.scores = {{"dot-product", 1}};
  } else if (policy == "gpu-packing") {
    s.scores = {{"gpu-packing", 1}};
  } else if (policy == "gpu-clustering") {
    s.scores = {{"gpu-clustering", 1}};
  } else if (policy == "best-fit") {
    s.scores = {{"best-fit-absolute", 1}};
  } else if (policy == "fgd") {
    s.scores = {{"fgd", 1}};
    s.device_choice = DeviceChoice::kEnumerate;
  } else if (policy == "meridian") {
    // Exact fragmentation descent that also counts host memory, plus the GPU share stranded
    // behind the node's CPU at the workload's CPU:GPU ratio, plus the GPUs taken from models that
    // constrained work needs beyond balance (model-reserve) and the room taken from multi-GPU
    // work where few nodes can hold it (multi-gpu-reserve; both ADR 0033, both 0 on an estate
    // with room to spare), then the least absolute free capacity (keep big nodes whole) among
    // near-equal candidates; see docs/adr/0003. On-prem first outweighs all of it (100 x 100
    // against about 1,000 per GPU of fragmentation): work bursts to cloud clusters only when no
    // on-prem node can hold it. Data outweighs that in turn once copying a job's datasets would
    // take more than half an hour (200 x 100 for an hour or more; docs/adr/0044): a job goes to
    // a cloud site that has its data rather than wait that long on-prem.
    s.scores = {{"fragmentation", 1000},  {"cpu-stranding", 500},
                {"model-reserve", 1000},  {"multi-gpu-reserve", 200},
                {"best-fit-absolute", 1}, {"topology", 1},
                {"data-locality", 200},   {"cost", 0.1},
                {"on-prem-first", 100}};
    s.device_choice = DeviceChoice::kEnumerate;
    s.quantize_scores = false;
    s.tie_break = TieBreak::kRandom;
  } else {
    std::string known;
    for (const std::string& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
    return base::Status::Invalid("unknown policy \"" + std::string(policy) + "\" (known: " + known +
                                 ")");
  }
  return s;
}

}  // namespace meridian::sched
