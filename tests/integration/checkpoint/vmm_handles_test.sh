#!/usr/bin/env bash
# A program that holds its own cuMemCreate handles (PyTorch's expandable segments: mlp_train
# --vmm keeps parameters and Adam state in 2 MiB pages whose handles it never lets go), started
# from a shell as users start it: checkpointed at random moments (stopping, and twice live),
# restored on the same and on the other simulated GPU, bit-identical to an uninterrupted run; the
# second live checkpoint stores only what changed. A program that exported one of its pages and
# keeps the fd (--vmm-share; no peer has imported it) is checkpointed and restored the same way,
# and refused while a process outside its tree holds that memory.
# (Note [Virtual allocation handles] in interpose/vmm_handles.h.)
#
#   vmm_handles_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
export SIMGPU_DEVICES=2 SIMGPU_MEMORY=1G
TEST_NAME=vmm-handles
source "$(dirname "$0")/lib.sh"
# A run steps slowly and holds before its last step while $T/slow exists (made before it starts,
# removed once its checkpoints are over): no checkpoint finds the run ended however slow the
# machine (under CI's load a 3 s run once was), and the rest, the restores and the reference (no
# $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps 100 --step-delay-ms 15 --hidden 256 --layers 4
     --footprint 8M --streams 2 --vmm --delay-while "$T/slow" --hold-while "$T/slow")

echo "== reference: mlp_train --vmm without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"

expect_ref() {  # LOG WHAT
  [[ $(checksum_of "$1") == "$REF" ]] || fail "$2 ended with '$(checksum_of "$1")', expected $REF"
  echo "ok: $2 matches the uninterrupted run"
}

echo "== checkpoint (the process stops), restore, finish"
: > "$T/slow"
"$GCR" run -- "${MLP[@]}" >> "$T/a.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/a.log" $((RANDOM % 40 + 5))
"$GCR" checkpoint "$P" --name a1 || fail "checkpoint of a program holding its own handles"
for _ in $(seq 1 200); do kill -0 "$P" 2>/dev/null || break; sleep 0.02; done
kill -0 "$P" 2>/dev/null && fail "process $P still runs after a checkpoint without --leave-running"
rm -f "$T/slow"
"$GCR" restore a1 || fail "restore a1"
wait_exit "$P" "$T/a.log"
expect_ref "$T/a.log" "the restored run"

echo "== two live checkpoints; restore each, the second on the other GPU"
: > "$T/slow"
"$GCR" run -- "${MLP[@]}" >> "$T/b.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/b.log" $((RANDOM % 20 + 5))
"$GCR" checkpoint "$P" -R --name b1 --json > "$T/b1.json" || fail "live checkpoint b1"
wait_steps "$T/b.log" 60
"$GCR" checkpoint "$P" -R --name b2 --json > "$T/b2.json" || fail "live checkpoint b2"
rm -f "$T/slow"
wait_exit "$P" "$T/b.log"
expect_ref "$T/b.log" "the run with two live checkpoints"
DEV=$(json_field region_bytes < "$T/b2.json")
NEW2=$(json_field stat.new_bytes < "$T/b2.json")
echo "second checkpoint: $NEW2 new bytes of $DEV bytes of device memory"
(( NEW2 < DEV / 2 )) || fail "the second checkpoint stored $NEW2 new bytes of $DEV"
for spec in "b1" "b2 --device 1"; do
  len=$(stat -c %s "$T/b.log")
  # shellcheck disable=SC2086
  "$GCR" restore $spec --json > "$T/r.json" || fail "restore $spec"
  r=$(json_field pid < "$T/r.json")
  for _ in $(seq 1 3000); do kill -0 "$r" 2>/dev/null || break; sleep 0.02; done
  [[ $(checksum_after "$T/b.log" "$len") == "$REF" ]] ||
    fail "restore $spec ended with '$(checksum_after "$T/b.log" "$len")', expected $REF"
  echo "ok: restore $spec matches"
done

echo "== memory exported, its fd kept open, no process has imported it: checkpointed and restored"
# Nothing shares it yet, so it is the process's own memory; the fd it keeps is made to name the
# memory again after the unpark and after the restore (Note [Kept exports] in interpose/park.cpp).
: > "$T/slow"
"$GCR" run -- "${MLP[@]/--vmm/--vmm-share}" >> "$T/c.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/c.log" $((RANDOM % 10 + 5))
"$GCR" checkpoint "$P" -R --name c1 --json > "$T/c1.json" 2> "$T/c.err" ||
  fail "checkpoint of a process that exported a page: $(cat "$T/c.err")"
rm -f "$T/slow"
wait_exit "$P" "$T/c.log"
expect_ref "$T/c.log" "the process that exported a page, checkpointed live"
len=$(stat -c %s "$T/c.log")
"$GCR" restore c1 --json > "$T/rc.json" || fail "restore c1"
r=$(json_field pid < "$T/rc.json")
for _ in $(seq 1 3000); do kill -0 "$r" 2>/dev/null || break; sleep 0.02; done
[[ $(checksum_after "$T/c.log" "$len") == "$REF" ]] ||
  fail "restore c1 ended with '$(checksum_after "$T/c.log" "$len")', expected $REF"
echo "ok: restore c1 matches"

echo "== the same while a process outside its tree, not under gcr, holds that memory: refused"
# (here the holder opened the process's device memory files, as an importer that kept the fd would)
: > "$T/slow"
"$GCR" run -- "${MLP[@]/--vmm/--vmm-share}" --steps 100000 >> "$T/d.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/d.log" 5
python3 -c '
import os, sys, time
fds = [os.open(f"/proc/{sys.argv[1]}/fd/{n}", os.O_RDONLY) for n in os.listdir(f"/proc/{sys.argv[1]}/fd")
       if "simgpu-dev" in os.readlink(f"/proc/{sys.argv[1]}/fd/{n}")]
print(len(fds), flush=True)
time.sleep(120)' "$P" > "$T/holder.out" &
H=$!
pids+=("$H")
for _ in $(seq 1 250); do [[ -s $T/holder.out ]] && break; sleep 0.02; done
rc=0
"$GCR" checkpoint "$P" -R > "$T/held.out" 2> "$T/held.err" || rc=$?
[[ $rc == 8 ]] || fail "checkpoint while process $H holds the exported memory: exit $rc, expected 8: $(cat "$T/held.err")"
grep -q "process $H" "$T/held.err" || fail "the refusal does not name process $H: $(cat "$T/held.err")"
echo "refused: $(head -c 300 "$T/held.err")"
kill "$H"
wait "$H" 2>/dev/null || true
kill -0 "$P" 2>/dev/null || fail "the process whose checkpoint was refused is gone"
kill "$P"
wait "$P" 2>/dev/null || true

"$GCR" image verify > /dev/null || fail "gcr image verify after the test"
echo "PASS"
