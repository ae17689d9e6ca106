#!/usr/bin/env bash
# An EXAMPLE provisioner for elastic node pools on AWS EC2, through the AWS CLI (v2) and jq.
# Not tested by Meridian's suite (no cloud can be reached from its CI): read it, adapt it, try it
# on a pool with maxNodes: 1 first. The contract it implements is in src/cloud/provisioner.h.
#
#   meridian server --provisioner "aws=/usr/local/lib/meridian/aws-ec2.sh \
#       --instance-type p4d.24xlarge --image-id ami-0123 --subnet-id subnet-0123 \
#       --security-group-id sg-0123 --region us-east-1"
#
# The image must have `meridian` installed (the Debian package) and the NVIDIA driver. Each
# instance is tagged meridian-pool=POOL and meridian-node=NAME; its user data writes the
# bootstrap token and starts `meridian agent` as that node. `list` reports a spot instance
# marked for termination with interruptAt = the mark's time + 120 s (AWS's two minutes).
set -euo pipefail

instance_type="" image_id="" subnet_id="" security_group_id="" region="${AWS_REGION:-}"
while [[ $# -gt 1 ]]; do
  case "$1" in
    --instance-type) instance_type="$2" ;;
    --image-id) image_id="$2" ;;
    --subnet-id) subnet_id="$2" ;;
    --security-group-id) security_group_id="$2" ;;
    --region) region="$2" ;;
    *) break ;;
  esac
  shift 2
done
verb="${1:?usage: aws-ec2.sh [--instance-type T --image-id AMI ...] create|delete|list}"
request="$(cat)"
aws_() { aws --region "$region" --output json "$@"; }

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
    market=()
    if [[ "$spot" == "true" ]]; then
      market=(--instance-market-options
        'MarketType=spot,SpotOptions={SpotInstanceType=one-time,InstanceInterruptionBehavior=terminate}')
    fi
    out='[]'
    for node in $(jq -r '.nodes[]' <<<"$request"); do
      user_data="$(printf '#!/bin/sh\nset -e\ninstall -d -m 0700 /etc/meridian\nprintf %%s %q > /etc/meridian/agent.token\nchmod 0600 /etc/meridian/agent.token\nexec meridian --server %q agent --node %q --cluster %q --pool %q --token-file /etc/meridian/agent.token >>/var/log/meridian-agent.log 2>&1\n' \
        "$token" "$server" "$node" "$cluster" "$pool")"
      if ! made="$(aws_ ec2 run-instances --image-id "$image_id" --instance-type "$instance_type" \
          --subnet-id "$subnet_id" --security-group-ids "$security_group_id" --count 1 \
          "${market[@]}" --user-data "$user_data" \
          --tag-specifications "ResourceType=instance,Tags=[{Key=meridian-pool,Value=$pool},{Key=meridian-node,Value=$node}]" \
          2>/tmp/aws-ec2.$$.err)"; then
        err="$(cat /tmp/aws-ec2.$$.err)"; rm -f /tmp/aws-ec2.$$.err
        # What was made so far stays: Meridian lists the pool after a failure and adopts it.
        case "$err" in
          *InsufficientInstanceCapacity*|*SpotMaxPriceTooLow*|*InsufficientCapacity*) fail capacity "$err" ;;
          *VcpuLimitExceeded*|*InstanceLimitExceeded*|*MaxSpotInstanceCountExceeded*) fail quota "$err" ;;
          *) fail internal "$err" ;;
        esac
      fi
      out="$(jq --arg node "$node" --arg pool "$pool" --argjson spot "$spot" --argjson m "$made" \
        '. + [{id: $m.Instances[0].InstanceId, node: $node, pool: $pool, state: "booting",
               createdAt: now, spot: $spot}]' <<<"$out")"
    done
    jq -n --argjson instances "$out" '{instances: $instances}'
    ;;
  delete)
    ids="$(jq -r '.instances[]' <<<"$request")"
    if [[ -n "$ids" ]]; then
      # Terminating a terminated or unknown instance is not an error here: deletes repeat.
      for id in $ids; do
        aws_ ec2 terminate-instances --instance-ids "$id" >/dev/null 2>/tmp/aws-ec2.$$.err ||
          grep -q InvalidInstanceID.NotFound /tmp/aws-ec2.$$.err ||
          { err="$(cat /tmp/aws-ec2.$$.err)"; rm -f /tmp/aws-ec2.$$.err; fail internal "$err"; }
      done
      rm -f /tmp/aws-ec2.$$.err
    fi
    jq '{deleted: .instances}' <<<"$request"
    ;;
  list)
    pool="$(jq -r '.pool // ""' <<<"$request")"
    filters=("Name=instance-state-name,Values=pending,running")
    if [[ -n "$pool" ]]; then filters+=("Name=tag:meridian-pool,Values=$pool"); else filters+=("Name=tag-key,Values=meridian-pool"); fi
    described="$(aws_ ec2 describe-instances --filters "${filters[@]}")" || fail internal "describe-instances failed"
    marked="$(aws_ ec2 describe-spot-instance-requests \
      --filters Name=status-code,Values=marked-for-termination 2>/dev/null || echo '{"SpotInstanceRequests": []}')"
    jq --argjson marked "$marked" '
      ($marked.SpotInstanceRequests | map({key: .InstanceId,
         value: ((.Status.UpdateTime | sub("\\.[0-9]+"; "") | fromdateiso8601) + 120)}) | from_entries) as $at
      | {instances: [.Reservations[].Instances[]
          | (.Tags | map({key: .Key, value: .Value}) | from_entries) as $tags
          | {id: .InstanceId, node: $tags["meridian-node"], pool: $tags["meridian-pool"],
             state: (if .State.Name == "running" then "running" else "booting" end),
             createdAt: (.LaunchTime | sub("\\.[0-9]+"; "") | sub("\\+00:00$"; "Z") | fromdateiso8601),
             spot: (.InstanceLifecycle == "spot")}
          + (if $at[.InstanceId] then {interruptAt: $at[.InstanceId]} else {} end)]}' <<<"$described"
    ;;
  *) fail invalid "unknown verb $verb (create, delete or list)" ;;
esac
