#!/usr/bin/env bash
# Soft copy-on-write (Note [Soft copy-on-write] in libgcr/include/gcr/cow_table.h): a
# --leave-running checkpoint whose drain is slowed down (GCR_DRAIN_MIB_PER_S) while mlp_train keeps
# training. The process writes regions gcrd has not read yet: with copies (the default) it copies
# them and runs on; with GCR_COW_COPY=0 it waits for gcrd to read them first. Either way the
# checkpoint must hold the bytes of the cut: its restore finishes with the checksum of an
# uninterrupted run, as does the run that went on. A process killed while its checkpoint is still
# being stored, after it copied regions, leaves the checkpoint whole (Note [Copies handed over] in
# gcr/cow_table.h), and `gcr ps` says it runs while its checkpoint drains.
#
#   cow_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=cow-test
source "$(dirname "$0")/lib.sh"
# gcrd inherits this from the gcr that starts it: about 3 s to drain the ~50 MiB below.
export GCR_DRAIN_MIB_PER_S=16
STEPS=400
# A run steps slowly and holds before its last step while $T/slow exists (made before it starts,
# removed once its checkpoint's checks are done): the rest, its restore and the references (with
# no $T/slow) go at full speed.
SLOW=(--delay-while "$T/slow" --hold-while "$T/slow")
MLP=("$BUILD/tests/workloads/mlp_train" --steps $STEPS --step-delay-ms 10 --footprint 48M --streams 2 "${SLOW[@]}")

echo "== reference: mlp_train without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"

run_case() {  # NAME COPY(1|0)
  local name=$1 copy=$2 log=$T/$1.log
  : > "$T/slow"
  GCR_COW_COPY=$copy setsid "$GCR" run -- "${MLP[@]}" >> "$log" 2>&1 < /dev/null &
  local p=$!
  pids+=("$p")
  wait_steps "$log" $((RANDOM % 30 + 20))
  local before
  before=$(steps_in "$log")
  "$GCR" checkpoint "$p" --name "$name" -R --json > "$T/$name.json" || fail "checkpoint $name"
  local after copies waits stall total
  after=$(steps_in "$log")
  copies=$(json_field cow_copies < "$T/$name.json")
  waits=$(json_field cow_waits < "$T/$name.json")
  stall=$(json_field time.stall_ns < "$T/$name.json")
  total=$(json_field time.total_ns < "$T/$name.json")
  echo "$name: steps $before -> $after during the checkpoint; stall $((stall / 1000000)) ms," \
       "total $((total / 1000000)) ms; copies $copies, waits $waits"
  (( total - stall > 1000000000 )) || fail "$name: the drain took under a second; the rate limit did not apply"
  # The process ran during the drain instead of waiting for it.
  (( after - before >= 10 )) || fail "$name: only $((after - before)) steps ran during a slow drain"
  if [[ $copy == 1 ]]; then
    (( copies >= 1 )) || fail "$name: no region was copied, though the process wrote during the drain"
    (( waits == 0 )) || fail "$name: the process waited for $waits regions although it may copy"
  else
    (( copies == 0 )) || fail "$name: $copies copies with GCR_COW_COPY=0"
    (( waits >= 1 )) || fail "$name: the process never waited for gcrd, though it wrote during the drain"
  fi
  rm -f "$T/slow"
  wait_exit "$p" "$log"
  [[ $(checksum_of "$log") == "$REF" ]] || fail "$name: the run went on to $(checksum_of "$log"), expected $REF"
  "$GCR" restore "$name" || fail "restore $name"
  wait_exit "$p" "$log"
  [[ $(checksum_of "$log") == "$REF" ]] || fail "$name: the restore ended with $(checksum_of "$log"), expected $REF"
  echo "ok: $name: both the run and its restore match the reference"
}

echo "== writes during the drain copy the region first"
run_case copy 1
echo "== with GCR_COW_COPY=0 they wait for gcrd instead"
run_case wait 0
echo "== killed while its checkpoint is stored: the copies it made stay with gcrd"
# More device memory, so that the drain (~8 s) outlasts a `gcr ps` slowed by other tests' processes;
# and more steps, so that the run still steps (writes, copies) when the test kills it, rather than
# holding before its last step.
KILLED=("$BUILD/tests/workloads/mlp_train" --steps 1200 --step-delay-ms 10 --footprint 128M --streams 2 "${SLOW[@]}")
LD_LIBRARY_PATH=$BUILD/simgpu "${KILLED[@]}" > "$T/ref_killed.log" 2>&1
REF_KILLED=$(checksum_of "$T/ref_killed.log")
: > "$T/slow"
"$GCR" run -- "${KILLED[@]}" >> "$T/killed.log" 2>&1 < /dev/null &  # as a shell starts a job
p=$!
pids+=("$p")
wait_steps "$T/killed.log" $((RANDOM % 30 + 20))
"$GCR" checkpoint "$p" --name killed -R --json > "$T/killed.json" 2> "$T/killed.err" &
cp=$!
draining() {  # gcr ps says process $p runs while its checkpoint is stored
  "$GCR" ps --json > "$T/ps.json" 2>&1 && python3 -c "
import json, sys
rows = [r for r in json.load(open('$T/ps.json')) if r['pid'] == $p]
sys.exit(0 if rows and rows[0].get('state') == 'draining' else 1)"
}
for _ in $(seq 1 1500); do draining && break; kill -0 "$cp" 2>/dev/null || break; sleep 0.02; done
draining || fail "gcr ps never showed process $p draining during its checkpoint; it said: $(cat "$T/ps.json")"
before=$(steps_in "$T/killed.log")
wait_steps "$T/killed.log" $((before + 3))  # it writes its weights every step: copies
kill -0 "$cp" 2>/dev/null || fail "the checkpoint ended before the process could be killed in its drain: $(cat "$T/killed.err")"
kill -9 "$p"
wait "$cp" || { cat "$T/killed.err"; fail "the checkpoint of a process killed while it was stored failed"; }
copies=$(json_field cow_copies < "$T/killed.json")
(( copies >= 1 )) || fail "killed: no region was copied before the kill ($copies)"
echo "killed: process killed after $(( $(steps_in "$T/killed.log") - before )) steps into the drain; $copies copies handed over"
[[ -z $(checksum_of "$T/killed.log") ]] || fail "killed: the killed run printed a checksum"
rm -f "$T/slow"
"$GCR" restore killed || fail "restore killed"
wait_exit "$p" "$T/killed.log"
[[ $(checksum_of "$T/killed.log") == "$REF_KILLED" ]] || fail "killed: the restore ended with $(checksum_of "$T/killed.log"), expected $REF_KILLED"
echo "ok: killed: its checkpoint, restored, matches the reference"
echo "== on a terminal the storing draws a progress bar"
: > "$T/slow"
"$GCR" run -- "${MLP[@]}" >> "$T/bar.log" 2>&1 < /dev/null &  # as a shell starts a job
p=$!
pids+=("$p")
wait_steps "$T/bar.log" 20
script -qec "'$GCR' checkpoint $p --name bar -R" /dev/null > "$T/pty.out" 2>&1 || { cat "$T/pty.out"; fail "checkpoint under a pty"; }
grep -q "pid $p: storing: [0-9.]*%" "$T/pty.out" || { cat -v "$T/pty.out"; fail "no progress bar while storing"; }
grep -q "checkpoint" "$T/pty.out" || fail "no summary after the bar"
rm -f "$T/slow"
wait_exit "$p" "$T/bar.log"
"$GCR" image verify > /dev/null || fail "gcr image verify"
echo "PASS"
