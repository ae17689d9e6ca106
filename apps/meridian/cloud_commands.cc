// `meridian dev-cloud`: a FAKE cloud provisioner for tests and the dev estate
// (src/cloud/dev_cloud.h). Its instances are agents started on this machine.

#include <iostream>
#include <iterator>

#include "apps/meridian/commands.h"
#include "base/strings.h"
#include "cloud/dev_cloud.h"

namespace {

struct DevCloudFlags {
  meridian::cloud::DevCloudOptions o;
  std::vector<std::string> capacity;
  std::string verb;
};

int RunDevCloudCommand(DevCloudFlags& f) {
  using meridian::base::Status;
  for (const std::string& c : f.capacity) {
    const size_t eq = c.find('=');
    long long n = 0;
    if (eq == std::string::npos || eq == 0 || !meridian::base::ParseInt64(c.substr(eq + 1), &n) ||
        n < 0 || n > 1000000) {
      return Fail(Status::Invalid("--capacity " + c + ": expected POOL=N, N a whole number"));
    }
    f.o.capacity[c.substr(0, eq)] = static_cast<int>(n);
  }
  const std::string in((std::istreambuf_iterator<char>(std::cin)),
                       std::istreambuf_iterator<char>());
  std::string out, err;
  const int rc = meridian::cloud::RunDevCloud(f.o, f.verb, in, &out, &err);
  std::cerr << err << std::flush;
  std::cout << out << std::flush;
  return rc;
}

}  // namespace

void AddCloudCommands(CLI::App& app, int* rc) {
  static DevCloudFlags f;
  CLI::App* c = app.add_subcommand(
      "dev-cloud",
      "A FAKE cloud for tests and the dev estate: a provisioner program (create, delete, list, "
      "bill, interrupt; the request on stdin, the answer on stdout) whose instances are agents "
      "started on "
      "this machine");
  c->add_option("--state", f.o.state_dir,
                "folder of its instances, their logs and bills (created 0711: tasks run under uids "
                "of their own pass through)")
      ->required();
  c->add_option("--capacity", f.capacity,
                "POOL=N: at most N live instances in the pool (repeatable; default: unlimited)");
  c->add_flag("--never-boot", f.o.never_boot,
              "instances stay booting for ever and start no agent (a node that never registers)");
  c->add_option("--interrupt-rate", f.o.interrupt_rate,
                "spot interruptions per spot instance-hour, drawn at each list (default 0: only "
                "by the interrupt verb)")
      ->check(CLI::Range(0.0, 1e6));
  c->add_option("--interrupt-notice", f.o.interrupt_notice,
                "seconds of notice an interruption at the rate gives (default 120, as AWS; GCP "
                "gives 30)")
      ->check(CLI::Range(0.0, 3600.0));
  c->add_option("--seed", f.o.seed, "seed of the interruptions' draws (default 1)");
  c->add_option("--agent", f.o.agent, "the meridian binary its instances run (default: this one)");
  c->add_option("--agent-arg", f.o.agent_args,
                "an extra argument for every agent, one a flag: --agent-arg --task-uids "
                "--agent-arg off (repeatable)");
  c->add_option("verb", f.verb,
                "create, delete, list, bill, or interrupt (a spot interruption: "
                "{\"instances\": [ID], \"noticeSeconds\": N})")
      ->required()
      ->check(CLI::IsMember({"create", "delete", "list", "bill", "interrupt"}));
  // A repeatable flag takes one value each time: otherwise it would take the verb after it.
  for (CLI::Option* o : c->get_options()) {
    if (o->get_items_expected_max() > 1 && !o->get_positional()) o->allow_extra_args(false);
  }
  c->callback([rc] { *rc = RunDevCloudCommand(f); });
}
