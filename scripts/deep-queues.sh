#!/usr/bin/env bash
# Queue order on deep queues (issue 18, item 3): every policy side by side over 5 seeds, with
# exact and with noisy runtime estimates, on generated traces with a production trace's
# properties: 80,000 jobs on 448 GPUs, lognormal durations (median 20 min, p90 3 h), gangs up to
# 128 GPUs, 15 tenants of very unequal use (Zipf 1.5), 30% of jobs in sweeps (queues thousands
# deep), load 0.9. Prints, per setting and policy, the mean over the seeds and [min-max] of: mean
# JCT, wait p99 (to first start), not-running p99 (JCT less duration: every wait, those after
# preemptions too), Jain fairness, preemptions and the replay's wall time; writes each replay's
# JSON into OUT_DIR.
# Usage: scripts/deep-queues.sh [OUT_DIR] [SEEDS] [JOBS]
set -euo pipefail
out=${1:-deep-queues}
seeds=${2:-1 2 3 4 5}
jobs=${3:-80000}
bin=${MERIDIAN:-./build/meridian}
mkdir -p "$out"
for noise in 0 1; do
  for seed in $seeds; do
    dir="$out/noise$noise-seed$seed"
    "$bin" sim generate --jobs "$jobs" --gpus 448 --load 0.9 --seed "$seed" --shape deep \
      --tenants 15 --tenant-skew 1.5 --sweep-share 0.3 --estimate-noise "$noise" \
      --out "$dir" >/dev/null
    # One policy at a time: each replay's wall time is its own, on one core.
    for policy in fifo sjf las meridian; do
      "$bin" sim replay --cluster "$dir/cluster.yaml" --jobs "$dir/jobs.csv" --policy "$policy" \
        --json >"$dir/$policy.json"
      echo "noise $noise, seed $seed, $policy: done" >&2
    done
  done
done
python3 - "$out" $seeds <<'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2:]
policies = ["fifo", "sjf", "las", "meridian"]
metrics = [("JCT mean (s)", lambda p: p["jct"]["mean"], "{:.0f}"),
           ("wait p99 (s)", lambda p: p["queueing_delay"]["p99"], "{:.0f}"),
           ("not running p99 (s)", lambda p: p["not_running"]["p99"], "{:.0f}"),
           ("Jain fairness", lambda p: p["jain_fairness"], "{:.3f}"),
           ("preemptions", lambda p: p["preemptions"], "{:.0f}"),
           ("never started", lambda p: p["never_started"], "{:.0f}"),
           ("replay wall (s)", lambda p: p["wall_seconds"], "{:.1f}")]
for noise in ["0", "1"]:
    print(f"\nestimates {'exact' if noise == '0' else 'off by a lognormal factor, sigma 1'}"
          f" ({len(seeds)} seeds: mean [min-max])")
    print(f"{'':<20}" + "".join(f"{p:>27}" for p in policies))
    for name, get, fmt in metrics:
        row = f"{name:<20}"
        for policy in policies:
            vals = []
            for seed in seeds:
                with open(f"{out}/noise{noise}-seed{seed}/{policy}.json") as f:
                    vals.append(get(json.load(f)["policies"][0]))
            cell = (fmt.format(sum(vals) / len(vals)) + " [" + fmt.format(min(vals)) + "-" +
                    fmt.format(max(vals)) + "]")
            row += f"{cell:>27}"
        print(row)
PY
