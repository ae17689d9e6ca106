#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/command.h"
#include "base/status.h"

// Slurm as its command-line tools show it (docs/adr/0037-slurm-connector.md): `sinfo --json` and
// `squeue --Format` decoded once into typed values, and `sbatch` and `scancel` run with the
// cluster's SLURM_CONF. The tools, not libslurm, so that one Meridian binary works with every
// Slurm release that has them (libslurm's ABI changes with each one), and with the munge key and
// configuration the site's login nodes already have.
namespace meridian::slurm {

using Json = nlohmann::json;
using base::CommandResult;
using base::RunCommand;

// One node as `sinfo --json` describes it.
struct SlurmNode {
  std::string name;
  std::string address;
  int32_t cpus = 0;
  int64_t memory_mib = 0;  // RealMemory
  std::string gpu_type;    // from GRES gpu:TYPE:N; empty for an untyped gpu:N
  int32_t gpus = 0;
  int32_t gpus_used = 0;           // GPUs Slurm's jobs hold now (gres_used), Meridian's among them
  int32_t cpus_used = 0;           // CPUs Slurm's jobs hold now (alloc_cpus), Meridian's among them
  int64_t memory_used_mib = 0;     // memory they hold (alloc_memory; 0 where memory is not a
                                   // consumable resource of the cluster's SelectTypeParameters)
  std::string state;               // idle, mixed, allocated, down, ...
  std::vector<std::string> flags;  // DRAIN, NOT_RESPONDING, ...
  std::string reason;              // why an administrator drained or downed it
  std::vector<std::string> partitions;

  // Why Slurm will not start new work on it ("drained: maintenance", "down: Not responding");
  // empty when it will.
  std::string Unavailable() const;
};

// One job as squeue describes it (jobs that ended stay there for MinJobAge).
struct SlurmJob {
  int64_t id = 0;
  std::string name;
  std::string state;      // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
  std::string reason;     // state_reason: Resources, NonZeroExitCode, ...
  int64_t exit_code = 0;  // a wait status: the code in bits 8-15, a signal in bits 0-6
  std::string partition;
  std::string user;
  std::string nodes;  // Slurm's host list ("n[2-3]"), as shown

  bool Active() const;  // pending, starting, running or being stopped: it holds or will hold nodes
};

// Whether a job in this state (squeue's job_state) holds or will hold nodes.
bool IsActiveState(const std::string& state);

// The GPUs of a GRES string ("gpu:h100:4", "gpu:4(S:0-1)", "gpu:a100:2,tmpdisk:100").
struct GpuGres {
  std::string type;
  int32_t count = 0;
};
GpuGres ParseGpuGres(const std::string& gres);

base::Result<std::vector<SlurmNode>> DecodeNodes(const Json& sinfo);
// squeue's jobs as `squeue --me --noheader --states=all --Format FIELDS` (slurm_cli.cc) lists
// them, a line each: the ID, state, reason, exit code (a wait status), partition, user and nodes,
// each ended by the unit separator (0x1f), then the name. A line that cannot be read, or a job
// shown twice, refuses the whole answer. Not --json: it writes 3.7 KB of every job, and
// took 1.2-1.7 s a call with 1,000 jobs (1-14 s while they started) where this took 55-83 ms
// (docs/benchmarks.md).
// kWithout: `squeue --user=... --Format` of the same fields less the name (SlurmCli::JobsOf),
// whose jobs then have no name.
enum class JobNames { kWith, kWithout };
base::Result<std::vector<SlurmJob>> DecodeJobLines(std::string_view squeue,
                                                   JobNames names = JobNames::kWith);

// What a Meridian run is called in Slurm: the connector's instance (by default its Meridian
// cluster's name), its job's ID and its generation in the Slurm job's name ("meridian-hpc-42-3"),
// which squeue always shows, so that a connector finds its runs again after a restart with
// nothing of its own, and never takes another installation's (or another connector's) for its
// own. Names before instances ("meridian-42-3") read with an empty instance.
struct RunTag {
  int64_t job = 0;
  int64_t generation = 0;
  bool operator<(const RunTag& o) const {
    return job < o.job || (job == o.job && generation < o.generation);
  }
  bool operator==(const RunTag& o) const { return job == o.job && generation == o.generation; }
};
std::string TagName(const RunTag& tag, const std::string& instance);
struct ParsedTag {
  RunTag tag;
  std::string instance;  // empty: a name from before instances
};
std::optional<ParsedTag> ParseTagName(const std::string& name);
// An instance a job name can carry: 1-64 letters, digits, '.', '_' or '-'.
bool ValidInstance(const std::string& instance);

// Slurm's commands for one cluster. Thread-compatible; every call runs one command.
class SlurmCli {
 public:
  // `slurm_conf` is given to every command as SLURM_CONF (empty: Slurm's own default).
  explicit SlurmCli(std::string slurm_conf, double timeout = 20);

  base::Result<std::vector<SlurmNode>> Nodes() const;
  base::Result<std::vector<SlurmJob>> Jobs() const;
  // The jobs of these users, without their names: a job's owner may rename it, with line breaks
  // that would forge lines of the answer, so such jobs are known by the ID sbatch gave.
  base::Result<std::vector<SlurmJob>> JobsOf(const std::vector<uint32_t>& uids) const;
  // The user's jobs of exactly these names (squeue --user --name), as ID and name: how a job
  // whose sbatch never answered is found. Their names are these, so no line can be forged; the
  // user could name another of its own jobs so, and nothing more.
  base::Result<std::vector<std::pair<int64_t, std::string>>> JobsNamed(
      uint32_t uid, const std::vector<std::string>& names) const;
  // sbatch with these options and this batch script; returns Slurm's job ID. kUnavailable when
  // the outcome is unknown (sbatch timed out, or could not reach slurmctld): the job may have
  // been taken. kInvalidArgument when Slurm refused it (an account, a partition). `env` is
  // sbatch's whole environment, and so the job's (Slurm's --export=ALL), with SLURM_CONF added:
  // nothing of the connector's own (its token) reaches a job.
  base::Result<int64_t> Submit(const std::vector<std::string>& options, const std::string& script,
                               const std::map<std::string, std::string>& env) const;
  // scancel: `signal` to every step of the job (its notice), or, with no signal, the job itself
  // (Slurm sends SIGTERM, then SIGKILL after KillWait); with `only_if`, only a job in that state
  // (PENDING: never one that has just started).
  base::Status Cancel(int64_t id, const std::string& signal = "",
                      const std::string& only_if = "") const;
  // scancel --signal: `signal` to step `step` of the job only. A step's SIGKILL is delivered at
  // once, where the job's is turned into Slurm's own stop (SIGTERM, and SIGKILL after KillWait).
  base::Status SignalStep(int64_t id, int step, const std::string& signal) const;
  // scancel --batch --signal: `signal` to the job's batch shell alone (not its children, not its
  // steps); a SIGKILL is delivered at once, and Slurm then ends what the shell left.
  base::Status SignalBatch(int64_t id, const std::string& signal) const;

 private:
  base::Result<Json> JsonOf(const std::vector<std::string>& argv) const;
  base::Status Scancel(std::vector<std::string> args) const;              // scancel ARGS...
  base::Result<std::string> Squeue(std::vector<std::string> args) const;  // squeue ARGS...
  std::map<std::string, std::string> Env() const;

  std::string slurm_conf_;
  double timeout_;
};

}  // namespace meridian::slurm
