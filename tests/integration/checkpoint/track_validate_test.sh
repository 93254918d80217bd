#!/usr/bin/env bash
# Write tracking you can check (Note [Validating write tracking] in interpose/validate.h).
# pointer_table's kernel adds to two buffers through device pointers stored in a device table, so
# gcr's speculative tracking does not see those writes. Shown three ways:
#   1. `gcr run --track validate --track-profile FILE` names the kernel and both regions on
#      stderr, writes the kernel to FILE, and the run itself is right;
#   2. without the profile, an incremental checkpoint misses the buffers' changes: its restore
#      ends wrong (the case the profile exists for; this proves the scenario catches it);
#   3. with the profile, the same incremental checkpoint holds them: its restore ends right.
#
#   track_validate_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=track-validate
source "$(dirname "$0")/lib.sh"
PT=("$BUILD/tests/workloads/pointer_table" --steps 150 --step-delay-ms 10)
PROFILE=$T/track.profile
needs_dumpable_session

echo "== --track validate names the kernel and records it"
"$GCR" run --track validate --track-profile "$PROFILE" -- "$BUILD/tests/workloads/pointer_table" \
  --steps 3 --step-delay-ms 0 > "$T/validate.out" 2> "$T/validate.err" || { cat "$T/validate.err"; fail "validated run"; }
grep -q "pointer_table: OK" "$T/validate.out" || fail "the validated run itself went wrong"
[[ $(grep -c "kernel add_through_table(float\* const\*, int, int)" "$T/validate.err") == 2 ]] ||
  { cat "$T/validate.err"; fail "want both buffers named once each"; }
grep -q "^_Z17add_through_tablePKPfii$" "$PROFILE" || { cat "$PROFILE"; fail "the profile lacks the kernel"; }
"$GCR" run --track validate --track-profile "$PROFILE" -- "$BUILD/tests/workloads/pointer_table" \
  --steps 2 --step-delay-ms 0 > /dev/null 2> "$T/validate2.err" || fail "second validated run"
[[ ! -s $T/validate2.err ]] || { cat "$T/validate2.err"; fail "a profiled kernel was reported again"; }
[[ $(wc -l < "$PROFILE") == 1 ]] || fail "the profile grew on the second run"
echo "ok: reported and recorded"

# incremental_case NAME [gcr run options]: checkpoint -R at step ~20 (full), then at step ~60
# (incremental, the process ends), restore; prints the restored run's last line.
incremental_case() {
  local name=$1 log=$T/$1.log
  shift
  "$GCR" run "$@" -- "${PT[@]}" >> "$log" 2>&1 < /dev/null &  # as a shell starts a job
  local p=$!
  pids+=("$p")
  wait_steps "$log" 20
  "$GCR" checkpoint "$p" --name "$name-1" -R > /dev/null || fail "$name: first checkpoint"
  wait_steps "$log" 60
  "$GCR" checkpoint "$p" --name "$name-2" --json > "$T/$name-2.json" || fail "$name: second checkpoint"
  for _ in $(seq 1 500); do kill -0 "$p" 2> /dev/null || break; sleep 0.02; done
  "$GCR" restore "$name-2" > /dev/null || fail "$name: restore"
  wait_for "$log" 'pointer_table: \(OK\|MISMATCH\)'
  for _ in $(seq 1 500); do kill -0 "$p" 2> /dev/null || break; sleep 0.02; done
  echo "$name: dirty $(json_field dirty_bytes < "$T/$name-2.json") of $(json_field region_bytes < "$T/$name-2.json") bytes at the second checkpoint; $(grep 'pointer_table:' "$log" | tail -1)"
}

echo "== without the profile an incremental checkpoint misses the writes"
incremental_case plain
grep -q "pointer_table: MISMATCH" "$T/plain.log" || fail "the restore without the profile came out right: the scenario does not show what validate is for"

echo "== with the profile the same incremental checkpoint is right"
incremental_case profiled --track-profile "$PROFILE"
grep -q "pointer_table: OK" "$T/profiled.log" || fail "the restore with the profile ended wrong"
echo "PASS"
