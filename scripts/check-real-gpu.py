#!/usr/bin/env python3
"""Checks the agent's NVML path against a real NVIDIA GPU (issue 14's device check).

Starts a `meridian server` and a `meridian agent --gpu-discovery nvml` on loopback, waits for the
node's telemetry, and compares every GPU the server reports with what `nvidia-smi` says of it:
count, UUID, memory, MIG mode, health, and the live readings within tolerances. Prints one table
row per GPU and field, and exits 1 on a mismatch, 2 when there is no GPU to check.

Run from the repository root after `make build`, as root (the agent runs tasks as other uids):
    scripts/check-real-gpu.py [--binary build/meridian] [--seconds 60]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

# nvidia-smi's name for each reading, and how far the agent's sample (taken up to a heartbeat
# earlier) may be from it: (field of GET /api/v1/nodes, nvidia-smi query, tolerance, kind).
FIELDS = [
    ("uuid", "uuid", None, "exact"),
    ("memoryTotalMib", "memory.total", 0.01, "relative"),
    ("memoryUsedMib", "memory.used", 2048, "absolute"),
    ("temperatureC", "temperature.gpu", 5, "absolute"),
    ("powerW", "power.draw", 30, "absolute"),
    ("utilization", "utilization.gpu", 0.25, "fraction"),
    ("smClockMhz", "clocks.sm", 0.25, "relative"),
    ("mig", "mig.mode.current", None, "mig"),
]


def smi():
    """nvidia-smi's readings per GPU index."""
    query = ",".join(["index"] + [q for _, q, _, _ in FIELDS])
    out = subprocess.run(["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"],
                         check=True, capture_output=True, text=True).stdout
    gpus = {}
    for line in out.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        gpus[int(cells[0])] = dict(zip([q for _, q, _, _ in FIELDS], cells[1:]))
    return gpus


def number(text):
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def compare(field, kind, tolerance, ours, theirs):
    """(ok, how) for one reading."""
    if kind == "exact":
        return ours == theirs, ""
    if kind == "mig":
        enabled = theirs.lower() == "enabled"
        return bool(ours) == enabled, ""
    want = number(theirs)
    if want is None:
        return True, "nvidia-smi has no value"
    if ours is None:
        return False, "the agent reported none"
    got = float(ours)
    if kind == "fraction":  # ours is 0..1, nvidia-smi's percent
        want /= 100
        return abs(got - want) <= tolerance, f"±{tolerance}"
    if kind == "relative":
        return abs(got - want) <= tolerance * max(abs(want), 1), f"±{tolerance:.0%}"
    return abs(got - want) <= tolerance, f"±{tolerance:g}"


def get(url, token):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def wait_for(path, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        time.sleep(0.1)
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/meridian")
    parser.add_argument("--seconds", type=float, default=60,
                        help="how long to wait for the node's first telemetry")
    parser.add_argument("--agent-arg", action="append", default=[],
                        help="one more argument for the agent (e.g. --nvml-library=PATH)")
    args = parser.parse_args()
    if shutil.which("nvidia-smi") is None:
        print("check-real-gpu: no nvidia-smi here: this needs an NVIDIA GPU and its driver",
              file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="meridian-gpu-check-")
    os.chmod(work, 0o711)
    procs = []
    try:
        data = os.path.join(work, "data")
        port_file = os.path.join(work, "port")
        with open(os.path.join(work, "server.log"), "w") as log:
            procs.append(subprocess.Popen(
                [args.binary, "server", "--data-dir", data, "--listen", "127.0.0.1:0",
                 "--port-file", port_file], stdout=log, stderr=log))
        if not wait_for(port_file, 30) or not wait_for(os.path.join(data, "admin.token"), 30):
            print("check-real-gpu: the server did not start; see " + work + "/server.log",
                  file=sys.stderr)
            return 1
        url = "http://127.0.0.1:" + open(port_file).read().strip()
        admin = open(os.path.join(data, "admin.token")).read().strip()
        env = dict(os.environ, MERIDIAN_SERVER=url, MERIDIAN_TOKEN=admin,
                   MERIDIAN_CONFIG=os.path.join(work, "config.json"))
        estate = os.path.join(work, "estate.yaml")
        with open(estate, "w") as f:
            f.write("kind: Cluster\nmetadata: {name: check}\nspec: {type: on-prem}\n")
        subprocess.run([args.binary, "apply", "-f", estate], env=env, check=True)
        with open(os.path.join(work, "agent.log"), "w") as log:
            procs.append(subprocess.Popen(
                [args.binary, "agent", "--cluster", "check", "--node", "gpu-check",
                 "--gpu-discovery", "nvml", "--work-dir", os.path.join(work, "agent")]
                + args.agent_arg,
                env=env, stdout=log, stderr=log))
        node = None
        deadline = time.time() + args.seconds
        while time.time() < deadline:
            try:
                node = get(url + "/api/v1/nodes/gpu-check", admin)
                if node.get("gpus") and all("temperatureC" in g for g in node["gpus"]):
                    break
            except Exception:  # not registered yet
                pass
            time.sleep(1)
        if not node or not node.get("gpus"):
            print("check-real-gpu: the node registered no GPUs; see " + work + "/agent.log",
                  file=sys.stderr)
            return 1
        theirs = smi()
        failures = 0
        print(f"{'gpu':>3}  {'field':<16} {'agent':>40}  {'nvidia-smi':>40}  result")
        if len(node["gpus"]) != len(theirs):
            print(f"GPU count: agent {len(node['gpus'])}, nvidia-smi {len(theirs)}  MISMATCH")
            failures += 1
        for gpu in node["gpus"]:
            reference = theirs.get(gpu["index"])
            if reference is None:
                print(f"{gpu['index']:>3}  not in nvidia-smi  MISMATCH")
                failures += 1
                continue
            for field, query, tolerance, kind in FIELDS:
                ok, how = compare(field, kind, tolerance, gpu.get(field), reference[query])
                failures += not ok
                print(f"{gpu['index']:>3}  {field:<16} {str(gpu.get(field)):>40}  "
                      f"{reference[query]:>40}  {'ok' if ok else 'MISMATCH'} {how}")
            healthy = gpu.get("healthy", False)
            failures += not healthy
            print(f"{gpu['index']:>3}  {'healthy':<16} {str(healthy):>40}  {'':>40}  "
                  f"{'ok' if healthy else 'MISMATCH (a healthy GPU was expected)'}")
        print(f"check-real-gpu: {len(node['gpus'])} GPUs, {failures} mismatches "
              f"(logs in {work})")
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
