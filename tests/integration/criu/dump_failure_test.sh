#!/usr/bin/env bash
# Description: a dump that fails after the device steps (CRIU's own fault injection,
# CRIU_FAULT=3: dumping memory pages fails, after PAUSE_DEVICES and CHECKPOINT_DEVICES): the
# plugin's exit(DUMP) restores and unlocks the process, which runs on and finishes with the
# uninterrupted checksum.
source "$(dirname "$0")/lib.sh"

start_baseline

step "start mlp_train"
start_mlp run
wait_steps "$WORK/run.out" 10

step "criu dump with CRIU_FAULT=3 (pid $PID)"
if CRIU_FAULT=3 dump img; then fail "criu dump succeeded despite CRIU_FAULT=3"; fi
log_has "$WORK/img.dump.log" "fault: Dump VMA pages failure"
log_has "$WORK/img.dump.log" "checkpointed CUDA in pid $PID"
log_has "$WORK/img.dump.log" "putting paused CUDA processes back (the dump failed"
log_has "$WORK/img.dump.log" "pid $PID is back to RUNNING"
at=$(last_step "$WORK/run.out")
alive "$PID" || fail "the process died with the failed dump"
wait_steps "$WORK/run.out" $((at + 3))

got=$(wait_checksum "$WORK/run.out")
wait_gone "$PID"
baseline_wait
want=$WANT
[[ $got == "$want" ]] || fail "checksum $got after the failed dump, want $want"
step "ok: checksum $got"
