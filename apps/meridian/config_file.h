#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"

// `--config FILE` of the long-running commands (server, agent): a YAML file with one section per
// command, whose keys are the command's flags without their dashes (and, for the agent, the
// global --server), e.g.
//
//   server:
//     data-dir: /var/lib/meridian
//     listen: 0.0.0.0:8443
//   agent:
//     server: https://meridian.example:8443
//     cluster: onprem
//
// A flag given on the command line wins over the file. Values go through the flags' own checks.
// A key that names no flag, a value of the wrong shape, or YAML that does not parse is an error
// naming FILE:LINE and the key.

// Adds --config to `command`; the file's path is kept in *path.
void AddConfigFlag(CLI::App* command, std::string* path);

// Applies the section of `path` named after `command` (none when `path` is empty) to the flags
// of `command` and of its parent that the command line left unset. Call it first thing in the
// command's callback, before the flags' variables are read.
meridian::base::Status ApplyConfigFile(CLI::App* command, const std::string& path);
