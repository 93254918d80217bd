#!/usr/bin/env bash
# What the checkpoint tests of py_train.py and data_workers rely on: their checksums depend only
# on the flags that change the math. py_train.py: the same with a primary context and with
# cuCtxCreate, and under `gcr run`; data_workers: the same with 1 and 3 workers, and under
# `gcr run`. No root needed.
#
#   deterministic_test.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SCRIPT=$(cd "$(dirname "$0")/../../workloads" && pwd)/py_train.py
KERNELS=$BUILD/tests/workloads/libpy_kernels.so
DW=$BUILD/tests/workloads/data_workers
export SIMGPU_DEVICES=1 SIMGPU_MEMORY=256M GCR_QUIET=1
T=$(mktemp -d /var/tmp/gcr-programs-det.XXXXXX)
trap 'rm -rf "$T"' EXIT
export GCR_WORK_DIR=$T/work GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock
PY=$(python3 -c 'import sys; print(sys.executable)')

fail() { echo "FAIL: $*"; exit 1; }
run() {  # LABEL CMD...: run it, set SUM to its checksum (fail on a bad exit or none)
  local label=$1 rc=0
  shift
  timeout -k 5 120 "$@" > "$T/$label.log" 2>&1 || rc=$?
  [[ $rc == 0 ]] || fail "$label: exit $rc: $(tail -n 5 "$T/$label.log")"
  SUM=$(awk '/^checksum/ {c = $2} END {print c}' "$T/$label.log")
  [[ -n $SUM ]] || fail "$label: no checksum: $(tail -n 5 "$T/$label.log")"
}
SIM=(env LD_LIBRARY_PATH="$BUILD/simgpu")

PYT=("$PY" "$SCRIPT" --kernels "$KERNELS" --steps 40 --state-bytes 65536)
run py-primary "${SIM[@]}" "${PYT[@]}"; a=$SUM
run py-create "${SIM[@]}" "${PYT[@]}" --context create --step-delay-ms 3; b=$SUM
run py-gcr "$BUILD/bin/gcr" run -- "${PYT[@]}"; c=$SUM
[[ $a == "$b" && $a == "$c" ]] || fail "py_train.py: primary $a, cuCtxCreate $b, under gcr $c"
run py-seed "${SIM[@]}" "${PYT[@]}" --seed 2; d=$SUM
[[ $d != "$a" ]] || fail "py_train.py: --seed 2 gives the checksum of --seed 1"
echo "ok: py_train.py checksum $a (primary context, cuCtxCreate, under gcr)"

run dw-2 "${SIM[@]}" "$DW" --steps 50; a=$SUM
run dw-1 "${SIM[@]}" "$DW" --steps 50 --workers 1; b=$SUM
run dw-3 "${SIM[@]}" "$DW" --steps 50 --workers 3 --step-delay-ms 2; c=$SUM
run dw-gcr "$BUILD/bin/gcr" run -- "$DW" --steps 50 --workers 2; d=$SUM
[[ $a == "$b" && $a == "$c" && $a == "$d" ]] || fail "data_workers: 2 workers $a, 1 worker $b, 3 workers $c, under gcr $d"
echo "ok: data_workers checksum $a (1, 2, 3 workers, under gcr)"
ls /dev/shm | grep '^gcr-data-workers-' > /dev/null && fail "data_workers left its ring in /dev/shm"
echo "PASS"
