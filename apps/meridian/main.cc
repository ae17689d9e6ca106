// meridian: one binary, many subcommands. Each *_commands.cc file declares the flags of a group
// of subcommands and calls into the modules; nothing else lives in apps/.
#include <CLI/CLI.hpp>

#include "apps/meridian/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Meridian: one control plane for GPU clusters"};
  app.require_subcommand(1);
  int rc = 0;
  AddSimCommands(app, &rc);
  AddBenchCommands(app, &rc);
  AddServerCommands(app, &rc);
  AddClientCommands(app, &rc);
  AddAgentCommands(app, &rc);
  AddSlurmCommands(app, &rc);
  AddCloudCommands(app, &rc);
  AddStoreCommands(app, &rc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; any other bad command line 2, as the user guide says (CLI11
    // numbers its errors from 100).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return rc;
}
