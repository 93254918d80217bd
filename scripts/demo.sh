#!/usr/bin/env bash
# The main job: set up (packages, CRIU, build), then show gcr's whole story on the GPU — the
# simulated one (simgpu) when this machine has no NVIDIA driver:
#   1. train mlp_train once without gcr: the reference checksum;
#   2. train it again under `gcr run`, checkpoint it while it runs (--leave-running), then kill it;
#   3. `gcr restore` the checkpoint: the run resumes where the checkpoint was taken and finishes
#      with the reference checksum, bit for bit.
#
#   scripts/demo.sh [--steps N] [--footprint SIZE] [--no-setup]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${GCR_BUILD_DIR:-build}"

STEPS=300
FOOTPRINT=256M
SETUP=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --footprint) FOOTPRINT="$2"; shift 2 ;;
        --no-setup) SETUP=0; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "demo.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
(( STEPS >= 60 )) || { echo "demo.sh: --steps must be at least 60" >&2; exit 2; }

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [[ $SETUP == 1 ]]; then
    say "set-up: packages, CRIU, and a build of what the demo runs (idempotent)"
    bash scripts/setup.sh --demo
fi

B="$ROOT/$BUILD_DIR"
GCR="$B/bin/gcr"
MLP=("$B/tests/workloads/mlp_train" --steps "$STEPS" --footprint "$FOOTPRINT" --step-delay-ms 10 --streams 2)
[[ -x "$GCR" && -x "${MLP[0]}" ]] || { echo "demo.sh: gcr is not built in $B; run scripts/setup.sh" >&2; exit 1; }

# grep reads all of ldconfig's list (no -q): under pipefail, a grep that left at the first match
# could fail ldconfig's next write (SIGPIPE) and so the test.
if [[ -e /dev/nvidiactl ]] && ldconfig -p 2>/dev/null | grep 'libcuda.so.1 ' >/dev/null; then
    BACKEND="the NVIDIA driver"
    DIRECT=()
else
    BACKEND="simgpu (a simulated H200; no NVIDIA driver found)"
    DIRECT=(env "LD_LIBRARY_PATH=$B/simgpu")
    export SIMGPU_DEVICES=${SIMGPU_DEVICES:-2} SIMGPU_MEMORY=${SIMGPU_MEMORY:-8G}
fi

# Close what this shell inherited beyond stdio (ctest leaves its log file open in the tests it
# runs): a workload inheriting such a file would make CRIU's restore check that file's size.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
done
# A private store, daemon and scratch space, so the demo leaves nothing behind.
D=$(mktemp -d /var/tmp/gcr-demo.XXXXXX)
export GCR_STORE=$D/store GCR_GCRD_SOCKET=$D/gcrd.sock GCR_WORK_DIR=$D/work GCR_QUIET=1
P=""
cleanup() {
    [[ -n $P ]] && kill -9 "$P" 2>/dev/null || true
    pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
checksum_of() { awk '/^checksum/ {c=$2} END {print c}' "$1"; }
last_step() { awk '/^step/ {s=$2} END {print s+0}' "$1"; }
wait_step() { while (( $(last_step "$1") < $2 )); do sleep 0.05; done; }

say "1. mlp_train on $BACKEND without gcr: $STEPS steps, $FOOTPRINT of device memory"
"${DIRECT[@]}" "${MLP[@]}" > "$D/reference.log"
REF=$(checksum_of "$D/reference.log")
echo "reference checksum $REF"

if [[ $(id -u) != 0 ]]; then
    say "checkpoint/restore needs root (CRIU); run the demo as root to see steps 2 and 3"
    exit 0
fi

say "2. the same run under gcr, checkpointed live at step $((STEPS / 4)), killed at step $((STEPS / 2))"
"$GCR" run -- "${MLP[@]}" > "$D/run.log" 2>&1 &
P=$!
disown "$P"  # the kill below is part of the story, not news for the shell
wait_step "$D/run.log" $((STEPS / 4))
"$GCR" checkpoint "$P" --name demo --leave-running
wait_step "$D/run.log" $((STEPS / 2))
kill -9 "$P"
while [[ -e /proc/$P ]]; do sleep 0.05; done
echo "process $P killed at step $(last_step "$D/run.log") of $STEPS"
"$GCR" ps

say "3. gcr restore demo: the run resumes from the checkpoint"
"$GCR" restore demo
while kill -0 "$P" 2>/dev/null; do sleep 0.1; done
GOT=$(checksum_of "$D/run.log")
"$GCR" image ls

say "result"
if [[ -n $GOT && $GOT == "$REF" ]]; then
    echo "restored run finished with checksum $GOT: bit-identical to the uninterrupted run"
else
    echo "restored run finished with checksum '${GOT}', expected $REF" >&2
    exit 1
fi
