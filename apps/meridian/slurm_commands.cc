// `meridian slurm-connector`: a Slurm cluster as a Meridian back end (src/slurm/connector.h).

#include <atomic>

#include "apps/meridian/commands.h"
#include "apps/meridian/config_file.h"
#include "slurm/connector.h"

namespace {

struct SlurmFlags {
  meridian::slurm::ConnectorOptions o;
  std::string token_file;
  std::vector<std::string> gpu_models;
  std::vector<std::string> accounts, run_as;
};

// "[PROJECT=]VALUE" flags into a map by project ("*": every project not named).
meridian::base::Status ByProject(const std::string& flag, const std::vector<std::string>& given,
                                 std::map<std::string, std::string>* out) {
  for (const std::string& g : given) {
    const size_t eq = g.find('=');
    const std::string project = eq == std::string::npos ? "*" : g.substr(0, eq);
    const std::string value = eq == std::string::npos ? g : g.substr(eq + 1);
    if (project.empty() || value.empty()) {
      return meridian::base::Status::Invalid(flag + " " + g + ": expected [PROJECT=]VALUE");
    }
    if (!out->emplace(project, value).second) {
      return meridian::base::Status::Invalid(
          flag + " " + g + ": " + (project == "*" ? "every project" : "project " + project) +
          " is given twice");
    }
  }
  return meridian::base::Status::Ok();
}

int RunConnector(SlurmFlags& f) {
  using meridian::base::Status;
  if (f.o.cluster.empty()) return Fail(Status::Invalid("--cluster is required"));
  const std::string instance = f.o.instance.empty() ? f.o.cluster : f.o.instance;
  if (!meridian::slurm::ValidInstance(instance)) {
    return Fail(Status::Invalid((f.o.instance.empty() ? "--cluster " : "--instance ") + instance +
                                ": a Slurm job name carries it: 1-64 letters, digits, '.', '_' "
                                "or '-'"));
  }
  auto config = RunnerClientConfig(f.token_file);
  if (!config.ok()) return Fail(config.status());
  f.o.server = *config;
  for (const std::string& m : f.gpu_models) {
    const size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
      return Fail(Status::Invalid("--gpu-model " + m + ": expected TYPE=MODEL"));
    f.o.gpu_models[m.substr(0, eq)] = m.substr(eq + 1);
  }
  if (Status s = ByProject("--account", f.accounts, &f.o.accounts); !s.ok()) return Fail(s);
  if (Status s = ByProject("--run-as", f.run_as, &f.o.run_as); !s.ok()) return Fail(s);
  if (f.o.work_dir.empty()) f.o.work_dir = "/var/lib/meridian/slurm/" + f.o.cluster;
  if (f.o.interval <= 0) return Fail(Status::Invalid("--interval must be positive"));
  std::atomic<bool> stop{false};
  StopOnSignals(&stop);
  // Slurm's jobs run on when the connector stops: a connector started again adopts them.
  meridian::slurm::SlurmConnector connector(f.o);
  Status s = connector.Run(stop);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

void AddSlurmCommands(CLI::App& app, int* rc) {
  static SlurmFlags f;
  CLI::App* c = app.add_subcommand(
      "slurm-connector",
      "Run a Slurm cluster's connector: its nodes join a Meridian cluster, Meridian's jobs run "
      "there as Slurm jobs");
  c->add_option("--cluster", f.o.cluster, "the Meridian cluster (backend: slurm) (required)");
  c->add_option("--slurm-conf", f.o.slurm_conf,
                "SLURM_CONF for Slurm's commands (default: Slurm's own)");
  c->add_option("--partition", f.o.partitions,
                "a partition Meridian may use (repeatable; jobs go to the first; default: every "
                "node, Slurm's default partition)");
  c->add_option("--account", f.accounts,
                "[PROJECT=]ACCOUNT: the Slurm account a project's jobs are charged to, or every "
                "other project's (repeatable; default: each user's default account)");
  c->add_option("--run-as", f.run_as,
                "[PROJECT=]USER: the Unix user a project's jobs run as, or every other "
                "project's (repeatable; the connector then runs as root; with any, a project "
                "with none is refused; default: the connector's own user)");
  c->add_option("--instance", f.o.instance,
                "what this connector's Slurm jobs are named by (meridian-INSTANCE-JOB-GENERATION), "
                "so that another Meridian's or connector's are never taken for its own (default: "
                "--cluster)");
  c->add_option("--node-prefix", f.o.node_prefix,
                "prefix of Meridian's names for Slurm's nodes (default: none)");
  c->add_option("--gpu-model", f.gpu_models,
                "TYPE=MODEL: the GPU model of a GRES type, e.g. a100=A100-40GB (repeatable)");
  c->add_option("--work-dir", f.o.work_dir,
                "run folders, on a filesystem Slurm's nodes share (default "
                "/var/lib/meridian/slurm/CLUSTER)");
  c->add_option("--token-file", f.token_file, "read the agent token from this file");
  c->add_option("--interval", f.o.interval, "seconds between looks at Slurm")
      ->capture_default_str();
  c->add_option("--pending-timeout", f.o.pending_timeout,
                "seconds a job may wait in Slurm before it is given back to Meridian's queue")
      ->capture_default_str();
  c->add_option("--slurm-timeout", f.o.slurm_timeout,
                "seconds Slurm may not answer before its nodes are no longer heartbeated")
      ->capture_default_str();
  static LogFlags log_flags;
  AddLogFlags(c, &log_flags);
  static std::string config;
  AddConfigFlag(c, &config);
  c->callback([rc, c] {
    if (meridian::base::Status s = ApplyConfigFile(c, config); !s.ok()) {
      *rc = Fail(s);
      return;
    }
    InitLog(log_flags, "meridian slurm-connector");
    *rc = RunConnector(f);
  });
}
