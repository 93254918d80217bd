#!/usr/bin/env bash
# What real processes hold besides CUDA (issue 12, Note [Refused up front] in docs/processes.md):
# each resource is either checkpointed and restored with a bit-identical run, or refused before
# anything is stopped, with a message that names it, leaving the process running.
#
#   resources_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=resources
source "$(dirname "$0")/lib.sh"
HOLD=$(dirname "$0")/hold_resources.py
STEPS=70
# A run steps slowly and holds before its last step while $T/slow exists (start makes it, and it
# is removed once the run's checkpoint is over): no checkpoint finds the run ended however slow
# the machine, and the rest, the restores and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps $STEPS --step-delay-ms 15 --footprint 4M --streams 2
     --delay-while "$T/slow" --hold-while "$T/slow")

LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"

start() {  # LOG KINDS [hold options]: mlp_train under gcr, holding KINDS; prints its pid
  local log=$1 kinds=$2
  shift 2
  : > "$T/slow"
  python3 "$HOLD" "$kinds" "$@" -- "$GCR" run -- "${MLP[@]}" > "$log" 2>&1 &
  local p=$!
  pids+=("$p")
  echo "$p"
}

echo "== handled: checkpointed with -R, restored, bit-identical"
round_trip() {  # PID LOG NAME WHAT [checkpoint options]: -R checkpoint, run to the end, restore it
  local p=$1 log=$2 name=$3 what=$4
  shift 4
  wait_steps "$log" 5
  "$GCR" checkpoint "$p" -R --name "$name" "$@" > /dev/null || fail "checkpoint of a process holding $what"
  rm -f "$T/slow"
  wait_exit "$p" "$log"
  local len r
  len=$(stat -c %s "$log")
  "$GCR" restore "$name" --json > "$T/$name-r.json" || fail "restore of a process holding $what"
  r=$(json_field pid < "$T/$name-r.json")
  for _ in $(seq 1 3000); do kill -0 "$r" 2>/dev/null || break; sleep 0.02; done
  ! kill -0 "$r" 2>/dev/null || fail "the restored run holding $what did not end"
  [[ $(checksum_after "$log" "$len") == "$REF" ]] ||
    fail "restored run holding $what ended with '$(checksum_after "$log" "$len")'"
  echo "ok: $what survive(s) checkpoint and restore"
}
KINDS=eventfd,timerfd,signalfd,inotify,epoll,memfd,tcp-listen,udp,unix-pair,deleted-small
P=$(start "$T/ok.log" "$KINDS")
pids+=("$P")  # start ran in a subshell
round_trip "$P" "$T/ok.log" ok "$KINDS"

images() { "$GCR" image ls --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['checkpoints']))"; }
refused() {  # KIND PATTERN [hold options]: the checkpoint is refused up front, naming it
  local kind=$1 pattern=$2
  shift 2
  local log=$T/refused-$kind.log
  P=$(start "$log" "$kind" "$@")
  pids+=("$P")
  wait_steps "$log" 5
  local rc=0 before
  before=$(images)
  "$GCR" checkpoint "$P" -R > "$T/refused.out" 2> "$T/refused.err" || rc=$?
  [[ $rc == 8 ]] || fail "checkpoint of a process holding $kind: exit $rc, expected 8 (unsupported): $(cat "$T/refused.err")"
  grep -q "$pattern" "$T/refused.err" || fail "the refusal of $kind does not say '$pattern': $(cat "$T/refused.err")"
  grep -q "fd [0-9]* of pid $P" "$T/refused.err" || fail "the refusal of $kind does not name the fd and pid: $(cat "$T/refused.err")"
  # Nothing was stopped: the process is not stopped, its steps go on, and it finishes unharmed.
  [[ $(awk '{print $3}' /proc/$P/stat) != T ]] || fail "the process refused for $kind is stopped"
  local n
  n=$(steps_in "$log")
  wait_steps "$log" $((n + 2))
  rm -f "$T/slow"
  wait_exit "$P" "$log"
  [[ $(checksum_of "$log") == "$REF" ]] || fail "the process refused for $kind did not finish right"
  [[ $(images) == "$before" ]] || fail "a refused checkpoint left something in the store"
  echo "ok: $kind refused: $(head -c 160 "$T/refused.err")"
}

echo "== refused up front"
python3 - "$T/tcp-peer.port" <<'EOF' &
import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
c, _ = s.accept()
time.sleep(60)
EOF
pids+=("$!")
wait_until 10 test -s "$T/tcp-peer.port" || fail "the outside TCP server did not start"
refused tcp-outside "is a TCP connection" --tcp-peer "127.0.0.1:$(cat "$T/tcp-peer.port")"
refused io_uring "io_uring"
refused deleted-large "deleted while open"
python3 - "$T/peer.sock" <<'EOF' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen()
c, _ = s.accept()
time.sleep(60)
EOF
pids+=("$!")
for _ in $(seq 1 200); do [[ -S $T/peer.sock ]] && break; sleep 0.02; done
refused unix-outside "unix socket connected to pid" --unix-peer "$T/peer.sock"

echo "== an established connection both of whose ends the process holds is carried"
P=$(start "$T/tcp-in.log" tcp-established)
pids+=("$P")
round_trip "$P" "$T/tcp-in.log" tcp-in "an established TCP connection within the process"

echo "== --tcp-close: an established connection is dumped as closed"
P=$(start "$T/tcp.log" tcp-established)
pids+=("$P")
round_trip "$P" "$T/tcp.log" tcp "an established TCP connection, closed" --tcp-close

echo "== /dev/nvidia* opened directly (by a process that does not use the driver)"
NODE=/dev/nvidia-gcr-test-$$
mknod "$NODE" c 1 3
trap 'rc=$?; rm -f "$NODE"; (exit $rc); cleanup' EXIT
python3 -c "import os,sys,time; f=open(sys.argv[1]); print('opened', flush=True); time.sleep(60)" "$NODE" > "$T/nv.log" 2>&1 &
P=$!
pids+=("$P")
wait_for "$T/nv.log" opened
rc=0
"$GCR" checkpoint "$P" -R 2> "$T/nv.err" || rc=$?
[[ $rc == 8 ]] && grep -q "opened directly" "$T/nv.err" || fail "a direct /dev/nvidia* was not refused (exit $rc): $(cat "$T/nv.err")"
kill -0 "$P" || fail "the refused process is gone"
echo "ok: /dev/nvidia* refused"
echo "PASS"
