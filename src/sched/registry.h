#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "sched/fragmentation.h"
#include "sched/profile.h"

namespace meridian::sched {

// What plugin factories may need beyond their name.
struct PluginArgs {
  std::shared_ptr<const FragmentationModel> fragmentation;  // for "fgd" and "fragmentation"
};

using FilterFactory = std::function<std::unique_ptr<FilterPlugin>(const PluginArgs&)>;
using ScoreFactory = std::function<base::Result<std::unique_ptr<ScorePlugin>>(const PluginArgs&)>;

// A profile named by plugin names, as configuration would state it.
struct ProfileSpec {
  std::string name;
  std::vector<std::string> filters;
  std::vector<std::pair<std::string, double>> scores;
  DeviceChoice device_choice = DeviceChoice::kEnumerate;
  bool quantize_scores = false;
  TieBreak tie_break = TieBreak::kRandom;
  int32_t max_feasible_nodes = 0;
};

// The plugins a build knows, by name. Registration is explicit (BuiltinRegistry lists every
// plugin Meridian ships) and a second plugin under a taken name is refused.
class Registry {
 public:
  base::Status RegisterFilter(const std::string& name, FilterFactory factory);
  base::Status RegisterScore(const std::string& name, ScoreFactory factory);
  base::Result<Profile> Build(const ProfileSpec& spec, const PluginArgs& args) const;
  std::vector<std::string> FilterNames() const;
  std::vector<std::string> ScoreNames() const;

 private:
  std::map<std::string, FilterFactory> filters_;
  std::map<std::string, ScoreFactory> scores_;
};

const Registry& BuiltinRegistry();

// The placement policies by name: the six of the FGD paper as its artifact configures them
// ("random", "dotprod", "gpu-packing", "gpu-clustering", "best-fit", "fgd") and "meridian", ours.
std::vector<std::string> PolicyNames();
base::Result<ProfileSpec> PolicySpec(std::string_view policy);

}  // namespace meridian::sched
