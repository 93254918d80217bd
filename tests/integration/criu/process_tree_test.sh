#!/usr/bin/env bash
# Description: a process tree whose root does not use CUDA and whose child does: PAUSE_DEVICES
# answers "not mine" for the root and locks the child (found while CRIU walks the tree),
# CHECKPOINT_DEVICES and RESUME_DEVICES_LATE act on the child only, and the child ends with the
# uninterrupted checksum after dump and restore.
source "$(dirname "$0")/lib.sh"

start_baseline

step "start sh -> mlp_train"
: >"$WORK/run.out"
LD_LIBRARY_PATH=$SIMGPU_DIR setsid sh -c '"$@"; echo "child exited $?"' sh "$MLP" "${MLP_ARGS[@]}" \
  --step-delay-ms 20 </dev/null >>"$WORK/run.out" 2>>"$WORK/run.err" &
PID=$!
PIDS+=("$PID")
wait_steps "$WORK/run.out" 10
CHILD=$(pgrep -P "$PID" mlp_train) || fail "no mlp_train under sh $PID"
PIDS+=("$CHILD")

step "criu dump (sh $PID, mlp_train $CHILD)"
dump img || fail "criu dump failed"
at=$(last_step "$WORK/run.out")
wait_gone "$PID"
wait_gone "$CHILD"
log_has "$WORK/img.dump.log" "pid $PID is not a CUDA process"
log_has "$WORK/img.dump.log" "paused CUDA in pid $CHILD"
log_has "$WORK/img.dump.log" "checkpointed CUDA in pid $CHILD"

step "criu restore -d (dumped at step $at)"
restore img || fail "criu restore failed"
log_has "$WORK/img.restore.log" "restored CUDA in pid $CHILD"
got=$(wait_checksum "$WORK/run.out")
wait_gone "$CHILD"
wait_gone "$PID"
baseline_wait
want=$WANT
[[ $got == "$want" ]] || fail "checksum $got, want $want"
grep -q "^child exited 0" "$WORK/run.out" || fail "the restored child did not exit 0"
step "ok: checksum $got"
