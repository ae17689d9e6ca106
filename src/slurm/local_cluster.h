#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace meridian::slurm {

// A real Slurm cluster on this machine, configured and started under one folder: munged with a
// key of its own, slurmctld, and one slurmd per logical node (`slurmd -N`), all on loopback, with
// fake GPUs (character devices 1:3, what /dev/null is) and no accounting database. What
// `meridian server --dev` adds beside its agents, and what the Slurm tests run against. Slurm's
// commands find it through SLURM_CONF (conf()). Needs root (slurmd runs jobs as their users) and
// Debian's slurm-wlm and munge.
class LocalCluster {
 public:
  // `nodes` nodes n1..nN of `gpus` GPUs of GRES type `gpu_type`, 16 CPUs and 64,000 MiB each, in
  // one partition `gpu`, under `dir` (made absolute; the caller makes it, private to this user).
  LocalCluster(std::string dir, int nodes, int gpus, std::string gpu_type = "h100");
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;
  ~LocalCluster() { Stop(); }

  // Whether Slurm's daemons and munge are installed and this process may run them (root).
  static bool Runnable();

  // Starts munged, slurmctld and the slurmd, and waits until every node is idle (seconds).
  base::Status Start();
  void KillController();  // SIGKILL, as a crash
  // Starts slurmctld again from its saved state and waits until it answers.
  base::Status RestartController() { return StartController(/*clear=*/false); }
  // Cancels every job (while the daemons still run: a slurmd stopped first leaves its jobs'
  // processes running), stops the daemons, and kills what still runs with this SLURM_CONF.
  void Stop();

  std::string conf() const { return dir_ + "/etc/slurm.conf"; }
  // Kills whatever still runs with this cluster's SLURM_CONF in its environment (slurmstepd and
  // the tasks under it inherit it), started by this object or not.
  void KillLeftovers() const;
  int IdleNodes() const;
  // A Slurm command against this cluster, its output (standard output and error); empty when it
  // could not be run.
  std::string Command(const std::vector<std::string>& argv) const;

 private:
  base::Status StartController(bool clear);
  // One daemon in the foreground, its output appended to `log`, SLURM_CONF `conf` in its
  // environment (and so in its jobs'); started from the main thread, it dies with this process.
  struct Daemon {
    pid_t pid = -1;
    void Start(std::vector<std::string> args, const std::string& log, const std::string& conf);
    bool Running();  // and forgets the PID of one that has ended
    // `sig`, then SIGKILL after 10 s (a slurmd whose controller is gone may ignore SIGTERM).
    void Stop(int sig);
  };
  base::Status WriteConfiguration();

  std::string dir_;
  int nodes_, gpus_;
  std::string gpu_type_;
  std::string munge_socket_;
  Daemon munge_, controller_;
  std::vector<Daemon> slurmd_;
  bool started_ = false;
};

}  // namespace meridian::slurm
