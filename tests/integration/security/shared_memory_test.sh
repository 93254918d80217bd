#!/usr/bin/env bash
# Description: shared memory from an untrusted process (docs/security.md, "Shared memory").
# While root's --leave-running checkpoint of its own mlp_train drains (slowed down), root's gcrd
# is also asked to checkpoint two hostile processes (user nobody's; the second root's where root
# may not dump another user's process, see lib.sh):
#  - a fake gcr-control mailbox (a memfd of that name, not sealed) that its owner truncates as
#    soon as gcrd writes to it;
#  - a hostile process that serves the control protocol itself (gcr_forge serve) and truncates
#    every memfd gcrd hands it (the copy-on-write table) and the regions it parked.
# gcrd must survive (same pid), refuse or fail only those two, and root's checkpoint must commit,
# verify, and the process finish with the reference checksum.
#
#   shared_memory_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
export GCR_DRAIN_MIB_PER_S=8  # root's 32 MiB take about 4 s to drain
export GCR_GCRD_PAUSE_AT=draining:1

step "nobody's fake mailbox, truncated once gcrd writes to it"
cat >"$N/mailbox.py" <<'PY'
import mmap, os, struct, sys, time
fd = os.memfd_create("gcr-control", 0)
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096)
m[0:8] = struct.pack("<IHH", 0x43524347, 1, 0)  # magic, major, minor
print("ready", flush=True)
while struct.unpack_from("<I", m, 8)[0] == 0:  # request_seq: a caller wrote its request
    time.sleep(0.0005)
os.ftruncate(fd, 0)
print("truncated", flush=True)
time.sleep(120)
PY
"${AS_NOBODY[@]}" /usr/bin/python3 "$N/mailbox.py" >"$T/mailbox.log" 2>&1 &
MB=$!
pids+=("$MB")
wait_for_line() { for _ in $(seq 1 500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.02; done; fail "$1 never showed $2"; }
wait_for_line "$T/mailbox.log" ready

step "$ATTACKER's hostile control server"
: >"$T/hostile.log"
"${AS_ATTACKER[@]}" setsid "$FORGE" serve 4 >>"$T/hostile.log" 2>&1 </dev/null &
H=$!
pids+=("$H")
wait_for_line "$T/hostile.log" ready

step "root's checkpoint, with both attacks during its drain"
long_reference
start_long "$T/a.log"
wait_steps "$T/a.log" 20
"$GCR" checkpoint "$P" -R --name victim --json >"$T/victim.json" 2>"$T/victim.err" &
V=$!
wait_for_line "$GCRD_LOG" "paused at draining"
g0=$(gcrd_pid)
[[ -n $g0 ]] || fail "no gcrd"
out_mb=$("$GCR" checkpoint "$MB" -R 2>&1) && bad "the fake mailbox was checkpointed: $out_mb"
out_h=$("$GCR" checkpoint "$H" -R 2>&1) || true
echo "fake mailbox: $out_mb"
echo "hostile server: ${out_h:0:300}"
cat "$T/hostile.log"
wait "$V" || bad "root's checkpoint failed while nobody attacked: $(cat "$T/victim.err")"
[[ $(gcrd_pid) == "$g0" ]] || bad "gcrd died (pid $g0, now '$(gcrd_pid)'): $(tail -3 "$GCRD_LOG")"
grep -q "truncate.*table: done" "$T/hostile.log" && bad "the hostile process could truncate gcrd's copy-on-write table"
grep -q "truncate a parked region: done" "$T/hostile.log" && bad "the hostile process could truncate a parked region"
"$GCR" image verify victim >/dev/null || bad "root's checkpoint does not verify"
go_on_long
REF=$REF_LONG check_run "root's process" "$P" "$T/a.log" 0
finish
