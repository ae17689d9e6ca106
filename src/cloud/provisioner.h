#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

// The provisioner contract (docs/adr/0039-elastic-pools.md): how Meridian asks a program to
// create, delete and list the instances of an elastic node pool, as Slurm asks its
// ResumeProgram and SuspendProgram. The program is run once per request as
//
//   PROGRAM [ARGS...] create|delete|list
//
// with the request as one JSON object on its standard input and the answer as one JSON object on
// its standard output; exit status 0 when it did what was asked. A failure exits non-zero and
// may print {"error": {"code": C, "message": M}} on standard output, C one of "capacity" (the
// cloud has none of the shape now: try another pool), "quota" (the account's limit), "invalid"
// (the request) or "internal". Standard error goes to the server's log. Every verb is idempotent
// in what it leaves behind: deleting an instance that is gone succeeds.
//
// create  {"pool", "cluster", "region", "spot", "shape": {"gpus", "gpuModel", "cpuMilli",
//          "memoryMib"}, "bootSeconds", "pricePerHour", "nodes": [NAME...],
//          "join": {"server", "token"}}
//         -> {"instances": [INSTANCE...]}: one instance per name in `nodes`. Each instance boots
//         a Meridian agent that registers as that node, into that cluster and pool, with that
//         token (a credential of the agent role that expires: a bootstrap, not the node's own).
// delete  {"pool", "instances": [ID...]} -> {"deleted": [ID...]}
// list    {"pool"} -> {"instances": [INSTANCE...]}: every instance of the pool not deleted.
//
// INSTANCE: {"id", "node", "pool", "state": "booting" | "running", "createdAt" (Unix seconds),
//            "spot", and, for a spot instance the cloud is taking back, "interruptAt" (Unix
//            seconds: when it goes; AWS gives two minutes' notice, GCP thirty seconds)}
namespace meridian::cloud {

using Json = nlohmann::json;

struct InstanceShape {
  int32_t gpus = 0;
  std::string gpu_model;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

struct CreateRequest {
  std::string pool;
  std::string cluster;
  std::string region;
  bool spot = false;
  InstanceShape shape;
  double boot_seconds = 0;
  double price_per_hour = 0;       // one instance's
  std::vector<std::string> nodes;  // one instance per name; its agent registers under it
  std::string server;              // where the agents register
  std::string token;               // their bootstrap credential
};

struct Instance {
  std::string id;
  std::string node;
  std::string pool;
  std::string state;  // booting | running
  double created_at = 0;
  bool spot = false;
  double interrupt_at = 0;  // 0: not being taken back
};

Json ToJson(const CreateRequest& r);
base::Result<CreateRequest> CreateRequestOf(const Json& j);
Json ToJson(const Instance& i);
base::Result<Instance> InstanceOf(const Json& j);
// {"instances": [...]}; an error names the entry and field that is wrong.
base::Result<std::vector<Instance>> InstancesOf(const Json& answer);

// A failure a provisioner reported: kUnavailable for "capacity" and "quota" (another pool may
// have room), kInternal otherwise; the message starts with the code.
base::Status ErrorOf(const Json& answer, const std::string& fallback);

// One provisioner program, run once per request. Thread-compatible.
class Provisioner {
 public:
  // `argv`: the program and its leading arguments; the verb is appended.
  Provisioner(std::vector<std::string> argv, double timeout);

  base::Result<std::vector<Instance>> Create(const CreateRequest& request) const;
  base::Status Delete(const std::string& pool, const std::vector<std::string>& ids) const;
  base::Result<std::vector<Instance>> List(const std::string& pool) const;

  const std::vector<std::string>& argv() const { return argv_; }

 private:
  base::Result<Json> Run(const std::string& verb, const Json& request) const;

  std::vector<std::string> argv_;
  double timeout_;
};

}  // namespace meridian::cloud
