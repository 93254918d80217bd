#!/usr/bin/env bash
# A quiesce that cannot drain within --timeout: a process under gcr (started from a shell) whose
# stream waits on a value that only a later host call writes. `gcr checkpoint -R --timeout 1` fails
# with exit 10 in about its timeout (it used to wait the timeout plus a minute for an answer),
# commits nothing, and the process runs on: once told, it writes the value and its stream drains.
#
#   drain_timeout_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=drain-timeout
source "$(dirname "$0")/lib.sh"
log=$T/stuck.log
"$GCR" run -- python3 "$(dirname "$0")/stuck_stream.py" "$T/flag" >> "$log" 2>&1 &
p=$!
pids+=("$p")
for _ in $(seq 1 500); do grep -q waiting "$log" && break; sleep 0.02; done
grep -q waiting "$log" || fail "the program did not start: $(cat "$log")"
rc=0
start=$(date +%s%N)
"$GCR" checkpoint "$p" -R --timeout 1 > "$T/ck.out" 2> "$T/ck.err" || rc=$?
took_ms=$((($(date +%s%N) - start) / 1000000))
[[ $rc == 10 ]] || fail "a quiesce that cannot drain: exit $rc, expected 10: $(cat "$T/ck.err")"
grep -q "did not finish within" "$T/ck.err" || fail "the error does not say the GPU work did not finish: $(cat "$T/ck.err")"
# Not a timing assertion on the machine's speed: without the bound it took the timeout plus 60 s.
(( took_ms < 30000 )) || fail "the checkpoint gave up only after $took_ms ms"
echo "refused in $took_ms ms (exit $rc): $(head -c 250 "$T/ck.err")"
[[ $("$GCR" image ls --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['checkpoints']))") == 0 ]] ||
  fail "the failed checkpoint left an image"
touch "$T/flag"
wait "$p" || fail "the process failed after the abandoned checkpoint: $(cat "$log")"
grep -q "^done" "$log" || fail "the process did not finish its stream: $(cat "$log")"
echo "ok: the process ran on and drained its stream"
echo "PASS"
