#!/usr/bin/env bash
# A forked child of a CUDA process that calls CUDA (a DataLoader worker touching a CUDA tensor)
# gets CUDA_ERROR_NOT_INITIALIZED for every call, cuInit included, at once rather than hanging or
# using its parent's context, and the parent's context still works: on simgpu, and under gcr's
# interposer (which leaves a forked child to the driver). data_workers --child-touches-cuda does
# the probing (data_workers/fork_probe.h); no root needed.
#
#   child_cuda_test.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
DW=$BUILD/tests/workloads/data_workers
[[ -x $DW && -x $BUILD/bin/gcr ]] || { echo "FAIL: data_workers or gcr not built in $BUILD"; exit 1; }
export SIMGPU_DEVICES=1 SIMGPU_MEMORY=256M GCR_QUIET=1
T=$(mktemp -d /var/tmp/gcr-child-cuda.XXXXXX)
trap 'rm -rf "$T"' EXIT
status=0

check() {  # LABEL CMD...: the probe must exit 0 within 60 s
  local label=$1 rc=0
  shift
  timeout -k 5 60 "$@" > "$T/out" 2>&1 || rc=$?
  sed "s/^/  $label: /" "$T/out"
  if [[ $rc == 124 || $rc == 137 ]]; then
    echo "FAIL: $label: the probe hung (killed after 60 s)"
    status=1
  elif [[ $rc != 0 ]]; then
    echo "FAIL: $label: exit $rc"
    status=1
  elif [[ $(grep -c -- '-> CUDA_ERROR_NOT_INITIALIZED' "$T/out") != 5 ]] ||
       ! grep -q '^parent_cuda: intact' "$T/out"; then
    echo "FAIL: $label: exit 0 but not five refused calls and an intact parent"
    status=1
  else
    echo "ok: $label"
  fi
}

check simgpu env LD_LIBRARY_PATH="$BUILD/simgpu" "$DW" --child-touches-cuda
GCR_WORK_DIR=$T/work GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock \
  check "gcr run" "$BUILD/bin/gcr" run -- "$DW" --child-touches-cuda
[[ $status == 0 ]] && echo "PASS"
exit $status
