#!/usr/bin/env bash
# Description: plain `criu dump` (the process is killed) then `criu restore -d`, both through
# gcr's plugin with no device step done by hand: the plugin locks and checkpoints the CUDA state
# at dump and names itself in the image's inventory, so a restore without it is refused; with it,
# it restores and unlocks the CUDA state, and the workload ends with the checksum of an
# uninterrupted run.
source "$(dirname "$0")/lib.sh"

start_baseline

step "start mlp_train"
start_mlp run
wait_steps "$WORK/run.out" 10

step "criu dump (pid $PID)"
dump img || fail "criu dump failed"
at=$(last_step "$WORK/run.out")
wait_gone "$PID"
log_has "$WORK/img.dump.log" "paused CUDA in pid $PID"
log_has "$WORK/img.dump.log" "checkpointed CUDA in pid $PID"
log_has "$WORK/img.dump.log" "leaving CUDA processes checkpointed"
grep -qa gcr_criu_plugin "$WORK/img/inventory.img" || fail "the inventory does not list the plugin"
(( at < 149 )) || fail "the workload finished before the dump (step $at)"

step "criu restore without the plugin is refused (the inventory requires it)"
mkdir "$WORK/no-plugins"
if "$CRIU" restore -D "$WORK/img" -L "$WORK/no-plugins" -d -v4 -o "$WORK/img.noplugin.log" 2>/dev/null; then
  fail "criu restore without the plugin succeeded"
fi
log_has "$WORK/img.noplugin.log" "Missing required plugin: gcr_criu_plugin"
wait_gone "$PID"

step "criu restore -d (dumped at step $at)"
restore img || fail "criu restore failed"
log_has "$WORK/img.restore.log" "restored CUDA in pid $PID"
got=$(wait_checksum "$WORK/run.out")
wait_gone "$PID"
baseline_wait
want=$WANT
[[ $got == "$want" ]] || fail "checksum $got after restore, want $want"
grep -q "^step $((at + 1)) " "$WORK/run.out" || fail "no step after $at once restored"
step "ok: checksum $got"
