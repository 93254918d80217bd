#!/usr/bin/env bash
# A multi-process job under gcr (issue 13): mp_train's ranks share device memory through every
# path real programs use (POSIX fds over SCM_RIGHTS, pidfd_getfd, an owner's proxy export, CUDA
# IPC) and all-reduce with kernels that spin on each other's flags. Started from this script's
# shell under `gcr run`, with a lagging rank, it must finish bit-identical to the single-process
# reference on every rank (Note [IPC memory under gcr]: IPC works on gcr's VMM-backed memory).
# gcr does not checkpoint shared memory yet: a checkpoint of the launcher (the whole tree) or of
# one rank is refused before anything stops, naming the sharing, and the job runs on to the
# right result with no image left behind.
#
#   mp_train_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=mp-train
source "$(dirname "$0")/lib.sh"
MP=("$BUILD/tests/workloads/mp_train" --steps 150 --step-delay-ms 10 --quiet)

LD_LIBRARY_PATH=$BUILD/simgpu "${MP[@]}" --ranks 1 > "$T/ref.log" 2>&1 || fail "reference: $(tail -3 "$T/ref.log")"
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "the reference printed no checksum"
every_rank_matches() {  # LOG RANKS WHAT
  local n
  n=$(grep -cE "^(rank [0-9]+ )?checksum $REF\$" "$1" || true)
  [[ $n == "$2" ]] || fail "$3: $n of $2 ranks ended with the reference checksum $REF: $(grep checksum "$1" | tr '\n' ' ')"
  echo "ok: $3: every rank matches $REF"
}

echo "== 4 ranks under gcr, rank 2 lagging"
"$GCR" run -- "${MP[@]}" --ranks 4 --lag-rank 2 --lag-ms 5 > "$T/a.log" 2>&1 &
P=$!
pids+=("$P")
for _ in $(seq 1 500); do [[ $(pgrep -c -P "$P" -f mp_train || true) == 4 ]] && break; sleep 0.02; done
RANK=$(pgrep -P "$P" -f "rank 1" | head -n 1 || true)
[[ -n $RANK ]] || fail "no rank 1 under launcher $P: $(ps -o pid,args --ppid "$P")"
sleep 0.3
for target in "$P" "$RANK"; do
  rc=0
  "$GCR" checkpoint "$target" -R > "$T/c.out" 2> "$T/c.err" || rc=$?
  [[ $rc == 8 ]] || fail "checkpoint of $target (launcher $P): exit $rc, expected 8: $(cat "$T/c.err")"
  grep -qE "cuIpc|cuMemExportToShareableHandle|cuMemImportFromShareableHandle" "$T/c.err" ||
    fail "the refusal does not name the sharing: $(cat "$T/c.err")"
  echo "refused ($target): $(head -c 200 "$T/c.err")..."
done
wait "$P" || fail "the job failed after the refused checkpoints: $(tail -5 "$T/a.log")"
every_rank_matches "$T/a.log" 4 "the job whose checkpoints were refused"
[[ $("$GCR" image ls --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['checkpoints']))") == 0 ]] ||
  fail "a refused checkpoint left an image"
echo "PASS"
