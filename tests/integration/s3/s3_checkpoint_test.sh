#!/usr/bin/env bash
# Description: checkpoint to S3 and restore from S3 on "another node" (a second gcrd with its own
# work directory and chunk cache), against a real single-node Ceph RGW: mlp_train under gcr is
# checkpointed into s3://…, restored from there by the other gcrd and must finish with the checksum
# of an uninterrupted run; a second node checkpointing the same workload uploads far less (dedup
# across machines); a repeated restore on a node reads nothing from the network (its cache).
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
MLP=("$BUILD/tests/workloads/mlp_train" --steps $STEPS --step-delay-ms 15 --footprint 32M --streams 2)
# node A|B: the environment of one node (its gcrd, work directory and cache).
node() {
  local n=$1
  shift
  mkdir -p "$T/$n"
  env GCR_GCRD_SOCKET="$T/$n/gcrd.sock" GCR_WORK_DIR="$T/$n/work" GCR_CACHE_DIR="$T/$n/cache" "$@"
}
start() {  # NODE LOG
  setsid env GCR_GCRD_SOCKET="$T/$1/gcrd.sock" GCR_WORK_DIR="$T/$1/work" "$GCR" run -- "${MLP[@]}" >> "$2" 2>&1 < /dev/null &
  local p=$!
  pids+=("$p")
  echo "$p"
}
stop_gcrd() { pkill -f "gcrd --socket $T/$1/gcrd.sock" 2>/dev/null || true; }
trap 'rc=$?; stop_gcrd a; stop_gcrd b; ceph_stop; (exit $rc); cleanup' EXIT

echo "== reference: mlp_train without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"

echo "== node a checkpoints into $B; node b restores from it"
mkdir -p "$T/a" "$T/b"
P=$(start a "$T/run.log")
wait_steps "$T/run.log" $((RANDOM % 30 + 10))
node a "$GCR" --store "$B" checkpoint "$P" --name s1 --json > "$T/s1.json" || fail "checkpoint to S3"
UP1=$(json_field upload.copied_bytes < "$T/s1.json")
DEV=$(json_field region_bytes < "$T/s1.json")
echo "uploaded $UP1 bytes (device memory $DEV)"
(( UP1 > 0 )) || fail "the first checkpoint uploaded nothing"
for _ in $(seq 1 200); do kill -0 "$P" 2>/dev/null || break; sleep 0.02; done
kill -0 "$P" 2>/dev/null && fail "process $P still runs after a checkpoint without --leave-running"
node b "$GCR" restore "$B/s1" > "$T/restore-b.out" 2> "$T/restore-b.err" || { cat "$T/restore-b.err"; fail "restore from S3 on node b"; }
grep -q "fetched" "$T/restore-b.err" || fail "restore on node b did not say what it fetched"
wait_exit "$P" "$T/run.log"
[[ $(checksum_of "$T/run.log") == "$REF" ]] || fail "restored run ended with $(checksum_of "$T/run.log"), expected $REF"
echo "ok: restored from S3 on another node, bit-identical"

echo "== node b checkpoints the same workload: it uploads far less"
P=$(start b "$T/run2.log")
wait_steps "$T/run2.log" 20
node b "$GCR" --store "$B" checkpoint "$P" --name s2 --leave-running --json > "$T/s2.json" || fail "second checkpoint to S3"
UP2=$(json_field upload.copied_bytes < "$T/s2.json")
PRESENT2=$(json_field upload.present_bytes < "$T/s2.json")
echo "second node uploaded $UP2 bytes, found $PRESENT2 already there"
(( UP2 < UP1 / 2 )) || fail "the second node uploaded $UP2 bytes, the first $UP1"
(( PRESENT2 > 0 )) || fail "the second node found nothing already in the bucket"
wait_exit "$P" "$T/run2.log"

echo "== node a restores s2 twice: the second time from its cache"
node a "$GCR" restore "$B/s2" 2> "$T/r1.err" > /dev/null || { cat "$T/r1.err"; fail "restore s2 on node a"; }
wait_exit "$P" "$T/run2.log"
[[ $(checksum_of "$T/run2.log") == "$REF" ]] || fail "restore of s2 ended with $(checksum_of "$T/run2.log")"
node a "$GCR" --store "$B" restore s2 2> "$T/r2.err" > /dev/null || { cat "$T/r2.err"; fail "second restore of s2"; }
grep -q "already there" "$T/r2.err" || { cat "$T/r2.err"; fail "the second restore fetched again"; }
wait_exit "$P" "$T/run2.log"
[[ $(checksum_of "$T/run2.log") == "$REF" ]] || fail "second restore of s2 ended with $(checksum_of "$T/run2.log")"
echo "ok: $SECONDS s"
