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
# every other each step. The goal's yardstick, in the same run: one mp_train process (--ranks 1)
# with the same device memory in the same 2 MiB pieces, checkpointed live alone, its stall by its
# own step times (first and incremental).
#
#   bench/job_hosts_bench.sh [BUILD_DIR] [--ranks 2,4] [--mib 256,1024]
#   bench/job_hosts_bench.sh [BUILD_DIR] --move [--mib 256,1024,2048]
#
# --move (Note [A rank moved while its job runs] in daemon/job_move.h): 2 ranks on hosts 0 and 1,
# rank 1 on an address of its own, moved to a third host with `gcr migrate --job` (pre-copy), and
# in another such job with --rounds 0 (its whole memory sent in the stop: the baseline, in the
# same run).
# For each: the job's stall by rank 0's step times over the whole move, the job-wide stop gcr
# reports (job_stop_ns: rank 0 held still) and the rank's downtime. The pre-copy's stop should
# not grow with the memory; the baseline's does.
#
# Prints a table and writes bench/results/job-hosts-<time>.json. Asserts nothing about time.
# Needs root (CRIU, namespaces).
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
set -- "${BENCH_ARGS[@]}"
RANKS_LIST=2,4
MIB_LIST=256,1024
MOVE=0
while (($#)); do
  case $1 in
    --ranks) RANKS_LIST=$2; shift 2 ;;
    --mib) MIB_LIST=$2; shift 2 ;;
    --move) MOVE=1; shift ;;
    *) echo "usage: $0 [BUILD_DIR] [--ranks 2,4] [--mib 256,1024] | --move [--mib 256,1024]" >&2; exit 2 ;;
  esac
done
TEST_NAME=bench-job-hosts
export SIMGPU_MEMORY=6G
set -- "$BUILD_ARG"
source "$HERE/../tests/integration/programs/lib.sh"
HOSTS=$((2 + MOVE))
NET=10.$((100 + $$ % 100)).$(($$ % 250))
source "$HERE/../tests/integration/jobs/hosts.sh"
trap 'rc=$?; cleanup_hosts; (exit $rc); cleanup' EXIT
OUT=$HERE/results/job-$( ((MOVE)) && echo move || echo hosts)-$(date -u +%Y-%m-%dT%H%M%S).json
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

ms() { awk -v n="$1" 'BEGIN {printf "%.1f", n / 1e6}'; }
# move_rank ROW_KEY FROM_HOST PID TO_HOST [flags]: moves rank 1, adds its numbers to `row`, sets MOVED.
move_rank() {
  local key=$1 from=$2 pid=$3 to=$4
  shift 4
  local k0 k1 stall
  k0=$(last_step "$T/$tag-r0.log")
  on_host "$from" "$GCR" migrate "$pid" --to "$(host_gcrd "$to")" --token-file "$T/token" \
    --job "${R[0]}@$(host_gcrd 0)" --json "$@" > "$T/$tag-$key.json" 2> "$T/$tag-$key.err" ||
    { cat "$T/$tag-$key.err"; exit 1; }
  k1=$(last_step "$T/$tag-r0.log")
  wait_steps "$T/$tag-r0.log" $((k1 + 20))
  stall=$(gap_stall "$T/$tag-r0.log" "$k0" $((k1 + 20)))
  MOVED=$(json_field destination_pid < "$T/$tag-$key.json")
  pids+=("$MOVED")
  row+=", \"${key}_stall_ms\": $stall, \"${key}_job_stop_ms\": $(ms "$(json_field job_stop_ns < "$T/$tag-$key.json")")"
  row+=", \"${key}_downtime_ms\": $(ms "$(json_field downtime_ns < "$T/$tag-$key.json")")"
  row+=", \"${key}_rounds\": $(json_field rounds < "$T/$tag-$key.json")"
  # Of the stop: the rank's checkpoint (cut to dumped), until its last changes were at the
  # destination, and the destination's restore until it ran.
  local f
  for f in stop_stall stopped_to_sent restore_to_resume; do
    row+=", \"${key}_${f}_ms\": $(ms "$(json_field "${f}_ns" < "$T/$tag-$key.json")")"
  done
  row+=", \"${key}_destination_ms\": $(python3 -c 'import json,sys; d=json.load(sys.stdin)["destination_restore"]; print(json.dumps({k[5:-3]: round(v / 1e6, 1) for k, v in d.items() if k.startswith("time.")}))' < "$T/$tag-$key.json")"
  row+=", \"${key}_last_sent_mib\": $(awk -v n="$(json_field last_sent_bytes < "$T/$tag-$key.json")" 'BEGIN {printf "%.1f", n / 1048576}')"
  printf '%5d MiB, %-9s: job stall %7s ms (rank 0 held %7s ms, downtime %7s ms, %s rounds; stop: checkpoint %s ms, sent %s ms, resumed %s ms)\n' \
    "$mib" "$key" "$stall" "$(ms "$(json_field job_stop_ns < "$T/$tag-$key.json")")" \
    "$(ms "$(json_field downtime_ns < "$T/$tag-$key.json")")" "$(json_field rounds < "$T/$tag-$key.json")" \
    "$(ms "$(json_field stop_stall_ns < "$T/$tag-$key.json")")" \
    "$(ms "$(json_field stopped_to_sent_ns < "$T/$tag-$key.json")")" \
    "$(ms "$(json_field restore_to_resume_ns < "$T/$tag-$key.json")")"
}

results=()
if ((MOVE)); then
  a=0
  for mib in ${MIB_LIST//,/ }; do
    row="{\"mib_per_rank\": $mib"
    # Each move on a job of its own: a rank restored on one machine's namespace host sits in a PID
    # namespace of its own (its old pid is still the source's), which CRIU cannot dump again.
    for key in ${MOVE_KEYS:-rounds0 precopy}; do
      a=$((a + 1))
      tag=move$mib-$key
      give_rank_address 1 "$a"
      R=()
      for r in 0 1; do
        listen=()
        ((r == 0)) || listen=(--listen "$(rank_addr "$a")")
        launch_on "$r" "$T/$tag-r$r.log" "$BUILD/tests/workloads/mp_train" --transport tcp --ranks 2 \
          --rank "$r" --store "$(host_addr 0):$((29600 + a))" --steps 100000 \
          --step-delay-ms "$STEP_DELAY" --ballast-mib "$mib" --store-every 0 "${listen[@]}"
        R+=("$P")
      done
      wait_steps "$T/$tag-r0.log" 30
      if [[ $key == rounds0 ]]; then move_rank "$key" 1 "${R[1]}" 2 --rounds 0; else move_rank "$key" 1 "${R[1]}" 2; fi
      for p in "${R[@]}" "$MOVED"; do kill -9 "$p" 2> /dev/null || true; done
      for p in "${R[@]}" "$MOVED"; do wait_gone "$p" 30 || true; done
    done
    row+="}"
    results+=("$row")
  done
  RANKS_LIST=
fi
# single_stalls MIB: "FIRST INCREMENTAL", one process's live checkpoint stalls at that footprint.
single_stalls() {
  local mib=$1 tag=single$1 out=() kind k0 k1
  launch_on 0 "$T/$tag.log" "$BUILD/tests/workloads/mp_train" --ranks 1 --steps 100000 \
    --step-delay-ms "$STEP_DELAY" --ballast-mib "$mib"
  local p=$P
  wait_steps "$T/$tag.log" 30
  for kind in first incremental; do
    k0=$(last_step "$T/$tag.log")
    on_host 0 "$GCR" checkpoint "$p" -R --name "$tag-$kind" > "$T/$tag-$kind.out" 2>&1 ||
      { cat "$T/$tag-$kind.out"; exit 1; }
    k1=$(last_step "$T/$tag.log")
    wait_steps "$T/$tag.log" $((k1 + 20))
    out+=("$(gap_stall "$T/$tag.log" "$k0" $((k1 + 20)))")
  done
  kill -9 "$p" 2> /dev/null || true
  wait_gone "$p" 30 || true
  echo "${out[@]}"
}
declare -A SINGLE
if [[ -n $RANKS_LIST ]]; then
  for mib in ${MIB_LIST//,/ }; do
    SINGLE[$mib]=$(single_stalls "$mib")
    echo "1 process,  $mib MiB: stall first ${SINGLE[$mib]% *} ms, incremental ${SINGLE[$mib]#* } ms"
  done
fi
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
    row+=", \"stop_copy_stall_ms\": $sc"
    row+=", \"single_first_stall_ms\": ${SINGLE[$mib]% *}, \"single_incremental_stall_ms\": ${SINGLE[$mib]#* }}"
    results+=("$row")
    printf '%d ranks, %5d MiB/rank: job stall first %8s ms, incremental %8s ms, stop-and-copy %9s ms (%.0fx); one process %s / %s ms\n' \
      "$ranks" "$mib" "$(echo "$row" | python3 -c 'import json,sys; print(json.load(sys.stdin)["first_stall_ms"])')" \
      "$(echo "$row" | python3 -c 'import json,sys; print(json.load(sys.stdin)["incremental_stall_ms"])')" "$sc" \
      "$(echo "$row" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["stop_copy_stall_ms"] / max(d["first_stall_ms"], 0.1))')" \
      "${SINGLE[$mib]% *}" "${SINGLE[$mib]#* }"
    for p in "${R[@]}"; do kill -9 "$p" 2> /dev/null || true; done
    for p in "${R[@]}"; do wait_gone "$p" 30 || true; done
  done
done
{
  echo "{\"bench\": \"job_$( ((MOVE)) && echo move || echo hosts)\", \"when\": \"$(date -u +%FT%TZ)\", \"host\": \"$(hostname)\", \"cpus\": $(nproc),"
  echo " \"step_delay_ms\": $STEP_DELAY, \"results\": ["
  (IFS=,; echo "${results[*]}")
  echo "]}"
} > "$OUT"
echo "results: $OUT"
