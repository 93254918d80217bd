#!/usr/bin/env bash
# Description: `criu dump --leave-running` with GCR_LEAVE_RUNNING=1 (as gcr runs it): the plugin
# restores and unlocks the CUDA state in exit(DUMP), so the original runs on and finishes with the
# uninterrupted checksum; meanwhile the image is restored into a new PID namespace (the original
# still holds the PID: `unshare --pid --fork --mount-proc criu restore` without -d, DESIGN.md §5)
# and that copy finishes with the same checksum.
source "$(dirname "$0")/lib.sh"

start_baseline

step "start mlp_train"
start_mlp run
wait_steps "$WORK/run.out" 10

step "criu dump --leave-running (pid $PID)"
GCR_LEAVE_RUNNING=1 dump img --leave-running || fail "criu dump failed"
at=$(last_step "$WORK/run.out")
log_has "$WORK/img.dump.log" "putting paused CUDA processes back (they keep running; GCR_LEAVE_RUNNING=1)"
log_has "$WORK/img.dump.log" "pid $PID is back to RUNNING"
alive "$PID" || fail "the original died at dump"
wait_steps "$WORK/run.out" $((at + 3))

# The original keeps appending to its (renamed) file; the copy appends to a new one at the path
# the image names.
mv "$WORK/run.out" "$WORK/original.out"
: >"$WORK/run.out"

step "criu restore in a new PID namespace while the original runs (dumped at step $at)"
unshare --pid --fork --kill-child --mount-proc "$CRIU" restore -D "$WORK/img" -L "$PLUGIN_DIR" -v4 \
  -o "$WORK/img.restore.log" &
RESTORER=$!
PIDS+=("$RESTORER")

got_original=$(wait_checksum "$WORK/original.out")
wait_gone "$PID"
baseline_wait
want=$WANT
[[ $got_original == "$want" ]] || fail "the original ended with checksum $got_original, want $want"

rc=0
wait "$RESTORER" || rc=$?
[[ $rc == 0 ]] || fail "criu restore (the restored copy) exited $rc"
log_has "$WORK/img.restore.log" "restored CUDA in pid $PID"
got=$(wait_checksum "$WORK/run.out")
[[ $got == "$want" ]] || fail "the restored copy ended with checksum $got, want $want"
# The original ran on while CRIU finished, so the dump is at step $at or a little before.
first=$(awk '/^step /{print $2; exit}' "$WORK/run.out")
((first > 10 && first <= at + 1)) || fail "the copy started at step $first, not where it was dumped (<= $at)"
step "ok: original and restored copy both end with $got"
