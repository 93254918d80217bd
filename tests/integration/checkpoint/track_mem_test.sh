#!/usr/bin/env bash
# Note [Incremental dumps made whole] (gcr/criu_pagemap.h): on a CRIU without cow-track and a
# kernel with soft-dirty bits, gcrd's live checkpoints are CRIU's own incremental dumps
# (--track-mem, then --prev-images-dir), each made whole before it is stored. mlp_train with
# 64 MiB of pageable host memory, of which each step rewrites 64 pages, started from a shell with
# its output appended to a log, is checkpointed live three times (cow-track turned off, so that
# gcr's CRIU takes this path too); the second and third must take most pages from their parent,
# and the run and each restore must end with the uninterrupted run's model and host checksums.
#
#   track_mem_test.sh BUILD_DIR      (needs root for CRIU and a kernel with soft-dirty bits;
#                                     exits 77 to skip)
set -euo pipefail
TEST_NAME=track-mem
source "$(dirname "$0")/lib.sh"
needs_dumpable_session
"$GCR" doctor --json > "$T/doctor.json" 2> /dev/null || true
soft_dirty=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(next((c['state'] for c in d['checks'] if c['name']=='soft-dirty'), 'none'))" "$T/doctor.json")
[[ $soft_dirty == ok ]] ||
  { echo "SKIP: this kernel keeps no soft-dirty bits (CONFIG_MEM_SOFT_DIRTY), which CRIU's --track-mem needs: $(grep -o '"writes are not marked[^"]*"' "$T/doctor.json" || echo "gcr doctor says $soft_dirty")"; exit 77; }
export GCR_CRIU_COW_TRACK=0 GCR_MEMORY_WORK_DIR=off
host_of() { awk '/^host_checksum/ {c=$2} END {print c}' "$1"; }
host_after() { tail -c +$(($2 + 1)) "$1" | awk '/^host_checksum/ {c=$2} END {print c}'; }
MLP=("$BUILD/tests/workloads/mlp_train" --steps 400 --step-delay-ms 15 --footprint 4M
     --host-footprint 64M --host-writes 64 --streams 2)
HOST_PAGES=$((64 * 256))
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
HREF=$(host_of "$T/ref.log")
[[ -n $REF && -n $HREF ]] || fail "the reference printed no checksums"

log=$T/run.log
bash -c "exec \"$GCR\" run -- ${MLP[*]} >> \"$log\" 2>&1 < /dev/null" &
p=$!
pids+=("$p")
live() {  # NAME: a live checkpoint of $p; its JSON in $T/NAME.json
  "$GCR" checkpoint "$p" -R --name "$1" --json > "$T/$1.json" || fail "live checkpoint $1"
}
field() { json_field "$2" < "$T/$1.json"; }
restore_and_check() {  # NAME: restored, the run from there ends as the uninterrupted one
  local len r
  len=$(stat -c %s "$log")
  "$GCR" restore "$1" --json > "$T/r-$1.json" || fail "restore $1"
  r=$(json_field pid < "$T/r-$1.json")
  pids+=("$r")
  wait_gone "$r" 120 || fail "restore $1: the restored run did not end"
  [[ $(checksum_after "$log" "$len") == "$REF" ]] ||
    fail "restore $1: model checksum '$(checksum_after "$log" "$len")', expected $REF"
  [[ $(host_after "$log" "$len") == "$HREF" ]] ||
    fail "restore $1: host memory checksum '$(host_after "$log" "$len")', expected $HREF"
  echo "ok: $1 restores bit-identical, host memory included"
}

step "three live checkpoints: the second and third take unchanged pages from their parent"
wait_steps "$log" $((RANDOM % 20 + 10))
live first
[[ $(field first host_pages_from_parent) == 0 ]] || fail "the first checkpoint took pages from a parent"
for name in second third; do
  n=$(steps_in "$log")
  wait_steps "$log" $((n + 15))
  live "$name"
  from_parent=$(field "$name" host_pages_from_parent)
  ((from_parent >= HOST_PAGES / 2)) ||
    fail "$name took $from_parent pages from its parent, fewer than half the host memory's $HOST_PAGES: $(cat "$T/$name.json")"
  echo "ok: $name: $from_parent pages from the parent, $(field "$name" host_pages_from_process) written since"
done

alive "$p" || fail "the run did not go on after the checkpoints"
wait_exit "$p" "$log"
[[ $(checksum_of "$log") == "$REF" && $(host_of "$log") == "$HREF" ]] ||
  fail "the run did not end with the uninterrupted run's checksums"
echo "ok: the run went on through every checkpoint and ended as the uninterrupted one"

for name in second third; do restore_and_check "$name"; done
echo "PASS"
