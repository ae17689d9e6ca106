#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

// Shell completion scripts generated from the CLI11 app itself (its subcommands, their options,
// and the choices of options checked with CLI::IsMember), so that they never drift from the
// flags. `words` adds what a positional argument takes, by command path ("meridian get": the
// resource kinds). CLI11 has no generator of its own.
std::string BashCompletion(CLI::App* app,
                           const std::map<std::string, std::vector<std::string>>& words);
// zsh runs the bash function through bashcompinit, as many CLIs' zsh scripts do.
std::string ZshCompletion(CLI::App* app,
                          const std::map<std::string, std::vector<std::string>>& words);
