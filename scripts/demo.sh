#!/usr/bin/env bash
# The main job: set up (packages, CRIU, build), then train mlp_train on the GPU — the simulated
# one (simgpu) when this machine has no NVIDIA driver — and show that its result is bit-identical
# across runs and stream counts, which is what every checkpoint/restore test of gcr relies on.
#
#   scripts/demo.sh [--steps N] [--footprint SIZE] [--no-setup]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${GCR_BUILD_DIR:-build}"

STEPS=200
FOOTPRINT=256M
SETUP=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --footprint) FOOTPRINT="$2"; shift 2 ;;
        --no-setup) SETUP=0; shift ;;
        -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "demo.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [[ $SETUP == 1 ]]; then
    say "set-up: packages, CRIU, build (idempotent)"
    bash scripts/setup.sh
fi

# The GPU: a real NVIDIA driver when there is one, else simgpu's libcuda.so.1.
if [[ -e /dev/nvidiactl ]] && ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
    BACKEND="NVIDIA driver"
    export -n LD_LIBRARY_PATH 2>/dev/null || true
else
    BACKEND="simgpu (a simulated H200; no NVIDIA driver found)"
    export LD_LIBRARY_PATH="$ROOT/$BUILD_DIR/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
MLP="$ROOT/$BUILD_DIR/tests/workloads/mlp_train"
[[ -x "$MLP" ]] || { echo "demo.sh: $MLP not built; run scripts/setup.sh" >&2; exit 1; }

say "mlp_train on $BACKEND: $STEPS steps, footprint $FOOTPRINT, 1 stream"
start=$SECONDS
"$MLP" --steps "$STEPS" --footprint "$FOOTPRINT" --streams 1 | tee /tmp/gcr-demo-1.log | awk 'NR % 50 == 1 || /checksum|final_loss/'
say "again with 4 streams (different scheduling, same arithmetic)"
"$MLP" --steps "$STEPS" --footprint "$FOOTPRINT" --streams 4 --quiet | tee /tmp/gcr-demo-4.log | grep -E 'checksum|final_loss'

a=$(awk '/^checksum/ {print $2}' /tmp/gcr-demo-1.log)
b=$(awk '/^checksum/ {print $2}' /tmp/gcr-demo-4.log)
say "result"
if [[ -n "$a" && "$a" == "$b" ]]; then
    echo "checksums identical ($a) in $((SECONDS - start)) s: the run is deterministic, so a restored run can be checked bit for bit"
else
    echo "checksums differ: 1 stream $a, 4 streams $b" >&2
    exit 1
fi
