#!/usr/bin/env bash
# Queue order on deep queues (issue 18, item 3): every policy side by side over 5 seeds, with
# exact and with noisy runtime estimates, on generated traces with a production trace's
# properties: 80,000 jobs on 448 GPUs, lognormal durations (median 20 min, p90 3 h), gangs up to
# 128 GPUs, 15 tenants of very unequal use (Zipf 1.5), 30% of jobs in sweeps (queues thousands
# deep), load 0.9. Prints, per setting and policy, the mean over the seeds and [min-max] of: mean
# JCT, wait p99 (to first start), not-running p99 (JCT less the work done: every wait, those
# after preemptions too), Jain fairness, preemptions and the replay's wall time; writes each
# replay's JSON into OUT_DIR, and OUT_DIR/deep-queues.html, a chart of each policy's mean JCT
# over SJF's per seed.
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

# The same per seed as a chart: mean JCT of each policy over SJF's (FIFO, tens of times above,
# is left off the scale), one group of bars per seed, for each setting.
colours = {"sjf": "#888888", "las": "#e0a030", "meridian": "#2b6cb0"}
shown = ["sjf", "las", "meridian"]
charts = []
for noise in ["0", "1"]:
    ratios = []
    for seed in seeds:
        jct = {}
        for policy in shown:
            with open(f"{out}/noise{noise}-seed{seed}/{policy}.json") as f:
                jct[policy] = json.load(f)["policies"][0]["jct"]["mean"]
        ratios.append({p: jct[p] / jct["sjf"] for p in shown})
    top = max(1.5, max(max(r.values()) for r in ratios) * 1.05)
    w, h, left, bottom, group = 640, 260, 50, 30, (640 - 60) / len(seeds)
    bar = group / (len(shown) + 1)
    y = lambda v: 10 + (h - bottom - 10) * (1 - min(v, top) / top)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="11">']
    for tick in [0.5 * k for k in range(int(top / 0.5) + 1)]:
        svg.append(f'<line x1="{left}" x2="{w - 10}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                   f'stroke="{"#000" if tick == 1 else "#ddd"}"/>'
                   f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.1f}</text>')
    for i, (seed, r) in enumerate(zip(seeds, ratios)):
        x0 = left + i * group + bar / 2
        for k, policy in enumerate(shown):
            x = x0 + k * bar
            svg.append(f'<rect x="{x:.1f}" y="{y(r[policy]):.1f}" width="{bar - 2:.1f}" '
                       f'height="{y(0) - y(r[policy]):.1f}" fill="{colours[policy]}">'
                       f'<title>seed {seed}, {policy}: {r[policy]:.3f} of SJF</title></rect>')
        svg.append(f'<text x="{x0 + bar * len(shown) / 2:.1f}" y="{h - 12}" '
                   f'text-anchor="middle">seed {seed}</text>')
    svg.append("</svg>")
    title = "exact estimates" if noise == "0" else "estimates off by a lognormal factor, sigma 1"
    charts.append(f"<h2>{title}</h2>" + "".join(svg))
legend = " ".join(f'<span style="color:{colours[p]}">&#9632; {p}</span>' for p in shown)
with open(f"{out}/deep-queues.html", "w") as f:
    f.write("<!doctype html><meta charset=utf-8><title>Deep queues</title>"
            "<body style='font-family:sans-serif'><h1>Mean JCT over SJF's, per seed</h1>"
            f"<p>{legend} (FIFO is tens of times above and left off; lower is better)</p>" +
            "".join(charts) + "</body>")
print(f"\nchart: {out}/deep-queues.html")
PY
