#!/usr/bin/env bash
# TCP between a job's processes, carried (issue 35, Note [TCP within a job] in daemon/job_tcp.h):
# two processes started on their own from this script's shell (as a user starts the ranks of a
# job), under `gcr run`, that talk over one TCP connection with bytes in flight both ways
# (tcp_pair.py: each checks every byte it receives against what its peer must have sent):
#   a: two --leave-running checkpoints of the job (`--job A B`) at random moments, the second
#      after more rounds; both processes run on and finish; each checkpoint restored in turn
#      finishes with the same checksums, every byte checked;
#   b: a checkpoint that ends the job, then its restore, finishes the same;
#   c: a connection to a process outside the checkpoint is refused before anything stops, naming
#      it, and the process runs on; no lock of gcrd's is left in iptables after any of it.
#
#   job_tcp_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=job-tcp
source "$(dirname "$0")/../programs/lib.sh"
command -v iptables-restore > /dev/null || { echo "SKIP: iptables-restore is missing"; exit 77; }
PAIR=(python3 "$(dirname "$0")/tcp_pair.py")
PORT=$(free_port)
ROUNDS=260

# No chain of this test's gcrd is left (gcrd names its chains GCR-<its pid>-N; other tests' gcrds
# may hold theirs meanwhile).
no_gcrd_lock() {
  local g
  g=$(pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" | head -n 1)
  [[ -z $g ]] || ! iptables -S 2> /dev/null | grep_quiet -- "-N GCR-$g-"
}
# start_pair TAG: the serving and the connecting process, each under `gcr run` in the background
# of this shell, logs $T/TAG-{s,c}.log; sets S and C.
start_pair() {
  launch "$T/$1-s.log" "${PAIR[@]}" serve "$PORT" --rounds "$ROUNDS"
  S=$P
  wait_until 30 grep -q listening "$T/$1-s.log" || fail "$1: the server did not listen: $(tail -n 3 "$T/$1-s.log")"
  launch "$T/$1-c.log" "${PAIR[@]}" connect "127.0.0.1:$PORT" --rounds "$ROUNDS"
  C=$P
}
# Waits for both to end with a checksum; prints "SERVE CONNECT".
both_checksums() {  # TAG S C
  wait_exit "$2" "$T/$1-s.log"
  wait_exit "$3" "$T/$1-c.log"
  echo "$(checksum_of "$T/$1-s.log") $(checksum_of "$T/$1-c.log")"
}
# Restores ID; both restored processes must append the reference checksums to TAG's logs.
restore_pair() {  # ID TAG
  local before_s before_c rp others
  before_s=$(checksums_in "$T/$2-s.log")
  before_c=$(checksums_in "$T/$2-c.log")
  "$GCR" restore "$1" --json > "$T/restore-$1.json" 2> "$T/restore-$1.err" ||
    fail "gcr restore $1: $(cat "$T/restore-$1.err" "$T/restore-$1.json" | head -n 20)"
  rp=$(json_field pid < "$T/restore-$1.json")
  others=$(json_field job_pids < "$T/restore-$1.json")
  [[ -n $rp && -n $others ]] || fail "gcr restore $1 named no pids: $(cat "$T/restore-$1.json")"
  pids+=("$rp" "$others")
  wait_gone "$rp" 120 || fail "restored $1: the server did not finish: $(tail -n 3 "$T/$2-s.log")"
  wait_gone "$others" 120 || fail "restored $1: the client did not finish: $(tail -n 3 "$T/$2-c.log")"
  [[ $(checksums_in "$T/$2-s.log") == $((before_s + 1)) && $(checksums_in "$T/$2-c.log") == $((before_c + 1)) ]] ||
    fail "restored $1 did not finish both sides: $(tail -n 2 "$T/$2-s.log" "$T/$2-c.log")"
  local got
  got="$(checksum_of "$T/$2-s.log") $(checksum_of "$T/$2-c.log")"
  [[ $got == "$REF" ]] || fail "restored $1 ended with '$got', expected '$REF'"
  echo "ok: $1 restored, both sides finished with $REF"
}

echo "== a: two live checkpoints of the job at random moments; the job finishes"
start_pair a
first=$((RANDOM % 40 + 10))
wait_steps "$T/a-s.log" "$first"
checkpoint_json "$T/a1.json" --job "$S" "$C" --name a1 -R
[[ $(json_field processes < "$T/a1.json") == 2 ]] || fail "a1 took $(json_field processes < "$T/a1.json") processes, expected 2"
wait_steps "$T/a-c.log" $((first + 40 + RANDOM % 40))
checkpoint_json "$T/a2.json" --job "$S" "$C" --name a2 -R
REF=$(both_checksums a "$S" "$C")
[[ $REF =~ ^[0-9a-f]+\ [0-9a-f]+$ ]] || fail "the job did not finish with checksums: $REF"
echo "ok: the job ran on through both checkpoints and finished: $REF"
no_gcrd_lock || fail "a lock of gcrd's is left: $(iptables -S | grep GCR-)"
restore_pair a1 a
restore_pair a2 a

echo "== b: a checkpoint that ends the job, then its restore"
start_pair b
wait_steps "$T/b-c.log" $((RANDOM % 60 + 10))
checkpoint_json "$T/b.json" --job "$S" "$C" --name b
wait_gone "$S" 30 && wait_gone "$C" 30 || fail "b: the job still runs after a checkpoint without --leave-running"
restore_pair b b
no_gcrd_lock || fail "a lock of gcrd's is left: $(iptables -S | grep GCR-)"

echo "== c: a connection to a process outside the checkpoint is refused; the process runs on"
start_pair c
wait_steps "$T/c-s.log" 5
if "$GCR" checkpoint "$S" -R --name c > "$T/c.out" 2>&1; then
  fail "a checkpoint of one end of a connection succeeded: $(cat "$T/c.out")"
fi
grep -q "127.0.0.1:$PORT" "$T/c.out" || fail "the refusal does not name the connection: $(cat "$T/c.out")"
REF_C=$(both_checksums c "$S" "$C")
[[ $REF_C == "$REF" ]] || fail "c: the job ended with '$REF_C' after the refusal, expected '$REF'"
echo "ok: refused ($(head -n 1 "$T/c.out" | cut -c1-160)), and the job finished right"
no_gcrd_lock || fail "a lock of gcrd's is left: $(iptables -S | grep GCR-)"
echo "PASS"
