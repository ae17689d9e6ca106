#pragma once

// The groups of subcommands of the `meridian` binary. Each registers its subcommands on `app`;
// the one that runs stores its exit code in *rc.

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "cli/client.h"

void AddSimCommands(CLI::App& app, int* rc);
void AddBenchCommands(CLI::App& app, int* rc);
void AddServerCommands(CLI::App& app, int* rc);
void AddClientCommands(CLI::App& app, int* rc);
void AddAgentCommands(CLI::App& app, int* rc);

// The server and token from the global flags, the environment and the client's config file.
meridian::base::Result<meridian::cli::ClientConfig> GlobalClientConfig();

// Prints "meridian: <message>" to stderr; returns 2 for invalid input, 1 otherwise.
int Fail(const meridian::base::Status& s);
