#!/usr/bin/env bash
# Description: Note [Seizing per dump]. With the plugin loaded, `criu dump --freeze-cgroup` of a
# tree without CUDA is seized with the cgroup freezer as without the plugin: a frozen cgroup stays
# frozen through the dump (ptrace-interrupt mode would thaw it, "unfreezing cgroup for plugin
# compatibility"). A CUDA tree in a freezer cgroup is still seized with ptrace interrupts (its
# restore thread must run), and runs on with -R to the uninterrupted checksum.
source "$(dirname "$0")/lib.sh"
FREEZER=/sys/fs/cgroup/freezer
[[ -d $FREEZER && -w $FREEZER ]] || skip "no writable cgroup v1 freezer at $FREEZER"
CG=$FREEZER/gcr-freezer-test-$$
mkdir "$CG"
remove_cgroup() {
  echo THAWED > "$CG/freezer.state" 2>/dev/null || true
  for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  for _ in $(seq 1 100); do rmdir "$CG" 2>/dev/null && return; sleep 0.05; done
}
trap 'rc=$?; remove_cgroup; (exit $rc); cleanup' EXIT
freezer_state() { cat "$CG/freezer.state"; }

step "a frozen tree without CUDA"
setsid sh -c 'sleep 100 & sleep 100' </dev/null >/dev/null 2>&1 &
PID=$!
PIDS+=("$PID")
sleep 0.2
echo "$PID" > "$CG/cgroup.procs"
for c in $(cat "/proc/$PID/task/$PID/children"); do echo "$c" > "$CG/cgroup.procs"; done
echo FROZEN > "$CG/freezer.state"
for _ in $(seq 1 100); do [[ $(freezer_state) == FROZEN ]] && break; sleep 0.02; done
[[ $(freezer_state) == FROZEN ]] || fail "the cgroup did not freeze"
dump frozen -R --freeze-cgroup "$CG" || fail "criu dump --freeze-cgroup failed"
log_has "$WORK/frozen.dump.log" "no process in the tree of $PID maps a CUDA driver"
if grep -qF "unfreezing cgroup for plugin compatibility" "$WORK/frozen.dump.log"; then
  fail "the plugin made CRIU thaw a frozen tree without CUDA"
fi
[[ $(freezer_state) == FROZEN ]] || fail "the cgroup is $(freezer_state) after the dump, was FROZEN"
echo THAWED > "$CG/freezer.state"
kill -9 "$PID" $(cat "$CG/cgroup.procs") 2>/dev/null || true

step "a CUDA tree in a freezer cgroup"
start_baseline
start_mlp run
echo "$PID" > "$CG/cgroup.procs"
wait_steps "$WORK/run.out" 10
GCR_LEAVE_RUNNING=1 dump cuda -R --freeze-cgroup "$CG" || fail "criu dump of the CUDA tree failed"
if grep -qF "CRIU seizes it its own way" "$WORK/cuda.dump.log"; then
  fail "the plugin let the freezer seize a CUDA tree"
fi
log_has "$WORK/cuda.dump.log" "pid $PID is back to RUNNING"
got=$(wait_checksum "$WORK/run.out")
baseline_wait
[[ $got == "$WANT" ]] || fail "the CUDA tree ran on to $got, want $WANT"
step "ok"
