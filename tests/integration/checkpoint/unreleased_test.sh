#!/usr/bin/env bash
# A --leave-running dump after which the CRIU plugin failed to put the process's CUDA state back
# (GCR_PLUGIN_FAULT=skip-release plays it): CRIU calls the dump a success anyway. gcr must notice,
# restore and unlock the process itself, say so, and the process must finish its run with the
# checksum of an uninterrupted one — for gcr's checkpoints and for the --stop-copy baseline.
#
#   unreleased_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
BUILD=$(cd "$1" && pwd)
[[ $(id -u) == 0 ]] || { echo "SKIP: CRIU needs root"; exit 77; }
GCR=$BUILD/bin/gcr
[[ -x $GCR && -x $BUILD/bin/gcrd ]] || { echo "FAIL: gcr or gcrd not built in $BUILD"; exit 1; }

for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
done
T=$(mktemp -d /var/tmp/gcr-unreleased-test.XXXXXX)
export GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock GCR_WORK_DIR=$T/work GCR_QUIET=1
export SIMGPU_DEVICES=1 SIMGPU_MEMORY=1G
export GCR_PLUGIN_FAULT=skip-release  # gcrd passes its environment on to CRIU and the plugin
MLP=("$BUILD/tests/workloads/mlp_train" --steps 100 --step-delay-ms 10 --footprint 8M)
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
  if [[ $rc != 0 ]]; then
    echo "--- logs (kept in $T) ---"
    tail -n 5 "$T"/*.log 2>/dev/null || true
  else
    rm -rf "$T"
  fi
  exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(awk '/^checksum/ {print $2}' "$T/ref.log")

for mode in gcr stop-copy; do
  log=$T/$mode.log
  setsid "$GCR" run -- "${MLP[@]}" >> "$log" 2>&1 < /dev/null &
  P=$!
  pids+=("$P")
  for _ in $(seq 1 500); do [[ $(grep -c '^step' "$log") -ge 20 ]] && break; sleep 0.02; done
  flags=(-R)
  [[ $mode == stop-copy ]] && flags+=(--stop-copy)
  timeout 120 "$GCR" checkpoint "$P" "${flags[@]}" 2> "$T/$mode.err" > /dev/null || fail "$mode: checkpoint: $(cat "$T/$mode.err")"
  grep -q "gcrd restored and unlocked it" "$T/$mode.err" || fail "$mode: no warning that the plugin left the process checkpointed: $(cat "$T/$mode.err")"
  for _ in $(seq 1 1500); do grep -q '^checksum' "$log" && break; sleep 0.02; done
  [[ $(awk '/^checksum/ {print $2}' "$log") == "$REF" ]] || fail "$mode: the process did not finish its run with $REF (steps: $(grep -c '^step' "$log"))"
  echo "ok: $mode: repaired, warned, and the run finished with $REF"
done
echo "PASS"
