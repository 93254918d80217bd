#!/usr/bin/env bash
# Description: dump and restore of a workload under a seccomp filter: CRIU seizes its threads with
# PTRACE_O_SUSPEND_SECCOMP, the plugin clears the options to run the restore thread and puts that
# option back (Note [Restore thread]); CRIU then dumps and restores the filter, and the workload
# ends with the uninterrupted checksum, still filtered. The filter allows every call, so this shows
# the seccomp path works end to end, not that a missing option would be caught.
source "$(dirname "$0")/lib.sh"
SECCOMP_EXEC=${5:?usage: seccomp_test.sh CRIU PLUGIN_DIR SIMGPU_DIR MLP_TRAIN SECCOMP_EXEC}

start_baseline

step "start mlp_train under seccomp"
: >"$WORK/run.out"
LD_LIBRARY_PATH=$SIMGPU_DIR setsid "$SECCOMP_EXEC" "$MLP" "${MLP_ARGS[@]}" --step-delay-ms 20 \
  </dev/null >>"$WORK/run.out" 2>>"$WORK/run.err" &
PID=$!
PIDS+=("$PID")
wait_steps "$WORK/run.out" 10
grep -q "^Seccomp:[[:space:]]*2" "/proc/$PID/status" || fail "the workload is not under a seccomp filter"

step "criu dump (pid $PID)"
dump img || fail "criu dump failed"
at=$(last_step "$WORK/run.out")
wait_gone "$PID"
log_has "$WORK/img.dump.log" "checkpointed CUDA in pid $PID"

step "criu restore -d (dumped at step $at)"
restore img || fail "criu restore failed"
log_has "$WORK/img.restore.log" "restored CUDA in pid $PID"
grep -q "^Seccomp:[[:space:]]*2" "/proc/$PID/status" || fail "the restored workload lost its seccomp filter"
got=$(wait_checksum "$WORK/run.out")
wait_gone "$PID"
baseline_wait
want=$WANT
[[ $got == "$want" ]] || fail "checksum $got, want $want"
step "ok: checksum $got"
