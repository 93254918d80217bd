#!/usr/bin/env bash
# Description: checkpoint to S3 and restore from S3 on "another node" (a second gcrd with its own
# work directory and chunk cache), against a real single-node Ceph RGW: mlp_train under gcr is
# checkpointed into s3://…, restored from there by the other gcrd and must finish with the checksum
# of an uninterrupted run; a second node checkpointing the same workload uploads far less (dedup
# across machines); a repeated restore on a node reads nothing from the network (its cache). The
# restores are streamed: the process runs before its memory has all arrived; radosgw killed and
# restarted in the middle of one is retried through; a pull that dies in the middle leaves no
# process running, and a rerun restores. Two nodes checkpointing at once both commit; a corrupted
# object is found by verify on the bucket and refused by a restore (exit 7), nothing left running.
#
#   s3_checkpoint_test.sh BUILD_DIR   (root for CRIU; 77 without root or without Ceph)
set -euo pipefail
export SIMGPU_DEVICES=1 SIMGPU_MEMORY=1G
TEST_NAME=s3-ckpt
source "$(dirname "$0")/../checkpoint/lib.sh"
. "$(dirname "$0")/ceph_lib.sh"
trap 'rc=$?; ceph_stop; (exit $rc); cleanup' EXIT

rc=0
ceph_start "$T/ceph" || rc=$?
[[ $rc == 77 ]] && exit 77
[[ $rc == 0 ]] || { tail -20 "$T"/ceph/log/* || true; fail "Ceph did not start"; }
code=$(s3_curl PUT gcr-test -o /dev/null -w '%{http_code}')
[[ $code == 200 ]] || fail "bucket creation: HTTP $code"
B=s3://gcr-test/ckpt

STEPS=100
# A run steps slowly and holds before its last step while $T/slow exists (start makes it, and it
# is removed once the run's checkpoint is taken): no checkpoint finds the run ended however slow
# the machine or the bucket, and the rest, the restores and the reference (no $T/slow) go at full
# speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps $STEPS --step-delay-ms 15 --footprint 32M --streams 2
     --delay-while "$T/slow" --hold-while "$T/slow")
# node A|B: the environment of one node (its gcrd, work directory and cache).
node() {
  local n=$1
  shift
  mkdir -p "$T/$n"
  env GCR_GCRD_SOCKET="$T/$n/gcrd.sock" GCR_WORK_DIR="$T/$n/work" GCR_CACHE_DIR="$T/$n/cache" "$@"
}
# Whether an mlp_train of this test runs (its environment names $T: other tests, run beside this
# one, run mlp_train too). A restored process keeps its original's environment.
ours_running() {
  local p
  for p in $(pgrep -f "$BUILD/tests/workloads/mlp_train"); do
    grep -qaF "$T/" "/proc/$p/environ" 2>/dev/null && return 0
  done
  return 1
}
start() {  # NODE LOG
  : > "$T/slow"
  setsid env GCR_GCRD_SOCKET="$T/$1/gcrd.sock" GCR_WORK_DIR="$T/$1/work" "$GCR" run -- "${MLP[@]}" >> "$2" 2>&1 < /dev/null &
  local p=$!
  pids+=("$p")
  echo "$p"
}
stop_gcrd() { pkill -f "gcrd --socket $T/$1/gcrd.sock" 2>/dev/null || true; }
trap 'rc=$?; for n in a b c d e; do stop_gcrd $n; done; ceph_stop; (exit $rc); cleanup' EXIT

echo "== reference: mlp_train without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"

echo "== node a checkpoints into $B; node b restores from it"
mkdir -p "$T/a" "$T/b"
P=$(start a "$T/run.log")
wait_steps "$T/run.log" $((RANDOM % 30 + 10))
node a "$GCR" --store "$B" checkpoint "$P" --name s1 --json > "$T/s1.json" || fail "checkpoint to S3"
rm -f "$T/slow"
UP1=$(json_field upload.copied_bytes < "$T/s1.json")
DEV=$(json_field region_bytes < "$T/s1.json")
echo "uploaded $UP1 bytes (device memory $DEV)"
(( UP1 > 0 )) || fail "the first checkpoint uploaded nothing"
for _ in $(seq 1 200); do kill -0 "$P" 2>/dev/null || break; sleep 0.02; done
kill -0 "$P" 2>/dev/null && fail "process $P still runs after a checkpoint without --leave-running"
# Streamed: the pull stops after its first stage (the CRIU files) for 1.5 s; the process must be
# running by then, its regions still on their way.
t0=$(date +%s%N)
GCR_PAUSE=transfer-after-stage GCR_PAUSE_FILE=$T/paused node b "$GCR" restore "$B/s1" --json > "$T/restore-b.out" 2> "$T/restore-b.err" & rp=$!
for _ in $(seq 1 1500); do [[ -e $T/paused ]] && break; sleep 0.02; done
[[ -e $T/paused ]] || { cat "$T/restore-b.err"; fail "the pull never paused after its first stage"; }
ls "$T"/b/cache/s3/*/store/incoming/*.manifest > /dev/null || fail "nothing announced in node b's cache"
ls "$T"/b/cache/s3/*/store/manifests/*.manifest 2> /dev/null && fail "committed before its regions came"
sleep 1.5
released=$(( $(date +%s%N) - t0 ))  # ns from just before the command started to the pull going on
rm -f "$T/paused"
wait $rp || { cat "$T/restore-b.err"; fail "restore from S3 on node b"; }
python3 - "$T/restore-b.out" "$released" <<'PY' || fail "the process did not run before its memory had arrived"
import json, sys
d = json.load(open(sys.argv[1]))
released = int(sys.argv[2])
resume, full = int(d["time.command_resume_ns"]), int(d["time.command_full_ns"])
print(f"resumed after {resume / 1e6:.0f} ms, pull let go on after {released / 1e6:.0f} ms, "
      f"all memory after {full / 1e6:.0f} ms")
assert resume < released < full, d
assert d["fetch.streamed"] == 1 and d["fetch.copied_bytes"] > 0, d
PY
ls "$T"/b/cache/s3/*/store/incoming/*.manifest 2> /dev/null && fail "the incoming manifest stayed"
wait_exit "$P" "$T/run.log"
[[ $(checksum_of "$T/run.log") == "$REF" ]] || fail "restored run ended with $(checksum_of "$T/run.log"), expected $REF"
echo "ok: restored from S3 on another node, streamed, bit-identical"

echo "== node b checkpoints the same workload: it uploads far less"
P=$(start b "$T/run2.log")
wait_steps "$T/run2.log" 20
node b "$GCR" --store "$B" checkpoint "$P" --name s2 --leave-running --json > "$T/s2.json" || fail "second checkpoint to S3"
rm -f "$T/slow"
UP2=$(json_field upload.copied_bytes < "$T/s2.json")
PRESENT2=$(json_field upload.present_bytes < "$T/s2.json")
echo "second node uploaded $UP2 bytes, found $PRESENT2 already there"
(( UP2 < UP1 / 2 )) || fail "the second node uploaded $UP2 bytes, the first $UP1"
(( PRESENT2 > 0 )) || fail "the second node found nothing already in the bucket"
wait_exit "$P" "$T/run2.log"

echo "== radosgw killed and restarted in the middle of a streamed restore: retries, right bytes"
GCR_S3_ATTEMPTS=12 GCR_PAUSE=transfer-after-stage GCR_PAUSE_FILE=$T/paused node c "$GCR" restore "$B/s2" > /dev/null 2> "$T/restore-c.err" & rp=$!
for _ in $(seq 1 1500); do [[ -e $T/paused ]] && break; sleep 0.02; done
[[ -e $T/paused ]] || { cat "$T/restore-c.err"; fail "the pull never paused"; }
ceph_rgw_stop
rm -f "$T/paused"
sleep 1
ceph_rgw_start || fail "radosgw did not restart"
wait $rp || { cat "$T/restore-c.err"; fail "the restore did not survive radosgw's restart"; }
wait_exit "$P" "$T/run2.log"
[[ $(checksum_of "$T/run2.log") == "$REF" ]] || fail "restore across the restart ended with $(checksum_of "$T/run2.log")"

echo "== the pull dies in the middle of a streamed restore: the process does not run on, a rerun works"
: > "$T/run3.log"
rc=0
GCR_FAULT=transfer-after-stage node d "$GCR" restore "$B/s2" --stdout "$T/run3.log" > /dev/null 2> "$T/restore-d.err" || rc=$?
[[ $rc == 86 ]] || { cat "$T/restore-d.err"; fail "the pull was to die (86), the restore exited $rc"; }
gone=0
for _ in $(seq 1 750); do ours_running || { gone=1; break; }; sleep 0.02; done
[[ $gone == 1 ]] || fail "a process restored from a pull that died still runs"
[[ -z $(checksum_of "$T/run3.log") ]] || fail "a process restored from a pull that died finished"
node d "$GCR" restore "$B/s2" > /dev/null 2> "$T/restore-d2.err" || { cat "$T/restore-d2.err"; fail "restore after the dead pull"; }
wait_exit "$P" "$T/run2.log"
[[ $(checksum_of "$T/run2.log") == "$REF" ]] || fail "restore after the dead pull ended with $(checksum_of "$T/run2.log")"

echo "== node a restores s2 twice: the second time from its cache"
node a "$GCR" restore "$B/s2" 2> "$T/r1.err" > /dev/null || { cat "$T/r1.err"; fail "restore s2 on node a"; }
wait_exit "$P" "$T/run2.log"
[[ $(checksum_of "$T/run2.log") == "$REF" ]] || fail "restore of s2 ended with $(checksum_of "$T/run2.log")"
node a "$GCR" --store "$B" restore s2 2> "$T/r2.err" > /dev/null || { cat "$T/r2.err"; fail "second restore of s2"; }
grep -q "already there" "$T/r2.err" || { cat "$T/r2.err"; fail "the second restore fetched again"; }
wait_exit "$P" "$T/run2.log"
[[ $(checksum_of "$T/run2.log") == "$REF" ]] || fail "second restore of s2 ended with $(checksum_of "$T/run2.log")"
echo "== two nodes checkpoint into the bucket at once: both commit"
PC=$(start c "$T/run-c.log")
PD=$(start d "$T/run-d.log")
wait_steps "$T/run-c.log" 15
wait_steps "$T/run-d.log" 15
node c "$GCR" --store "$B" checkpoint "$PC" --name both-c --leave-running --json > "$T/c.json" 2> "$T/c.err" & cc=$!
node d "$GCR" --store "$B" checkpoint "$PD" --name both-d --leave-running --json > "$T/d.json" 2> "$T/d.err" & cd=$!
wait $cc || { cat "$T/c.err"; fail "node c's checkpoint beside node d's"; }
wait $cd || { cat "$T/d.err"; fail "node d's checkpoint beside node c's"; }
rm -f "$T/slow"
node a "$GCR" --store "$B" image ls --json > "$T/ls.json"
python3 -c "import json; d=json.load(open('$T/ls.json')); t=[x for c in d['checkpoints'] for x in c['tags']]; assert 'both-c' in t and 'both-d' in t, t" || fail "not both listed"
node a "$GCR" --store "$B" image verify > "$T/verify.out" 2>&1 || { cat "$T/verify.out"; fail "the bucket does not verify"; }
wait_exit "$PC" "$T/run-c.log"
wait_exit "$PD" "$T/run-d.log"

echo "== a corrupted object in the bucket: the restore refuses it, nothing runs"
# Every pack: chunks the concurrent checkpoints uploaded twice must not have a good copy left.
packs=$(s3_curl GET "gcr-test?list-type=2&prefix=ckpt%2Fpacks%2F" | grep -o 'ckpt/packs/[0-9a-f]*\.pack')
[[ -n $packs ]] || fail "no pack listed"
for pack in $packs; do
  s3_curl GET "gcr-test/$pack" -o "$T/pack"
  python3 - "$T/pack" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
for at in range(100, len(b), 1 << 20):  # a byte in every MiB: whatever the restore reads first
    b[at] ^= 0xff
open(p, 'wb').write(b)
PY
  [[ $(s3_curl PUT "gcr-test/$pack" -T "$T/pack" -o /dev/null -w '%{http_code}') == 200 ]] || fail "re-upload"
done
node a "$GCR" --store "$B" image verify > "$T/verify.out" 2>&1 && fail "verify missed the damage"
rc=0
node e "$GCR" restore "$B/s1" > /dev/null 2> "$T/restore-e.err" || rc=$?
[[ $rc == 7 ]] || { cat "$T/restore-e.err"; fail "restore of a damaged checkpoint exited $rc, want 7"; }
grep -q "checksum mismatch\|corrupt\|zstd\|the index says" "$T/restore-e.err" || { cat "$T/restore-e.err"; fail "no damage named"; }
for _ in $(seq 1 250); do ours_running || break; sleep 0.02; done
ours_running && fail "a process runs from a damaged checkpoint"
echo "ok: $SECONDS s"
