#!/usr/bin/env bash
# container_bench: runc checkpoint and restore of a container running `gcr run mlp_train`, through
# gcr's CRIU plugin and gcrd, against the baseline the same plugin gives without gcrd
# (GCR_PLUGIN_GCRD=off: the driver copies device memory into the process, CRIU dumps it: what
# cuda-checkpoint + CRIU do), in the same run, at each footprint:
#
#   checkpoint   `runc checkpoint` wall time (the container ends)
#   images       what runc's images directory holds (MiB)
#   restore      `runc restore -d` wall time
#   first step   restore start -> the restored run's next step line (it reads all its device
#                memory every step, so this includes loading everything on demand)
#   -R stall     `runc checkpoint --leave-running`: the longest gap between two steps of the
#                program's own clock around the checkpoint, minus its step delay
#
#   bench/container_bench.sh [--build DIR] [--footprints 256M,1G | --quick]   (root, runc, CRIU)
#
# Prints a table with baseline/gcr ratios and writes bench/results/container-<time>.json. Nothing
# is asserted about time; exit 1 only when a checkpoint or restore failed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=$HERE/../build
FOOTPRINTS=256M,1G
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) BUILD_DIR=$2; shift 2 ;;
    --footprints) FOOTPRINTS=$2; shift 2 ;;
    --quick) FOOTPRINTS=64M,256M; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "container_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
TEST_NAME=container-bench
export SIMGPU_MEMORY=8G
source "$HERE/../tests/integration/containers/lib.sh" "$BUILD_DIR"
command -v runc > /dev/null || skip "runc is missing"
RESULTS=$HERE/results/container-$(date -u +%Y-%m-%dT%H%M%S).json
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
DELAY=20
start_gcrd "$GCR_GCRD_SOCKET"

rows=()
n=0
# one MODE FOOTPRINT: checkpoint + restore, then a -R checkpoint of a fresh container.
one() {
  local mode=$1 fp=$2 env=() name log t0 t1 t2 ckpt_ms rest_ms first_ms images stall before
  [[ $mode == baseline ]] && env=(env GCR_PLUGIN_GCRD=off)
  n=$((n + 1))
  name=bench$n
  log=$T/$name.log
  make_bundle "$T/$name" "$log" "$GCR" run -- "$BUILD/tests/workloads/mlp_train" --steps 100000 \
    --step-delay-ms $DELAY --footprint "$fp"
  runc run -d --bundle "$T/$name" "$name" > /dev/null 2>&1 < /dev/null || fail "runc run"
  containers+=("$name")
  wait_steps "$log" 10
  t0=$(now_ms)
  "${env[@]}" runc --criu "$CRIU" checkpoint --image-path "$T/$name-img" --work-path "$T/$name-w" "$name" ||
    fail "$mode checkpoint at $fp"
  t1=$(now_ms)
  ckpt_ms=$((t1 - t0))
  images=$(du -sm "$T/$name-img" | cut -f1)
  before=$(steps_in "$log")
  t0=$(now_ms)
  "${env[@]}" runc --criu "$CRIU" restore -d --image-path "$T/$name-img" --work-path "$T/$name-r" \
    --bundle "$T/$name" "$name-r" > /dev/null 2>&1 < /dev/null || fail "$mode restore at $fp"
  t1=$(now_ms)
  containers+=("$name-r")
  rest_ms=$((t1 - t0))
  while (( $(steps_in "$log") <= before )); do sleep 0.002; done
  first_ms=$(( $(now_ms) - t0 ))
  # -R: the program's own step gaps around a live checkpoint
  before=$(steps_in "$log")
  "${env[@]}" runc --criu "$CRIU" checkpoint --leave-running --image-path "$T/$name-img2" \
    --work-path "$T/$name-w2" "$name-r" || fail "$mode --leave-running checkpoint at $fp"
  wait_steps "$log" $((before + 5))
  stall=$(awk -v from="$before" -v d=$DELAY '/^step /{ if (n >= from - 2 && prev != "") { g = $6 - prev - d; if (g > m) m = g } prev = $6; n++ } END { printf "%.0f", m }' "$log")
  runc delete -f "$name-r" > /dev/null 2>&1 || true
  rm -rf "$T/$name-img" "$T/$name-img2"
  printf '%-9s %-6s checkpoint %6d ms  images %6d MiB  restore %6d ms  first step %6d ms  -R stall %6d ms\n' \
    "$mode" "$fp" "$ckpt_ms" "$images" "$rest_ms" "$first_ms" "$stall"
  rows+=("{\"mode\":\"$mode\",\"footprint\":\"$fp\",\"checkpoint_ms\":$ckpt_ms,\"images_mib\":$images,\"restore_ms\":$rest_ms,\"first_step_ms\":$first_ms,\"stall_R_ms\":$stall}")
  eval "R_${mode}_${fp}=($ckpt_ms $images $rest_ms $first_ms $stall)"
}

IFS=, read -ra FPS <<< "$FOOTPRINTS"
for fp in "${FPS[@]}"; do
  one gcr "$fp"
  one baseline "$fp"
done
echo
echo "baseline / gcr (higher: gcr better)"
for fp in "${FPS[@]}"; do
  eval "g=(\"\${R_gcr_${fp}[@]}\"); b=(\"\${R_baseline_${fp}[@]}\")"
  awk -v fp="$fp" -v gc="${g[0]}" -v bc="${b[0]}" -v gi="${g[1]}" -v bi="${b[1]}" -v gr="${g[3]}" -v br="${b[3]}" -v gs="${g[4]}" -v bs="${b[4]}" \
    'function r(b, g) { return g > 0 ? sprintf("%.1fx", b / g) : "inf" }
     BEGIN { printf "%-6s checkpoint %s  images %s  restore to first step %s  -R stall %s\n", fp, r(bc, gc), r(bi, gi), r(br, gr), r(bs, gs) }'
done
mkdir -p "$(dirname "$RESULTS")"
{
  echo "{\"bench\":\"container\",\"host\":\"$(hostname)\",\"cpus\":$(nproc),\"step_delay_ms\":$DELAY,\"rows\":["
  (IFS=,; echo "${rows[*]}")
  echo "]}"
} > "$RESULTS"
echo "results: $RESULTS"
