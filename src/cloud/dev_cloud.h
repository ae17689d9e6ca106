#pragma once

#include <map>
#include <string>
#include <vector>

// dev-cloud: a FAKE cloud, for tests and the dev estate. It speaks the provisioner contract
// (provisioner.h) and "creates" an instance by starting a Meridian agent on this machine, as a
// daemon in its own session, after the instance's boot time; deleting the instance stops that
// agent. Nothing here talks to a real cloud: it stands in for one where none can run (see
// DESIGN.md, "Real components in tests").
//
// Its state (instances, live and deleted, for the bill) is one JSON file in `state_dir`, read and
// written under an exclusive lock on a lock file and replaced atomically, so that concurrent
// invocations (the server's create, list and delete, or several processes) are safe.
namespace meridian::cloud {

struct DevCloudOptions {
  std::string state_dir;  // its instances and bills live here (created 0711: tasks under uids of
                          // their own pass through)
  std::map<std::string, int> capacity;  // pool -> most live instances; absent: unlimited
  // Instances stay "booting" for ever and no agent starts: an instance that never registers.
  bool never_boot = false;
  // The meridian binary its instances run (empty: this process's executable).
  std::string agent;
  std::vector<std::string> agent_args;  // extra arguments for every agent (e.g. --heartbeat ..)
  // Spot interruptions at a rate, as a cloud takes spot capacity back: each live spot instance
  // is interrupted with this probability per hour (a Poisson process, drawn at every list for
  // the time since the last), given `interrupt_notice` seconds' notice (AWS gives 120, GCP 30).
  // 0: only when asked (`interrupt`). Draws are seeded by `seed`, the instance and the time.
  double interrupt_rate = 0;
  double interrupt_notice = 120;
  uint64_t seed = 1;
};

// Runs one verb of the contract, `in` the request's JSON text, the answer's JSON text in *out:
//
//   create, delete, list  as in provisioner.h; list's instances also carry "processAlive": false
//                         when the agent is gone (it crashed: the instance is still listed, as a
//                         cloud keeps a VM whose agent died; it is "booting" until it is deleted).
//                         With an interrupt_rate, list first draws the spot interruptions due.
//   bill  {"pool"?} -> {"instances": [{"id", "node", "pool", "spot", "pricePerHour", "seconds",
//                      "cost"}], "total"}: per-second billing of every instance, deleted ones
//                      included, from its creation to its deletion (or now).
//
// Returns the exit status: 0 done; 1 failed, with {"error": {"code", "message"}} in *out;
// 2 bad input (an unknown verb, a request that is not valid), with the same error object.
// *err receives progress and error lines for the caller's log. Agents started by create outlive
// the call (and the calling process); a call may be made from any process, at any time.
int RunDevCloud(const DevCloudOptions& o, const std::string& verb, const std::string& in,
                std::string* out, std::string* err);

}  // namespace meridian::cloud
