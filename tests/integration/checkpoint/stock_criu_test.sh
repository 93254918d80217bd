#!/usr/bin/env bash
# gcr on a CRIU without its patches (issue 40; docs/criu-patches.md): the same CRIU 4.x built from
# the same source, as a distribution ships it (scripts/build-criu.sh --stock, .deps/criu-stock).
#   a. the probes (Note [CRIU's capabilities probed] in gcr/criu_capabilities.h): gcr doctor lists
#      every capability of the patches as absent on the stock CRIU, each with what its absence
#      costs, and as present on gcr's; --capability answers 8 / 0
#   b. a live checkpoint on the stock CRIU says what it does the slow way (host memory written in
#      the freeze), the process runs on to the reference checksum, and the checkpoint restores
#      bit-identical with that CRIU
#   c. a job of an interactive shell (its terminal open): the checkpoint is refused before
#      anything stops, naming terminal-onto-any-file; the job runs on
#   d. a process whose session leader is outside its pid namespace: refused the same way, naming
#      session-outside-pidns; it runs on
#
#   stock_criu_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=stock-criu
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PATCHED=$ROOT/.deps/criu/criu  # set-up's, whatever GCR_CRIU says (the suite may run on another)
STOCK=${GCR_STOCK_CRIU_BIN:-$ROOT/.deps/criu-stock/criu}
[[ -x $STOCK ]] || { echo "SKIP: no stock CRIU at $STOCK (scripts/setup.sh builds it: scripts/build-criu.sh --stock)"; exit 77; }
[[ -x $PATCHED ]] || { echo "SKIP: no CRIU of gcr's set-up at $PATCHED to compare with"; exit 77; }
STEPS=300
# A run steps slowly and holds before its last step while $T/slow exists (made before each start,
# removed once the run's checkpoint is taken): none finds the run ended however slow the machine,
# and the rest, the restore and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps $STEPS --step-delay-ms 12 --footprint 16M
     --delay-while "$T/slow" --hold-while "$T/slow")
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "the reference run printed no checksum"
PROBED=(terminal-onto-any-file session-outside-pidns cow-dump cow-track cow-dma kdat-cache-dir)

step "a. the probes: every capability absent on the stock CRIU, present on gcr's"
GCR_CRIU=$STOCK "$GCR" doctor --json > "$T/stock-doctor.json" || true
GCR_CRIU=$STOCK "$GCR" doctor > "$T/stock-doctor.txt" 2>&1 || true
GCR_CRIU=$PATCHED "$GCR" doctor --json > "$T/patched-doctor.json" || true
state_of() {  # FILE CAPABILITY: its check's state in gcr doctor --json
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(next((c['state'] for c in d['checks'] if c['name']=='CRIU '+sys.argv[2]), 'none'))" "$1" "$2"
}
for c in "${PROBED[@]}" unprivileged-bounding-set shell-job-group lazy-pages-pipelined; do
  [[ $(state_of "$T/stock-doctor.json" "$c") == warn ]] || bad "the stock CRIU's $c is not listed as missing"
  grep -q "CRIU $c" "$T/stock-doctor.txt" || bad "gcr doctor does not list CRIU $c"
done
for c in "${PROBED[@]}"; do
  [[ $(state_of "$T/patched-doctor.json" "$c") == ok ]] ||
    bad "gcr's CRIU's $c is not found present: $(GCR_CRIU=$PATCHED "$GCR" doctor --capability "$c" 2>&1 | head -1)"
done
grep -q "fix: host memory is written inside the freeze" "$T/stock-doctor.txt" ||
  bad "gcr doctor does not say what a CRIU without cow-dump costs: $(grep -A1 'CRIU cow-dump' "$T/stock-doctor.txt")"
rc=0
GCR_CRIU=$STOCK "$GCR" doctor --capability cow-dump > "$T/cap.out" 2>&1 || rc=$?
[[ $rc == 8 ]] || bad "doctor --capability cow-dump on the stock CRIU exited $rc, not 8: $(cat "$T/cap.out")"
grep -q "this CRIU does not know --cow-dump" "$T/cap.out" || bad "the probe did not say why: $(cat "$T/cap.out")"
GCR_CRIU=$PATCHED "$GCR" doctor --capability cow-dump > /dev/null || bad "doctor --capability cow-dump on gcr's CRIU failed"
rc=0
"$GCR" doctor --capability no-such-thing > "$T/cap.out" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "cow-dump" "$T/cap.out" || bad "an unknown capability: exit $rc: $(cat "$T/cap.out")"

step "b. a live checkpoint on the stock CRIU: its fallback line; restored bit-identical"
stop_gcrd
export GCR_CRIU=$STOCK  # gcrd, started by the next command, runs the stock CRIU
# In a session of its own, as from a user's shell: a runner that makes no session (CI) is step d's.
: > "$T/slow"
setsid "$GCR" run -- "${MLP[@]}" > "$T/live.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
wait_steps "$T/live.log" $((RANDOM % 30 + 10))
"$GCR" checkpoint "$P" -R --name live > "$T/live.out" 2>&1 || fail "live checkpoint on the stock CRIU: $(cat "$T/live.out")"
rm -f "$T/slow"
grep -q "host memory written inside the freeze: this CRIU lacks cow-dump" "$T/live.out" ||
  bad "the checkpoint did not say it wrote host memory in the freeze: $(cat "$T/live.out")"
wait_exit "$P" "$T/live.log"
[[ $(checksum_of "$T/live.log") == "$REF" ]] || fail "the original run after the checkpoint ended wrong"
"$GCR" restore live --stdout "$T/restored.log" --json > "$T/restore.json" || fail "restore on the stock CRIU"
wait_gone "$(json_field pid < "$T/restore.json")"
[[ $(checksum_of "$T/restored.log") == "$REF" ]] || fail "the restored run ended with '$(checksum_of "$T/restored.log")', expected $REF"

step "c. a job of an interactive shell: refused before anything stops, naming terminal-onto-any-file"
: > "$T/slow"  # runs on (held) until the end
script -qfec "bash --norc -i -c '\"$GCR\" run -- ${MLP[*]} & echo \$! > $T/tty.pid; wait'" \
  "$T/tty.typescript" > /dev/null 2>&1 < /dev/null &
pids+=("$!")
wait_until 10 test -s "$T/tty.pid" || fail "the job on a terminal did not start"
P=$(cat "$T/tty.pid")
pids+=("$P")
wait_steps "$T/tty.typescript" 5
rc=0
"$GCR" checkpoint "$P" --name tty > "$T/tty.out" 2>&1 || rc=$?
[[ $rc == 8 ]] || bad "a checkpoint of a job on a terminal exited $rc, not 8 (unsupported): $(cat "$T/tty.out")"
grep -q "lacks terminal-onto-any-file" "$T/tty.out" || bad "the refusal does not name the capability: $(cat "$T/tty.out")"
n=$(steps_in "$T/tty.typescript")
wait_steps "$T/tty.typescript" $((n + 3))
alive "$P" || fail "the job on a terminal did not run on"

step "d. a session leader outside the pid namespace: refused, naming session-outside-pidns"
# As a CI runner that makes no session does: gcr, gcrd and the process in one pid namespace whose
# session leader is outside it. The checkpoint runs there once the process has stepped.
stop_gcrd
NS_MLP=("${MLP[@]}")
NS_MLP[2]=$((STEPS + 1))
unshare --pid --fork --mount-proc bash -c '
  gcr=$1 t=$2
  shift 2
  "$gcr" run -- "$@" > "$t/ns.log" 2>&1 &
  p=$!
  for _ in $(seq 3000); do [[ -e $t/ns.go ]] && break; sleep 0.02; done
  rc=0
  "$gcr" checkpoint "$p" -R --name ns > "$t/ns.out" 2>&1 || rc=$?
  echo "$rc" > "$t/ns.rc"
  for _ in $(seq 3000); do [[ -e $t/ns.end ]] && break; sleep 0.02; done
  kill -0 "$p" && echo running > "$t/ns.state"
' _ "$GCR" "$T" "${NS_MLP[@]}" < /dev/null &
NS=$!
pids+=("$NS")
wait_steps "$T/ns.log" 5
touch "$T/ns.go"
wait_until 60 test -s "$T/ns.rc" || fail "the checkpoint in the pid namespace did not end"
rc=$(cat "$T/ns.rc")
[[ $rc == 8 ]] || bad "a checkpoint of a process whose session is outside its namespace exited $rc, not 8: $(cat "$T/ns.out")"
grep -q "lacks session-outside-pidns" "$T/ns.out" || bad "the refusal does not name the capability: $(cat "$T/ns.out")"
n=$(steps_in "$T/ns.log")
wait_steps "$T/ns.log" $((n + 3))
touch "$T/ns.end"
wait "$NS" || true
[[ -s $T/ns.state ]] || bad "the process in the pid namespace did not run on"
unset GCR_CRIU
finish
