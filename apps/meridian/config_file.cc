#include "apps/meridian/config_file.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <vector>

using meridian::base::Status;

namespace {

// The sections a config file may hold: the commands that take --config.
const std::set<std::string> kSections = {"server", "agent", "slurm-connector"};

std::string At(const std::string& path, const YAML::Mark& mark) {
  return path + ":" + std::to_string(mark.line + 1);
}

CLI::Option* FindFlag(CLI::App* command, const std::string& key) {
  if (CLI::Option* o = command->get_option_no_throw("--" + key)) return o;
  // The global flags (--server, --token) that the command uses.
  CLI::App* parent = command->get_parent();
  return parent ? parent->get_option_no_throw("--" + key) : nullptr;
}

}  // namespace

void AddConfigFlag(CLI::App* command, std::string* path) {
  command
      ->add_option("--config", *path,
                   "YAML file of flags, in a section named `" + command->get_name() +
                       "` (flags on the command line win)")
      ->check(CLI::ExistingFile);
}

Status ApplyConfigFile(CLI::App* command, const std::string& path) {
  if (path.empty()) return Status::Ok();
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::ParserException& e) {
    return Status::Invalid(At(path, e.mark) + ": not YAML: " + e.msg);
  } catch (const YAML::Exception& e) {
    return Status::Invalid(path + ": " + e.what());
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) {
    return Status::Invalid(
        At(path, root.Mark()) +
        ": expected a mapping with the sections server, agent and slurm-connector");
  }
  const std::string& name = command->get_name();
  YAML::Node section;
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>("");
    if (!kSections.count(key)) {
      return Status::Invalid(At(path, entry.first.Mark()) + ": unknown section \"" + key +
                             "\" (expected server, agent or slurm-connector)");
    }
    if (key == name) section = entry.second;
  }
  if (!section || section.IsNull()) return Status::Ok();
  if (!section.IsMap()) {
    return Status::Invalid(At(path, section.Mark()) + ": " + name +
                           ": expected a mapping of flags to values");
  }
  for (const auto& entry : section) {
    const std::string key = entry.first.as<std::string>("");
    const std::string where = At(path, entry.first.Mark()) + ": " + name + "." + key;
    CLI::Option* option = key == "config" || key == "help" ? nullptr : FindFlag(command, key);
    if (!option) {
      return Status::Invalid(where + ": not a flag of `meridian " + name + "` (see `meridian " +
                             name + " --help`)");
    }
    if (option->count() > 0) continue;  // the command line's value wins
    std::vector<std::string> values;
    const YAML::Node& value = entry.second;
    if (value.IsScalar()) {
      values.push_back(value.Scalar());
    } else if (value.IsSequence() && option->get_items_expected_max() > 1) {
      for (const YAML::Node& v : value) {
        if (!v.IsScalar()) {
          return Status::Invalid(At(path, v.Mark()) + ": " + name + "." + key +
                                 ": expected a list of values");
        }
        values.push_back(v.Scalar());
      }
    } else {
      return Status::Invalid(where + ": expected " +
                             std::string(option->get_items_expected_max() > 1
                                             ? "a value or a list of values"
                                             : "one value"));
    }
    try {
      if (option->get_expected_min() == 0) {
        // A flag without a value (--dev): true or false.
        for (std::string& v : values) v = option->get_flag_value(option->get_name(), v);
      }
      option->add_result(values);
      option->run_callback();
    } catch (const CLI::Error& e) {
      return Status::Invalid(where + ": " + e.what());
    }
  }
  return Status::Ok();
}
