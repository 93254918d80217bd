#!/usr/bin/env bash
# Description: `gcr checkpoint` of a pid that does not exist (exit 3), of a process that is not
# ours (a non-root user checkpointing root's process or another user's: exit 4, also through
# root's gcrd), each with a clear message and the target left running undisturbed; and of
# processes gcr does not manage: one that does not use CUDA (checkpointed by CRIU alone, said so,
# left running with --leave-running, restorable) and a CUDA process not started under gcr
# (checkpointed the --stop-copy way, said so; it runs on to the checksum of an uninterrupted run).
#
#   checkpoint_refused_test.sh BUILD_DIR CRIU     (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"

# expect WANT_RC PATTERN WHAT COMMAND...: COMMAND exits WANT_RC with a message matching PATTERN.
expect() {
  local want=$1 pattern=$2 what=$3 rc=0 out
  shift 3
  out=$("$@" 2>&1) || rc=$?
  echo "   $what: exit $rc: $out"
  [[ $rc == "$want" ]] || bad "$what: exit $rc, expected $want ($out)"
  # shellcheck disable=SC2053
  [[ $out == $pattern ]] || bad "$what: the message does not match '$pattern': $out"
}

step "a pid that does not exist"
sleep 0 &
gone=$!
wait "$gone"
expect 3 "*no process $gone*" "pid $gone (exited)" "$GCR" checkpoint "$gone" -R
expect 3 "*no process 0*" "pid 0" "$GCR" checkpoint 0

step "processes that are not ours"
start "$T/root.log"
root_pid=$P
wait_steps "$T/root.log" 5
setpriv --reuid=4321 --regid=4321 --clear-groups setsid sleep 100 </dev/null >/dev/null 2>&1 &
other_pid=$!
pids+=("$other_pid")
U=$T/nobody  # nobody's own store, gcrd and work directory
mkdir -p "$U"
chown nobody:nogroup "$U"
as_nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups
  env HOME="$U" GCR_STORE="$U/store" GCR_GCRD_SOCKET="$U/gcrd.sock" GCR_WORK_DIR="$U/work")
if ! "${as_nobody[@]}" test -x "$GCR"; then
  bad "user nobody cannot run $GCR (the build tree must be world-readable for this test)"
else
  expect 4 "*$root_pid*not yours*" "nobody checkpoints root's pid $root_pid" \
    "${as_nobody[@]}" "$GCR" checkpoint "$root_pid" -R
  expect 4 "*$other_pid*not yours*" "nobody checkpoints uid 4321's pid $other_pid" \
    "${as_nobody[@]}" "$GCR" checkpoint "$other_pid" -R
  expect 4 "*gcrd's socket*another user's*" "nobody asks root's gcrd" \
    "${as_nobody[@]}" GCR_GCRD_SOCKET="$GCR_GCRD_SOCKET" "$GCR" checkpoint "$root_pid" -R
  pkill -f "gcrd --socket $U/gcrd.sock" || true
  [[ -z $(ls "$U/store/manifests" 2>/dev/null) ]] || bad "a checkpoint appeared in nobody's store"
fi
alive "$other_pid" || bad "uid 4321's process $other_pid did not survive the refused checkpoint"
check_run "root's process after refused checkpoints" "$root_pid" "$T/root.log" 0 || true

step "a process that does not use CUDA"
setsid sleep 100 </dev/null >/dev/null 2>&1 &
S=$!
pids+=("$S")
sleep 0.1
expect 0 "*pid $S does not use CUDA*CRIU alone*" "sleep (pid $S), --leave-running" \
  "$GCR" checkpoint "$S" -R --name plain
alive "$S" || bad "sleep $S is gone after a --leave-running checkpoint"
kill -9 "$S"
wait "$S" 2>/dev/null || true
wait_gone "$S" || fail "sleep $S did not go away"
"$GCR" restore plain >/dev/null || bad "restore of the sleep's checkpoint"
alive "$S" || bad "the restored sleep $S does not run"
kill -9 "$S" 2>/dev/null || true

step "a CUDA process not started under gcr"
: >"$T/bare.log"
LD_LIBRARY_PATH=$BUILD/simgpu setsid "${MLP[@]}" >>"$T/bare.log" 2>&1 </dev/null &
P=$!
pids+=("$P")
wait_steps "$T/bare.log" 15
expect 0 "*pid $P is not running under gcr*--stop-copy*" "mlp_train without gcr (pid $P)" \
  "$GCR" checkpoint "$P" -R --name bare
check_run "a CUDA process checkpointed without gcr" "$P" "$T/bare.log" 0 || true
finish
