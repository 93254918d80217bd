#!/usr/bin/env bash
# Description: plain `criu dump -R` by hand, GCR_LEAVE_RUNNING unset: the plugin reads -R from
# criu's command line (Note [Leave running]), gives the process its CUDA state back, and it
# finishes with the uninterrupted checksum.
source "$(dirname "$0")/lib.sh"
unset GCR_LEAVE_RUNNING

start_baseline

step "start mlp_train"
start_mlp run
wait_steps "$WORK/run.out" 10

step "criu dump -R (pid $PID)"
dump img -R || fail "criu dump failed"
log_has "$WORK/img.dump.log" "-R on criu's command line"
log_has "$WORK/img.dump.log" "pid $PID is back to RUNNING"
got=$(wait_checksum "$WORK/run.out")
wait_gone "$PID"
baseline_wait
want=$WANT
[[ $got == "$want" ]] || fail "checksum $got, want $want"
step "ok: checksum $got"
