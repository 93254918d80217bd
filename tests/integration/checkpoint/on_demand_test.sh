#!/usr/bin/env bash
# On-demand restore (Note [On-demand restore] in libgcr/include/gcr/cow_table.h). late_touch is
# checkpointed while it waits, then restored with loading slowed down (GCR_LOAD_MIB_PER_S): the
# process runs before its 64 MiB buffer B has arrived. Its first touch of the small A waits for A
# only (the loader takes wanted regions next), its touch of B waits for B, its second touch of A
# does not wait; every byte it reads is right. The same checkpoint restored --eager runs only after
# everything is loaded, and no touch waits. mlp_train restored on demand finishes bit-identical.
#
#   on_demand_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=on-demand-test
source "$(dirname "$0")/lib.sh"
# gcrd inherits this from the gcr that starts it: 64 MiB take about 8 s to load.
export GCR_LOAD_MIB_PER_S=8
wait_ms() { awk -v w="touch $2" '$1" "$2 == w {print int($4)}' "$1" | tail -n 1; }

echo "== late_touch, checkpointed while it waits"
setsid "$GCR" run -- "$BUILD/tests/workloads/late_touch" --go "$T/go" >> "$T/lt.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
wait_for "$T/lt.log" '^ready'
"$GCR" checkpoint "$P" --name lt > /dev/null || fail "checkpoint"
wait_gone "$P"
touch "$T/go"

restore_case() {  # MODE (on-demand|eager)
  local mode=$1 log=$T/lt.log
  : > "$T/lt.log.mark"
  local flags=()
  [[ $mode == eager ]] && flags=(--eager)
  "$GCR" restore lt "${flags[@]}" --json > "$T/$mode.json" || fail "$mode restore"
  wait_for "$log" 'late_touch: \(OK\|FAILED\)'
  grep -q 'late_touch: OK' "$log" || { grep mismatch "$log" | head; fail "$mode: wrong bytes after the restore"; }
  local a b again resume full wanted
  a=$(wait_ms "$log" A); b=$(wait_ms "$log" B); again=$(wait_ms "$log" A-again)
  resume=$(( $(json_field time.resume_ns < "$T/$mode.json") / 1000000 ))
  full=$(( $(json_field time.full_ns < "$T/$mode.json") / 1000000 ))
  wanted=$(json_field wanted_regions < "$T/$mode.json")
  echo "$mode: running after $resume ms, all loaded after $full ms; waits: A $a ms, B $b ms, A again $again ms; regions wanted: $wanted"
  if [[ $mode == on-demand ]]; then
    (( full - resume > 3000 )) || fail "on-demand: the process ran only $((full - resume)) ms before the load ended"
    (( b > 2000 )) || fail "on-demand: touching B (not loaded yet) waited only $b ms"
    (( a * 3 < b )) || fail "on-demand: touching A waited $a ms, not much less than B's $b ms: A did not jump the queue"
    (( wanted >= 1 )) || fail "on-demand: gcrd reports no region the process waited for"
  else
    (( b < 1000 && a < 1000 )) || fail "eager: a touch waited (A $a ms, B $b ms) although all was loaded"
    (( full <= resume )) || fail "eager: the process ran before all was loaded"
  fi
  (( again < 500 )) || fail "$mode: touching A again (loaded) waited $again ms"
  wait_gone "$(json_field pid < "$T/$mode.json")"
  : > "$log"
}
echo "== restored on demand, loading slowed to 8 MiB/s"
restore_case on-demand
echo "== restored eagerly"
restore_case eager

echo "== on a terminal (script(1) gives it one) the load draws a progress bar"
rm -f "$T/go"  # late_touch touches nothing until go: the slowed load shows
script -qec "'$GCR' restore lt" /dev/null > "$T/pty.out" 2>&1 &
sp=$!
sleep 1.5
touch "$T/go"
wait $sp || { cat -v "$T/pty.out"; fail "restore under a pty"; }
grep -q "loading device memory: [0-9.]*%" "$T/pty.out" || { cat -v "$T/pty.out"; fail "no progress bar while loading"; }
grep -q "restored checkpoint" "$T/pty.out" || fail "no summary after the bar"
wait_for "$T/lt.log" 'late_touch: \(OK\|FAILED\)'
grep -q 'late_touch: OK' "$T/lt.log" || fail "pty restore: wrong bytes"
wait_gone "$(sed -n 's/.* as pid \([0-9]*\).*/\1/p' "$T/pty.out" | head -1)"
: > "$T/lt.log"

echo "== the first-touch order: A and C touched before B load first, without being waited for"
rm -f "$T/go"
setsid "$GCR" run -- "$BUILD/tests/workloads/late_touch" --go "$T/go" --small-first >> "$T/lt.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
wait_for "$T/lt.log" '^ready'
"$GCR" checkpoint "$P" --name lt2 > /dev/null || fail "checkpoint lt2"
wait_gone "$P"
order=$("$GCR" image inspect lt2 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['meta'].get('touch_order',''))")
slab=$("$GCR" image inspect lt2 --json | python3 -c "import json,sys; d=json.load(sys.stdin); r=[o for o in d['objects'] if o['kind'] == 'region' and o['size'] < 8<<20]; print(r[0]['address'][2:])")
[[ ${order%%,*} == "$slab" ]] || fail "touch_order '$order' does not start with the small regions' slab $slab"
touch "$T/go"
"$GCR" restore lt2 --json > "$T/lt2.json" || fail "restore lt2"
wait_for "$T/lt.log" 'late_touch: \(OK\|FAILED\)'
grep -q 'late_touch: OK' "$T/lt.log" || fail "lt2: wrong bytes after the restore"
a=$(wait_ms "$T/lt.log" A); wanted=$(json_field wanted_regions < "$T/lt2.json")
echo "lt2: touch_order $order; A waited $a ms; regions wanted: $wanted"
(( a < 1000 )) || fail "lt2: A, first in the recorded order, was waited for $a ms"
wait_gone "$(json_field pid < "$T/lt2.json")"
: > "$T/lt.log"

echo "== mlp_train restored on demand finishes bit-identical"
MLP=("$BUILD/tests/workloads/mlp_train" --steps 80 --step-delay-ms 10 --footprint 16M)
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(awk '/^checksum/ {print $2}' "$T/ref.log")
setsid "$GCR" run -- "${MLP[@]}" >> "$T/mlp.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
wait_for "$T/mlp.log" '^step 20 '
"$GCR" checkpoint "$P" --name mlp > /dev/null || fail "checkpoint of mlp_train"
wait_gone "$P"
"$GCR" restore mlp > /dev/null || fail "restore of mlp_train"
wait_for "$T/mlp.log" '^checksum'
[[ $(awk '/^checksum/ {print $2}' "$T/mlp.log") == "$REF" ]] || fail "mlp_train restored on demand ended with another checksum"
echo "ok: checksum $REF"
echo "PASS"
