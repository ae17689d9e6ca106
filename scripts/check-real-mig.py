#!/usr/bin/env python3
"""Checks MIG and MPS shares through `meridian agent` against a real NVIDIA GPU (issue 20).

Starts a `meridian server` and a `meridian agent --gpu-discovery nvml` on loopback (the Policy's
migReconfigureInterval 0, so that layouts change at once), then:
  1. submits a small and a large MIG job; while they run, compares the instances the agent made
     (the node's migInstances, the jobs' allocations, the UUID each task was given) with
     `nvidia-smi mig -lgi`, `nvidia-smi mig -lci` and `nvidia-smi -L`, and checks that each task
     sees its own instance's two capability nodes only (not mig/config);
  2. cancels them: their instances must be gone from `nvidia-smi mig -lgi`;
  3. submits a job that needs every GPU of the node: MIG mode must be off (`nvidia-smi`);
  4. submits two shares of one GPU (pool gpuSharing mps): an MPS control daemon must run for each
     job (each runs under a uid of its own, and a daemon serves one uid at a time), each task must
     have its thread percentage and pinned memory limit, and the jobs' GpuShared events must say
     "through MPS".
Prints one line per check and exits 1 on a mismatch, 2 when there is no GPU (or no MIG) here.

Run from the repository root after `make build`, as root:
    scripts/check-real-mig.py [--binary build/meridian]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

# A small and a large profile of each MIG-capable model of the catalogue.
PROFILES = {"A100-40GB": ("1g.5gb", "3g.20gb"), "A100-80GB": ("1g.10gb", "3g.40gb"),
            "H100-80GB": ("1g.10gb", "3g.40gb"), "H200-141GB": ("1g.18gb", "3g.71gb")}


def call(url, token, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def wait(what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.5)
    return None


def smi(*args):
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True).stdout


def open_minor(path):
    """The DeviceFileMinor of one of the driver's capability files; None when absent."""
    try:
        with open(path) as f:
            m = re.search(r"DeviceFileMinor:\s*(\d+)", f.read())
            return int(m.group(1)) if m else None
    except OSError:
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/meridian")
    args = parser.parse_args()
    if shutil.which("nvidia-smi") is None:
        print("check-real-mig: no nvidia-smi here: this needs an NVIDIA GPU", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="meridian-mig-check-")
    os.chmod(work, 0o711)
    procs, failures = [], 0

    def check(ok, what, detail=""):
        nonlocal failures
        failures += not ok
        print(f"{'ok      ' if ok else 'MISMATCH'} {what}" + (f": {detail}" if detail else ""))

    try:
        data, port_file = os.path.join(work, "data"), os.path.join(work, "port")
        with open(os.path.join(work, "server.log"), "w") as log:
            procs.append(subprocess.Popen(
                [args.binary, "server", "--data-dir", data, "--listen", "127.0.0.1:0",
                 "--port-file", port_file], stdout=log, stderr=log))
        if not wait(lambda: os.path.exists(os.path.join(data, "admin.token")), 30):
            print("check-real-mig: the server did not start; see " + work, file=sys.stderr)
            return 1
        url = "http://127.0.0.1:" + open(port_file).read().strip()
        admin = open(os.path.join(data, "admin.token")).read().strip()
        env = dict(os.environ, MERIDIAN_SERVER=url, MERIDIAN_TOKEN=admin,
                   MERIDIAN_CONFIG=os.path.join(work, "config.json"))
        estate = os.path.join(work, "estate.yaml")
        with open(estate, "w") as f:
            f.write("kind: Organization\nmetadata: {name: o}\n---\nkind: Team\nmetadata: {name: t}\n"
                    "spec: {organization: o}\n---\nkind: Project\nmetadata: {name: p}\n"
                    "spec: {team: t}\n---\nkind: Cluster\nmetadata: {name: check}\n"
                    "spec: {type: on-prem}\n---\nkind: NodePool\nmetadata: {name: gpus}\n"
                    "spec: {cluster: check, gpuSharing: mps}\n---\nkind: Policy\n"
                    "metadata: {name: default}\nspec: {migReconfigureInterval: 0}\n")
        subprocess.run([args.binary, "apply", "-f", estate], env=env, check=True)
        with open(os.path.join(work, "agent.log"), "w") as log:
            procs.append(subprocess.Popen(
                [args.binary, "agent", "--cluster", "check", "--pool", "gpus", "--node", "gpu",
                 "--gpu-discovery", "nvml", "--work-dir", os.path.join(work, "agent")],
                env=env, stdout=log, stderr=log))
        node = wait(lambda: (lambda n: n if n.get("gpus") else None)(
            call(url + "/api/v1/nodes/gpu", admin)) if os.path.exists(port_file) else None)
        if not node:
            print("check-real-mig: no GPUs registered; see " + work, file=sys.stderr)
            return 1
        model = node.get("model", "")
        if model not in PROFILES:
            print(f"check-real-mig: {model} has no MIG in the catalogue", file=sys.stderr)
            return 2

        def submit(spec):
            job = {"metadata": {"name": "check", "project": "p"}, "spec": spec}
            return call(url + "/api/v1/jobs", admin, "POST", job)["id"]

        def job(i):
            return call(url + f"/api/v1/jobs/{i}", admin)

        def logs(i):
            return subprocess.run([args.binary, "logs", str(i)], env=env, capture_output=True,
                                  text=True).stdout

        say = ["sh", "-c", "env | grep -E '^(CUDA|MERIDIAN_GPU)'; "
               "stat -c 'cap %n %t:%T' /dev/nvidia-caps/nvidia-cap* 2>/dev/null; sleep 30"]
        small, large = PROFILES[model]
        jobs = [submit({"migProfile": p, "command": say}) for p in (small, large)]
        check(wait(lambda: all(job(i)["status"]["phase"] == "Running" for i in jobs), 120),
              "MIG jobs running", " ".join(job(i)["status"].get("reason", "") for i in jobs))
        time.sleep(3)  # a heartbeat or two: the layout read back
        granted = set()
        for i in jobs:
            d = job(i)["status"]["allocation"][0]["devices"][0]
            granted.add((d["gpu"], d["mig"]["profile"], d["mig"]["start"]))
        lgi = smi("mig", "-lgi")
        listed = set()
        for m in re.finditer(r"\|\s+(\d+)\s+MIG\s+(\S+)\s+\d+\s+\d+\s+(\d+):(\d+)\s+\|", lgi):
            listed.add((int(m.group(1)), m.group(2), int(m.group(3))))
        check(granted <= listed, "granted instances are in nvidia-smi mig -lgi",
              f"granted {sorted(granted)}, listed {sorted(listed)}")
        node = call(url + "/api/v1/nodes/gpu", admin)
        reported = {(g["index"], *m.split("@")) for g in node["gpus"]
                    for m in g.get("migInstances", [])}
        reported = {(g, p, int(s)) for g, p, s in reported}
        check(reported == listed, "the agent's layout is nvidia-smi's",
              f"agent {sorted(reported)}, nvidia-smi {sorted(listed)}")
        lci = smi("mig", "-lci")
        check(lci.count("MIG") >= len(jobs), "a compute instance per GPU instance (-lci)")
        uuids = set(re.findall(r"UUID: (MIG-[0-9a-f-]+)", smi("-L")))
        for i in jobs:
            seen = wait(lambda: re.search(r"CUDA_VISIBLE_DEVICES=(\S+)", logs(i)), 20)
            given = seen.group(1) if seen else ""
            check(given in uuids, f"job {i}'s task was given a MIG device of nvidia-smi -L", given)
            # Its /dev/nvidia-caps holds its own instance's two capability nodes only: not
            # mig/config, not another job's.
            caps = dict(re.findall(r"cap (\S+) (\S+)", logs(i)))
            config = open_minor("/proc/driver/nvidia/capabilities/mig/config")
            check(len(caps) == 2, f"job {i}'s task sees two capability nodes (its GPU and compute "
                  "instance)", str(caps))
            if config is not None:
                check(f"/dev/nvidia-caps/nvidia-cap{config}" not in caps,
                      f"job {i}'s task cannot open mig/config", str(caps))
        for i in jobs:
            call(url + f"/api/v1/jobs/{i}/cancel", admin, "POST", {})
        wait(lambda: all(job(i)["status"]["phase"] == "Cancelled" for i in jobs), 60)
        time.sleep(3)
        left = smi("mig", "-lgi")
        gone = all(f"MIG {p}" not in left or not re.search(
            rf"\|\s+{g}\s+MIG\s+{re.escape(p)}\s+\d+\s+\d+\s+{s}:", left) for g, p, s in granted)
        check(gone, "their instances are destroyed when they end", left.strip()[-400:])
        # The whole node: every GPU leaves MIG mode.
        whole = submit({"gpus": len(node["gpus"]), "command": ["nvidia-smi", "-L"]})
        check(wait(lambda: job(whole)["status"]["phase"] == "Succeeded", 120),
              "a job of every GPU ran", job(whole)["status"].get("reason", ""))
        modes = smi("--query-gpu=mig.mode.current", "--format=csv,noheader").split()
        check(all(m == "Disabled" for m in modes), "MIG mode off for whole-GPU work", str(modes))
        # Two shares of one GPU under MPS.
        shares = [submit({"gpuMilli": 500, "gpuMemoryMib": 4096, "command": say}) for _ in range(2)]
        check(wait(lambda: all(job(i)["status"]["phase"] == "Running" for i in shares), 120),
              "two shares running")
        daemons = subprocess.run(["pgrep", "-f", "nvidia-cuda-mps-control"], capture_output=True,
                                 text=True).stdout.split()
        check(len(daemons) >= 2, "an MPS control daemon runs for each job", str(daemons))
        for i in shares:
            out = wait(lambda: logs(i) if "CUDA_MPS_PINNED" in logs(i) else None, 20) or ""
            check("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in out and
                  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M" in out,
                  f"job {i}'s share is set for MPS", out.strip()[-300:])
            events = call(url + f"/api/v1/jobs/{i}/events", admin).get("items", [])
            said = [e["message"] for e in events if e.get("reason") == "GpuShared"]
            check(any("through MPS" in m for m in said), f"job {i}'s GpuShared event", str(said))
        print(f"check-real-mig: {failures} mismatches (logs in {work})")
        return 1 if failures else 0
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
