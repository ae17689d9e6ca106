#!/usr/bin/env bash
# Dispatch from Meridian's queue into a real Slurm cluster, beside sbatch's own rate on the same
# cluster (issue 15, "Measure"). Starts, under a temporary folder, munged, slurmctld and four
# slurmd (256 CPUs and 8 fake GPUs each), a meridian server and a meridian slurm-connector, then:
#   1. sbatch's rate: N trivial jobs from one client, then from 16 at once;
#   2. Meridian's: an array of N trivial jobs submitted at once; dispatch rate from the first
#      placement to the last start, and per job the delay from placement (Meridian's decision)
#      to Started (the connector saw it RUNNING in Slurm, or already done), p50 and p99;
#   3. the connector's cost with IN_FLIGHT Slurm jobs running at once: its CPU over 20 s, and
#      what one squeue (as the connector reads it, and with --json) takes then.
# Needs root (munged, slurmd, fake device nodes) and Slurm (scripts/install-deps.sh).
# Usage: MERIDIAN=build/meridian scripts/slurm-dispatch-bench.sh [N] [IN_FLIGHT]
set -euo pipefail
MERIDIAN=$(realpath "${MERIDIAN:-build/meridian}")
N=${1:-500}
IN_FLIGHT=${2:-1000}
D=$(mktemp -d /tmp/meridian-slurm-bench-XXXXXX)
chmod 711 "$D"
S=$D/slurm
mkdir -p "$S"/{etc,state,log,run,dev,spool/n1,spool/n2,spool/n3,spool/n4} "$S"/munge/{key,run}
chmod 700 "$S/munge/key"
chmod 755 "$S" "$S/munge" "$S/munge/run"
pids=()
cleanup() {
  # Jobs first, while the daemons run: a slurmd stopped before its jobs leaves them behind.
  scancel --user=root 2>/dev/null || true
  for _ in $(seq 150); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 2
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

for i in 0 1 2 3 4 5 6 7; do mknod -m 666 "$S/dev/nvidia$i" c 1 3; done
mungekey --create --keyfile="$S/munge/key/munge.key" 2>/dev/null
munged -F --socket="$S/munge/run/munge.socket" --key-file="$S/munge/key/munge.key" \
  --log-file="$S/munge/key/munged.log" --pid-file="$S/munge/run/munged.pid" \
  --seed-file="$S/munge/key/munged.seed" > "$S/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$S/munge/run/munge.socket" ] && break; sleep 0.05; done
H=$(hostname -s)
{
  echo "ClusterName=bench"; echo "SlurmctldHost=$H(127.0.0.1)"; echo "SlurmctldPort=$(port)"
  echo "SlurmUser=root"; echo "SlurmdUser=root"; echo "AuthType=auth/munge"; echo "CredType=cred/munge"
  echo "AuthInfo=socket=$S/munge/run/munge.socket"; echo "StateSaveLocation=$S/state"
  echo "SlurmdSpoolDir=$S/spool/%n"; echo "SlurmctldPidFile=$S/run/slurmctld.pid"
  echo "SlurmdPidFile=$S/run/slurmd-%n.pid"; echo "SlurmctldLogFile=$S/log/slurmctld.log"
  echo "SlurmdLogFile=$S/log/slurmd-%n.log"; echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"; echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"; echo "JobCompType=jobcomp/none"
  echo "SchedulerType=sched/backfill"
  echo "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000"
  echo "SelectType=select/cons_tres"; echo "SelectTypeParameters=CR_Core"
  echo "SlurmdParameters=config_overrides"; echo "GresTypes=gpu"; echo "ReturnToService=2"
  echo "MpiDefault=none"; echo "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"
  echo "MaxJobCount=100000"; echo "MinJobAge=600"; echo "SlurmdTimeout=120"; echo "KillWait=2"
  for i in 1 2 3 4; do
    echo "NodeName=n$i NodeHostname=$H NodeAddr=127.0.0.1 Port=$(port) CPUs=256 RealMemory=512000 Gres=gpu:h100:8 State=UNKNOWN"
  done
  echo "PartitionName=gpu Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} > "$S/etc/slurm.conf"
echo "AutoDetect=off
NodeName=n[1-4] Name=gpu Type=h100 File=$S/dev/nvidia[0-7]" > "$S/etc/gres.conf"
export SLURM_CONF=$S/etc/slurm.conf
slurmctld -D -c -i > "$S/log/slurmctld.out" 2>&1 &
pids+=($!)
for _ in $(seq 200); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.05; done
for i in 1 2 3 4; do slurmd -D -N "n$i" > "$S/log/slurmd-n$i.out" 2>&1 & pids+=($!); done
for _ in $(seq 600); do [ "$(sinfo -h -N -t idle -o %N | wc -l)" -ge 4 ] && break; sleep 0.05; done
echo "Slurm: $(sinfo -h -N -t idle -o %N | wc -l) nodes idle (256 CPUs, 8 GPUs each)"

echo; echo "== 1. sbatch on its own: $N trivial jobs"
# Submitted, and started: the first sbatch to the moment none is pending (a job Slurm has taken
# is not yet one it has started, and on a busy cluster starting is the slower).
started_by() {
  for _ in $(seq 6000); do [ "$(squeue -h -t pending | wc -l)" = 0 ] && break; sleep 0.1; done
  now
}
t0=$(now)
for _ in $(seq "$N"); do sbatch -Q --wrap true -o /dev/null; done
t1=$(now); t2=$(started_by)
echo "one client:  $(python3 -c "print(f'submitted {$N/($t1-$t0):.0f} jobs/s, started {$N/($t2-$t0):.0f} jobs/s')")"
for _ in $(seq 600); do [ "$(squeue -h -t pending,running | wc -l)" = 0 ] && break; sleep 0.1; done
t0=$(now)
seq "$N" | xargs -P 16 -I{} sbatch -Q --wrap true -o /dev/null
t1=$(now); t2=$(started_by)
echo "16 clients:  $(python3 -c "print(f'submitted {$N/($t1-$t0):.0f} jobs/s, started {$N/($t2-$t0):.0f} jobs/s')")"
for _ in $(seq 600); do [ "$(squeue -h -t pending,running | wc -l)" = 0 ] && break; sleep 0.1; done

echo; echo "== 2. Meridian: an array of $N trivial jobs placed on Slurm"
DATA=$D/data
"$MERIDIAN" server --data-dir "$DATA" --listen 127.0.0.1:0 --port-file "$D/port" > "$D/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ -s "$D/port" ] && break; sleep 0.05; done
export MERIDIAN_SERVER=http://127.0.0.1:$(cat "$D/port") MERIDIAN_CONFIG=/nonexistent
export MERIDIAN_TOKEN=$(cat "$DATA/admin.token")
cat > "$D/estate.yaml" <<YAML
kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: hpc}
spec: {type: on-prem, region: eu-west, backend: slurm}
YAML
"$MERIDIAN" apply -f "$D/estate.yaml" > /dev/null
curl -sf -X PUT -H "Authorization: Bearer $MERIDIAN_TOKEN" "$MERIDIAN_SERVER/api/v1/users/agents" \
  -d '{"spec":{"roles":[{"role":"agent"}]}}' > /dev/null
curl -sf -X POST -H "Authorization: Bearer $MERIDIAN_TOKEN" "$MERIDIAN_SERVER/api/v1/tokens" \
  -d '{"user":"agents","description":"bench"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' > "$D/agent.token"
"$MERIDIAN" slurm-connector --cluster hpc --work-dir "$D/connector" --token-file "$D/agent.token" \
  > "$D/connector.log" 2>&1 &
CONNECTOR=$!
pids+=($CONNECTOR)
for _ in $(seq 200); do [ "$("$MERIDIAN" get nodes 2>/dev/null | grep -c ' hpc ')" = 4 ] && break; sleep 0.1; done

# Submits an array of $2 elements from $1 (a job document) and, once $3 of them have started,
# prints the dispatch rate and the delay from each placement to its start, from the events.
submit_and_measure() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, os, sys, time, urllib.request
doc, n, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
url, token = os.environ["MERIDIAN_SERVER"], os.environ["MERIDIAN_TOKEN"]
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
since = call("GET", "/api/v1/events?continue=latest&limit=1").get("continue", 0)
call("POST", "/api/v1/jobs", json.load(open(doc)))
placed, started = {}, {}
cursor, deadline = since, time.time() + 600
while len(started) < want and time.time() < deadline:
    page = call("GET", f"/api/v1/events?continue={cursor}&limit=1000&objectKind=Job")
    for e in page.get("items", []):
        if e["reason"] == "Placed": placed.setdefault(e["object"], e["at"])
        # Started: the connector saw it running in Slurm; a trivial job may be seen done first.
        # Only jobs placed since the submission: an earlier array's ends are not this one's starts.
        if e["reason"] in ("Started", "Succeeded", "Failed") and e["object"] in placed:
            started.setdefault(e["object"], e["at"])
    cursor = page.get("continue", cursor)
    if len(page.get("items", [])) < 1000: time.sleep(0.2)
d = sorted(started[j] - placed[j] for j in started if j in placed)
span = max(started.values()) - min(placed.values())
print(f"started {len(started)} of {n}; dispatch {len(started)/span:.0f} jobs/s "
      f"(first placement to last start {span:.1f} s)")
print(f"placement -> Started: p50 {d[len(d)//2]*1000:.0f} ms, p99 {d[min(len(d)-1, int(len(d)*0.99))]*1000:.0f} ms")
PY
}
python3 -c "import json; print(json.dumps({'metadata': {'name': 'trivial', 'project': 'research'}, 'spec': {'command': ['true'], 'cpuMilli': 1000, 'memoryMib': 100, 'array': '0-$((N - 1))'}}))" > "$D/array.json"
submit_and_measure "$D/array.json" "$N" "$N"
# A run that ended by itself and was reported so must not be "fenced" before Slurm shows its end.
echo "runs fenced: $(grep -c 'fenced Slurm job' "$D/connector.log" || true)"

echo; echo "== 3. the connector with $IN_FLIGHT Slurm jobs running"
python3 -c "import json; print(json.dumps({'metadata': {'name': 'long', 'project': 'research'}, 'spec': {'command': ['sleep', '600'], 'cpuMilli': 1000, 'memoryMib': 100, 'array': '0-$((IN_FLIGHT - 1))'}}))" > "$D/long.json"
submit_and_measure "$D/long.json" "$IN_FLIGHT" "$IN_FLIGHT"
echo "running in Slurm: $(squeue -h -t running | wc -l)"
ticks() { awk '{print $14 + $15}' "/proc/$CONNECTOR/stat"; }
a=$(ticks); sleep 20; b=$(ticks)
echo "connector CPU: $(python3 -c "print(f'{($b-$a)/$(getconf CLK_TCK)/20*100:.1f}% of one core')")"
# What every round of the connector reads (slurm_cli.cc, kSqueueFields), beside --json.
FIELDS='JobID:|,State:|,Reason:|,exit_code:|,Partition:|,UserName:|,NodeList:|,Name:'
for _ in 1 2 3; do
  t0=$(now); squeue --noheader --states=all --Format "$FIELDS" > /dev/null; t1=$(now)
  squeue --json > /dev/null; t2=$(now)
  echo "one squeue as the connector reads it: $(python3 -c "print(f'{($t1-$t0)*1000:.0f} ms; --json {($t2-$t1)*1000:.0f} ms')")"
done
echo "connector RSS: $(awk '/VmRSS/ {print $2/1024 " MiB"}' /proc/$CONNECTOR/status)"
