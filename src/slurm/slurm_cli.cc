#include "slurm/slurm_cli.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>

#include "base/strings.h"

namespace meridian::slurm {

using base::Status;

namespace {

bool Has(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Fields as Slurm's JSON writes them. 22.05 writes states as strings and numbers as numbers;
// 23.02 and later write states as lists of flags ("job_state": ["RUNNING"]) and many numbers as
// {"set": true, "infinite": false, "number": N}. Both are read; null is what Slurm does not know.
std::string Text(const Json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array() && !it->empty() && it->front().is_string()) return it->front();
  return "";
}

std::optional<int64_t> NumberOf(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return static_cast<int64_t>(v.get<double>());
  if (v.is_object() && v.value("set", true) && v.contains("number")) return NumberOf(v["number"]);
  return std::nullopt;
}

int64_t Number(const Json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? 0 : NumberOf(*it).value_or(0);
}

// The rest of a state list: the flags (["IDLE", "DRAIN"] -> DRAIN).
std::vector<std::string> StateFlags(const Json& o, const char* key) {
  std::vector<std::string> out;
  auto it = o.find(key);
  if (it == o.end() || !it->is_array()) return out;
  for (size_t i = 1; i < it->size(); ++i) {
    if ((*it)[i].is_string()) out.push_back((*it)[i].get<std::string>());
  }
  return out;
}

}  // namespace

std::string SlurmNode::Unavailable() const {
  const std::string why = reason.empty() ? "" : ": " + reason;
  if (Has(flags, "DRAIN")) return "drained in Slurm" + why;
  const std::string s = Lower(state);
  if (s == "down" || s == "error" || s == "future" || s == "unknown") {
    return s + " in Slurm" + why;
  }
  if (Has(flags, "NOT_RESPONDING")) return "not responding to Slurm";
  return "";
}

bool IsActiveState(const std::string& state) {
  static const std::array<const char*, 7> kActive = {
      "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"};
  return std::any_of(kActive.begin(), kActive.end(), [&](const char* s) { return state == s; });
}

bool SlurmJob::Active() const { return IsActiveState(state); }

GpuGres ParseGpuGres(const std::string& gres) {
  GpuGres out;
  size_t at = 0;
  while (at <= gres.size()) {
    size_t end = gres.find(',', at);
    if (end == std::string::npos) end = gres.size();
    std::string item = gres.substr(at, end - at);
    at = end + 1;
    item = item.substr(0, item.find('('));  // "(S:0-1)", "(IDX:0-1)"
    if (item.rfind("gpu", 0) != 0) continue;
    std::vector<std::string> parts;
    size_t p = 0;
    while (p <= item.size()) {
      size_t q = item.find(':', p);
      if (q == std::string::npos) q = item.size();
      parts.push_back(item.substr(p, q - p));
      p = q + 1;
    }
    if (parts.front() != "gpu") continue;
    const std::string count = parts.size() >= 2 ? parts.back() : "";
    if (count.empty() || !std::all_of(count.begin(), count.end(), ::isdigit)) continue;
    out.count += static_cast<int32_t>(std::min<int64_t>(std::stoll(count.substr(0, 9)), 1024));
    if (parts.size() >= 3) out.type = parts[1];
  }
  return out;
}

base::Result<std::vector<SlurmNode>> DecodeNodes(const Json& sinfo) {
  if (!sinfo.is_object() || !sinfo.contains("nodes") || !sinfo.at("nodes").is_array()) {
    return Status::Invalid("sinfo --json: no \"nodes\" list");
  }
  std::vector<SlurmNode> out;
  size_t i = 0;
  for (const Json& n : sinfo.at("nodes")) {
    const std::string at = "sinfo --json: nodes[" + std::to_string(i++) + "]";
    if (!n.is_object() || Text(n, "name").empty()) return Status::Invalid(at + ": no name");
    SlurmNode node;
    node.name = Text(n, "name");
    node.address = Text(n, "address");
    node.cpus = static_cast<int32_t>(Number(n, "cpus"));
    node.memory_mib = Number(n, "real_memory");
    const GpuGres gpus = ParseGpuGres(Text(n, "gres"));
    node.gpu_type = gpus.type;
    node.gpus = gpus.count;
    node.gpus_used = ParseGpuGres(Text(n, "gres_used")).count;
    node.cpus_used = static_cast<int32_t>(Number(n, "alloc_cpus"));
    node.memory_used_mib = Number(n, "alloc_memory");
    node.state = Text(n, "state");
    if (node.state.empty()) return Status::Invalid(at + ": no state");
    node.flags = StateFlags(n, "state");
    node.reason = Text(n, "reason");
    for (const char* list : {"state_flags", "partitions"}) {
      auto it = n.find(list);
      if (it == n.end() || !it->is_array()) continue;
      for (const Json& v : *it) {
        if (!v.is_string()) continue;
        (std::strcmp(list, "partitions") == 0 ? node.partitions : node.flags)
            .push_back(v.get<std::string>());
      }
    }
    out.push_back(std::move(node));
  }
  return out;
}

namespace {

// squeue's fields, each ended by the unit separator, the name last (DecodeJobLines).
const char* const kSqueueFields =
    "JobID:\x1f,State:\x1f,Reason:\x1f,exit_code:\x1f,Partition:\x1f,UserName:\x1f,NodeList:\x1f,"
    "Name:";
// The same without what a job's owner may write: its name (renamed to anything, line breaks
// included) and its reason (a plugin's words may carry the user's text, as a burst buffer's
// refusal quotes the user's --bb).
const char* const kSqueueFieldsOfOthers =
    "JobID:\x1f,State:\x1f,exit_code:\x1f,Partition:\x1f,UserName:\x1f,NodeList:\x1f";

// A whole non-negative number ("768"), or nullopt.
std::optional<int64_t> Count(std::string_view s) {
  long long v = 0;
  if (!base::ParseInt64(s, &v) || v < 0 || s.front() == '+') return std::nullopt;
  return v;
}

// A wait status as squeue prints it: a 32-bit value, with "%d" (a job's owner may complete its
// job with any code, 0xFFFFFFFF printing as -1). nullopt for what is no such number.
std::optional<int64_t> WaitStatus(std::string_view s) {
  long long v = 0;
  if (!base::ParseInt64(s, &v) || v < INT32_MIN || v > UINT32_MAX || s.front() == '+') {
    return std::nullopt;
  }
  return static_cast<int64_t>(static_cast<uint32_t>(v));
}

}  // namespace

base::Result<std::vector<SlurmJob>> DecodeJobLines(std::string_view squeue, JobNames names) {
  const bool named = names == JobNames::kWith;
  // Where each field is: without names, the reason is not asked for either.
  const size_t fields = named ? 7 : 6, exit_at = named ? 3 : 2;
  std::vector<SlurmJob> out;
  std::set<int64_t> ids;
  size_t line_no = 0;
  for (std::string_view line : base::Split(squeue, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    const std::string at = "squeue, line " + std::to_string(line_no);
    // Seven fields (six), each ended by the unit separator; the name is the rest of the line.
    const std::vector<std::string_view> field = base::Split(line, '\x1f');
    if (field.size() < fields + 1 ||
        (!named && (field.size() != fields + 1 || !field[fields].empty()))) {
      return Status::Invalid(at + ": " + std::to_string(field.size()) + " fields where " +
                             std::to_string(fields + 1) + " were asked for");
    }
    SlurmJob job;
    const auto id = Count(field[0]);
    if (!id || *id <= 0) return Status::Invalid(at + ": job ID \"" + std::string(field[0]) + "\"");
    // A job shows once: a second line of one ID was written by a name holding a line break.
    if (!ids.insert(*id).second) {
      return Status::Invalid(at + ": job " + std::string(field[0]) + " shown twice");
    }
    job.id = *id;
    job.state = std::string(field[1]);
    // A job whose state cannot be read is not guessed at (running or ended): the whole answer
    // is refused, and nothing is reported from it.
    if (job.state.empty() || !std::all_of(job.state.begin(), job.state.end(), [](char c) {
          return std::isupper(static_cast<unsigned char>(c)) || c == '_';
        })) {
      return Status::Invalid(at + ": job state \"" + job.state + "\"");
    }
    if (named) job.reason = std::string(field[2]);
    const auto exit = WaitStatus(field[exit_at]);
    if (!exit) {
      return Status::Invalid(at + ": exit code \"" + std::string(field[exit_at]) +
                             "\" is not a wait status");
    }
    job.exit_code = *exit;
    job.partition = std::string(field[exit_at + 1]);
    job.user = std::string(field[exit_at + 2]);
    job.nodes = std::string(field[exit_at + 3]);
    if (named) {
      job.name = std::string(line.substr(static_cast<size_t>(field[7].data() - line.data())));
    }
    out.push_back(std::move(job));
  }
  return out;
}

std::string TagName(const RunTag& tag, const std::string& instance) {
  return "meridian-" + (instance.empty() ? "" : instance + "-") + std::to_string(tag.job) + "-" +
         std::to_string(tag.generation);
}

bool ValidInstance(const std::string& instance) {
  return !instance.empty() && instance.size() <= 64 &&
         std::all_of(instance.begin(), instance.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
         });
}

std::optional<ParsedTag> ParseTagName(const std::string& name) {
  static const std::string kPrefix = "meridian-";
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string rest = name.substr(kPrefix.size());
  // The job and generation are the last two fields; what comes before them is the instance.
  const size_t second = rest.rfind('-');
  if (second == std::string::npos || second == 0) return std::nullopt;
  const size_t first = rest.rfind('-', second - 1);
  const size_t job_at = first == std::string::npos ? 0 : first + 1;
  const std::string job = rest.substr(job_at, second - job_at);
  const std::string generation = rest.substr(second + 1);
  const std::string instance = first == std::string::npos ? "" : rest.substr(0, first);
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), ::isdigit);
  };
  if (!digits(job) || !digits(generation) ||
      (first != std::string::npos && !ValidInstance(instance))) {
    return std::nullopt;
  }
  return ParsedTag{{std::stoll(job), std::stoll(generation)}, instance};
}

SlurmCli::SlurmCli(std::string slurm_conf, double timeout)
    : slurm_conf_(std::move(slurm_conf)), timeout_(timeout) {}

std::map<std::string, std::string> SlurmCli::Env() const {
  if (slurm_conf_.empty()) return {};
  return {{"SLURM_CONF", slurm_conf_}};
}

namespace {

// The first line of what a failed command said, for an error message.
std::string Said(const CommandResult& r) {
  std::string s = r.err.empty() ? r.out : r.err;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "exit code " + std::to_string(r.exit_code) : s;
}

}  // namespace

base::Result<Json> SlurmCli::JsonOf(const std::vector<std::string>& argv) const {
  auto r = RunCommand(argv, Env(), "", timeout_);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return Status(base::StatusCode::kUnavailable, argv[0] + ": " + Said(*r));
  }
  Json j = Json::parse(r->out, nullptr, false);
  if (j.is_discarded()) return Status::Invalid(argv[0] + " --json: output is not JSON");
  return j;
}

base::Result<std::vector<SlurmNode>> SlurmCli::Nodes() const {
  auto j = JsonOf({"sinfo", "--json"});
  if (!j.ok()) return j.status();
  return DecodeNodes(*j);
}

base::Result<std::string> SlurmCli::Squeue(std::vector<std::string> args) const {
  args.insert(args.begin(), {"squeue", "--noheader", "--states=all"});
  auto r = RunCommand(args, Env(), "", timeout_);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) return Status(base::StatusCode::kUnavailable, "squeue: " + Said(*r));
  return std::move(r->out);
}

base::Result<std::vector<SlurmJob>> SlurmCli::Jobs() const {
  // Only the jobs of the connector's own user (--me), as it submits them: a user's job name or
  // state text cannot then break the answer or forge a line of it.
  auto out = Squeue({"--me", "--Format", kSqueueFields});
  if (!out.ok()) return out.status();
  return DecodeJobLines(*out);
}

base::Result<std::vector<SlurmJob>> SlurmCli::JobsOf(const std::vector<uint32_t>& uids) const {
  if (uids.empty()) return std::vector<SlurmJob>{};
  std::string list;
  for (uint32_t uid : uids) list += (list.empty() ? "" : ",") + std::to_string(uid);
  auto out = Squeue({"--user=" + list, "--Format", kSqueueFieldsOfOthers});
  if (!out.ok()) return out.status();
  return DecodeJobLines(*out, JobNames::kWithout);
}

base::Result<std::vector<std::pair<int64_t, std::string>>> SlurmCli::JobsNamed(
    uint32_t uid, const std::vector<std::string>& names) const {
  std::vector<std::pair<int64_t, std::string>> jobs;
  if (names.empty()) return jobs;
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ",") + n;
  auto out =
      Squeue({"--user=" + std::to_string(uid), "--name=" + list, "--Format", "JobID:\x1f,Name:"});
  if (!out.ok()) return out.status();
  const std::set<std::string> asked(names.begin(), names.end());
  for (std::string_view line : base::Split(*out, '\n')) {
    if (line.empty()) continue;
    const size_t sep = line.find('\x1f');
    const auto id = sep == std::string_view::npos ? std::nullopt : Count(line.substr(0, sep));
    const std::string name(sep == std::string_view::npos ? "" : line.substr(sep + 1));
    if (!id || *id <= 0 || !asked.count(name)) {
      return Status::Invalid("squeue --name: line \"" + std::string(line) + "\"");
    }
    jobs.emplace_back(*id, name);
  }
  return jobs;
}

base::Result<int64_t> SlurmCli::Submit(const std::vector<std::string>& options,
                                       const std::string& script,
                                       const std::map<std::string, std::string>& env) const {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), options.begin(), options.end());
  std::map<std::string, std::string> whole = env;
  for (const auto& [k, v] : Env()) whole[k] = v;
  auto r = base::RunCommandWithOnly(argv, whole, script, timeout_);
  if (!r.ok()) return r.status();
  // --parsable prints "ID" or "ID;CLUSTER".
  const std::string id = r->out.substr(0, r->out.find_first_of(";\n"));
  if (r->exit_code != 0 || id.empty() || id.size() > 18 ||
      !std::all_of(id.begin(), id.end(), ::isdigit)) {
    // Slurm's words when slurmctld could not be reached or was too busy: the job may or may not
    // have been taken.
    const std::string said = Said(*r);
    for (const char* transient : {"Unable to contact slurm controller", "Socket timed out",
                                  "temporarily unable", "Zero Bytes were transmitted",
                                  "Connection refused", "Communication connection failure"}) {
      if (said.find(transient) != std::string::npos) {
        return Status(base::StatusCode::kUnavailable, "sbatch: " + said);
      }
    }
    return Status::Invalid("sbatch refused the job: " + said);
  }
  return static_cast<int64_t>(std::stoll(id));
}

Status SlurmCli::SignalStep(int64_t id, int step, const std::string& signal) const {
  return Scancel({"--signal=" + signal, std::to_string(id) + "." + std::to_string(step)});
}

Status SlurmCli::SignalBatch(int64_t id, const std::string& signal) const {
  return Scancel({"--batch", "--signal=" + signal, std::to_string(id)});
}

Status SlurmCli::Cancel(int64_t id, const std::string& signal, const std::string& only_if) const {
  std::vector<std::string> args;
  if (!signal.empty()) args.push_back("--signal=" + signal);
  if (!only_if.empty()) args.push_back("--state=" + only_if);
  args.push_back(std::to_string(id));
  return Scancel(std::move(args));
}

Status SlurmCli::Scancel(std::vector<std::string> args) const {
  args.insert(args.begin(), "scancel");
  auto r = RunCommand(args, Env(), "", timeout_);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) return Status(base::StatusCode::kUnavailable, "scancel: " + Said(*r));
  return Status::Ok();
}

}  // namespace meridian::slurm
