#!/usr/bin/env bash
# Description: a process that never uses CUDA dumps and restores with the plugin loaded: every
# hook answers "not mine" (-ENOTSUP), the image does not name the plugin, and so it also restores
# without it.
source "$(dirname "$0")/lib.sh"

step "start sleep"
setsid sleep 100 </dev/null >/dev/null 2>&1 &
PID=$!
PIDS+=("$PID")
sleep 0.2

step "criu dump (pid $PID)"
dump img || fail "criu dump failed"
wait_gone "$PID"
log_has "$WORK/img.dump.log" "pid $PID is not a CUDA process"
if grep -qa gcr_criu_plugin "$WORK/img/inventory.img"; then fail "the inventory names the plugin"; fi

step "criu restore -d with the plugin"
restore img || fail "criu restore failed"
log_has "$WORK/img.restore.log" "disabled: the image was not dumped with gcr_criu_plugin"
alive "$PID" || fail "the restored sleep is not running"
kill -9 "$PID"
wait_gone "$PID"

step "criu restore -d without the plugin"
"$CRIU" restore -D "$WORK/img" -d -v4 -o "$WORK/img.restore2.log" || fail "criu restore without the plugin failed"
alive "$PID" || fail "the restored sleep is not running"
step "ok"
