#!/usr/bin/env bash
# A checkpoint without --leave-running leaves the process stopped (not ended) until its checkpoint
# is committed. gcrd killed in between (paused at 'draining': CRIU done, nothing stored): the
# checkpoint is lost, but gcr-keeper gives the process its parked memory back and lets it go on,
# and it finishes with the checksum of an uninterrupted run. A normal checkpoint still ends it.
#
#   gcrd_dies_stopping_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=gcrd-dies-test
source "$(dirname "$0")/lib.sh"
# A run steps slowly and holds before its last step while $T/slow exists (made before it starts,
# removed once its checkpoint is over): none finds the run ended however slow the machine, and the
# rest, the restore and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps 150 --step-delay-ms 10 --footprint 8M
     --delay-while "$T/slow" --hold-while "$T/slow")
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")

echo "== gcrd killed after the dump of a checkpoint without --leave-running"
: > "$T/slow"
GCR_GCRD_PAUSE_AT=draining:60 setsid "$GCR" run -- "${MLP[@]}" >> "$T/a.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
wait_steps "$T/a.log" 20
export GCR_GCRD_PAUSE_AT=draining:60  # gcrd, started by this checkpoint, inherits it
"$GCR" checkpoint "$P" --name lost > "$T/ck.out" 2>&1 &
C=$!
wait_for "$T/gcrd.log" "paused at draining"
grep -q "T (stopped)" "/proc/$P/status" || fail "the process is not left stopped after the dump: $(grep State "/proc/$P/status")"
pkill -9 -f "gcrd --socket $GCR_GCRD_SOCKET"
rc=0
wait "$C" || rc=$?
(( rc != 0 )) || fail "gcr checkpoint succeeded although gcrd died"
unset GCR_GCRD_PAUSE_AT
rm -f "$T/slow"
wait_exit "$P" "$T/a.log"
[[ $(checksum_of "$T/a.log") == "$REF" ]] || fail "the process ended with $(checksum_of "$T/a.log"), expected $REF"
grep -q "gcr-keeper: process $P has its memory back" "$T/gcrd.log" || fail "gcr-keeper did not report giving the memory back"
"$GCR" image ls --json | grep_quiet '"lost"' && fail "a checkpoint whose gcrd died was committed"
echo "ok: the process went on and finished with $REF; no checkpoint was committed"

echo "== the same checkpoint, undisturbed, ends the process once committed"
: > "$T/b.log"
: > "$T/slow"
setsid "$GCR" run -- "${MLP[@]}" >> "$T/b.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
wait_steps "$T/b.log" 20
"$GCR" checkpoint "$P" --name kept > /dev/null || fail "checkpoint"
rm -f "$T/slow"
for _ in $(seq 1 250); do kill -0 "$P" 2>/dev/null || break; sleep 0.02; done
kill -0 "$P" 2>/dev/null && fail "the process still runs after a committed checkpoint without -R"
"$GCR" restore kept > /dev/null || fail "restore"
wait_exit "$P" "$T/b.log"
[[ $(checksum_of "$T/b.log") == "$REF" ]] || fail "the restore ended with $(checksum_of "$T/b.log")"
echo "PASS"
