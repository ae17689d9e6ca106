#!/usr/bin/env bash
# An EXAMPLE provisioner for elastic node pools on Google Compute Engine, through gcloud and jq.
# Not tested by Meridian's suite (no cloud can be reached from its CI): read it, adapt it, try it
# on a pool with maxNodes: 1 first. The contract it implements is in src/cloud/provisioner.h.
#
#   meridian server --provisioner "gcp=/usr/local/lib/meridian/gcp-compute.sh \
#       --zone us-central1-a --machine-type a2-highgpu-8g --image-family meridian-gpu \
#       --image-project my-project"
#
# The instance is named as the node (Meridian's names are valid GCE names) and labelled
# meridian-pool=POOL; its startup script writes the bootstrap token and starts `meridian agent`.
# Spot instances use the SPOT provisioning model; GCE gives thirty seconds' notice, which `list`
# cannot see: an agent-side watcher of the metadata server's `preempted` key is the way to get
# it, so here a spot instance simply vanishes from the list when it is taken back.
set -euo pipefail

zone="" machine_type="" image_family="" image_project=""
while [[ $# -gt 1 ]]; do
  case "$1" in
    --zone) zone="$2" ;;
    --machine-type) machine_type="$2" ;;
    --image-family) image_family="$2" ;;
    --image-project) image_project="$2" ;;
    *) break ;;
  esac
  shift 2
done
verb="${1:?usage: gcp-compute.sh [--zone Z --machine-type T ...] create|delete|list}"
request="$(cat)"

fail() {  # code message
  jq -n --arg code "$1" --arg message "$2" '{error: {code: $code, message: $message}}'
  exit 1
}

case "$verb" in
  create)
    pool="$(jq -r .pool <<<"$request")"
    spot="$(jq -r .spot <<<"$request")"
    server="$(jq -r .join.server <<<"$request")"
    token="$(jq -r .join.token <<<"$request")"
    cluster="$(jq -r .cluster <<<"$request")"
    model=(--provisioning-model=STANDARD --maintenance-policy=TERMINATE)
    if [[ "$spot" == "true" ]]; then
      model=(--provisioning-model=SPOT --instance-termination-action=DELETE)
    fi
    script="$(mktemp)"
    trap 'rm -f "$script"' EXIT
    out='[]'
    for node in $(jq -r '.nodes[]' <<<"$request"); do
      printf '#!/bin/sh\nset -e\ninstall -d -m 0700 /etc/meridian\nprintf %%s %q > /etc/meridian/agent.token\nchmod 0600 /etc/meridian/agent.token\nexec meridian --server %q agent --node %q --cluster %q --pool %q --token-file /etc/meridian/agent.token >>/var/log/meridian-agent.log 2>&1\n' \
        "$token" "$server" "$node" "$cluster" "$pool" >"$script"
      if ! err="$(gcloud compute instances create "$node" --zone "$zone" \
          --machine-type "$machine_type" --image-family "$image_family" \
          --image-project "$image_project" "${model[@]}" --labels "meridian-pool=$pool" \
          --metadata-from-file "startup-script=$script" --quiet 2>&1 >/dev/null)"; then
        # What was made so far stays: Meridian lists the pool after a failure and adopts it.
        case "$err" in
          *ZONE_RESOURCE_POOL_EXHAUSTED*|*STOCKOUT*|*does\ not\ have\ enough\ resources*) fail capacity "$err" ;;
          *QUOTA_EXCEEDED*|*Quota*) fail quota "$err" ;;
          *) fail internal "$err" ;;
        esac
      fi
      out="$(jq --arg node "$node" --arg pool "$pool" --argjson spot "$spot" \
        '. + [{id: $node, node: $node, pool: $pool, state: "booting", createdAt: now,
               spot: $spot}]' <<<"$out")"
    done
    jq -n --argjson instances "$out" '{instances: $instances}'
    ;;
  delete)
    for id in $(jq -r '.instances[]' <<<"$request"); do
      # Deleting an instance that is gone is not an error here: deletes repeat.
      if ! err="$(gcloud compute instances delete "$id" --zone "$zone" --quiet 2>&1)"; then
        [[ "$err" == *"was not found"* ]] || fail internal "$err"
      fi
    done
    jq '{deleted: .instances}' <<<"$request"
    ;;
  list)
    pool="$(jq -r '.pool // ""' <<<"$request")"
    filter="labels.meridian-pool:*"
    [[ -n "$pool" ]] && filter="labels.meridian-pool=$pool"
    listed="$(gcloud compute instances list --filter "$filter AND status!=TERMINATED" \
      --zones "$zone" --format json)" || fail internal "instances list failed"
    # creationTimestamp is RFC 3339 with an offset: 2026-12-05T00:00:00.123-08:00.
    jq 'def epoch: capture("^(?<t>.{19})(\\.[0-9]+)?(?<s>[-+])(?<h>[0-9]{2}):(?<m>[0-9]{2})$") as $c
          | ($c.t + "Z" | fromdateiso8601)
            - (($c.s + "1" | tonumber) * (($c.h | tonumber) * 3600 + ($c.m | tonumber) * 60));
        {instances: [.[] | {id: .name, node: .name, pool: .labels["meridian-pool"],
          state: (if .status == "RUNNING" then "running" else "booting" end),
          createdAt: (.creationTimestamp | epoch),
          spot: (.scheduling.provisioningModel == "SPOT")}]}' <<<"$listed"
    ;;
  *) fail invalid "unknown verb $verb (create, delete or list)" ;;
esac
