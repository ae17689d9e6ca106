#pragma once

#include <iostream>
#include <string>
#include <vector>

#include "cli/client.h"

namespace meridian::cli {

// What every verb gets: the client, the output format, where to print, and the time (for ages).
struct Context {
  explicit Context(Client c) : client(std::move(c)) {}
  Client client;
  std::string output = "table";  // table | wide | json | yaml
  std::ostream& out = std::cout;
  std::ostream& err = std::cerr;
  double now = 0;
  std::string config_path;
};

struct GetFlags {
  std::string project;   // jobs, events: one project (or a comma-separated list)
  std::string phase;     // jobs: Pending, Placed, ... (comma-separated)
  std::string user;      // jobs: one user's
  std::string job;       // events: one job's
  std::string selector;  // jobs, nodes: a label selector (-l team=nlp,tier!=batch)
  int limit = 100;
  // Jobs: every phase (without it, and without --phase, only the active ones: Pending, Placed,
  // Running, Stopping), every page.
  bool all = false;
  bool watch = false;     // jobs, nodes, events: after the list, a line per change until killed
  std::string array;      // jobs: the elements of this array (its id)
  bool elements = false;  // one job: an array's elements too
};

struct SubmitFlags {
  std::string file;  // a job YAML document; flags below are ignored when given
  std::string name = "job";
  std::string project;
  std::string priority_class;
  int tasks = 1;
  int gpus = 0;
  int gpu_milli = 0;
  std::string mig_profile;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  double runtime_estimate = 0;
  double runtime_limit = 0;
  std::vector<std::string> gpu_models;
  std::vector<std::string> clusters;
  std::string image;
  std::string type;                      // training, inference, interactive, batch
  std::vector<int> ports;                // ports the task serves (spec.ports)
  std::vector<std::string> selector;     // KEY=VALUE
  std::vector<std::string> tolerations;  // KEY or KEY=VALUE
  std::vector<std::string> env;          // KEY=VALUE
  double grace_period = -1;              // < 0: the spec's default
  std::vector<std::string> command;
  // Also with --file, where they replace the document's spec.array and spec.dependencies.
  std::string array;       // Slurm's --array: 0-999%50
  std::string dependency;  // Slurm's --dependency: afterok:12:13,afterany:14
};

// `report usage`: the window (Unix seconds; 0: the server's default) and what to sum by.
struct UsageReportFlags {
  double from = 0;
  double to = 0;
  std::string by = "project";
};
int ReportUsage(Context& c, const UsageReportFlags& f);

struct AuditFlags {
  std::string user;
  std::string result;
  int limit = 100;
};

// plan and apply: the documents, and whether they are the whole desired state.
struct ConfigFlags {
  std::vector<std::string> files;  // YAML files or folders of them
  std::string message;             // apply: what the revision is for
  // Without it, only what the files hold is created or updated and nothing is deleted; with
  // it, whatever the files lack is deleted too.
  bool prune = false;
};

struct TokenFlags {
  std::string user;
  std::string description;
  double expires_in = -1;  // seconds (the flag takes "30d", "12h", ...); < 0: the server's default
};

// drain: the stop deadline of the node's jobs, and whether to wait until it is drained.
struct DrainFlags {
  double timeout = -1;  // seconds; < 0: the longest grace period of its jobs (the server's)
  std::string reason;
  bool wait = true;
};

int Login(Context& c, bool save);

// login --sso: which of the server's identity providers (empty: its only one), and whether to
// keep the ID token in the configuration file.
struct SsoFlags {
  std::string provider;
  bool save = true;
};
// Signs in with the device authorization grant (RFC 8628): prints the URL and code to open,
// waits for the approval, checks the ID token with the server, and keeps it as the token.
int LoginSso(Context& c, const SsoFlags& f);
int Get(Context& c, const std::string& resource, const std::string& name, const GetFlags& f);
int Describe(Context& c, const std::string& resource, const std::string& name, const GetFlags& f);
int Submit(Context& c, const SubmitFlags& f);
int Cancel(Context& c, const std::string& id);
// A task's output; with `follow`, keeps printing until the job has ended.
int Logs(Context& c, const std::string& id, int task, bool follow);

// Sessions into a running task (sessions.cc; docs/adr/0029-sessions-into-tasks.md).
struct ExecOptions {
  std::string job;  // ID, or ID_INDEX
  int task = 0;
  bool stdin = false;  // -i: send this terminal's (or pipe's) input to the command
  bool tty = false;    // -t: the command gets a terminal; this one goes raw meanwhile
  std::vector<std::string> command;
};
// Runs the command in the task and exits with its exit code (128 + a signal's number), as
// kubectl exec does; the CLI's own codes when the session could not be opened.
int Exec(Context& c, const ExecOptions& o);
// Listens on `address`:LOCAL and carries each connection to REMOTE of the task (ports as
// "LOCAL:REMOTE", or "PORT" for both), until interrupted.
int PortForward(Context& c, const std::string& job, int task, const std::string& ports,
                const std::string& address);

// Whether `text` names a job (its id, or ID_INDEX for an array's element); says why not.
bool JobId(Context& c, const std::string& text);
// The API's path for a job named as JobId takes it, with `sub` (e.g. "/events") after the job:
// ID_INDEX is /api/v1/jobs/ID<sub>?index=INDEX.
std::string JobPath(const std::string& text, const std::string& sub = "");
int Top(Context& c);
int Quota(Context& c, const std::string& scope);
// The YAML files and folders of them that plan and apply send: [{name, content}], in the order
// given, a folder's files by name.
base::Result<Json> ReadFiles(const std::vector<std::string>& paths);
int Plan(Context& c, const ConfigFlags& f);
int Apply(Context& c, const ConfigFlags& f);
int Rollback(Context& c, int64_t to);
int History(Context& c);
int Audit(Context& c, const AuditFlags& f);
int TokenCreate(Context& c, const TokenFlags& f);
int TokenList(Context& c, const std::string& user);
int TokenRevoke(Context& c, const std::string& id);
// Node operations, as kubectl names them: cordon, uncordon, drain NAME, delete node NAME.
int Cordon(Context& c, const std::string& node, bool cordoned);
// A GPU cordoned for a fault back in service (its faults forgotten): uncordon NODE --gpu I.
int UncordonGpu(Context& c, const std::string& node, int gpu);
// Fault injection into a simulated GPU: fault inject NODE --gpu I --xid N.
// An XID, or (warning not empty) a warning before failure: ecc-corrected, temperature,
// power-cap, nvlink-crc, clear.
int InjectFault(Context& c, const std::string& node, int gpu, int xid, const std::string& warning);
int Drain(Context& c, const std::string& node, const DrainFlags& f);
// delete KIND NAME, or delete -f FILE (what its documents name).
struct DeleteFlags {
  std::string resource;            // job, node, or a configuration kind
  std::string name;                // a job's id; another's name
  std::vector<std::string> files;  // -f: YAML files or folders; each document's kind and name
  bool force = false;              // a Lost node that jobs still hold: delete it anyway
};
// Deletes a node, a configuration object, or (cancelling it, as `cancel` does) a job.
int Delete(Context& c, const DeleteFlags& f);
// The client's version, and the server's when it can be asked (GET /api/v1/version).
int Version(Context& c, const std::string& client_version);

}  // namespace meridian::cli
