#!/usr/bin/env bash
# Description: the control messages a process can send gcrd, fuzzed against a live gcrd
# (docs/security.md, "Control channel"). Each input of tests/fuzz/corpus/gcrd_live drives a hostile
# process (gcr_forge chaos: every answer to gcrd drawn from the input's bytes: errors, region
# lists of any length and size, fds missing, unsealed or of the wrong size, copies of the wrong
# index or size, made-up status and first-touch lists). gcrd is asked for a live checkpoint and one
# that stops the process, and, if one committed, a restore. Whatever fails, it must be that
# process's request: gcrd keeps running (same pid), and afterwards a real process's checkpoint
# and restore are bit-identical.
#
#   control_fuzz_test.sh BUILD_DIR CRIU [INPUT...]   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
CORPUS=$(cd "$(dirname "$0")/../../fuzz/corpus/gcrd_live" && pwd)
shift 2 || true
INPUTS=("$@")
((${#INPUTS[@]})) || INPUTS=("$CORPUS"/*)

"$GCR" image ls >/dev/null 2>&1 || true  # starts nothing; the first checkpoint starts gcrd
G=""
n=0
for input in "${INPUTS[@]}"; do
  name=$(basename "$input")
  step "input $name ($(stat -c %s "$input") bytes)"
  : >"$T/chaos.log"
  "${AS_ATTACKER[@]}" setsid "$FORGE" chaos "$input" >>"$T/chaos.log" 2>&1 </dev/null &
  C=$!
  pids+=("$C")
  for _ in $(seq 1 250); do grep -q ready "$T/chaos.log" && break; sleep 0.02; done
  for mode in -R ""; do
    rc=0
    # shellcheck disable=SC2086
    timeout 120 "$GCR" checkpoint "$C" $mode --name "chaos-$name$mode" --json >"$T/out.json" 2>"$T/out.err" || rc=$?
    ((rc != 124)) || bad "input $name: gcr checkpoint $mode hung"
    ((rc < 128)) || bad "input $name: gcr checkpoint $mode died of signal $((rc - 128))"
    [[ -n $G ]] || G=$(gcrd_pid)
    [[ -n $G && $(gcrd_pid) == "$G" ]] || bad "input $name: gcrd $G is gone after checkpoint $mode (now '$(gcrd_pid)'): $(tail -n 3 "$GCR_WORK_DIR/../gcrd/gcrd.log" 2>/dev/null)"
    if ((rc == 0)); then
      rc=0
      timeout 120 "$GCR" restore "chaos-$name$mode" --json >"$T/r.json" 2>"$T/r.err" || rc=$?
      ((rc != 124 && rc < 128)) || bad "input $name: gcr restore hung or died ($rc)"
      [[ $(gcrd_pid) == "$G" ]] || bad "input $name: gcrd died restoring"
      r=$(json_of pid <"$T/r.json" 2>/dev/null || true)
      [[ -z $r ]] || kill -9 "$r" 2>/dev/null || true
    fi
    echo "   checkpoint $mode: exit $rc $(head -c 200 "$T/out.err" | tr '\n' ' ')"
    kill -0 "$C" 2>/dev/null || break  # the stopping checkpoint ended it
  done
  kill -9 "$C" 2>/dev/null || true
  wait "$C" 2>/dev/null || true  # (at once: else bash reports the kill)
  n=$((n + 1))
done

step "after $n hostile inputs: gcrd ($G) checkpoints and restores a real process"
[[ $(gcrd_pid) == "$G" ]] || bad "gcrd changed from $G to '$(gcrd_pid)'"
start "$T/real.log"
wait_steps "$T/real.log" 10
"$GCR" checkpoint "$P" --name real >/dev/null 2>"$T/real.err" || bad "checkpoint of the real process: $(cat "$T/real.err")"
wait_gone "$P" 10 || true
restore_check real "$T/real.log" "the real process after the fuzzing"
finish
