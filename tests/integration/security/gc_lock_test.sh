#!/usr/bin/env bash
# Description: a held gc.lock (docs/security.md, "Locks"). While another user of the store holds
# gc.lock (a long `gcr image gc`; here flock for 6 s), a --leave-running checkpoint must not
# freeze the process: it waits for the lock before the cut, the process keeps stepping, and the
# checkpoint completes once the lock is free; the process finishes with the reference checksum.
#
#   gc_lock_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
long_reference
start_long "$T/a.log"
wait_steps "$T/a.log" 20
"$GCR" checkpoint "$P" -R --name first >/dev/null || fail "first checkpoint"

step "gc.lock held for 6 s during a checkpoint"
flock -x "$GCR_STORE/gc.lock" -c "touch '$T/locked'; sleep 6" &
L=$!
pids+=("$L")
for _ in $(seq 1 250); do [[ -e $T/locked ]] && break; sleep 0.02; done
"$GCR" checkpoint "$P" -R --name during >"$T/during.out" 2>&1 &
C=$!
last=$(steps_in "$T/a.log") since=$(date +%s%N) worst=0
while kill -0 "$C" 2>/dev/null; do
  now=$(steps_in "$T/a.log") t=$(date +%s%N)
  if [[ $now != "$last" ]]; then last=$now since=$t; fi
  gap=$(( (t - since) / 1000000 ))
  (( gap > worst )) && worst=$gap
  sleep 0.05
done
wait "$C" || bad "the checkpoint failed: $(cat "$T/during.out")"
echo "longest the process made no step while the checkpoint waited for gc.lock: $worst ms"
(( worst < 2000 )) || bad "the process stood still for $worst ms while the checkpoint waited for gc.lock"
go_on_long
REF=$REF_LONG check_run "the checkpointed process" "$P" "$T/a.log" 0
finish
