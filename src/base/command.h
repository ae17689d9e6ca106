#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

// Running a helper program to its end: Slurm's commands, a cloud provisioner.
namespace meridian::base {

// What a process printed and how it ended.
struct CommandResult {
  int exit_code = 0;  // -1: killed by a signal or by the timeout
  std::string out;
  std::string err;
};

// Runs argv (searched in PATH) with `extra_env` added to this process's environment, `input` on
// its standard input, for at most `timeout` seconds. An error only when it could not be started
// or did not end in time; a non-zero exit is a result.
base::Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                       const std::map<std::string, std::string>& extra_env,
                                       const std::string& input, double timeout);
// The same with `env` as its whole environment: nothing of this process's (its credentials)
// reaches the command, nor what the command passes on (sbatch gives a job its environment).
base::Result<CommandResult> RunCommandWithOnly(const std::vector<std::string>& argv,
                                               const std::map<std::string, std::string>& env,
                                               const std::string& input, double timeout);

// Where `program` is: itself when it names a path, else the first folder of this process's PATH
// that holds it as an executable. Empty when it is not installed.
std::string FindProgram(const std::string& program);

}  // namespace meridian::base
