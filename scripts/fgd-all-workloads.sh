#!/usr/bin/env bash
# Runs the FGD protocol (10 seeds, inflate 1.3) for the published policies and Meridian's on
# every workload that has published results, and prints our allocation beside the published one.
# Usage: scripts/fgd-all-workloads.sh [TRACES_DIR] [POLICY...]
set -euo pipefail
traces=${1:-../shared/traces/alibaba-gpu-2023}
shift || true
policies=("$@")
[ ${#policies[@]} -gt 0 ] || policies=(fgd meridian)
args=()
for p in "${policies[@]}"; do args+=(--policy "$p"); done
bin=${MERIDIAN:-./build/meridian}
for w in default cpu050 cpu100 cpu200 cpu250 gpushare40 gpushare60 gpushare80 gpushare100; do
  "$bin" sim fgd --nodes "$traces/csv/openb_node_list_gpu_node.csv" \
    --tasks "$traces/csv/openb_pod_list_$w.csv" "${args[@]}" --seeds 42-51 --inflate 1.3 \
    --compare "$traces/published-fgd/summary-allocation.txt"
done
