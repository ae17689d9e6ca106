#pragma once

// The groups of subcommands of the `meridian` binary. Each registers its subcommands on `app`;
// the one that runs stores its exit code in *rc.

#include <CLI/CLI.hpp>
#include <atomic>

#include "base/status.h"
#include "cli/client.h"
#include "cli/verbs.h"

void AddSimCommands(CLI::App& app, int* rc);
void AddBenchCommands(CLI::App& app, int* rc);
void AddServerCommands(CLI::App& app, int* rc);
void AddClientCommands(CLI::App& app, int* rc);
void AddAgentCommands(CLI::App& app, int* rc);
void AddSlurmCommands(CLI::App& app, int* rc);
// `meridian dev-cloud`: a FAKE cloud provisioner for tests and the dev estate.
void AddCloudCommands(CLI::App& app, int* rc);
void AddStoreCommands(CLI::App& app, int* rc);

// `meridian sim export` (a live server's history as a replay trace), added to `sim`.
void AddSimExport(CLI::App* sim, int* rc);
// `meridian plan --what-if TRACE`: the trace replayed under the live documents and under the
// live ones changed by the plan's files, per project side by side (src/sim/history.h).
int RunWhatIf(meridian::cli::Context& c, const meridian::cli::ConfigFlags& f,
              const std::string& trace_dir);

// A moment given on the command line: Unix seconds, a UTC date (2026-11-30 or
// 2026-11-30T08:00:00Z), or a duration (7d, 36h) meaning that long before `now`. An error names
// `flag`.
meridian::base::Result<double> ParseWhen(const std::string& flag, const std::string& text,
                                         double now);

// The server and token from the global flags, the environment and the client's config file.
meridian::base::Result<meridian::cli::ClientConfig> GlobalClientConfig();
// The same, with the token read from `token_file` when one is named (agents, connectors).
meridian::base::Result<meridian::cli::ClientConfig> RunnerClientConfig(
    const std::string& token_file);

// SIGINT and SIGTERM set `stop` (a thread waits for them; the process blocks them); SIGPIPE is
// ignored. For the long-running loops: agents, connectors.
void StopOnSignals(std::atomic<bool>* stop);

// Prints "meridian: <message>" to stderr; returns 2 for invalid input, 1 otherwise.
int Fail(const meridian::base::Status& s);

// Turns a duration flag's text ("90s", "1h30m", "01:30:00", seconds: base/duration.h) into its
// seconds before CLI11 stores it; bad text fails the parse with "--flag: ... (use ...)", exit 2.
CLI::Validator DurationFlag();

// --log-level and --log-format of the long-running commands (server, agent).
struct LogFlags {
  std::string level = "info";
  std::string format = "text";
};
void AddLogFlags(CLI::App* command, LogFlags* flags);
// Sends this process's log lines (base/log.h) to stderr as the flags say, as `program`.
void InitLog(const LogFlags& flags, const std::string& program);
