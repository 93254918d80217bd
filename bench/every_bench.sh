#!/usr/bin/env bash
# every_bench: what checkpoints every period cost a running program (issue 37; Note [Checkpoints
# every period] in daemon/periodic.h). mp_train with one rank and B MiB of device memory in 2 MiB
# pieces (--ballast-mib), --step-delay-ms 10, run for a fixed number of steps twice in the same
# run: without, then under `gcr run --checkpoint-every PERIOD --keep 2`. For each: the median and
# mean step time (its own step log) and the wall time of the whole run; the slowdown is their
# ratio. Also the checkpoints taken, their stalls (gcr ps --json while it runs) and delays.
#
#   bench/every_bench.sh [BUILD_DIR] [--mib 256,1024] [--every 1s] [--steps 600]
#
# Prints a table and writes bench/results/every-<time>.json. Asserts nothing about time. Root
# (CRIU).
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
set -- "${BENCH_ARGS[@]}"
MIB_LIST=256,1024
EVERY=1s
STEPS=600
while (($#)); do
  case $1 in
    --mib) MIB_LIST=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) echo "usage: $0 [BUILD_DIR] [--mib 256,1024] [--every 1s] [--steps 600]" >&2; exit 2 ;;
  esac
done
TEST_NAME=bench-every
export SIMGPU_MEMORY=4G
set -- "$BUILD_ARG"
source "$HERE/../tests/integration/checkpoint/lib.sh"
OUT=$HERE/results/every-$(date -u +%Y-%m-%dT%H%M%S).json
STEP_DELAY=10

# step_times LOG: "median mean" of the step wall times (step-log lines "step S T_ms").
step_times() {
  python3 - "$1" << 'PY'
import statistics, sys
t = [float(l.split()[2]) for l in open(sys.argv[1]) if l.startswith("step ")]
t = t[5:]  # warm-up
print(f"{statistics.median(t):.2f} {statistics.mean(t):.2f}" if t else "nan nan")
PY
}
# stalls PID OUT: polls gcr ps --json while PID runs; writes "count delayed failed max_stall_ms".
poll_schedule() {
  local pid=$1 out=$2
  python3 - "$GCR" "$pid" > "$out" << 'PY'
import json, subprocess, sys, time, os
gcr, pid = sys.argv[1], int(sys.argv[2])
seen, stalls = {}, {}
while os.path.exists(f"/proc/{pid}"):
    try:
        for p in json.loads(subprocess.run([gcr, "ps", "--json"], capture_output=True, text=True).stdout or "[]"):
            if p.get("pid") == pid and "every" in p:
                e = p["every"]
                seen = e
                if e.get("last_id"):
                    stalls[e["last_id"]] = e.get("last_stall_ns", 0)
    except Exception:
        pass
    time.sleep(0.2)
s = sorted(stalls.values())
print(seen.get("count", 0), seen.get("delayed", 0), seen.get("failed", 0),
      f"{s[len(s) // 2] / 1e6:.1f}" if s else "nan", f"{max(s) / 1e6:.1f}" if s else "nan")
PY
}

results=()
for mib in ${MIB_LIST//,/ }; do
  row="{\"mib\": $mib, \"every\": \"$EVERY\", \"steps\": $STEPS"
  for mode in none every; do
    log=$T/$mode-$mib.log
    steplog=$T/$mode-$mib.steps
    args=("$BUILD/tests/workloads/mp_train" --ranks 1 --steps "$STEPS" --step-delay-ms "$STEP_DELAY"
      --ballast-mib "$mib" --step-log "$steplog")
    t0=$(date +%s%N)
    if [[ $mode == none ]]; then
      "$GCR" run -- "${args[@]}" > "$log" 2>&1
    else
      "$GCR" run --checkpoint-every "$EVERY" --keep 2 --checkpoint-name "bench$mib" -- "${args[@]}" \
        > "$log" 2>&1 &
      p=$!
      pids+=("$p")
      poll_schedule "$p" "$T/$mode-$mib.sched" &
      poller=$!
      wait "$p"
      wait "$poller"
      read -r count delayed failed stall_med stall_max < "$T/$mode-$mib.sched"
      row+=", \"checkpoints\": $count, \"delayed\": $delayed, \"failed\": $failed"
      row+=", \"stall_median_ms\": $stall_med, \"stall_max_ms\": $stall_max"
    fi
    wall=$((($(date +%s%N) - t0) / 1000000))
    read -r med mean <<< "$(step_times "$steplog")"
    row+=", \"${mode}_step_median_ms\": $med, \"${mode}_step_mean_ms\": $mean, \"${mode}_wall_ms\": $wall"
    eval "${mode}_mean=$mean ${mode}_wall=$wall"
  done
  row+="}"
  results+=("$row")
  printf '%5d MiB, every %s: step mean %s -> %s ms (%s), run %s -> %s ms (%s); %s checkpoints, stall median %s ms, max %s ms, %s delayed\n' \
    "$mib" "$EVERY" "$none_mean" "$every_mean" \
    "$(python3 -c "print(f'{$every_mean / $none_mean:.3f}x')")" "$none_wall" "$every_wall" \
    "$(python3 -c "print(f'{$every_wall / $none_wall:.3f}x')")" "$count" "$stall_med" "$stall_max" "$delayed"
done
{
  echo "{\"bench\": \"every\", \"when\": \"$(date -u +%FT%TZ)\", \"host\": \"$(hostname)\", \"cpus\": $(nproc),"
  echo " \"step_delay_ms\": $STEP_DELAY, \"results\": ["
  (IFS=,; echo "${results[*]}")
  echo "]}"
} > "$OUT"
echo "results: $OUT"
