#!/usr/bin/env bash
# job_tiers_bench: what checkpoints every period with copies in a peer's memory cost a job across
# hosts, and how fast it is back after losing a host (issue 37; Note [Checkpoints in peers'
# memory] in daemon/memory_tier.h). mp_train --transport tcp, 2 ranks on hosts 0 and 1 (network
# namespaces with a gcrd each, every gcrd with --peer-memory; tests/integration/jobs/hosts.sh),
# B MiB of device memory per rank (--ballast-mib), --step-delay-ms 10, in the same run:
#   1. the baseline: the job run to its end with no checkpoint;
#   2. the same job under `gcr checkpoint --job ... --every PERIOD --keep 2 --peer-copies 1`: its
#      step times up to the loss against the baseline's over the same steps (median and mean: a
#      stall shows in the mean), the checkpoints taken and delayed;
#   3. host 1 lost (its namespace deleted) at about 2/3 of the run: `gcr restore --latest
#      --place HOST1=HOST2` from host 0 (the part pulled by host 2 from host 0's memory as it is
#      restored): the time to the job's first step after (it runs again), the command's time (it
#      ends once all memory is in), the steps redone, and the job's checksum against the
#      baseline's. The yardstick: restarting the job from its start,
#      i.e. the baseline's own time to reach the step where the host was lost.
# One size a run (a lost host's address stays on the spare). No bucket tier for a job yet: the
# issue's "from the bucket" column is absent.
#
#   bench/job_tiers_bench.sh [BUILD_DIR] [--mib 256] [--every 1s] [--steps 1500] [--pace MIB_PER_S]
#
# --pace: every gcrd paces each copy into its memory to that many MiB/s (--peer-copy-mib-per-s).
#
# Prints a table and writes bench/results/job-tiers-<time>.json. Asserts nothing about time, but
# fails if the restored job does not end with the baseline's checksum. Needs root.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
set -- "${BENCH_ARGS[@]}"
MIB=256
EVERY=1s
STEPS=1500
while (($#)); do
  case $1 in
    --mib) MIB=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --pace) HOST_PEER_COPY_RATE=$2; shift 2 ;;
    *) echo "usage: $0 [BUILD_DIR] [--mib 256] [--every 1s] [--steps 1500] [--pace MIB_PER_S]" >&2; exit 2 ;;
  esac
done
TEST_NAME=bench-job-tiers
export SIMGPU_MEMORY=6G
set -- "$BUILD_ARG"
source "$HERE/../tests/integration/programs/lib.sh"
HOSTS=3
HOST_PEER_MEMORY=4G
NET=10.$((100 + $$ % 100)).$(($$ % 250))
source "$HERE/../tests/integration/jobs/hosts.sh"
trap 'rc=$?; cleanup_hosts; (exit $rc); cleanup' EXIT
OUT=$HERE/results/job-tiers-$(date -u +%Y-%m-%dT%H%M%S).json
STEP_DELAY=10
STORE_PORT=29500

# steps LOG FROM TO: "median mean" of the step gaps (ms) of steps FROM..TO (by its t_ms).
steps() {
  python3 - "$@" << 'PY'
import re, statistics, sys
path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = {}
for line in open(path, errors="replace"):
    m = re.match(r"step (\d+) .*t_ms ([0-9.]+)", line)
    if m:
        t.setdefault(int(m.group(1)), float(m.group(2)))
g = [t[s] - t[s - 1] for s in range(first, last + 1) if s in t and s - 1 in t]
print(f"{statistics.median(g):.2f} {statistics.mean(g):.2f}")
PY
}
t_ms_at() { awk -v s="$2" '$1 == "step" && $2 == s {print $NF; exit}' "$1"; }
last_step() { awk '/^step / {s = $2} END {print s + 0}' "$1"; }
start_pair() {  # TAG MIB: ranks 0 and 1 on hosts 0 and 1; sets R
  R=()
  local r
  for r in 0 1; do
    launch_on "$r" "$T/$1-r$r.log" "$BUILD/tests/workloads/mp_train" --transport tcp --ranks 2 --rank "$r" \
      --steps "$STEPS" --step-delay-ms $STEP_DELAY --ballast-mib "$2" --store "$(host_addr 0):$STORE_PORT"
    R+=("$P")
  done
}
schedule_field() {  # P F
  on_host 0 "$GCR" ps --json | python3 -c "
import json, sys
for p in json.load(sys.stdin):
    if p['pid'] == $1: print(p.get('every', {}).get('$2', ''))"
}

results=()
printf "%6s %14s %14s %8s %8s %10s %12s %12s %10s %12s\n" "MiB" "steps base" "steps every" "mean x" \
  "taken" "delayed" "restore ms" "1st step ms" "redone" "restart ms"
mib=$MIB
# 1. The baseline.
start_pair base "$mib"
for p in "${R[@]}"; do wait_gone "$p" 600 || fail "the baseline did not end"; done
ref=$(checksum_of "$T/base-r0.log")
[[ -n $ref ]] || fail "the baseline printed no checksum: $(tail -n 3 "$T/base-r0.log")"
# 2. Every period, copies in the other host's memory.
start_pair every "$mib"
wait_steps "$T/every-r0.log" 30
on_host 0 "$GCR" checkpoint --job "${R[0]}" "${R[1]}@$(host_gcrd 1)" --token-file "$T/token" --every "$EVERY" \
  --keep 2 --peer-copies 1 --name bt > /dev/null || fail "gcr checkpoint --every"
loss=$((STEPS * 2 / 3))
wait_until 600 eval "(( \$(last_step $T/every-r0.log) >= $loss ))" || fail "the job did not reach step $loss"
taken=$(schedule_field "${R[0]}" count)
delayed=$(schedule_field "${R[0]}" delayed)
tiers=$(schedule_field "${R[0]}" tiers)
# 3. Host 1 lost.
remove_host 1
kill -9 "${R[0]}" 2> /dev/null || true  # as a scheduler ends a job that lost a node
wait_gone "${R[0]}" 120 || fail "rank 0 did not end"
lost_at=$(last_step "$T/every-r0.log")
read -r base_med base_mean <<< "$(steps "$T/base-r0.log" 31 "$lost_at")"
read -r every_med every_mean <<< "$(steps "$T/every-r0.log" 31 "$lost_at")"
size=$(stat -c %s "$T/every-r0.log")
t0=$(date +%s%N)
on_host 0 "$GCR" restore --latest bt --token-file "$T/token" --place "$(host_gcrd 1)=$(host_gcrd 2)" --json \
  > "$T/restore.json" 2> "$T/restore.err" &
restoring=$!
# The job runs again when rank 0 prints a step (every rank waits for every other each step),
# which may be before the command returns (it ends once all memory is in).
until [[ $(tail -c +$((size + 1)) "$T/every-r0.log" | grep -c "^step") -ge 1 ]]; do
  kill -0 $restoring 2> /dev/null || [[ $(tail -c +$((size + 1)) "$T/every-r0.log" | grep -c "^step") -ge 1 ]] ||
    { wait $restoring || fail "gcr restore --latest: $(cat "$T/restore.err")"; }
  (( $(date +%s%N) - t0 < 120000000000 )) || fail "the restored rank 0 printed no step"
  sleep 0.005
done
first_ms=$((($(date +%s%N) - t0) / 1000000))
wait $restoring || fail "gcr restore --latest: $(cat "$T/restore.err")"
restore_ms=$((($(date +%s%N) - t0) / 1000000))
pids+=("$(json_field pid < "$T/restore.json")" "$(json_field remote_pids.0 < "$T/restore.json")")
resumed_at=$(tail -c +$((size + 1)) "$T/every-r0.log" | awk '/^step/ {print $2; exit}')
wait_until 600 eval '[[ -n $(tail -c +$((size + 1)) "$T/every-r0.log" | grep checksum) ]]' ||
  fail "the restored job did not end"
got=$(tail -c +$((size + 1)) "$T/every-r0.log" | awk '/checksum/ {print $NF}')
[[ $got == "$ref" ]] || fail "the restored job ended with $got, the baseline with $ref"
restart_ms=$(t_ms_at "$T/base-r0.log" "$lost_at")
from=$(json_field remote_from.0 < "$T/restore.json")
ratio=$(awk -v a="$every_mean" -v b="$base_mean" 'BEGIN {printf "%.3f", a / b}')
row="{\"mib\": $mib, \"every\": \"$EVERY\", \"steps\": $STEPS, \"pace_mib_per_s\": ${HOST_PEER_COPY_RATE:-0}, \"base_step_median_ms\": $base_med,"
row+=" \"base_step_mean_ms\": $base_mean, \"every_step_median_ms\": $every_med, \"every_step_mean_ms\": $every_mean,"
row+=" \"mean_ratio\": $ratio, \"checkpoints\": ${taken:-0}, \"delayed\": ${delayed:-0}, \"tiers\": \"$tiers\","
row+=" \"lost_at_step\": $lost_at, \"resumed_at_step\": $resumed_at, \"restore_command_ms\": $restore_ms,"
row+=" \"first_step_after_ms\": $first_ms, \"part_read_from\": \"$from\","
row+=" \"restore_times_ms\": $(python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({k[5:-3]: round(v / 1e6, 1) for k, v in d.items() if k.startswith("time.")}))' < "$T/restore.json"),"
row+=" \"restart_from_start_ms\": ${restart_ms:-0}, \"checksum_ok\": true}"
results+=("$row")
printf "%6s %14s %14s %8s %8s %10s %12s %12s %10s %12s\n" "$mib" "$base_med/$base_mean" "$every_med/$every_mean" \
  "$ratio" "$taken" "$delayed" "$restore_ms" "$first_ms" "$((lost_at - resumed_at + 1))" "${restart_ms%.*}"
{
  echo "{\"bench\": \"job-tiers\", \"machine\": \"$(nproc) cpus, $(awk '/MemTotal/ {print $2}' /proc/meminfo) kB\","
  echo " \"step_delay_ms\": $STEP_DELAY, \"results\": ["
  (IFS=,; echo "${results[*]}")
  echo "]}"
} > "$OUT"
echo "results: $OUT"
