#!/usr/bin/env bash
# py_train.py (a Python training loop on the driver API through ctypes: a data thread, a printer
# thread, gc.collect(), an anonymous mmap per batch, small allocations every step) under
# `gcr run`, started from this script's shell as a user would start it. Checkpointed live twice
# and once for good at random moments; every restore must finish with the checksum of a run
# without gcr, bit for bit (lib.sh: checkpoint_scenarios).
#
#   py_train_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=py-train
source "$(dirname "$0")/lib.sh"
SCRIPT=$(cd "$(dirname "$0")/../../workloads" && pwd)/py_train.py
KERNELS=$BUILD/tests/workloads/libpy_kernels.so
[[ -f $KERNELS ]] || fail "$KERNELS is not built (target py_kernels)"
# The interpreter itself, not a wrapper script (pyenv's shims are bash scripts that exec it).
PY=$(python3 -c 'import sys; print(sys.executable)')
CMD=("$PY" "$SCRIPT" --kernels "$KERNELS" --steps 100 --step-delay-ms 25)

echo "== reference: py_train.py without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${CMD[@]}" > "$T/ref.log" 2>&1 || fail "reference run: $(tail -n 5 "$T/ref.log")"
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"
echo "reference checksum $REF"

checkpoint_scenarios py "$REF" "${CMD[@]}"
echo "PASS"
