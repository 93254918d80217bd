#!/usr/bin/env bash
# The core test: mlp_train under `gcr run` is checkpointed at random moments (with and without
# --leave-running, several times in one run, and the --stop-copy baseline), restored (on the same
# simulated GPU and on another), and must finish with the checksum of an uninterrupted run.
# Also: the second checkpoint of a run stores only what changed.
#
#   checkpoint_restore_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
export SIMGPU_DEVICES=2 SIMGPU_MEMORY=1G
TEST_NAME=ckpt-test
source "$(dirname "$0")/lib.sh"
STEPS=120
# A run steps slowly and holds before its last step while $T/slow exists (start makes it, and it
# is removed once the run's checkpoints are taken): no checkpoint finds the run ended however slow
# the machine, and the rest, the restores and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps $STEPS --step-delay-ms 15 --footprint 32M --streams 2
     --delay-while "$T/slow" --hold-while "$T/slow")
start() {  # LOG: start mlp_train under gcr, print its pid
  : > "$T/slow"
  # Appending: CRIU checks the size of a file a process writes to, except of such log files,
  # which may grow between a --leave-running checkpoint and its restore.
  setsid "$GCR" run -- "${MLP[@]}" >> "$1" 2>&1 < /dev/null &
  local p=$!
  pids+=("$p")
  echo "$p"
}

echo "== reference: mlp_train without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"
echo "reference checksum $REF"

echo "== checkpoint (process stops), restore, finish"
P=$(start "$T/a.log")
wait_steps "$T/a.log" $((RANDOM % 40 + 10))
"$GCR" checkpoint "$P" --name a1 || fail "checkpoint a1"
rm -f "$T/slow"
for _ in $(seq 1 200); do kill -0 "$P" 2>/dev/null || break; sleep 0.02; done
kill -0 "$P" 2>/dev/null && fail "process $P still runs after a checkpoint without --leave-running"
"$GCR" restore a1 || fail "restore a1"
wait_exit "$P" "$T/a.log"
[[ $(checksum_of "$T/a.log") == "$REF" ]] || fail "restored run ended with $(checksum_of "$T/a.log"), expected $REF"
echo "ok: restored run matches"

echo "== two checkpoints with --leave-running; the run goes on undisturbed"
P=$(start "$T/b.log")
wait_steps "$T/b.log" $((RANDOM % 20 + 10))
"$GCR" checkpoint "$P" --name b1 -R --json > "$T/b1.json" || fail "checkpoint b1"
wait_steps "$T/b.log" 60
"$GCR" checkpoint "$P" --name b2 -R --json > "$T/b2.json" || fail "checkpoint b2"
rm -f "$T/slow"
wait_exit "$P" "$T/b.log"
[[ $(checksum_of "$T/b.log") == "$REF" ]] || fail "run with two live checkpoints ended with $(checksum_of "$T/b.log")"
echo "ok: live checkpoints leave the result unchanged"
NEW1=$(json_field stat.new_bytes < "$T/b1.json")
NEW2=$(json_field stat.new_bytes < "$T/b2.json")
DEV1=$(json_field region_bytes < "$T/b1.json")
DIRTY2=$(json_field dirty_bytes < "$T/b2.json")
echo "first checkpoint stored $NEW1 new bytes, the second $NEW2 (device memory $DEV1, changed $DIRTY2)"
# (The first one's new bytes are small too: the store already holds the ballast from above.)
(( NEW2 < DEV1 / 4 )) || fail "the second checkpoint stored $NEW2 new bytes of $DEV1 bytes of device memory"
# The ballast is only read (a const pointer of a C++ kernel): write tracking keeps it clean.
(( DIRTY2 < DEV1 )) || fail "the second checkpoint found all $DEV1 bytes of device memory changed"

echo "== restore the first of them, then the second on the other GPU"
"$GCR" restore b1 || fail "restore b1"
wait_exit "$P" "$T/b.log"
[[ $(checksum_of "$T/b.log") == "$REF" ]] || fail "restore of b1 ended with $(checksum_of "$T/b.log")"
"$GCR" restore b2 --device 1 || fail "restore b2 --device 1"
wait_exit "$P" "$T/b.log"
[[ $(checksum_of "$T/b.log") == "$REF" ]] || fail "restore of b2 on device 1 ended with $(checksum_of "$T/b.log")"
echo "ok: both restores match"

echo "== the --stop-copy baseline"
P=$(start "$T/c.log")
wait_steps "$T/c.log" $((RANDOM % 40 + 10))
"$GCR" checkpoint "$P" --name c1 --stop-copy || fail "stop-copy checkpoint"
rm -f "$T/slow"
for _ in $(seq 1 200); do kill -0 "$P" 2>/dev/null || break; sleep 0.02; done
"$GCR" restore c1 || fail "restore c1"
wait_exit "$P" "$T/c.log"
[[ $(checksum_of "$T/c.log") == "$REF" ]] || fail "stop-copy restore ended with $(checksum_of "$T/c.log")"
echo "ok: stop-copy round trip matches"

"$GCR" image verify > /dev/null || fail "gcr image verify after the test"

echo "== bad input: a pid that does not exist, a name that does not, a corrupt image"
set +e
out=$("$GCR" checkpoint 4194303 2>&1); rc=$?
set -e
[[ $rc == 3 && $out == *"no process 4194303"* ]] || fail "checkpoint of a missing pid: exit $rc, '$out'"
set +e
out=$("$GCR" restore no-such-checkpoint 2>&1); rc=$?
set -e
[[ $rc == 3 ]] || fail "restore of an unknown name: exit $rc, '$out'"
# Flip one byte in the middle of every pack: the restore must fail, and no process run on. (Found
# while materializing, before any process exists; or, in host memory gcrd serves after CRIU has
# made the process, Note [Host memory from the store], when read: the process is killed first.
# Its zombie may wait a moment for whoever reaps it.)
for pack in "$GCR_STORE"/packs/*.pack; do
  size=$(stat -c %s "$pack")
  printf '\xff' | dd of="$pack" bs=1 seek=$((size / 2)) conv=notrunc status=none
done
set +e
out=$("$GCR" restore c1 2>&1); rc=$?
set -e
[[ $rc != 0 ]] || fail "restore of a corrupt image succeeded"
[[ $(awk '{print $3}' "/proc/$P/stat" 2>/dev/null || echo gone) =~ ^(gone|Z)$ ]] ||
  fail "a process $P runs after a failed restore"
echo "ok: refused with exit codes 3, 3 and $rc ($(echo "$out" | head -n 1))"
echo "PASS"
