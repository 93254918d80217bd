#!/usr/bin/env bash
# Description: gcrd killed during an on-demand restore (docs/security.md, "Restored processes").
# mlp_train is checkpointed, then restored on demand with loading slowed down, and gcrd is killed
# with SIGKILL at each point: while CRIU restores it (CRIU paused in its post-restore action, and
# let go once gcrd is dead), after CRIU restored the process (still parked, no memory), after it
# got the load table (still parked), and while it runs with loading under way. Each time the
# restored process must either end or finish with the reference checksum: never run on to
# another checksum, never stay parked. The same while CRIU restores into a new PID namespace
# (there is no pidfile then: the keeper finds the task under unshare). And while its host memory
# still comes from gcrd (Note [Host memory from the store]: gcrd's server paused at the daemon's
# first background request, no page served since). Then the checkpoint, unchanged, restores to the
# reference.
#
#   gcrd_dies_loading_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
MLP=("$MLP_BIN" --steps "$STEPS" --step-delay-ms 15 --footprint 64M --streams 2)
LD_LIBRARY_PATH=$BUILD/simgpu "$MLP_BIN" --steps "$STEPS" --footprint 64M --quiet >"$T/ref64.log" 2>&1
REF=$(checksum_of "$T/ref64.log")

step "checkpoint"
start "$T/a.log"
wait_steps "$T/a.log" 40
"$GCR" checkpoint "$P" --name c >/dev/null || fail "checkpoint"
wait_gone "$P" 10 || fail "the checkpointed process did not end"

# The host pid of this test's mlp_train restored into a PID namespace below this shell's, if any
# (its environment names $T; other tests run beside this one).
restored_in_pidns() {
  local p mine
  mine=$(awk '/^NSpid:/ {print NF}' /proc/$$/status)
  for p in $(pgrep -f "^$MLP_BIN" || true); do
    grep -qaF "$T/" "/proc/$p/environ" 2>/dev/null || continue  # another test's
    (( $(awk '/^NSpid:/ {print NF}' "/proc/$p/status" 2>/dev/null || echo 0) > mine )) && { echo "$p"; return; }
  done
  return 0
}

step "gcrd killed while CRIU restores into a new PID namespace"
stop_gcrd
: >"$T/a.log"
rm -f "$T/criu-paused" "$T/criu-go"
echo post-restore >"$T/criu-pause-at"
"$GCR" restore c --new-pid-namespace >"$T/restore-pidns.out" 2>&1 &
pids+=("$!")
for _ in $(seq 1 1000); do [[ -e $T/criu-paused ]] && break; sleep 0.02; done
if [[ -e $T/criu-paused ]]; then
  kill -9 "$(gcrd_pid)"
  sleep 0.3
  touch "$T/criu-go"
  # Until the restored task shows up (or CRIU's unshare is gone), then until it is gone.
  for _ in $(seq 1 500); do
    [[ -n $(restored_in_pidns) ]] && break
    pgrep -f "unshare --pid --fork --kill-child --mount-proc .* -D $GCR_WORK_DIR" >/dev/null || break
    sleep 0.02
  done
  for _ in $(seq 1 500); do
    [[ -z $(restored_in_pidns) ]] && break
    sleep 0.02
  done
  left=$(restored_in_pidns)
  if [[ -n $left ]]; then
    bad "killed while CRIU restored into a new PID namespace: process $left stays (state $(awk '{print $3}' "/proc/$left/stat" 2>/dev/null), $(grep -c '^step' "$T/a.log") steps)"
    kill -9 "$left" 2>/dev/null || true
  else
    echo "killed while CRIU restored into a new PID namespace: the process ended: $(grep "gcr-keeper" "$GCRD_LOG" | tail -1)"
  fi
else
  bad "CRIU never paused in post-restore (new PID namespace)"
fi

for point in criu restored load-table loading host-pages; do
  step "gcrd killed at $point"
  if [[ $point == host-pages ]] && ! "$REAL_CRIU" check --feature uffd-noncoop >/dev/null 2>&1; then
    echo "note: no lazy pages on this kernel (criu check --feature uffd-noncoop): host memory is restored before the process runs"
    continue
  fi
  stop_gcrd
  : >"$T/a.log"
  sleep 0.2
  pause=60
  [[ $point == loading ]] && pause=1
  rm -f "$T/criu-paused" "$T/criu-go"
  log0=$(wc -l <"$GCRD_LOG" 2>/dev/null || echo 0)
  if [[ $point == criu ]]; then
    echo post-restore >"$T/criu-pause-at"
    GCR_LOAD_MIB_PER_S=4 "$GCR" restore c >"$T/restore-$point.out" 2>&1 &
    pids+=("$!")
    for _ in $(seq 1 1000); do [[ -e $T/criu-paused ]] && break; sleep 0.02; done
    [[ -e $T/criu-paused ]] || { bad "CRIU never paused in post-restore"; continue; }
  else
    GCR_LOAD_MIB_PER_S=4 GCR_GCRD_PAUSE_AT=$point:$pause "$GCR" restore c >"$T/restore-$point.out" 2>&1 &
    pids+=("$!")
    for _ in $(seq 1 1000); do grep -q "paused at $point" "$GCRD_LOG" 2>/dev/null && break; sleep 0.02; done
    grep -q "paused at $point" "$GCRD_LOG" || { bad "gcrd never reached $point: $(tail -3 "$GCRD_LOG")"; continue; }
  fi
  [[ $point == loading ]] && sleep 1.5  # it runs, part of its memory still to come
  g=$(gcrd_pid)
  kill -9 "$g"
  [[ $point == criu ]] && { sleep 0.3; touch "$T/criu-go"; }
  rc=0
  finish_run "$P" "$T/a.log" 0 || rc=$?
  case $rc in
    0) sum=$(checksum_of "$T/a.log")
       [[ $sum == "$REF" ]] || bad "killed at $point: the restored process ran on to checksum $sum, not $REF"
       echo "killed at $point: the process finished with the right checksum" ;;
    1) bad "killed at $point: the restored process $P hangs (state $(awk '{print $3}' /proc/$P/stat 2>/dev/null))"
       kill -9 "$P" 2>/dev/null || true ;;
    2) sleep 0.2
       echo "killed at $point: the process ended: $({ cat "$T/a.log"; tail -n +$((log0 + 1)) "$GCRD_LOG"; } | grep "gcr: the restore\|gcr-keeper.* $P " | tail -1)" ;;
  esac
  wait_gone "$P" 10 || true
done

step "the checkpoint restores to the reference"
stop_gcrd
: >"$T/a.log"
restore_check c "$T/a.log" "after gcrd's deaths"
finish
