#!/usr/bin/env bash
# Note [Host memory tracked between checkpoints] (daemon/host_tracking.h): a live
# checkpoint after the first takes the host pages the process did not write since from the
# previous dump's images, not from the frozen process. mlp_train with 96 MiB of pageable host
# memory, of which each step rewrites 64 pages, started from a shell with its output appended to
# a log, is checkpointed live three times; the second and third must take most pages from their
# parent, and every restore must end with
# the uninterrupted run's model and host checksums. Then
# what ends the tracking and what does not: gcrd's death (the next checkpoint is a full one, and
# correct), CRIU killed before it took the userfaultfds (tracking goes on) and after (the next is
# full), the default 2 MiB block, and GCR_CRIU_COW_TRACK=0.
#
#   host_tracking_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=host-tracking
source "$(dirname "$0")/lib.sh"
criu_bin=${GCR_CRIU:-$(dirname "$0")/../../../.deps/criu/criu}
needs_criu cow-dump cow-track  # what this test measures (Note [Host memory tracked between checkpoints])
export GCR_MEMORY_WORK_DIR=off
# mlp_train's pinned buffers: no device write may find a page still write-protected (a GPU's DMA
# would pass the protection unseen; docs/simgpu.md), through every way the tracking ends below.
export SIMGPU_DMA_CHECK=1
# Page-sized blocks (GCR_HOST_TRACK_BLOCK): this workload writes 64 pages a step all over its
# host memory, which would touch every 2 MiB block; the default block has its own section.
export GCR_HOST_TRACK_BLOCK=4096
host_of() { awk '/^host_checksum/ {c=$2} END {print c}' "$1"; }
host_after() { tail -c +$(($2 + 1)) "$1" | awk '/^host_checksum/ {c=$2} END {print c}'; }
workload() {  # HOST_MIB WRITES: the workload, and its uninterrupted run's checksums (REF, HREF)
  MLP=("$BUILD/tests/workloads/mlp_train" --steps 300 --step-delay-ms 15 --footprint 4M
       --host-footprint "$1M" --host-writes "$2" --streams 2 --delay-while "$T/slow"
       --hold-while "$T/slow")
  HOST_PAGES=$(($1 * 256))
  LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref-$1-$2.log" 2>&1
  REF=$(checksum_of "$T/ref-$1-$2.log")
  HREF=$(host_of "$T/ref-$1-$2.log")
  [[ -n $REF && -n $HREF ]] || fail "the reference printed no checksums"
}
# A run steps slowly and holds before its last step until ends_like_reference (its checkpoints
# over): none finds it ended however slow the machine, and the rest and the restores go at full
# speed (the reference, with no $T/slow, too).
start_run() {  # from a shell, its output appended to $log; its pid in $p
  : > "$log"
  : > "$T/slow"
  bash -c "exec \"$GCR\" run -- ${MLP[*]} >> \"$log\" 2>&1" &
  p=$!
  pids+=("$p")
}
ends_like_reference() {  # WHAT: the run ($p) ends with the uninterrupted run's checksums
  rm -f "$T/slow"
  wait_exit "$p" "$log"
  [[ $(checksum_of "$log") == "$REF" && $(host_of "$log") == "$HREF" ]] ||
    fail "$1 did not end with the uninterrupted run's checksums"
}
log=$T/run.log
workload 96 64

restore_and_check() {  # LOG NAME
  local log=$1 name=$2 len r
  len=$(stat -c %s "$log")
  "$GCR" restore "$name" --json > "$T/r.json" || fail "restore $name"
  r=$(json_field pid < "$T/r.json")
  for _ in $(seq 1 3000); do kill -0 "$r" 2>/dev/null || break; sleep 0.02; done
  [[ $(checksum_after "$log" "$len") == "$REF" ]] ||
    fail "restore $name: model checksum '$(checksum_after "$log" "$len")', expected $REF"
  [[ $(host_after "$log" "$len") == "$HREF" ]] ||
    fail "restore $name: host memory checksum '$(host_after "$log" "$len")', expected $HREF"
  echo "ok: $name restores bit-identical, host memory included"
}

live() {  # NAME: a live checkpoint; its JSON in $T/NAME.json
  "$GCR" checkpoint "$p" -R --name "$1" --json > "$T/$1.json" || fail "live checkpoint $1"
}
field() { json_field "$2" < "$T/$1.json"; }

echo "== three live checkpoints: the second and third take unchanged pages from their parent"
log=$T/run.log
start_run
wait_steps "$log" 10
live first
# Each next cut 30 steps after the previous checkpoint returned; the checks once all three are
# taken, so that none of their time falls between two cuts (more steps, more pages written).
n=$(steps_in "$log")
wait_steps "$log" $((n + 30))
live second
n=$(steps_in "$log")
wait_steps "$log" $((n + 30))
live third
[[ $(field first host_tracked_tasks) -ge 1 ]] || fail "the first checkpoint tracks no task: $(cat "$T/first.json")"
[[ $(field first host_pages_from_parent) == 0 ]] || fail "the first checkpoint took pages from a parent"
# mlp_train's batch buffers and loss array are pinned: the interposer writes their pages before a
# device may (Note [Device writes to pinned host memory]), so none is copied while frozen.
[[ $(field first host_pinned_touched_bytes) -ge 1 && $(field first host_pages_dma_frozen) == 0 ]] ||
  fail "the first checkpoint gave pinned memory special care: $(cat "$T/first.json")"
[[ $(field first host_pages_from_process) -ge $HOST_PAGES ]] ||
  fail "the first checkpoint took $(field first host_pages_from_process) pages, fewer than the $HOST_PAGES of the host footprint"
from_parent=$(field second host_pages_from_parent)
from_process=$(field second host_pages_from_process)
echo "second: $from_process pages from the process, $from_parent from the first's images"
[[ $from_parent -ge $((HOST_PAGES / 2)) ]] ||
  fail "the second checkpoint took only $from_parent pages from its parent (host footprint $HOST_PAGES pages)"
[[ $from_process -lt $((HOST_PAGES / 2)) ]] ||
  fail "the second checkpoint took $from_process pages from the process: not incremental"
# ... nor taken from the process whatever its protection says (checkpoint.pinned_memory has
# the rest).
[[ $(field second host_pages_pinned) == 0 ]] ||
  fail "the second checkpoint lifted the protection of $(field second host_pages_pinned) pinned pages"
[[ $(field third host_pages_from_parent) -ge $((HOST_PAGES / 2)) ]] ||
  fail "the third checkpoint took only $(field third host_pages_from_parent) pages from its parent"

echo "== gcrd dies between checkpoints: the next one is full, and the process never waits on it"
pkill -KILL -f "gcrd --socket $GCR_GCRD_SOCKET" || fail "no gcrd to kill"
steps=$(steps_in "$log")
wait_steps "$log" $((steps + 5))  # a first write to a page after the death goes through
live after_death
[[ $(field after_death host_pages_from_parent) == 0 ]] ||
  fail "after gcrd's death a checkpoint took $(field after_death host_pages_from_parent) pages from a parent it cannot have"
wait_steps "$log" $((steps + 30))
live fourth
[[ $(field fourth host_pages_from_parent) -ge $((HOST_PAGES / 2)) ]] ||
  fail "tracking did not start again after gcrd's death"
ends_like_reference "the checkpointed run"
echo "ok: the run went on to the uninterrupted run's checksums"
for name in second third after_death fourth; do restore_and_check "$log" "$name"; done

echo "== CRIU killed before it took what gcrd handed in: the tracking goes on"
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
export GCR_GCRD_PAUSE_AT=parked:2  # every checkpoint waits 2 s with CRIU started, before go
start_run
wait_steps "$log" 10
live k_first
gcrd=$(pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" | head -n 1)
"$GCR" checkpoint "$p" -R --name k_killed > "$T/k_killed.out" 2>&1 &
c=$!
criu=""
for _ in $(seq 1 500); do
  grep -q "paused at parked" "$(dirname "$GCR_GCRD_SOCKET")/gcrd.log" 2>/dev/null &&
    [[ $(grep -c "paused at parked" "$(dirname "$GCR_GCRD_SOCKET")/gcrd.log") -ge 2 ]] &&
    criu=$(pgrep -P "$gcrd" -f "/criu dump " | head -n 1) && [[ -n $criu ]] && break
  sleep 0.02
done
[[ -n $criu ]] || fail "no CRIU waiting at the pause point 'parked'"
kill -9 "$criu"
if wait "$c"; then fail "the checkpoint whose CRIU was killed succeeded: $(cat "$T/k_killed.out")"; fi
kill -0 "$p" || fail "the process died with its checkpoint's CRIU"
steps=$(steps_in "$log")
wait_steps "$log" $((steps + 20))
live k_after
[[ $(field k_after host_pages_from_parent) -ge $((HOST_PAGES / 2)) ]] ||
  fail "after a CRIU that never took the userfaultfds died, the next checkpoint took $(field k_after host_pages_from_parent) pages from its parent"
unset GCR_GCRD_PAUSE_AT
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
ends_like_reference "the run whose checkpoint failed"
restore_and_check "$log" k_after
restore_and_check "$log" k_first

echo "== CRIU killed after it took them (everything dumped, the process frozen): the next is full"
# CRIU through a wrapper whose action script stops it at post-dump once asked to.
cat > "$T/criu" <<EOF
#!/bin/sh
exec "$criu_bin" "\$@" --action-script "$T/criu-action"
EOF
cat > "$T/criu-action" <<EOF
#!/usr/bin/env bash
if [[ -f $T/criu-pause-at && \$(cat $T/criu-pause-at) == "\$CRTOOLS_SCRIPT_ACTION" ]]; then
  rm -f $T/criu-pause-at
  echo "\$PPID" > $T/criu-paused
  sleep 30
fi
exit 0
EOF
chmod 755 "$T/criu" "$T/criu-action"
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
export GCR_CRIU=$T/criu
"$GCR" doctor --capability cow-dump > /dev/null 2>&1 || true  # probed now, not in the freeze's way
start_run
wait_steps "$log" 10
live f_first
echo post-dump > "$T/criu-pause-at"
"$GCR" checkpoint "$p" -R --name f_killed > "$T/f_killed.out" 2>&1 &
c=$!
for _ in $(seq 1 500); do [[ -s $T/criu-paused ]] && break; sleep 0.02; done
[[ -s $T/criu-paused ]] || fail "CRIU never paused at post-dump: $(cat "$T/f_killed.out")"
kill -9 "$(cat "$T/criu-paused")"
if wait "$c"; then fail "the checkpoint whose CRIU was killed succeeded: $(cat "$T/f_killed.out")"; fi
kill -0 "$p" || fail "the process died with its checkpoint's CRIU"
steps=$(steps_in "$log")
wait_steps "$log" $((steps + 20))  # it writes its host memory: no page stays protected
live f_after
[[ $(field f_after host_pages_from_parent) == 0 ]] ||
  fail "after a CRIU that took the userfaultfds died, the next checkpoint still took pages from a parent"
wait_steps "$log" $((steps + 40))
live f_next
[[ $(field f_next host_pages_from_parent) -ge $((HOST_PAGES / 2)) ]] || fail "tracking did not start again"
unset GCR_CRIU
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
ends_like_reference "the run whose CRIU was killed"
for name in f_next f_after f_first; do restore_and_check "$log" "$name"; done

echo "== the default block (2 MiB): a program that writes little keeps most of its memory in the parent"
unset GCR_HOST_TRACK_BLOCK GCR_CRIU_COW_TRACK
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
workload 192 1
start_run
wait_steps "$log" 10
live b_first
wait_steps "$log" 40
live b_second
echo "b_second: $(field b_second host_pages_from_process) pages from the process, $(field b_second host_pages_from_parent) from the first's images"
[[ $(field b_second host_pages_from_parent) -ge $((HOST_PAGES / 2)) ]] ||
  fail "with 2 MiB blocks the second checkpoint took only $(field b_second host_pages_from_parent) pages from its parent"
ends_like_reference "the run with 2 MiB blocks"
restore_and_check "$log" b_second

echo "== GCR_CRIU_COW_TRACK=0: no tracking"
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true  # the next gcrd reads the setting
export GCR_CRIU_COW_TRACK=0
start_run
wait_steps "$log" 10
live off1
wait_steps "$log" 30
live off2
[[ $(field off2 host_tracked_tasks) == 0 && $(field off2 host_pages_from_parent) == 0 ]] ||
  fail "GCR_CRIU_COW_TRACK=0 still tracked: $(cat "$T/off2.json")"
kill "$p" 2>/dev/null || true
echo "PASS"
