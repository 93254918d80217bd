#!/usr/bin/env bash
# Shared device memory in incremental checkpoints (Note [Shared memory written job-wide] in
# interpose/regions.h). shared_table runs as two processes (a parent and the child it forked)
# sharing one 32 MiB cuMemCreate allocation through an fd, each with 4 MiB of its own rewritten
# every step; started from a shell as a background job writing a log:
#   a. nobody writes the table between two live checkpoints: the second does not read or store
#      it (its dirty bytes are the private buffers), and restored, the pair ends bit-identical
#      (the table from the first checkpoint's chunks)
#   b. the child writes the table through its own mapping between them: the second stores it
#      again, and restored, ends bit-identical to an uninterrupted run with that write
#   c. the child writes the table just after a live checkpoint's resume, while gcrd (paused at
#      `draining`) has not read it yet: the child waits for gcrd (Note [Shared memory behind every
#      view] in daemon/drain.h: cow_waits counts it), the pair ends bit-identical, and the
#      checkpoint, restored, too (the table as it was at the cut, not as the child wrote it)
#   d. as c, but gcrd is killed while the child waits for it: the child is let go (its control
#      session ends), the pair ends bit-identical, and the checkpoint fails, committing nothing
#
#   shared_incremental_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=shared-incremental
source "$(dirname "$0")/lib.sh"
TABLE_MIB=32
# The pair steps slowly and holds before its last step while $T/slow exists (made before it starts
# under gcr, removed once its checkpoints are over): no checkpoint finds it ended however slow the
# machine, and the rest, the restores and the references (no $T/slow) go at full speed (its
# result does not depend on speed).
ST=("$BUILD/tests/workloads/shared_table" --steps 250 --step-delay-ms 15 --table-bytes ${TABLE_MIB}M
    --private-bytes 4M --delay-while "$T/slow" --hold-while "$T/slow")
checksums() { grep '^checksum' "$1" | sort | tr '\n' ' '; }  # LOG: both processes' lines
checksums_after() { tail -c +$(($2 + 1)) "$1" | grep '^checksum' | sort | tr '\n' ' '; }

# run CASE WRITE_AT FIRST SECOND: two live checkpoints at steps FIRST and SECOND; sets J1, J2.
run() {
  local c=$1 write_at=$2 first=$3 second=$4
  LD_LIBRARY_PATH=$BUILD/simgpu "${ST[@]}" --write-at "$write_at" > "$T/$c-ref.log" 2>&1
  REF=$(checksums "$T/$c-ref.log")
  [[ $(grep -c '^checksum' "$T/$c-ref.log") == 2 ]] || fail "the reference printed no two checksums: $(tail -3 "$T/$c-ref.log")"
  : > "$T/slow"
  "$GCR" run -- "${ST[@]}" --write-at "$write_at" >> "$T/$c.log" 2>&1 &
  P=$!
  pids+=("$P")
  wait_steps "$T/$c.log" "$first"
  "$GCR" checkpoint "$P" -R --name "$c-1" --json > "$T/$c-1.json" || fail "live checkpoint $c-1"
  [[ $(json_field processes < "$T/$c-1.json") == 2 ]] || fail "$c-1 took $(json_field processes < "$T/$c-1.json") processes, expected 2"
  (( $(json_field shared_regions < "$T/$c-1.json") >= 1 )) || fail "$c-1 found no shared memory"
  wait_steps "$T/$c.log" "$second"
  # The child's write, when there is one, comes before the second checkpoint: the parent's steps
  # run ahead of the child's, so its step alone does not say so.
  if ((write_at > 0)); then
    wait_until 120 grep -q "^wrote the table" "$T/$c.log" || fail "the child never wrote the table"
  fi
  "$GCR" checkpoint "$P" -R --name "$c-2" --json > "$T/$c-2.json" || fail "live checkpoint $c-2"
  rm -f "$T/slow"
  wait_exit "$P" "$T/$c.log"
  [[ $(checksums "$T/$c.log") == "$REF" ]] || fail "the run with two checkpoints ended with $(checksums "$T/$c.log"), expected $REF"
  DIRTY2=$(json_field dirty_bytes < "$T/$c-2.json")
  echo "second checkpoint read $((DIRTY2 >> 20)) MiB of $(( $(json_field region_bytes < "$T/$c-2.json") >> 20 )) MiB," \
       "stall $(( $(json_field time.stall_ns < "$T/$c-2.json") / 1000000 )) ms"
}
# restored NAME LOG: the restored pair runs to the end with the reference checksums.
restored() {
  local len
  len=$(stat -c %s "$2")
  "$GCR" restore "$1" --json > "$T/r.json" || fail "restore $1"
  local r
  r=$(json_field pid < "$T/r.json")
  for _ in $(seq 1 3000); do kill -0 "$r" 2> /dev/null || break; sleep 0.02; done
  [[ $(checksums_after "$2" "$len") == "$REF" ]] ||
    fail "restore $1 ended with '$(checksums_after "$2" "$len")', expected $REF"
  echo "ok: restore $1 ends with $REF"
}

echo "== a. the table unchanged between two live checkpoints"
run a 0 $((RANDOM % 20 + 10)) 60
(( DIRTY2 < TABLE_MIB << 20 )) || fail "the second checkpoint read the unchanged table again ($DIRTY2 dirty bytes)"
restored a-2 "$T/a.log"

echo "== b. the child writes the table between them"
run b 60 $((RANDOM % 20 + 10)) 80
(( DIRTY2 >= TABLE_MIB << 20 )) || fail "the second checkpoint missed the child's write to the table ($DIRTY2 dirty bytes)"
restored b-2 "$T/b.log"
restored b-1 "$T/b.log"

# paused_pair CASE SECONDS CUT: a new gcrd that pauses SECONDS at `draining`; the reference run,
# then the pair under gcr, the child writing the table 20 steps after CUT once $T/write-hold is
# gone (the test removes it once gcrd paused, after the cut, however slow the machine). Sets REF
# and P.
paused_pair() {
  local c=$1 w=$(($3 + 20))
  stop_gcrd
  export GCR_GCRD_PAUSE_AT=draining:$2
  LD_LIBRARY_PATH=$BUILD/simgpu "${ST[@]}" --write-at "$w" > "$T/$c-ref.log" 2>&1
  REF=$(checksums "$T/$c-ref.log")
  : > "$T/slow"
  : > "$T/write-hold"
  "$GCR" run -- "${ST[@]}" --write-at "$w" --write-hold "$T/write-hold" >> "$T/$c.log" 2>&1 &
  P=$!
  pids+=("$P")
  wait_steps "$T/$c.log" "$3"
  PAUSED=$(grep -c "paused at draining" "$T/gcrd.log" || true)  # earlier gcrds' too
}
# gcrd_paused: the checkpoint's gcrd paused at `draining` (after the resume).
gcrd_paused() { (( $(grep -c "paused at draining" "$T/gcrd.log" || true) > PAUSED )); }

echo "== c. the child writes the table while gcrd, after the resume, has not read it"
# gcrd pauses 3 s after the resume; the child's write comes once it paused, and waits for it (the
# parent's last step waits for that write).
paused_pair c 3 $((RANDOM % 20 + 10))
"$GCR" checkpoint "$P" -R --name c-1 --json > "$T/c-1.json" &
CK=$!
wait_until 60 gcrd_paused || fail "gcrd never paused at draining"
rm -f "$T/write-hold"
wait "$CK" || fail "live checkpoint c-1"
unset GCR_GCRD_PAUSE_AT
stop_gcrd
rm -f "$T/slow"
wait_exit "$P" "$T/c.log"
[[ $(checksums "$T/c.log") == "$REF" ]] || fail "the run ended with $(checksums "$T/c.log"), expected $REF"
WAITS=$(json_field cow_waits < "$T/c-1.json")
echo "the table's write waited for gcrd: cow_waits $WAITS, stall $(( $(json_field time.stall_ns < "$T/c-1.json") / 1000000 )) ms"
(( WAITS >= 1 )) || fail "the child wrote the table without waiting for gcrd to read it (cow_waits $WAITS)"
restored c-1 "$T/c.log"

echo "== d. gcrd killed while the child waits for it to read the table"
paused_pair d 5 $((RANDOM % 10 + 10))
rc=0
"$GCR" checkpoint "$P" -R --name d-1 --json > "$T/d-1.json" 2> "$T/d-1.err" &
CK=$!
wait_until 60 gcrd_paused || fail "gcrd never paused at draining"
rm -f "$T/write-hold"
sleep 0.8  # the child reaches its write (a 10 ms poll away) and waits (gcrd pauses 5 s)
pkill -9 -f "gcrd --socket $GCR_GCRD_SOCKET"
wait "$CK" || rc=$?
unset GCR_GCRD_PAUSE_AT
(( rc != 0 )) || fail "the checkpoint whose gcrd was killed succeeded"
echo "the checkpoint failed (exit $rc): $(tail -c 200 "$T/d-1.err")"
rm -f "$T/slow"
wait_exit "$P" "$T/d.log"
[[ $(checksums "$T/d.log") == "$REF" ]] || fail "after gcrd died the run ended with $(checksums "$T/d.log"), expected $REF"
"$GCR" image ls --json | grep_quiet '"d-1' && fail "the checkpoint whose gcrd died was committed"
echo "ok: the pair ran on to $REF"
