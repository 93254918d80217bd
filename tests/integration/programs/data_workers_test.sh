#!/usr/bin/env bash
# data_workers (a CUDA trainer fed by forked CPU-only worker processes through an unlinked
# /dev/shm ring and pipes) under `gcr run`, started from this script's shell as a user would
# start it. gcr checkpoints the whole process tree, live twice and once for good, at random
# moments; every restore of trainer and workers must finish with the checksum of a run without
# gcr, bit for bit (lib.sh: checkpoint_scenarios).
#
#   data_workers_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=data-workers
source "$(dirname "$0")/lib.sh"
CMD=("$BUILD/tests/workloads/data_workers" --workers 3 --steps 120 --step-delay-ms 20)

echo "== reference: data_workers without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${CMD[@]}" > "$T/ref.log" 2>&1 || fail "reference run: $(tail -n 5 "$T/ref.log")"
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"
echo "reference checksum $REF"

checkpoint_scenarios dw "$REF" "${CMD[@]}"
echo "PASS"
