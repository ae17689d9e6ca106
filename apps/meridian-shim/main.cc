// meridian-shim DIR: the supervisor of one task run, started by `meridian agent` (src/agent/
// shim.h). A binary of its own, next to `meridian`, so that each task run starts a small
// process rather than the whole CLI.
#include <cstdio>
#include <string>

#include "agent/shim.h"
#include "base/log.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: meridian-shim TASK_DIR | meridian-shim --exec (started by meridian "
                 "agent)\n");
    return 2;
  }
  meridian::base::log::LogOptions log;
  log.program = "meridian-shim";
  meridian::base::log::Init(log);
  if (std::string(argv[1]) == "--exec") return meridian::agent::RunExecShim();
  return meridian::agent::RunShim(argv[1]);
}
