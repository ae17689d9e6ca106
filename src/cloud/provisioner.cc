#include "cloud/provisioner.h"

#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "base/command.h"
#include "base/log.h"
#include "base/strings.h"

namespace meridian::cloud {

using base::Status;
using base::StatusCode;

namespace {

constexpr double kMaxSeconds = 365.0 * 24 * 3600;
constexpr size_t kQuoteBytes = 200;

// Reads the fields of one JSON object and keeps every error, each named by its path
// ("instances[2].node"), so that a bad request or answer is explained in one message.
class Reader {
 public:
  Reader(const Json& object, std::string prefix, std::vector<std::string>* errors)
      : object_(object), prefix_(std::move(prefix)), errors_(errors) {}

  bool Has(const char* key) const {
    return object_.is_object() && object_.contains(key) && !object_.at(key).is_null();
  }
  const Json& At(const char* key) const { return object_.at(key); }
  std::string Path(const std::string& key) const { return prefix_ + key; }
  void Error(const std::string& key, const std::string& message) {
    errors_->push_back(Path(key) + ": " + message);
  }

  // `required`: absent, null or empty is an error; otherwise absent reads as "".
  std::string String(const char* key, bool required) {
    if (!Has(key)) {
      if (required) Error(key, "must be a non-empty string");
      return "";
    }
    const Json& v = At(key);
    if (!v.is_string() || (required && v.get_ref<const std::string&>().empty())) {
      Error(key, required ? "must be a non-empty string" : "must be a string");
      return "";
    }
    return v.get<std::string>();
  }

  bool Bool(const char* key, bool fallback) {
    if (!Has(key)) return fallback;
    if (!At(key).is_boolean()) {
      Error(key, "must be true or false");
      return fallback;
    }
    return At(key).get<bool>();
  }

  double Number(const char* key, double min, double max, double fallback, bool required) {
    if (!Has(key)) {
      if (required) Error(key, "is required");
      return fallback;
    }
    const Json& v = At(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < min ||
        v.get<double>() > max) {
      Error(key, "must be a number from " + Plain(min) + " to " + Plain(max));
      return fallback;
    }
    return v.get<double>();
  }

  int64_t Int(const char* key, int64_t min, int64_t max, int64_t fallback) {
    if (!Has(key)) return fallback;
    const Json& v = At(key);
    std::optional<int64_t> n;
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())) {
        n = static_cast<int64_t>(v.get<uint64_t>());
      }
    } else if (v.is_number_integer()) {
      n = v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
        n = static_cast<int64_t>(d);
      }
    }
    if (!n || *n < min || *n > max) {
      Error(key, "must be an integer from " + std::to_string(min) + " to " + std::to_string(max));
      return fallback;
    }
    return *n;
  }

 private:
  static std::string Plain(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
    return std::to_string(v);
  }

  const Json& object_;
  std::string prefix_;
  std::vector<std::string>* errors_;
};

Status Invalid(const std::vector<std::string>& errors) {
  std::string message;
  for (const std::string& e : errors) message += (message.empty() ? "" : "; ") + e;
  return Status::Invalid(message);
}

// A node name becomes a host name, a file name and part of URLs: letters, digits, '.', '-' and
// '_', not starting with '.' or '-'.
bool IsNodeName(const std::string& name) {
  if (name.empty() || name.size() > 253 || name[0] == '.' || name[0] == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

void ReadInstance(Reader& r, Instance& i) {
  i.id = r.String("id", true);
  i.node = r.String("node", true);
  i.pool = r.String("pool", true);
  i.state = r.String("state", true);
  if (!i.state.empty() && i.state != "booting" && i.state != "running") {
    r.Error("state", "must be booting or running");
  }
  i.created_at = r.Number("createdAt", 0, 1e12, 0, true);
  i.spot = r.Bool("spot", false);
  i.interrupt_at = r.Number("interruptAt", 0, 1e12, 0, false);
}

// The first line of `text`, cut to a length that a log line or an error message can carry.
std::string FirstLine(const std::string& text) {
  std::string_view v = text;
  const size_t start = v.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) return "";
  v.remove_prefix(start);
  v = v.substr(0, v.find('\n'));
  if (!v.empty() && v.back() == '\r') v.remove_suffix(1);
  if (v.size() > kQuoteBytes) return std::string(v.substr(0, kQuoteBytes)) + "...";
  return std::string(v);
}

}  // namespace

Json ToJson(const CreateRequest& r) {
  return Json{{"pool", r.pool},
              {"cluster", r.cluster},
              {"region", r.region},
              {"spot", r.spot},
              {"shape",
               {{"gpus", r.shape.gpus},
                {"gpuModel", r.shape.gpu_model},
                {"cpuMilli", r.shape.cpu_milli},
                {"memoryMib", r.shape.memory_mib}}},
              {"bootSeconds", r.boot_seconds},
              {"pricePerHour", r.price_per_hour},
              {"nodes", r.nodes},
              {"join", {{"server", r.server}, {"token", r.token}}}};
}

base::Result<CreateRequest> CreateRequestOf(const Json& j) {
  if (!j.is_object()) return Status::Invalid("create request: must be a JSON object");
  std::vector<std::string> errors;
  Reader r(j, "", &errors);
  CreateRequest out;
  out.pool = r.String("pool", true);
  out.cluster = r.String("cluster", true);
  out.region = r.String("region", false);
  out.spot = r.Bool("spot", false);
  if (!r.Has("shape") || !r.At("shape").is_object()) {
    r.Error("shape", "must be a JSON object");
  } else {
    Reader s(r.At("shape"), "shape.", &errors);
    out.shape.gpus = static_cast<int32_t>(s.Int("gpus", 0, 1024, 0));
    out.shape.gpu_model = s.String("gpuModel", out.shape.gpus > 0);
    out.shape.cpu_milli = s.Int("cpuMilli", 0, int64_t{1} << 40, 0);
    out.shape.memory_mib = s.Int("memoryMib", 0, int64_t{1} << 40, 0);
  }
  out.boot_seconds = r.Number("bootSeconds", 0, kMaxSeconds, 0, false);
  out.price_per_hour = r.Number("pricePerHour", 0, 1e9, 0, false);
  if (!r.Has("nodes") || !r.At("nodes").is_array() || r.At("nodes").empty()) {
    r.Error("nodes", "must be a non-empty list of node names");
  } else {
    std::set<std::string> seen;
    const Json& nodes = r.At("nodes");
    for (size_t k = 0; k < nodes.size(); ++k) {
      const std::string path = "nodes[" + std::to_string(k) + "]";
      if (!nodes[k].is_string() || !IsNodeName(nodes[k].get<std::string>())) {
        errors.push_back(path +
                         ": must be a node name (letters, digits, '.', '-', '_'; not starting "
                         "with '.' or '-')");
      } else if (!seen.insert(nodes[k].get<std::string>()).second) {
        errors.push_back(path + ": " + nodes[k].get<std::string>() + " is named twice");
      } else {
        out.nodes.push_back(nodes[k].get<std::string>());
      }
    }
  }
  if (!r.Has("join") || !r.At("join").is_object()) {
    r.Error("join", "must be a JSON object");
  } else {
    Reader join(r.At("join"), "join.", &errors);
    out.server = join.String("server", true);
    out.token = join.String("token", true);
  }
  if (!errors.empty()) return Invalid(errors);
  return out;
}

Json ToJson(const Instance& i) {
  Json j{{"id", i.id},
         {"node", i.node},
         {"pool", i.pool},
         {"state", i.state},
         {"createdAt", i.created_at},
         {"spot", i.spot}};
  if (i.interrupt_at > 0) j["interruptAt"] = i.interrupt_at;
  return j;
}

base::Result<Instance> InstanceOf(const Json& j) {
  if (!j.is_object()) return Status::Invalid("instance: must be a JSON object");
  std::vector<std::string> errors;
  Reader r(j, "", &errors);
  Instance out;
  ReadInstance(r, out);
  if (!errors.empty()) return Invalid(errors);
  return out;
}

base::Result<std::vector<Instance>> InstancesOf(const Json& answer) {
  if (!answer.is_object()) return Status::Invalid("answer: must be a JSON object");
  if (!answer.contains("instances") || !answer.at("instances").is_array()) {
    return Status::Invalid("instances: must be a list");
  }
  std::vector<std::string> errors;
  std::vector<Instance> out;
  const Json& list = answer.at("instances");
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string path = "instances[" + std::to_string(k) + "]";
    if (!list[k].is_object()) {
      errors.push_back(path + ": must be a JSON object");
      continue;
    }
    Reader r(list[k], path + ".", &errors);
    Instance i;
    ReadInstance(r, i);
    out.push_back(std::move(i));
  }
  if (!errors.empty()) return Invalid(errors);
  return out;
}

Status ErrorOf(const Json& answer, const std::string& fallback) {
  std::string code = "internal";
  std::string message;
  if (answer.is_object() && answer.contains("error") && answer.at("error").is_object()) {
    const Json& e = answer.at("error");
    if (e.contains("code") && e.at("code").is_string() &&
        !e.at("code").get<std::string>().empty()) {
      code = FirstLine(e.at("code").get<std::string>());
    }
    if (e.contains("message") && e.at("message").is_string()) {
      message = e.at("message").get<std::string>();
    }
  }
  if (message.empty()) message = fallback;
  const StatusCode status =
      code == "capacity" || code == "quota" ? StatusCode::kUnavailable : StatusCode::kInternal;
  return Status(status, message.empty() ? code : code + ": " + message);
}

Provisioner::Provisioner(std::vector<std::string> argv, double timeout)
    : argv_(std::move(argv)), timeout_(timeout) {}

base::Result<Json> Provisioner::Run(const std::string& verb, const Json& request) const {
  if (argv_.empty()) return Status::Invalid("provisioner: no program to run");
  std::vector<std::string> args = argv_;
  args.push_back(verb);
  const std::string what = "provisioner " + argv_[0] + " " + verb;
  auto result = base::RunCommand(args, {}, request.dump(), timeout_);
  if (!result.ok()) return Status(result.status().code(), what + ": " + result.status().message());
  const base::CommandResult& r = *result;
  // The program's standard error is the server's to log: progress when it worked, the reason
  // when it did not.
  const base::log::Level level =
      r.exit_code == 0 ? base::log::Level::kInfo : base::log::Level::kWarn;
  for (std::string_view line : base::Split(r.err, '\n')) {
    if (base::Trim(line).empty()) continue;
    base::log::Write(level, {{"provisioner", argv_[0]}, {"verb", verb}}, line);
  }
  Json answer = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (r.exit_code != 0) {
    std::string why = FirstLine(r.err);
    if (why.empty()) why = FirstLine(r.out);
    if (why.empty()) why = "no message";
    const std::string status =
        r.exit_code < 0 ? "was killed" : "exited with status " + std::to_string(r.exit_code);
    return ErrorOf(answer.is_discarded() ? Json() : answer, what + " " + status + ": " + why);
  }
  if (answer.is_discarded() || !answer.is_object()) {
    std::string quoted = FirstLine(r.out);
    if (quoted.empty()) quoted = FirstLine(r.err);
    return Status::Internal(what + ": the answer is not a JSON object: '" + quoted + "'");
  }
  return answer;
}

base::Result<std::vector<Instance>> Provisioner::Create(const CreateRequest& request) const {
  auto answer = Run("create", ToJson(request));
  if (!answer.ok()) return answer.status();
  auto instances = InstancesOf(*answer);
  if (!instances.ok()) {
    return Status::Internal("provisioner " + argv_[0] + " create: " + instances.status().message());
  }
  // One instance per requested node: anything else would leave a node the server waits for, or
  // an instance it does not know.
  std::set<std::string> asked(request.nodes.begin(), request.nodes.end());
  std::set<std::string> got;
  for (const Instance& i : *instances) got.insert(i.node);
  if (got != asked || instances->size() != request.nodes.size()) {
    return Status::Internal("provisioner " + argv_[0] + " create: answered " +
                            std::to_string(instances->size()) + " instance(s) for " +
                            std::to_string(request.nodes.size()) +
                            " node(s), not one per requested node");
  }
  return instances;
}

Status Provisioner::Delete(const std::string& pool, const std::vector<std::string>& ids) const {
  auto answer = Run("delete", Json{{"pool", pool}, {"instances", ids}});
  if (!answer.ok()) return answer.status();
  const Json& deleted = answer->contains("deleted") ? answer->at("deleted") : Json();
  bool strings = deleted.is_array();
  for (const Json& d : strings ? deleted : Json::array()) strings = strings && d.is_string();
  if (!strings) {
    return Status::Internal("provisioner " + argv_[0] + " delete: deleted: must be a list of ids");
  }
  return Status::Ok();
}

base::Result<std::vector<Instance>> Provisioner::List(const std::string& pool) const {
  auto answer = Run("list", Json{{"pool", pool}});
  if (!answer.ok()) return answer.status();
  auto instances = InstancesOf(*answer);
  if (!instances.ok()) {
    return Status::Internal("provisioner " + argv_[0] + " list: " + instances.status().message());
  }
  return instances;
}

}  // namespace meridian::cloud
