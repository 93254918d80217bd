#!/usr/bin/env bash
# A CUDA process under gcr that holds no device memory (a context only) is parked like any other
# at a checkpoint; its restore must give it that empty park back, or its next CUDA call waits at
# its closed gate for ever. context_only, started from a shell with its output appended to a log:
# a stopping checkpoint restored, and a live one restored after the original is killed; both run
# to the uninterrupted run's checksum.
#
#   no_device_memory_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=no-device-memory
source "$(dirname "$0")/lib.sh"
APP=("$BUILD/tests/workloads/context_only" --steps 150 --step-delay-ms 20)
LD_LIBRARY_PATH=$BUILD/simgpu "${APP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "the reference printed no checksum"
log=$T/run.log

start_run() {
  : > "$log"
  bash -c "exec \"$GCR\" run -- ${APP[*]} >> \"$log\" 2>&1" &
  p=$!
  pids+=("$p")
}
restored_runs_to_the_end() {  # NAME: restore it, and the log ends with the reference checksum
  local len r
  len=$(stat -c %s "$log")
  "$GCR" restore "$1" --json > "$T/r.json" || fail "restore $1"
  r=$(json_field pid < "$T/r.json")
  for _ in $(seq 1 1500); do kill -0 "$r" 2>/dev/null || break; sleep 0.02; done
  kill -0 "$r" 2>/dev/null && fail "restore $1: the restored process is still there after 30 s (stuck at its gate?): $(tail -n 2 "$log")"
  [[ $(checksum_after "$log" "$len") == "$REF" ]] ||
    fail "restore $1: checksum '$(checksum_after "$log" "$len")', expected $REF"
  echo "ok: $1 restored, and it ran to the uninterrupted run's checksum"
}

echo "== a stopping checkpoint"
start_run
wait_steps "$log" 20
"$GCR" checkpoint "$p" --name stop --json > "$T/stop.json" || fail "checkpoint"
[[ $(json_field regions < "$T/stop.json") == 0 ]] || fail "the process held device memory: $(cat "$T/stop.json")"
restored_runs_to_the_end stop

echo "== a live checkpoint, the original killed"
start_run
wait_steps "$log" 20
"$GCR" checkpoint "$p" -R --name live > /dev/null || fail "live checkpoint"
steps=$(steps_in "$log")
wait_steps "$log" $((steps + 5))  # the original runs on after it
kill -9 "$p"
wait "$p" 2>/dev/null || true
restored_runs_to_the_end live
echo "PASS"
