#!/usr/bin/env bash
# job_hosts_bench: what a checkpoint of a job across hosts costs it, by the ranks' own step times
# (issue 35; bench/job_bench.py measures jobs on one host). mp_train --transport tcp with R ranks
# on 2 hosts (network namespaces with a gcrd each: tests/integration/jobs/hosts.sh), B MiB of
# device memory per rank (--ballast-mib), --step-delay-ms 10. For each (R, B), first the
# baseline: every rank dumped at once by stop-and-copy (`gcr checkpoint --stop-copy --tcp-close -R`
# on each rank's host: the driver copies its device memory through host RAM and CRIU dumps it;
# connections recorded closed, which the live job does not notice; it runs first because the
# driver refuses a process whose memory gcr has parked and given back, as imported memory); then
# a first live checkpoint of the whole job from host 0 (`gcr checkpoint --job P0 P1@H1 ... -R`)
# and an incremental one 20 steps later. The stall is the longest gap between rank 0's consecutive
# steps (its t_ms) around the checkpoint, minus the median gap before it: every rank waits for
# every other each step.
#
#   bench/job_hosts_bench.sh [BUILD_DIR] [--ranks 2,4] [--mib 256,1024]
#
# Prints a table and writes bench/results/job-hosts-<time>.json. Asserts nothing about time.
# Needs root (CRIU, namespaces).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD_ARG=$HERE/../build
if [[ $# -gt 0 && $1 != --* ]]; then
  BUILD_ARG=$1
  shift
fi
RANKS_LIST=2,4
MIB_LIST=256,1024
while (($#)); do
  case $1 in
    --ranks) RANKS_LIST=$2; shift 2 ;;
    --mib) MIB_LIST=$2; shift 2 ;;
    *) echo "usage: $0 [BUILD_DIR] [--ranks 2,4] [--mib 256,1024]" >&2; exit 2 ;;
  esac
done
TEST_NAME=bench-job-hosts
export SIMGPU_MEMORY=6G
set -- "$BUILD_ARG"
source "$HERE/../tests/integration/programs/lib.sh"
HOSTS=2
NET=10.$((100 + $$ % 100)).$(($$ % 250))
source "$HERE/../tests/integration/jobs/hosts.sh"
trap 'rc=$?; cleanup_hosts; (exit $rc); cleanup' EXIT
OUT=$HERE/results/job-hosts-$(date -u +%Y-%m-%dT%H%M%S).json
STEP_DELAY=10

# gap_stall LOG FROM TO: max gap (ms) at steps FROM..TO minus the median gap of steps 6..FROM-1.
gap_stall() {
  python3 - "$@" << 'PY'
import re, statistics, sys
path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = {}
for line in open(path, errors="replace"):
    m = re.match(r"step (\d+) .*t_ms ([0-9.]+)", line)
    if m:
        t[int(m.group(1))] = float(m.group(2))
gap = lambda s: t[s] - t[s - 1] if s in t and s - 1 in t else None
before = [g for g in (gap(s) for s in range(6, first)) if g is not None]
around = [g for g in (gap(s) for s in range(first, last + 1)) if g is not None]
print(f"{max(around) - statistics.median(before):.1f}" if before and around else "nan")
PY
}
last_step() { awk '/^step / {s = $2} END {print s + 0}' "$1"; }

results=()
for ranks in ${RANKS_LIST//,/ }; do
  for mib in ${MIB_LIST//,/ }; do
    tag=r${ranks}m$mib
    R=()
    for ((r = 0; r < ranks; r++)); do
      launch_on $((r % 2)) "$T/$tag-r$r.log" "$BUILD/tests/workloads/mp_train" --transport tcp \
        --ranks "$ranks" --rank "$r" --store "$(host_addr 0):$((29500 + ranks))" --steps 100000 \
        --step-delay-ms "$STEP_DELAY" --ballast-mib "$mib" --store-every 0
      R+=("$P")
    done
    wait_steps "$T/$tag-r0.log" 30
    args=("${R[0]}")
    for ((r = 1; r < ranks; r++)); do
      if ((r % 2 == 0)); then args+=("${R[r]}"); else args+=("${R[r]}@$(host_gcrd 1)"); fi
    done
    row="{\"ranks\": $ranks, \"hosts\": 2, \"mib_per_rank\": $mib"
    # The baseline first (after gcr has parked a process, its memory is imported, which the
    # driver's checkpoint refuses): every rank stopped and copied at once.
    k0=$(last_step "$T/$tag-r0.log")
    bpids=()
    for ((r = 0; r < ranks; r++)); do
      on_host $((r % 2)) "$GCR" checkpoint "${R[r]}" --stop-copy --tcp-close -R --name "$tag-sc-$r" \
        > "$T/$tag-sc-$r.out" 2>&1 &
      bpids+=($!)
    done
    for p in "${bpids[@]}"; do wait "$p" || { cat "$T/$tag-sc-"*.out; exit 1; }; done
    k1=$(last_step "$T/$tag-r0.log")
    wait_steps "$T/$tag-r0.log" $((k1 + 20))
    sc=$(gap_stall "$T/$tag-r0.log" "$k0" $((k1 + 20)))
    n=$(last_step "$T/$tag-r0.log")
    wait_steps "$T/$tag-r0.log" $((n + 20))
    for kind in first incremental; do
      k0=$(last_step "$T/$tag-r0.log")
      on_host 0 "$GCR" checkpoint --job "${args[@]}" --token-file "$T/token" -R --name "$tag-$kind" \
        --json > "$T/$tag-$kind.json" 2> "$T/$tag-$kind.err" || { cat "$T/$tag-$kind.err"; exit 1; }
      k1=$(last_step "$T/$tag-r0.log")
      wait_steps "$T/$tag-r0.log" $((k1 + 20))
      stall=$(gap_stall "$T/$tag-r0.log" "$k0" $((k1 + 20)))
      cmd=$(json_field time.job_stall_ns < "$T/$tag-$kind.json")
      row+=", \"${kind}_stall_ms\": $stall, \"${kind}_cmd_stall_ms\": $(awk -v n="$cmd" 'BEGIN {printf "%.1f", n / 1e6}')"
      n=$(last_step "$T/$tag-r0.log")
      wait_steps "$T/$tag-r0.log" $((n + 20))
    done
    row+=", \"stop_copy_stall_ms\": $sc}"
    results+=("$row")
    printf '%d ranks, %5d MiB/rank: job stall first %8s ms, incremental %8s ms, stop-and-copy %9s ms (%.0fx)\n' \
      "$ranks" "$mib" "$(echo "$row" | python3 -c 'import json,sys; print(json.load(sys.stdin)["first_stall_ms"])')" \
      "$(echo "$row" | python3 -c 'import json,sys; print(json.load(sys.stdin)["incremental_stall_ms"])')" "$sc" \
      "$(echo "$row" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["stop_copy_stall_ms"] / max(d["first_stall_ms"], 0.1))')"
    for p in "${R[@]}"; do kill -9 "$p" 2> /dev/null || true; done
    for p in "${R[@]}"; do wait_gone "$p" 30 || true; done
  done
done
{
  echo "{\"bench\": \"job_hosts\", \"when\": \"$(date -u +%FT%TZ)\", \"host\": \"$(hostname)\", \"cpus\": $(nproc),"
  echo " \"step_delay_ms\": $STEP_DELAY, \"results\": ["
  (IFS=,; echo "${results[*]}")
  echo "]}"
} > "$OUT"
echo "results: $OUT"
