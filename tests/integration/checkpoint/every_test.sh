#!/usr/bin/env bash
# Periodic checkpoints (Note [Checkpoints every period] in daemon/periodic.h): mlp_train started
# as a user would (`gcr run --checkpoint-every 1s --keep 2 -- ... >> log &`) is checkpointed by
# gcrd every second; `gcr ps` shows the schedule; only the newest two are kept, named ev.N and
# the newest also ev; killed, `gcr restore ev` brings it back from within one period of where it
# was (by its step counter), it is checkpointed every second again (its checkpoints counting on),
# and it finishes bit-identical to an uninterrupted run; a gcrd stopped and started again in
# between starts the schedule again (it counts on).
#
#   every_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=every-test
source "$(dirname "$0")/lib.sh"
STEP_MS=15
# Long enough (>= 36 s) that a slow machine still kills it mid-run after its first checkpoints;
# slow and held before its last step until its restore is checkpointed again ($T/slow), then at
# full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps 2400 --footprint 32M --streams 2)
SLOW=(--step-delay-ms $STEP_MS --delay-while "$T/slow" --hold-while "$T/slow")

# The reference runs beside the test (it needs no gcrd), at full speed; its checksum is read at
# the end.
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1 &
REF_PID=$!
pids+=("$REF_PID")

every() {  # PID FIELD: the field of PID's schedule in gcr ps --json ('' if none)
  "$GCR" ps --json | python3 -c "
import json, sys
for p in json.load(sys.stdin):
    if p['pid'] == $1: print(p.get('every', {}).get('$2', ''))"
}
taken() { [[ $(every "$1" count) -ge $2 ]]; }

echo "== a run checkpointed every second"
: > "$T/slow"
"$GCR" run --checkpoint-every 1s --keep 2 --checkpoint-name ev -- "${MLP[@]}" "${SLOW[@]}" >> "$T/a.log" 2>&1 &
P=$!
pids+=("$P")
wait_until 60 taken "$P" 3 || fail "gcrd took $(every "$P" count) checkpoints in 60 s: $(every "$P" last_error)"
[[ $(every "$P" every_ms) == 1000 && $(every "$P" failed) == 0 ]] ||
  fail "gcr ps shows the schedule as $("$GCR" ps --json)"
wait_until 10 eval '"$GCR" ps | grep_quiet "every 1.00 s"' || fail "gcr ps does not show the schedule: $("$GCR" ps)"
# One listing: only the newest two are kept (ev.K-1, ev.K), and ev names the newest. (A listing
# between two tags of one checkpoint is looked at again.)
kept_right() {
  "$GCR" image ls --json | python3 -c "
import json, sys
tags = {t: c['id'] for c in json.load(sys.stdin)['checkpoints'] for t in c.get('tags', [])}
n = sorted(int(t[3:]) for t in tags if t.startswith('ev.'))
ok = len(n) == 2 and n[1] == n[0] + 1 and n[1] >= 3 and set(tags) == {'ev', 'ev.%d' % n[0], 'ev.%d' % n[1]} \
     and tags['ev'] == tags['ev.%d' % n[1]]
print(' '.join(sorted(tags)))
sys.exit(0 if ok else 1)" > "$T/tags"
}
wait_until 10 kept_right || fail "the store holds '$(cat "$T/tags")', expected ev on the newest of the newest two"
tags=$(cat "$T/tags")
n=$(every "$P" count)
echo "ok: $n checkpoints, kept: $tags"

echo "== gcrd stopped and started again: the schedule goes on, counting on"
stop_gcrd
LD_LIBRARY_PATH=$BUILD/simgpu "$BUILD/bin/gcrd" --socket "$GCR_GCRD_SOCKET" --detach > /dev/null 2>&1 ||
  fail "gcrd did not start again"
wait_until 60 taken "$P" $((n + 1)) || fail "the schedule did not go on after a restart: $("$GCR" ps --json)"
grep -q "kept across a restart" "$(dirname "$GCR_GCRD_SOCKET")/gcrd.log" || fail "gcrd's log does not say it"
n=$(every "$P" count)
echo "ok: checkpoint $n taken by the new gcrd"

echo "== killed, restored from the newest: it lost at most one period"
kill -0 "$P" 2> /dev/null && ! grep -q '^checksum' "$T/a.log" ||
  fail "the run ended before it could be killed (the machine is slower than this test allows)"
t0=$(date +%s%N)
age=$(every "$P" last_age_ms)
kill -9 "$P"
gap=$((($(date +%s%N) - t0) / 1000000))
killed_at=$(awk '/^step/ {s = $2} END {print s}' "$T/a.log")
size=$(stat -c %s "$T/a.log")
wait_gone "$P" 30 || fail "process $P did not die"
"$GCR" restore ev --json > "$T/r.json" || fail "gcr restore ev"
[[ $(json_field every_ms < "$T/r.json") == 1000 ]] || fail "the restored process is not checkpointed every second: $(cat "$T/r.json")"
wait_until 60 eval '[[ $(tail -c +$((size + 1)) "$T/a.log" | grep -c "^step") -ge 1 ]]' || fail "the restored run printed no step"
resumed_at=$(tail -c +$((size + 1)) "$T/a.log" | awk '/^step/ && s == "" {s = $2} END {print s}')  # reads it all: no SIGPIPE for tail
lost=$((killed_at - resumed_at + 1))
most=$(((age + gap) / STEP_MS + 3))
((lost >= 0 && lost <= most)) ||
  fail "killed at step $killed_at, resumed at step $resumed_at: $lost steps lost, at most $most expected (newest checkpoint $age ms old)"
echo "ok: killed at step $killed_at, resumed at step $resumed_at ($lost steps again; the newest checkpoint was $age ms old)"
wait_until 60 taken "$P" $((n + 1)) || fail "the restored process was not checkpointed again: $("$GCR" ps --json)"
rm -f "$T/slow"
wait_until 180 exited_with_checksum "$P" "$T/a.log" || fail "the restored run did not finish (log $T/a.log)"
wait_until 180 exited_with_checksum "$REF_PID" "$T/ref.log" || fail "the reference run did not finish"
REF=$(checksum_of "$T/ref.log")
[[ $(checksum_of "$T/a.log") == "$REF" ]] || fail "the restored run ended with $(checksum_of "$T/a.log"), expected $REF"
echo "ok: checkpointed again after the restore (counting on from ev.$n), ended with $REF"

echo "== bad input"
out=$("$GCR" run --checkpoint-every 10ms -- true 2>&1) && fail "--checkpoint-every 10ms was taken"
[[ $out == *"100ms"* ]] || fail "--checkpoint-every 10ms said: $out"
out=$("$GCR" run --checkpoint-every soon -- true 2>&1) && fail "--checkpoint-every soon was taken"
echo "ok: refused: $out"
echo PASS
