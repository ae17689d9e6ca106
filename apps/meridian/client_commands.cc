// Client verbs in kubectl's style: flags, and calls into the cli module.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "apps/meridian/commands.h"
#include "apps/meridian/completion.h"
#include "base/version.h"
#include "cli/verbs.h"

namespace {

using meridian::cli::Context;

struct Global {
  meridian::cli::ClientConfig flags;
  std::string output = "table";
  std::string config;
};

// Resolves where and as whom to call, then runs the verb.
void Run(const Global& g, int* rc, const std::function<int(Context&)>& verb) {
  const std::string path = g.config.empty() ? meridian::cli::DefaultConfigPath() : g.config;
  auto file = meridian::cli::LoadConfig(path);
  if (!file.ok()) {
    *rc = Fail(file.status());
    return;
  }
  Context c(meridian::cli::Client(meridian::cli::ResolveConfig(g.flags, *file)));
  c.output = g.output;
  c.config_path = path;
  c.now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  *rc = verb(c);
}

Global& Globals() {
  static Global g;
  return g;
}

}  // namespace

meridian::base::Result<meridian::cli::ClientConfig> GlobalClientConfig() {
  const Global& g = Globals();
  const std::string path = g.config.empty() ? meridian::cli::DefaultConfigPath() : g.config;
  auto file = meridian::cli::LoadConfig(path);
  if (!file.ok()) return file.status();
  return meridian::cli::ResolveConfig(g.flags, *file);
}

meridian::base::Result<meridian::cli::ClientConfig> RunnerClientConfig(
    const std::string& token_file) {
  auto config = GlobalClientConfig();
  if (!config.ok() || token_file.empty()) return config;
  std::ifstream in(token_file);
  std::string token;
  if (!(in >> token)) {
    return meridian::base::Status::Invalid("--token-file " + token_file + ": cannot read");
  }
  config->token = token;
  return config;
}

void AddClientCommands(CLI::App& app, int* rc) {
  static Global& g = Globals();
  app.fallthrough();
  // Several servers (replicas on one PostgreSQL): comma-separated or the flag repeated; a call
  // moves on to the next when one cannot be reached, and follows a follower's redirect.
  app.add_option("--server", g.flags.server,
                 "API server URL, or several: URL1,URL2 or --server repeated (or "
                 "MERIDIAN_SERVER)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::Join);
  app.add_option("--token", g.flags.token, "API token (or MERIDIAN_TOKEN)");
  app.add_option("--ca-cert", g.flags.ca_cert, "CA certificate to trust (or MERIDIAN_CA_CERT)");
  app.add_flag("--insecure-skip-verify", g.flags.insecure,
               "do not verify the server's TLS certificate");
  app.add_option("-o,--output", g.output, "table, wide, json or yaml (csv: report usage)")
      ->check(CLI::IsMember({"table", "wide", "json", "yaml", "csv"}));
  app.add_option("--config", g.config, "client configuration file (or MERIDIAN_CONFIG)");

  static bool no_save = false;
  static bool sso = false;
  static std::string provider;
  CLI::App* login = app.add_subcommand("login", "Check the server and token, and remember them");
  login->add_flag("--no-save", no_save, "check only; do not write the configuration file");
  login->add_flag("--sso", sso,
                  "sign in with the server's identity provider (OpenID Connect device flow)");
  login->add_option("--provider", provider, "with --sso: which identity provider, by name");
  login->callback([rc] {
    Run(g, rc, [](Context& c) {
      if (!sso && !provider.empty()) {
        c.err << "meridian: --provider: only with --sso\n";
        return static_cast<int>(meridian::cli::kExitUsage);
      }
      if (sso) return meridian::cli::LoginSso(c, {provider, !no_save});
      return meridian::cli::Login(c, !no_save);
    });
  });

  static std::string resource, name;
  static meridian::cli::GetFlags gf;
  CLI::App* get = app.add_subcommand("get", "List or show resources (jobs, nodes, events, ...)");
  get->add_option("resource", resource,
                  "jobs, nodes, events, alerts, idle, clusters, nodepools, projects, "
                  "teams, organizations, quotas, priorityclasses, "
                  "policies, alertrules, alertreceivers, identityproviders, idlepolicies, budgets, "
                  "datasets, users, tokens")
      ->required();
  get->add_option("name", name, "one of them (a job's id, a project's name)");
  get->add_option("-p,--project", gf.project, "jobs of these projects (comma-separated)");
  get->add_option("--phase", gf.phase, "jobs in these phases (Pending, Placed, ...)");
  get->add_option("--user", gf.user, "jobs of this user");
  get->add_option("--job", gf.job, "events of this job");
  get->add_option("-l,--selector", gf.selector,
                  "jobs, nodes: by label (team=nlp,tier!=batch,key,!key)");
  get->add_option("--limit", gf.limit, "at most this many (per page with --all)");
  get->add_flag("--all", gf.all,
                "jobs: every phase and every page (without it: Pending, Placed, Running, "
                "Stopping); with -o wide, as sacct lists them");
  get->add_flag("-w,--watch", gf.watch,
                "jobs, nodes, events: after the list, a line per change until interrupted");
  get->add_option("--array", gf.array, "jobs: the elements of this array (its id)");
  get->add_flag("--elements", gf.elements, "one job that is an array: its elements too");
  get->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::Get(c, resource, name, gf); }); });

  CLI::App* describe = app.add_subcommand("describe",
                                          "Show one resource in detail (a job: "
                                          "placement, why it waits, events)");
  describe->add_option("resource", resource, "job, project, cluster, ...")->required();
  describe->add_option("name", name, "its id or name (an array's element: ID_INDEX)")->required();
  describe->add_flag("--elements", gf.elements, "a job array: list its elements");
  describe->callback([rc] {
    Run(g, rc, [](Context& c) { return meridian::cli::Describe(c, resource, name, gf); });
  });

  static meridian::cli::SubmitFlags sf;
  CLI::App* submit = app.add_subcommand("submit", "Submit a job from a YAML file or from flags");
  submit->add_option("-f,--file", sf.file, "job document (YAML)");
  submit->add_option("--name", sf.name, "job name");
  submit->add_option("-p,--project", sf.project, "project");
  submit->add_option("--priority-class", sf.priority_class, "priority class");
  submit->add_option("--tasks", sf.tasks, "tasks (replicas)");
  submit->add_option("--gpus", sf.gpus, "whole GPUs per task");
  submit->add_option("--gpu-milli", sf.gpu_milli, "a fraction of one GPU per task, in 1/1000");
  submit->add_option("--mig", sf.mig_profile, "a MIG profile per task (e.g. 3g.40gb)");
  submit->add_option("--cpu-milli", sf.cpu_milli, "CPU per task, in 1/1000 cores");
  submit->add_option("--memory-mib", sf.memory_mib, "memory per task, MiB");
  submit
      ->add_option("--estimate", sf.runtime_estimate, "expected runtime (45m, 2h, 1h30m, seconds)")
      ->transform(DurationFlag());
  submit
      ->add_option("--limit", sf.runtime_limit, "runtime limit (45m, 2h, 1h30m, HH:MM:SS, seconds)")
      ->transform(DurationFlag());
  submit->add_option("--gpu-model", sf.gpu_models, "allowed GPU models (repeatable)");
  submit->add_option("--cluster", sf.clusters, "allowed clusters (repeatable)");
  submit->add_option("--image", sf.image, "container image");
  submit->add_option("--type", sf.type, "training, inference, interactive or batch (default)");
  submit->add_option("--port", sf.ports,
                     "a port the task serves (a notebook): submit says how to reach it");
  submit->add_option("--selector", sf.selector, "node label KEY=VALUE it needs (repeatable)");
  submit->add_option("--toleration", sf.tolerations,
                     "node taint KEY or KEY=VALUE it may run on (repeatable)");
  submit->add_option("--env", sf.env, "environment variable KEY=VALUE (repeatable)");
  submit
      ->add_option("--grace-period", sf.grace_period,
                   "from the stop notice to SIGKILL (default 30s)")
      ->transform(DurationFlag());
  submit->add_option("--array", sf.array,
                     "a job array, as Slurm's: 0-15, 1,3,5-7, 0-999:2, with %N at most N at once");
  submit->add_option("--dependency", sf.dependency,
                     "as Slurm's: afterok:12:13,afterany:14 (afterok, afterany, afternotok, "
                     "aftercorr)");
  submit->add_option("command", sf.command, "the command, after --");
  // A repeatable flag takes one value each time: otherwise it would take the words that follow
  // it, and `--env A=1 -- sh -c X` would not reach its command.
  for (CLI::Option* o : submit->get_options()) {
    if (o->get_items_expected_max() > 1 && !o->get_positional()) o->allow_extra_args(false);
  }
  submit->callback([rc] { Run(g, rc, [](Context& c) { return meridian::cli::Submit(c, sf); }); });

  static std::string job_id;
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("job", job_id, "job id (an array: all its elements; ID_INDEX: one)")
      ->required();
  cancel->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::Cancel(c, job_id); }); });

  // Node operations, named as kubectl names them.
  static std::string node_name;
  CLI::App* cordon = app.add_subcommand("cordon", "Mark a node unschedulable (admins)");
  CLI::App* uncordon =
      app.add_subcommand("uncordon", "Make a node schedulable again, ending a drain (admins)");
  for (CLI::App* verb : {cordon, uncordon}) {
    verb->add_option("node", node_name, "node name")->required();
  }
  static int gpu_index = -1;
  uncordon->add_option("--gpu", gpu_index,
                       "uncordon only this GPU (cordoned for a fault), forgetting its faults");
  cordon->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::Cordon(c, node_name, true); }); });
  uncordon->callback([rc] {
    Run(g, rc, [](Context& c) {
      return gpu_index >= 0 ? meridian::cli::UncordonGpu(c, node_name, gpu_index)
                            : meridian::cli::Cordon(c, node_name, false);
    });
  });
  // Fault injection into simulated GPUs (dev estates, tests): the XID as NVML would report it.
  static int fault_xid = 0;
  static std::string fault_warning;
  CLI::App* fault = app.add_subcommand("fault", "Fault injection into simulated GPUs (admins)");
  CLI::App* inject =
      fault->add_subcommand("inject", "Make a simulated GPU report an XID, as NVML would");
  fault->require_subcommand(1);
  inject->add_option("node", node_name, "node name")->required();
  inject->add_option("--gpu", gpu_index, "the GPU's index on the node")->required();
  CLI::Option* xid_option =
      inject->add_option("--xid", fault_xid, "the XID to report (e.g. 13, 48, 74, 79)");
  CLI::Option* warning_option = inject->add_option(
      "--warning", fault_warning,
      "a warning before failure instead: ecc-corrected, temperature, power-cap, nvlink-crc, or "
      "clear (temperature and power back to normal)");
  xid_option->excludes(warning_option);
  inject->callback([rc, xid_option, warning_option] {
    if (xid_option->count() == 0 && warning_option->count() == 0) {
      std::fprintf(stderr, "fault inject: give --xid N or --warning KIND\n");
      *rc = 2;
      return;
    }
    Run(g, rc, [](Context& c) {
      return meridian::cli::InjectFault(c, node_name, gpu_index, fault_xid, fault_warning);
    });
  });
  static meridian::cli::DrainFlags df;
  static bool no_wait = false;
  CLI::App* drain = app.add_subcommand(
      "drain", "Cordon a node and requeue its jobs, stopped by a deadline (admins)");
  drain->add_option("node", node_name, "node name")->required();
  drain
      ->add_option("--timeout", df.timeout,
                   "how long its jobs have to stop (default: their longest grace period)")
      ->transform(DurationFlag());
  drain->add_option("--reason", df.reason, "why, for the events and the audit log");
  drain->add_flag("--no-wait", no_wait, "return once asked; do not wait until it is drained");
  drain->callback([rc] {
    df.wait = !no_wait;
    Run(g, rc, [](Context& c) { return meridian::cli::Drain(c, node_name, df); });
  });
  static meridian::cli::DeleteFlags delf;
  CLI::App* del = app.add_subcommand(
      "delete", "Delete a job (cancelling it), a node or a configuration object");
  del->add_option("resource", delf.resource, "job, node, cluster, nodepool, project, ...");
  del->add_option("name", delf.name, "its name (a job's id)");
  del->add_option("-f,--filename", delf.files,
                  "delete what the documents of a YAML file (or folder) name");
  del->add_flag("--force", delf.force, "a Lost node that jobs still hold: delete it anyway");
  del->callback([rc] { Run(g, rc, [](Context& c) { return meridian::cli::Delete(c, delf); }); });

  CLI::App* version = app.add_subcommand("version", "Print the client's and the server's version");
  version->callback([rc] {
    Run(g, rc, [](Context& c) { return meridian::cli::Version(c, meridian::base::Version()); });
  });

  static std::string shell;
  CLI::App* completion = app.add_subcommand(
      "completion", "Print a shell completion script: source <(meridian completion bash)");
  completion->add_option("shell", shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  CLI::App* root = &app;
  completion->callback([rc, root] {
    // What positional arguments take: the kinds of resource.
    const std::vector<std::string> kinds = {
        "jobs",         "nodes",         "events",         "alerts",
        "idle",         "clusters",      "nodepools",      "projects",
        "teams",        "organizations", "quotas",         "priorityclasses",
        "policies",     "alertrules",    "alertreceivers", "identityproviders",
        "idlepolicies", "budgets",       "datasets",       "users",
        "tokens"};
    const std::map<std::string, std::vector<std::string>> words = {
        {"meridian get", kinds}, {"meridian describe", kinds}, {"meridian delete", kinds}};
    std::fputs((shell == "zsh" ? ZshCompletion(root, words) : BashCompletion(root, words)).c_str(),
               stdout);
    *rc = 0;
  });

  static int log_task = 0;
  static bool follow = false;
  CLI::App* logs = app.add_subcommand("logs", "Print a job's output (a task's; -f to follow)");
  logs->add_option("job", job_id, "job id")->required();
  logs->add_option("--task", log_task, "task index (default 0)");
  logs->add_flag("-f,--follow", follow, "keep printing until the job ends");
  logs->callback([rc] {
    Run(g, rc, [](Context& c) { return meridian::cli::Logs(c, job_id, log_task, follow); });
  });

  static meridian::cli::ExecOptions exec_options;
  CLI::App* exec = app.add_subcommand(
      "exec", "Run a command inside a running job's task: meridian exec JOB [-it] -- CMD...");
  exec->add_option("job", exec_options.job, "job id (ID_INDEX for an array's element)")->required();
  exec->add_option("--task", exec_options.task, "task index (default 0)");
  exec->add_flag("-i,--stdin", exec_options.stdin, "send this input to the command");
  exec->add_flag("-t,--tty", exec_options.tty, "give the command a terminal");
  exec->add_option("command", exec_options.command, "what to run, after --");
  exec->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::Exec(c, exec_options); }); });

  static std::string forward_ports;
  static std::string forward_address = "127.0.0.1";
  static int forward_task = 0;
  CLI::App* forward = app.add_subcommand(
      "port-forward", "Reach a port of a running job's task from here: LOCAL:REMOTE");
  forward->add_option("job", job_id, "job id (ID_INDEX for an array's element)")->required();
  forward->add_option("ports", forward_ports, "LOCAL:REMOTE, or PORT for both, or :REMOTE")
      ->required();
  forward->add_option("--task", forward_task, "task index (default 0)");
  forward->add_option("--address", forward_address, "local address to listen on (127.0.0.1)");
  forward->callback([rc] {
    Run(g, rc, [](Context& c) {
      return meridian::cli::PortForward(c, job_id, forward_task, forward_ports, forward_address);
    });
  });

  CLI::App* top = app.add_subcommand("top", "The estate in one screen: GPUs and quotas");
  top->callback([rc] { Run(g, rc, [](Context& c) { return meridian::cli::Top(c); }); });

  static std::string scope;
  CLI::App* quota = app.add_subcommand("quota", "Quota guarantees, limits and use");
  quota->add_option("scope", scope, "an organization, team or project (default: all)");
  quota->callback([rc] { Run(g, rc, [](Context& c) { return meridian::cli::Quota(c, scope); }); });

  static meridian::cli::ConfigFlags cf;
  CLI::App* plan = app.add_subcommand("plan", "Show what applying the documents would change");
  CLI::App* apply = app.add_subcommand(
      "apply", "Create or update what the documents hold, atomically, as a new revision");
  for (CLI::App* verb : {plan, apply}) {
    verb->add_option("-f,--filename", cf.files, "a YAML file or a folder of them")->required();
    verb->add_flag("--prune", cf.prune,
                   "the files are the whole desired state: delete what they do not hold");
  }
  apply->add_option("-m,--message", cf.message, "what this revision is for");
  static std::string what_if;
  plan->add_option("--what-if", what_if,
                   "a replay trace (a folder with cluster.yaml and jobs.csv, as `meridian sim "
                   "export` writes): replay it under the live and the proposed documents and "
                   "print the difference per project");
  plan->callback([rc] {
    Run(g, rc, [](Context& c) {
      // -o json or yaml: one object, the plan's changes in it.
      const bool structured = c.output == "json" || c.output == "yaml";
      if (!what_if.empty() && structured) return RunWhatIf(c, cf, what_if);
      const int code = meridian::cli::Plan(c, cf);
      if (code != 0 || what_if.empty()) return code;
      return RunWhatIf(c, cf, what_if);
    });
  });
  apply->callback([rc] { Run(g, rc, [](Context& c) { return meridian::cli::Apply(c, cf); }); });
  static int64_t to = 0;
  CLI::App* rollback = app.add_subcommand("rollback", "Restore an earlier revision");
  rollback->add_option("--to", to, "revision number")->required();
  rollback->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::Rollback(c, to); }); });
  CLI::App* history = app.add_subcommand("history", "List configuration revisions");
  history->callback([rc] { Run(g, rc, [](Context& c) { return meridian::cli::History(c); }); });

  static meridian::cli::AuditFlags af;
  static std::string report_from, report_to;
  static meridian::cli::UsageReportFlags uf;
  CLI::App* report = app.add_subcommand("report", "Accounting reports");
  report->require_subcommand(1);
  CLI::App* usage = report->add_subcommand(
      "usage",
      "GPU-, CPU- and memory-hours and cost of the runs in a window (as sreport), by project, "
      "team, organization, user, cluster, pool or gpuModel; -o table, csv, json or yaml");
  usage->add_option("--from", report_from,
                    "start: Unix seconds, a UTC date (2026-11-30, 2026-11-30T08:00:00Z) or a "
                    "duration before now (7d); default: the first of --to's month (UTC)");
  usage->add_option("--to", report_to, "end, as --from; default: now");
  usage->add_option("--by", uf.by, "what to sum by (default: project)")
      ->check(CLI::IsMember(
          {"project", "team", "organization", "user", "cluster", "pool", "gpuModel"}));
  usage->callback([rc] {
    Run(g, rc, [](Context& c) {
      // Left out, each is the server's default: to now, from the first of to's month (UTC).
      if (!report_to.empty()) {
        auto to = ParseWhen("--to", report_to, c.now);
        if (!to.ok()) return Fail(to.status());
        uf.to = *to;
      }
      if (!report_from.empty()) {
        auto from = ParseWhen("--from", report_from, c.now);
        if (!from.ok()) return Fail(from.status());
        uf.from = *from;
      }
      return meridian::cli::ReportUsage(c, uf);
    });
  });

  CLI::App* audit = app.add_subcommand("audit", "Read the audit log (admins)");
  audit->add_option("--user", af.user, "entries of this user");
  audit->add_option("--result", af.result, "allowed, denied or failed");
  audit->add_option("--limit", af.limit, "at most this many");
  audit->callback([rc] { Run(g, rc, [](Context& c) { return meridian::cli::Audit(c, af); }); });

  static meridian::cli::TokenFlags tf;
  static std::string token_id;
  CLI::App* token = app.add_subcommand("token", "Create, list and revoke API tokens");
  token->require_subcommand(1);
  CLI::App* create = token->add_subcommand("create", "Create a token (printed once)");
  create->add_option("--user", tf.user, "for this user (admins; default: yourself)");
  create->add_option("--description", tf.description, "what it is for");
  create->add_option("--expires-in", tf.expires_in, "lifetime: 30d, 12h, 90m, seconds")
      ->transform(DurationFlag());
  create->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::TokenCreate(c, tf); }); });
  CLI::App* list = token->add_subcommand("list", "List tokens (yours; admins: any user's)");
  list->add_option("--user", tf.user, "this user's");
  list->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::TokenList(c, tf.user); }); });
  CLI::App* revoke = token->add_subcommand("revoke", "Revoke a token by id");
  revoke->add_option("id", token_id, "token id")->required();
  revoke->callback(
      [rc] { Run(g, rc, [](Context& c) { return meridian::cli::TokenRevoke(c, token_id); }); });
}
