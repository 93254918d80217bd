#!/usr/bin/env bash
# Note [Device writes to pinned host memory] (interpose/pinned.h): pinned host memory is tracked
# and written after the resume like the rest of host memory, because the interposer writes each
# page a device may write before it does. mlp_train with 64 MiB of pinned memory, of which each
# step a copy from the device rewrites one page and the CPU the next, and a kernel one page of a
# small mapped buffer through its device pointer, started from a shell with its output appended
# to a log:
#   - live checkpoints copy none of it in the freeze, and the second takes most of it from the
#     first's images and stores little that is new (incremental), with CRIU's write-out slowed (CRIU_FAULT=139: 2 s with every
#     page still to write) while the run goes on writing pinned pages: each is saved first;
#   - no device write finds a pinned page still write-protected (SIMGPU_DMA_CHECK: on a GPU the
#     DMA would pass the protection), and every restore ends with the uninterrupted run's model
#     and pinned-memory checksums, as does the run that went on;
#   - GCR_PINNED_FROZEN=1 brings back the care for processes whose kernels write pinned memory
#     where gcr cannot see: copied in the freeze and taken from the process every time.
#
#   pinned_memory_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=pinned-memory
source "$(dirname "$0")/lib.sh"
needs_criu cow-dump cow-track  # CRIU_FAULT=139 is 0009's, which comes with 0005 (docs/criu-patches.md)
export GCR_MEMORY_WORK_DIR=off
export GCR_HOST_TRACK_BLOCK=4096  # the workload writes pages all over its pinned memory
PINNED_MIB=64
PINNED_PAGES=$((PINNED_MIB * 256))
MLP=("$BUILD/tests/workloads/mlp_train" --steps 800 --step-delay-ms 10 --footprint 4M
     --pinned-footprint "${PINNED_MIB}M" --streams 2 --delay-while "$T/slow" --hold-while "$T/slow")
pinned_of() { awk '/^pinned_checksum/ {c=$2} END {print c}' "$1"; }
pinned_after() { tail -c +$(($2 + 1)) "$1" | awk '/^pinned_checksum/ {c=$2} END {print c}'; }
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
PREF=$(pinned_of "$T/ref.log")
[[ -n $REF && -n $PREF ]] || fail "the reference printed no checksums"

log=$T/run.log
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
live() { "$GCR" checkpoint "$p" -R --name "$1" --json > "$T/$1.json" || fail "live checkpoint $1"; }
field() { json_field "$2" < "$T/$1.json"; }
restore_and_check() {  # NAME
  local len r
  len=$(stat -c %s "$log")
  "$GCR" restore "$1" --json > "$T/r.json" || fail "restore $1"
  r=$(json_field pid < "$T/r.json")
  for _ in $(seq 1 3000); do kill -0 "$r" 2>/dev/null || break; sleep 0.02; done
  [[ $(checksum_after "$log" "$len") == "$REF" ]] ||
    fail "restore $1: model checksum '$(checksum_after "$log" "$len")', expected $REF"
  [[ $(pinned_after "$log" "$len") == "$PREF" ]] ||
    fail "restore $1: pinned memory checksum '$(pinned_after "$log" "$len")', expected $PREF"
  echo "ok: $1 restores bit-identical, pinned memory included"
}
ends_like_reference() {
  rm -f "$T/slow"
  wait_exit "$p" "$log"
  [[ $(checksum_of "$log") == "$REF" && $(pinned_of "$log") == "$PREF" ]] ||
    fail "$1 did not end with the uninterrupted run's checksums"
}

echo "== live checkpoints, CRIU's write-out slowed: pinned memory tracked, none copied frozen"
export CRIU_FAULT=139  # the gcrd this starts passes it to CRIU
# simgpu ends the run if a device write finds a pinned page still write-protected, which a GPU's
# DMA would pass unseen (docs/simgpu.md): what the interposer's writes exist to prevent.
export SIMGPU_DMA_CHECK=1
start_run
wait_steps "$log" 10
live first
[[ $(field first host_pinned_touched_bytes) -ge $((PINNED_MIB << 20)) ]] ||
  fail "the first checkpoint saw no pinned memory written before device writes: $(cat "$T/first.json")"
[[ $(field first host_pages_dma_frozen) == 0 ]] ||
  fail "the first checkpoint copied $(field first host_pages_dma_frozen) pinned pages in the freeze"
before=$(steps_in "$log")
wait_steps "$log" $((before + 20))
live second
after=$(steps_in "$log")
wait_steps "$log" $((after + 20))
live third
# The second's checks once the third is taken: none of their time falls in the run between.
echo "second: $(field second host_pages_from_process) pages from the process," \
     "$(field second host_pages_from_parent) from the first's images;" \
     "$(field second host_pages_saved) written during the write-out, saved first;" \
     "stall $(($(field second time.stall_ns) / 1000000)) ms; steps $before -> $after"
[[ $(field second host_pages_from_parent) -ge $((PINNED_PAGES / 2)) ]] ||
  fail "the second checkpoint took only $(field second host_pages_from_parent) pages from its parent (pinned memory $PINNED_PAGES pages): not incremental"
[[ $(field second host_pages_pinned) == 0 && $(field second host_pages_dma_frozen) == 0 ]] ||
  fail "the second checkpoint gave pinned memory special care: $(cat "$T/second.json")"
# The store too takes in only what changed: the pages written since the first lie together.
new_bytes=$(field second stat.new_bytes)
echo "second: $((new_bytes >> 10)) KiB new to the store"
(( new_bytes < (PINNED_MIB << 20) / 4 )) ||
  fail "the second checkpoint stored $new_bytes new bytes, for ~$(((after - before) * 8)) KiB of pinned memory changed"
[[ $(field second host_pages_saved) -ge 1 ]] ||
  fail "the run wrote no page during a 2 s write-out: the slowed write-out did not apply"
unset CRIU_FAULT SIMGPU_DMA_CHECK  # for the next gcrd and run
ends_like_reference "the checkpointed run"
echo "ok: the run went on to the uninterrupted run's checksums"
for name in first second third; do restore_and_check "$name"; done

echo "== GCR_PINNED_FROZEN=1: pinned memory copied in the freeze and taken from the process"
stop_gcrd  # the next gcrd reads the setting
export GCR_PINNED_FROZEN=1
start_run
wait_steps "$log" 10
live frozen1
wait_steps "$log" 30
live frozen2
[[ $(field frozen2 host_pinned_touched_bytes) == 0 ]] || fail "GCR_PINNED_FROZEN=1 was not heard"
if criu_has cow-dma; then
  [[ $(field frozen1 host_pages_dma_frozen) -ge $PINNED_PAGES ]] ||
    fail "GCR_PINNED_FROZEN=1: the first checkpoint copied $(field frozen1 host_pages_dma_frozen) pinned pages while frozen"
fi
[[ $(field frozen2 host_pages_pinned) -ge $PINNED_PAGES ]] ||
  fail "GCR_PINNED_FROZEN=1: the second checkpoint took $(field frozen2 host_pages_pinned) pinned pages from the process"
unset GCR_PINNED_FROZEN
stop_gcrd
ends_like_reference "the run with GCR_PINNED_FROZEN=1"
restore_and_check frozen2
echo "PASS"
