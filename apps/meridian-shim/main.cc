// meridian-shim DIR: the supervisor of one task run, started by `meridian agent` (src/agent/
// shim.h). A binary of its own, next to `meridian`, so that each task run starts a small
// process rather than the whole CLI.
#include <cstdio>

#include "agent/shim.h"
#include "base/log.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: meridian-shim TASK_DIR (started by meridian agent)\n");
    return 2;
  }
  meridian::base::log::LogOptions log;
  log.program = "meridian-shim";
  meridian::base::log::Init(log);
  return meridian::agent::RunShim(argv[1]);
}
