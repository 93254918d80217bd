#!/usr/bin/env bash
# A --leave-running dump after which the CRIU plugin failed to put the process's CUDA state back
# (GCR_PLUGIN_FAULT=skip-release plays it): CRIU calls the dump a success anyway. gcr must notice,
# restore and unlock the process itself, say so, and the process must finish its run with the
# checksum of an uninterrupted one — for gcr's checkpoints and for the --stop-copy baseline.
#
#   unreleased_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=unreleased-test
source "$(dirname "$0")/lib.sh"
export GCR_PLUGIN_FAULT=skip-release  # gcrd passes its environment on to CRIU and the plugin
# A run steps slowly and holds before its last step while $T/slow exists (made before it starts,
# removed once its checkpoint is over): none finds the run ended however slow the machine, and the
# rest, the restore and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps 100 --step-delay-ms 10 --footprint 8M
     --delay-while "$T/slow" --hold-while "$T/slow")

LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(awk '/^checksum/ {print $2}' "$T/ref.log")

for mode in gcr stop-copy; do
  log=$T/$mode.log
  : > "$T/slow"
  setsid "$GCR" run -- "${MLP[@]}" >> "$log" 2>&1 < /dev/null &
  P=$!
  pids+=("$P")
  for _ in $(seq 1 500); do [[ $(grep -c '^step' "$log") -ge 20 ]] && break; sleep 0.02; done
  flags=(-R)
  [[ $mode == stop-copy ]] && flags+=(--stop-copy)
  timeout 120 "$GCR" checkpoint "$P" "${flags[@]}" 2> "$T/$mode.err" > /dev/null || fail "$mode: checkpoint: $(cat "$T/$mode.err")"
  grep -q "gcrd restored and unlocked it" "$T/$mode.err" || fail "$mode: no warning that the plugin left the process checkpointed: $(cat "$T/$mode.err")"
  rm -f "$T/slow"
  for _ in $(seq 1 1500); do grep -q '^checksum' "$log" && break; sleep 0.02; done
  [[ $(awk '/^checksum/ {print $2}' "$log") == "$REF" ]] || fail "$mode: the process did not finish its run with $REF (steps: $(grep -c '^step' "$log"))"
  echo "ok: $mode: repaired, warned, and the run finished with $REF"
done
echo "PASS"
