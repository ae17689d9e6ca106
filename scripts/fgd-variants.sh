#!/usr/bin/env bash
# Does the placement generalise? Runs the FGD protocol (10 seeds, inflate 1.3) for `meridian`
# and `fgd`:
#   1. on every workload with published results, with the margin over the published FGD curve;
#   2. on generated variants of the default list (model-constrained, multi-GPU, fractional and
#      CPU-only shares moved, each drawn with two variant seeds), with the margin over our fgd.
# Prints one line per workload: allocation at 100% and 130% arrived, and the lowest margin of
# meridian over FGD at any whole percent from 50% to 130%; writes an HTML report of the curves
# per workload into OUT_DIR.
# Usage: scripts/fgd-variants.sh [TRACES_DIR] [OUT_DIR]
set -euo pipefail
traces=${1:-../shared/traces/alibaba-gpu-2023}
out=${2:-fgd-variants}
bin=${MERIDIAN:-./build/meridian}
mkdir -p "$out"
nodes="$traces/csv/openb_node_list_gpu_node.csv"
run() {  # name, tasks file, extra flags...
  local name=$1 tasks=$2
  shift 2
  "$bin" sim fgd --nodes "$nodes" --tasks "$tasks" --policy meridian --policy fgd \
    --seeds 42-51 --inflate 1.3 --html "$out/$name.html" --json "$@" >"$out/$name.json"
  python3 - "$name" "$out/$name.json" >>"$out/summary.txt" <<'PY'
import json, sys
name, path = sys.argv[1:]
j = json.load(open(path))
c = {p["policy"]: p["curve"] for p in j["policies"]}
m, f = c["meridian"], c["fgd"]
# The margin over the published FGD where there is one, else over ours.
margin = sorted(j["margins"], key=lambda x: x["against"] != "published fgd")[0]
print(f"{name:<44} {m[100]:7.2f} {f[100]:7.2f} {m[130]:7.2f} {f[130]:7.2f}"
      f"   {margin['gap']:+.2f} at {margin['arrived']}% (over {margin['against']})")
PY
  tail -1 "$out/summary.txt"
}
: >"$out/summary.txt"
printf '%-44s %7s %7s %7s %7s   %s\n' workload "mer@100" "fgd@100" "mer@130" "fgd@130" \
  "lowest margin of meridian over FGD, 50-130% arrived"
for w in default cpu050 cpu100 cpu200 cpu250 gpushare40 gpushare60 gpushare80 gpushare100; do
  run "$w" "$traces/csv/openb_pod_list_$w.csv" \
    --compare-curves "$traces/published-fgd/analysis_allo_discrete.csv"
done
default="$traces/csv/openb_pod_list_default.csv"
for seed in 1 2; do
  for v in "--constrained 0.1" "--constrained 0.2" "--constrained 0.25" "--constrained 0.33" \
    "--constrained 0.5" "--multi-gpu 0.2" "--multi-gpu 0.5" "--fractional 0.8" \
    "--cpu-only 0.3" "--constrained 0.33 --multi-gpu 0.3" \
    "--constrained 0.25 --fractional 0.8" "--constrained 0.33 --cpu-only 0.3"; do
    # shellcheck disable=SC2086
    name="default+$(sed -e 's/--//g' -e 's/ /=/g' -e 's/=\([a-z]\)/,\1/g' <<<"$v"),seed$seed"
    # shellcheck disable=SC2086
    run "$name" "$default" $v --variant-seed "$seed"
  done
done
echo "reports: $out/*.html; table: $out/summary.txt"
