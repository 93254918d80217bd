#!/usr/bin/env bash
# Description: restore onto the other simulated GPU with GCR_DEVICE_MAP=0=1 (two devices): the
# plugin resolves the ordinals to UUIDs through the driver and passes them as gpuPairs; the
# workload ends with the uninterrupted checksum. Before that, two restores that cannot succeed
# fail and leave no process behind: a malformed map (refused at plugin init) and a map the
# driver rejects (a GPU that is not there; the plugin kills the task, so criu restore fails).
source "$(dirname "$0")/lib.sh"
export SIMGPU_DEVICES=2

start_baseline

step "start mlp_train on device 0"
start_mlp run
wait_steps "$WORK/run.out" 10

step "criu dump (pid $PID)"
dump img || fail "criu dump failed"
at=$(last_step "$WORK/run.out")
wait_gone "$PID"

step "restore with a malformed GCR_DEVICE_MAP fails at init"
if GCR_DEVICE_MAP="0=1=2" restore img 2>/dev/null; then fail "restore with GCR_DEVICE_MAP=0=1=2 succeeded"; fi
log_has "$WORK/img.restore.log" "GCR_DEVICE_MAP entry '0=1=2'"
if alive "$PID"; then fail "pid $PID runs after a refused restore"; fi

step "restore with a map the driver rejects fails, leaving nothing running"
bogus=GPU-00000000-0000-0000-0000-000000000000
if GCR_DEVICE_MAP="$bogus=1" restore img 2>/dev/null; then fail "restore from an absent GPU succeeded"; fi
log_has "$WORK/img.restore.log" "cuCheckpointProcessRestore(pid $PID): CUDA_ERROR_INVALID_DEVICE"
log_has "$WORK/img.restore.log" "killed it so that the restore fails"
wait_gone "$PID"
[[ $(last_step "$WORK/run.out") == "$at" ]] || fail "the failed restore ran steps"

step "criu restore with GCR_DEVICE_MAP=0=1 (dumped at step $at)"
GCR_DEVICE_MAP=0=1 restore img || fail "criu restore failed"
log_has "$WORK/img.restore.log" "GCR_DEVICE_MAP: 0 (GPU-"
log_has "$WORK/img.restore.log" "restored CUDA in pid $PID"
got=$(wait_checksum "$WORK/run.out")
wait_gone "$PID"
baseline_wait
want=$WANT
[[ $got == "$want" ]] || fail "checksum $got on device 1, want $want"
# Not checked: the exit status. simgpu moves the contexts to device 1, so the workload's closing
# cuDevicePrimaryCtxRelease(0) fails after its results are out (a real driver keeps the process's
# ordinals, NVIDIA/cuda-checkpoint#48); see plugin_hooks_test.cpp.
step "ok: checksum $got"
