# shellcheck shell=bash
# Shared by the failure tests (one per file, each sourcing this): the environment of the
# end-to-end test (a private store, gcrd socket and work directory under /var/tmp, simgpu), an
# uninterrupted reference run of mlp_train, and the means to stop a checkpoint at a known phase:
#
#  - gcrd's pause points (GCR_GCRD_PAUSE_AT, daemon/pause_point.h): gcrd logs
#    "paused at NAME" and sleeps; a point gcrd never reaches (one checkpoint.cpp does not call yet)
#    is reported as skipped, by name;
#  - CRIU's action scripts: gcrd runs CRIU through a wrapper ($T/criu) that adds
#    --action-script; the script stops CRIU at pre-dump (the process is parked, not yet seized) or
#    post-dump (everything dumped, the process still frozen) while $T/criu-pause-at names it;
#  - gdb on CRIU, to kill it inside parasite_dump_pages_seized (CRIU's parasite is in the process);
#  - the store's crash points (GCR_FAULT, libgcr/store/fault.h) in gcrd.
#
# usage: <test>.sh BUILD_DIR CRIU        (needs root for CRIU; exits 77 to skip)
# GCR_TEST_KEEP=1 keeps the work directory.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"
BUILD=$(cd "$1" && pwd)
REAL_CRIU=${2:-}
[[ $(id -u) == 0 ]] || { echo "SKIP: CRIU needs root"; exit 77; }
GCR=$BUILD/bin/gcr
[[ -x $GCR && -x $BUILD/bin/gcrd ]] || { echo "FAIL: gcr or gcrd not built in $BUILD"; exit 1; }
[[ -x $REAL_CRIU ]] || { echo "SKIP: no CRIU at '$REAL_CRIU' (scripts/setup.sh builds it)"; exit 77; }

close_inherited_fds
harness_dir failure-test
chmod 711 "$T"  # a test user (nobody) may reach a folder of its own in it
# gcrd makes its socket's folder 0700, and --detach logs there.
export GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd/gcrd.sock GCR_WORK_DIR=$T/work GCR_QUIET=1
export SIMGPU_DEVICES=2 SIMGPU_MEMORY=1G
GCRD_LOG=$T/gcrd/gcrd.log
STEPS=300
MLP_BIN=$BUILD/tests/workloads/mlp_train
# 15 ms a step while $T/slow exists: long enough for every phase of a checkpoint to be reached
# while the process runs; kill_at removes it once its checkpoints are over, so that the run and
# its restores go on at full speed (what they are checked for, the checksum, does not change).
SLOW=$T/slow
# While $T/hold exists the run does not end: kill_at's checkpoints must find it alive however long
# gdb or a busy machine takes (it held 300 steps of 15 ms, 4.5 s, until a CI run showed otherwise).
HOLD=$T/hold
MLP=("$MLP_BIN" --steps "$STEPS" --step-delay-ms 15 --delay-while "$SLOW" --hold-while "$HOLD"
  --footprint 32M --streams 2)
pids=() # processes to kill on the way out

cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done  # reaped quietly
  pkill -9 -f "gcrd --socket $T/" 2>/dev/null || true  # root's, and any test user's
  touch "$T/criu-go" 2>/dev/null || true  # a CRIU still waiting in its action script
  if [[ $rc != 0 && $rc != 77 ]]; then
    echo "--- logs (kept in $T) ---"
    tail -n 5 "$T"/*.log "$GCRD_LOG" 2>/dev/null || true
  elif [[ -n ${GCR_TEST_KEEP:-} ]]; then
    echo "kept $T"
  else
    rm -rf "$T"
  fi
  exit $rc
}
trap cleanup EXIT

# finish_run PID LOG CHECKSUMS: waits for PID to exit and LOG to hold more than CHECKSUMS
# checksum lines. 0: finished; 1: hung (alive, no new step for $HUNG_S s); 2: exited without one.
HUNG_S=8  # a checkpoint stalls a step for well under a second here
finish_run() {
  local pid=$1 log=$2 before=$3 last=-1 since=$SECONDS now
  while :; do
    if ! alive "$pid"; then
      wait_gone "$pid" 5 || true
      sleep 0.05
      [[ $(checksums_in "$log") -gt $before ]] && return 0
      return 2
    fi
    now=$(steps_in "$log")
    if [[ $now != "$last" ]]; then
      last=$now
      since=$SECONDS
    elif ((SECONDS - since >= HUNG_S)); then
      return 1
    fi
    sleep 0.02
  done
}
# check_run WHAT PID LOG CHECKSUMS: finish_run, then the checksum must be the reference's. A hung
# process is killed (after a look at its threads), so that the test can go on.
check_run() {
  local what=$1 pid=$2 log=$3 before=$4 rc=0
  finish_run "$pid" "$log" "$before" || rc=$?
  case $rc in
    0)
      local sum
      sum=$(checksum_of "$log")
      if [[ $sum == "$REF" ]]; then return 0; fi
      bad "$what: the run ended with checksum $sum, not the reference's $REF"
      ;;
    1)
      bad "$what: process $pid hangs (no step for $HUNG_S s after step $(steps_in "$log"); threads:" \
        "$(for t in /proc/"$pid"/task/*; do printf '%s:%s ' "$(cat "$t"/comm)" "$(cat "$t"/wchan)"; done))"
      kill -9 "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true  # (at once: else bash reports the kill)
      wait_gone "$pid" 10 || true
      ;;
    2) bad "$what: process $pid exited without a checksum ($(tail -n 2 "$log" | tr '\n' ' '))" ;;
  esac
  return 1
}

# start LOG: mlp_train under `gcr run` in its own session, output appended to LOG (CRIU checks
# no size of an O_APPEND file); sets P.
start() {
  : >"$1"
  touch "$SLOW"
  setsid "$GCR" run -- "${MLP[@]}" >>"$1" 2>&1 </dev/null &
  P=$!
  pids+=("$P")
}

# restore_check NAME LOG WHAT: restores checkpoint NAME (its process writes to LOG) and checks
# that it finishes with the reference checksum.
restore_check() {
  local name=$1 log=$2 what=$3 before out pid
  before=$(checksums_in "$log")
  if ! out=$("$GCR" restore "$name" --json 2>&1); then
    bad "$what: restore of $name failed: $out"
    return 1
  fi
  pid=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])' <<<"$out")
  pids+=("$pid")
  check_run "$what (restored from $name)" "$pid" "$log" "$before"
}

gcrd_pid() { pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" | head -n 1 || true; }
# stop_gcrd: so that the next gcr command starts one with the environment it is given.
stop_gcrd() {
  local g
  g=$(gcrd_pid) || true
  [[ -n $g ]] || return 0
  kill -TERM "$g" 2>/dev/null || true
  for _ in $(seq 1 250); do
    kill -0 "$g" 2>/dev/null || return 0
    sleep 0.02
  done
  fail "gcrd $g did not stop"
}

# CRIU through a wrapper that adds an action script; the script stops CRIU at the action named
# in $T/criu-pause-at (once), writes CRIU's pid to $T/criu-paused, and waits for $T/criu-go (or
# CRIU's death).
cat >"$T/criu" <<EOF
#!/bin/sh
exec "$REAL_CRIU" "\$@" --action-script "$T/criu-action"
EOF
cat >"$T/criu-action" <<EOF
#!/usr/bin/env bash
ctl=$T
if [[ -f \$ctl/criu-pause-at && \$(cat "\$ctl/criu-pause-at") == "\$CRTOOLS_SCRIPT_ACTION" ]]; then
  rm -f "\$ctl/criu-pause-at"
  echo "\$PPID" >"\$ctl/criu-paused.tmp"
  mv "\$ctl/criu-paused.tmp" "\$ctl/criu-paused"
  for ((i = 0; i < 3000; i++)); do
    [[ -e \$ctl/criu-go ]] && break
    kill -0 "\$PPID" 2>/dev/null || break
    sleep 0.02
  done
  rm -f "\$ctl/criu-go"
fi
exit 0
EOF
chmod 755 "$T/criu" "$T/criu-action"
export GCR_CRIU=$T/criu
# A new CRIU path: its capabilities probed now (through the action script, no pause asked), not in
# the first checkpoint (Note [CRIU's capabilities probed] in gcr/criu_capabilities.h).
"$GCR" doctor --capability cow-dump > /dev/null 2>&1 || true

# The reference: mlp_train without gcr.
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" >"$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "the reference run printed no checksum"

# kill_at VICTIM PHASE: mlp_train under gcr gets a good --leave-running checkpoint; a second one is
# stopped at PHASE and VICTIM (gcr, gcrd or criu) is killed with SIGKILL there. Then: the process
# must run to the end with the reference checksum; the store must verify; the good checkpoint
# must restore to the reference checksum, and so must the second one if it was committed (when
# only gcr died, it must have been: gcrd finishes the work of a client that went away).
#
# PHASE: a gcrd pause point (request quiesced parked dumped draining reply), criu-start (CRIU's
# pre-dump action: CRIU has started, before gcrd quiesces the process, Note [CRIU started before
# the cut] in gcr/criu.h), criu-parasite (CRIU inside
# parasite_dump_pages_seized, its parasite in the process), criu-frozen (CRIU's post-dump
# action: all dumped, the process still frozen), or crash:FAULT (gcrd exits at the store's
# crash point FAULT during the drain, as if killed there; VICTIM must be gcrd).
KILLS=0
kill_at() {
  local victim=$1 phase=$2 n=$((++KILLS)) what="kill -9 $1 at $2"
  local log=$T/run-$n.log out=$T/second-$n.out c victim_pid="" reached="" criu_pid="" rc=0
  local env=() paused_before
  step "$what"
  if [[ $phase == criu-parasite ]] && ! command -v gdb >/dev/null; then
    echo "SKIP $what: no gdb to stop CRIU inside its parasite"
    return
  fi
  rm -f "$T/criu-pause-at" "$T/criu-paused" "$T/criu-go"
  stop_gcrd
  touch "$HOLD"
  start "$log"
  local p=$P
  wait_steps "$log" 15
  "$GCR" checkpoint "$p" --name "good-$n" -R >/dev/null || {
    bad "$what: the first checkpoint failed"
    kill -9 "$p"
    wait "$p" 2>/dev/null || true
    return
  }
  case $phase in
    criu-start | criu-parasite) echo pre-dump >"$T/criu-pause-at" ;;
    criu-frozen) echo post-dump >"$T/criu-pause-at" ;;
    crash:*) env=(GCR_FAULT="${phase#crash:}") ;;
    # gcrd goes on after a pause of 1 s when gcr is killed, 3 s when CRIU is (it must see CRIU
    # gone), and is killed itself within its 60 s.
    *) env=(GCR_GCRD_PAUSE_AT="$phase:$(case $victim in gcr) echo 1 ;; criu) echo 3 ;; *) echo 60 ;; esac)") ;;
  esac
  # A gcrd with that environment: started by the next command.
  stop_gcrd
  paused_before=$(grep -c "paused at $phase " "$GCRD_LOG" 2>/dev/null || true)
  env "${env[@]}" "$GCR" checkpoint "$p" --name "second-$n" -R >"$out" 2>&1 &
  c=$!
  pids+=("$c")
  for _ in $(seq 1 1000); do
    case $phase in
      criu-*) [[ -s $T/criu-paused ]] && reached=1 ;;
      crash:*) reached=1 ;;
      *) [[ $(grep -c "paused at $phase " "$GCRD_LOG" 2>/dev/null || true) -gt $paused_before ]] && reached=1 ;;
    esac
    [[ -n $reached ]] && break
    kill -0 "$c" 2>/dev/null || break
    sleep 0.02
  done
  [[ -s $T/criu-paused ]] && criu_pid=$(cat "$T/criu-paused")
  if [[ -z $reached ]]; then
    rm -f "$T/criu-pause-at"
    case $phase in
      criu-*) bad "$what: CRIU never reached its $phase pause ($(tr '\n' ' ' <"$out"))" ;;
      *) echo "SKIP $what: gcrd has no pause point '$phase' yet (checkpoint.cpp does not call" \
        "pause_point(\"$phase\")); the checkpoint ran through" ;;
    esac
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    wait "$c" 2>/dev/null || true
    wait_gone "$p" || true
    stop_gcrd
    return
  fi
  if [[ $phase == criu-parasite ]]; then
    # gdb stops CRIU at the breakpoint and kills it there (SIGKILL): the victim is CRIU.
    gdb -p "$criu_pid" -batch -ex 'break parasite_dump_pages_seized' -ex continue -ex kill \
      >"$T/gdb-$n.out" 2>&1 &
    local gdb=$!
    for _ in $(seq 1 500); do
      grep -q '^Breakpoint 1 at' "$T/gdb-$n.out" && break
      sleep 0.02
    done
    touch "$T/criu-go"
    wait_gone "$criu_pid" 30 || bad "$what: CRIU $criu_pid still runs under gdb"
    wait "$gdb" || true
    grep -q '^Breakpoint 1, parasite_dump_pages_seized' "$T/gdb-$n.out" ||
      bad "$what: CRIU was not stopped inside its parasite: $(tail -n 3 "$T/gdb-$n.out" | tr '\n' ' ')"
  else
    if [[ $phase != crash:* ]]; then
      case $victim in
        gcr) victim_pid=$c ;;
        gcrd) victim_pid=$(gcrd_pid) ;;
        # At a gcrd pause point: the CRIU gcrd started before the cut, waiting for its go.
        # (the dump's: not the `criu check` a fresh gcrd runs at its start)
        criu) victim_pid=${criu_pid:-$(pgrep -P "$(gcrd_pid)" -f "/criu dump " | head -n 1 || true)} ;;
      esac
      [[ -n $victim_pid ]] || fail "$what: no $victim process to kill"
      kill -9 "$victim_pid"
      if [[ $victim == gcr ]]; then wait "$c" 2>/dev/null || true; fi
    fi
    if [[ $phase == criu-* && $victim != criu ]]; then touch "$T/criu-go"; fi
  fi
  # The command: gone with gcr; otherwise it must return, with an error, unless only gcr died.
  for _ in $(seq 1 1000); do
    kill -0 "$c" 2>/dev/null || break
    sleep 0.02
  done
  if kill -0 "$c" 2>/dev/null; then
    bad "$what: gcr checkpoint did not return within 20 s"
    kill -9 "$c"
  fi
  wait "$c" 2>/dev/null || rc=$?
  if [[ $victim != gcr ]]; then
    if [[ $rc == 0 && $phase != reply ]]; then
      bad "$what: gcr checkpoint succeeded"
    else
      echo "   gcr checkpoint: exit $rc: $(head -c 300 "$out" | tr '\n' ' ')"
    fi
  fi
  if [[ $victim == gcr ]]; then
    # gcrd goes on without its client: the second checkpoint gets committed.
    for _ in $(seq 1 1000); do
      "$GCR" image inspect "second-$n" >/dev/null 2>&1 && break
      sleep 0.02
    done
  fi
  rm -f "$SLOW" "$HOLD"
  check_run "$what: the checkpointed process" "$p" "$log" 0 || true
  [[ -z $criu_pid ]] || wait_gone "$criu_pid" 10 || bad "$what: CRIU $criu_pid still runs"
  local verified
  verified=$("$GCR" image verify 2>&1) || bad "$what: gcr image verify: $verified"
  restore_check "good-$n" "$log" "$what" || true
  if "$GCR" image inspect "second-$n" >/dev/null 2>&1; then
    restore_check "second-$n" "$log" "$what" || true
  elif [[ $victim == gcr ]]; then
    bad "$what: gcrd did not commit the checkpoint whose client it lost (gcrd.log: $(tail -n 2 "$GCRD_LOG" | tr '\n' ' '))"
  fi
  # What a dead gcrd left in the work directory went with the next request (a restore above).
  # (`lineage` is gcrd's record of each process's last checkpoint: kept on purpose.)
  local left
  left=$(ls -A "$GCR_WORK_DIR" 2>/dev/null | grep -vx lineage || true)
  [[ -z $left ]] || bad "$what: left in the work directory: $(echo "$left" | tr '\n' ' ')"
  stop_gcrd
}
