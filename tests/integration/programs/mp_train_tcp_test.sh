#!/usr/bin/env bash
# mp_train --transport tcp (issue 35): ranks started apart from this shell, as on several hosts,
# meet through rank 0's store and all-reduce over a ring of TCP connections through pinned staging
# and proxy threads. No gcr, no root.
#   a: 2 ranks, rank 0 started first; 3 ranks, rank 0 started last (the others retry the store
#      until it is up): every rank ends with the single-process reference's checksum;
#   b: --ballast-mib 8: the checksum unchanged, a ballast digest per rank, the same for a rank
#      whatever the number of ranks (rank 0's as the reference's);
#   c: --store-every 3 with rank 1 slow (--step-delay-ms): ranks 0 and 2 are seen blocked in a
#      receive from the store (the barrier), every rank ends right, --step-log has every step;
#   d: the launcher form (--transport tcp --ranks 3, no --rank) ends right;
#   e: errors: no store, a rank that never comes, a rank killed mid-run: exit 2, saying what.
#
#   mp_train_tcp_test.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
MP=$BUILD/tests/workloads/mp_train
export LD_LIBRARY_PATH=$BUILD/simgpu SIMGPU_DEVICES=1 SIMGPU_MEMORY=1G
T=$(mktemp -d /var/tmp/gcr-mp-tcp.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
checksum_in() { awk '/^(rank [0-9]+ )?checksum / {c = $NF} END {print c}' "$1"; }
ballast_in() { awk '/^rank [0-9]+ ballast / {c = $NF} END {print c}' "$1"; }

# Polls CONDITION (a command) every 20 ms for up to SECONDS s; fails with WHAT otherwise.
wait_for() {  # SECONDS WHAT CONDITION...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out waiting: $what"
    sleep 0.02
  done
}
is_gone() { ! kill -0 "$1" 2>/dev/null; }
lines_at_least() { [[ -e $1 && $(wc -l < "$1") -ge $2 ]]; }  # FILE N

# start_rank TAG R N [MP_TRAIN OPTIONS...]: rank R of N in the background, store at $STORE, output
# to $T/TAG.R.log, step log $T/TAG.R.steps; its pid in RANK_PID[R].
declare -A RANK_PID
start_rank() {
  local tag=$1 r=$2 n=$3
  shift 3
  "$MP" --transport tcp --ranks "$n" --rank "$r" --store "$STORE" --quiet \
    --step-log "$T/$tag.$r.steps" "$@" > "$T/$tag.$r.log" 2>&1 &
  RANK_PID[$r]=$!
  pids+=($!)
}
# Waits for ranks 0..N-1 of TAG to end (up to 120 s) and checks each exited 0 with checksum REF.
check_job() {  # TAG N REF WHAT
  local tag=$1 n=$2 ref=$3 what=$4 r rc got
  for ((r = 0; r < n; r++)); do
    wait_for 120 "$what: rank $r to end" is_gone "${RANK_PID[$r]}"
    rc=0
    wait "${RANK_PID[$r]}" || rc=$?
    [[ $rc == 0 ]] || fail "$what: rank $r exited $rc: $(tail -n 5 "$T/$tag.$r.log")"
    got=$(checksum_in "$T/$tag.$r.log")
    [[ $got == "$ref" ]] || fail "$what: rank $r ended with checksum '$got', the reference $ref"
  done
  echo "ok: $what: every rank ended with $ref"
}

"$MP" --ranks 1 --steps 60 --quiet > "$T/ref.log" 2>&1 || fail "reference: $(tail -n 3 "$T/ref.log")"
REF=$(checksum_in "$T/ref.log")
[[ -n $REF ]] || fail "the reference printed no checksum: $(tail -n 3 "$T/ref.log")"

echo "== a: ranks started apart, rank 0 first, then rank 0 last"
STORE=127.0.0.1:$(free_port)
start_rank a2 0 2 --steps 60
wait_for 60 "rank 0 up (its step log made, its store next)" test -e "$T/a2.0.steps"
start_rank a2 1 2 --steps 60
check_job a2 2 "$REF" "2 ranks, rank 0 first"

STORE=127.0.0.1:$(free_port)
start_rank a3 2 3 --steps 60
start_rank a3 1 3 --steps 60
# Ranks 1 and 2 make their step logs just before they connect to the store: then start rank 0.
wait_for 60 "ranks 1 and 2 up" test -e "$T/a3.1.steps" -a -e "$T/a3.2.steps"
start_rank a3 0 3 --steps 60
check_job a3 3 "$REF" "3 ranks, rank 0 last"

echo "== b: --ballast-mib 8"
"$MP" --ranks 1 --steps 60 --quiet --ballast-mib 8 > "$T/ref-ballast.log" 2>&1 ||
  fail "reference with ballast: $(tail -n 3 "$T/ref-ballast.log")"
[[ $(checksum_in "$T/ref-ballast.log") == "$REF" ]] ||
  fail "--ballast-mib changed the reference's checksum: $(checksum_in "$T/ref-ballast.log")"
BALLAST0=$(ballast_in "$T/ref-ballast.log")
[[ -n $BALLAST0 ]] || fail "the reference with ballast printed no ballast line"
STORE=127.0.0.1:$(free_port)
for r in 1 0 2; do start_rank b3 "$r" 3 --steps 60 --ballast-mib 8; done
check_job b3 3 "$REF" "3 ranks with ballast"
STORE=127.0.0.1:$(free_port)
for r in 1 0; do start_rank b2 "$r" 2 --steps 60 --ballast-mib 8; done
check_job b2 2 "$REF" "2 ranks with ballast"
declare -A seen
for r in 0 1 2; do
  grep -qE "^rank $r ballast [0-9a-f]{16}\$" "$T/b3.$r.log" ||
    fail "rank $r printed no 'rank $r ballast' line: $(tail -n 3 "$T/b3.$r.log")"
  d=$(ballast_in "$T/b3.$r.log")
  [[ -z ${seen[$d]:-} ]] || fail "ranks ${seen[$d]} and $r have the same ballast digest $d"
  seen[$d]=$r
done
[[ $(ballast_in "$T/b3.0.log") == "$BALLAST0" ]] ||
  fail "rank 0's ballast digest $(ballast_in "$T/b3.0.log") differs from the reference's $BALLAST0"
for r in 0 1; do
  [[ $(ballast_in "$T/b2.$r.log") == $(ballast_in "$T/b3.$r.log") ]] ||
    fail "rank $r's ballast digest depends on the number of ranks"
done
echo "ok: ballast digests per rank: $(for r in 0 1 2; do printf '%s ' "$(ballast_in "$T/b3.$r.log")"; done)"

echo "== c: a store barrier every 3 steps, rank 1 slow"
"$MP" --ranks 1 --steps 12 --quiet > "$T/ref12.log" 2>&1 || fail "reference: $(tail -n 3 "$T/ref12.log")"
REF12=$(checksum_in "$T/ref12.log")
STORE=127.0.0.1:$(free_port)
start_rank c 0 3 --steps 12 --store-every 3
start_rank c 1 3 --steps 12 --store-every 3 --step-delay-ms 300
start_rank c 2 3 --steps 12 --store-every 3
# While rank 1 sleeps after a barrier step, ranks 0 and 2 wait in the barrier: their main thread
# in recvfrom on the store connection (/proc/PID/syscall's first field; x86_64 and arm64 only).
case $(uname -m) in
  x86_64) RECVFROM=45 ;;
  aarch64) RECVFROM=207 ;;
  *) RECVFROM= ;;
esac
in_store_receive() {
  local sc=
  read -r sc _ < "/proc/$1/syscall" 2>/dev/null || true
  [[ $sc == "$RECVFROM" ]]
}
both_seen_in_barrier() {
  local r
  for r in 0 2; do
    [[ -n ${in_barrier[$r]:-} ]] || ! in_store_receive "${RANK_PID[$r]}" || in_barrier[$r]=1
    [[ -n ${in_barrier[$r]:-} ]] || ! is_gone "${RANK_PID[$r]}" ||
      fail "rank $r ended without being seen blocked in a receive from the store"
  done
  [[ -n ${in_barrier[0]:-} && -n ${in_barrier[2]:-} ]]
}
declare -A in_barrier
if [[ -n $RECVFROM && -r /proc/$$/syscall ]]; then
  wait_for 60 "rank 0 past its first step" test -s "$T/c.0.steps"
  wait_for 60 "ranks 0 and 2 seen blocked in a receive from the store" both_seen_in_barrier
  echo "ok: ranks 0 and 2 were seen blocked in a receive from the store while rank 1 slept"
else
  echo "note: /proc/PID/syscall unreadable here (or $(uname -m)): not looking for the barrier wait"
fi
check_job c 3 "$REF12" "3 ranks, store barriers, rank 1 slow"
for r in 0 1 2; do
  [[ $(grep -cE '^step [0-9]+ [0-9]+\.[0-9]+$' "$T/c.$r.steps") == 12 ]] ||
    fail "rank $r's step log does not have 12 'step S T_ms' lines: $(head -n 3 "$T/c.$r.steps")"
done
echo "ok: step logs, rank 0's: $(awk '{printf "%s:%s ", $2, $3}' "$T/c.0.steps")"

echo "== d: the launcher form"
"$MP" --transport tcp --ranks 3 --steps 60 --quiet > "$T/d.log" 2>&1 || fail "launcher: $(tail -n 5 "$T/d.log")"
[[ $(grep -cE "^(rank [0-9]+ )?checksum $REF\$" "$T/d.log") == 3 ]] ||
  fail "launcher: not every rank ended with $REF: $(grep checksum "$T/d.log" | tr '\n' ' ')"
echo "ok: launcher form: every rank ended with $REF"

echo "== e: errors"
expect_error() {  # TAG PID TEXT WHAT
  local rc=0
  wait_for 60 "$4 to end" is_gone "$2"
  wait "$2" || rc=$?
  [[ $rc == 2 ]] || fail "$4: exit $rc, expected 2: $(tail -n 3 "$T/$1")"
  grep -qF "$3" "$T/$1" || fail "$4: no '$3' in: $(tail -n 3 "$T/$1")"
  echo "ok: $4: $(grep -F "$3" "$T/$1" | head -n 1)"
}
STORE=127.0.0.1:$(free_port)
start_rank e1 1 2 --connect-timeout-s 1
expect_error e1.1.log "${RANK_PID[1]}" "the store at $STORE is unreachable" "no store"
start_rank e2 0 2 --connect-timeout-s 1
expect_error e2.0.log "${RANK_PID[0]}" "has no 'addr/1' after 1 s" "rank 1 never comes"
STORE=127.0.0.1:$(free_port)
start_rank e3 0 2 --steps 100000 --step-delay-ms 5
start_rank e3 1 2 --steps 100000 --step-delay-ms 5
wait_for 60 "rank 0 past 5 steps" lines_at_least "$T/e3.0.steps" 5
disown "${RANK_PID[1]}"  # (no "Killed" notice from bash)
kill -9 "${RANK_PID[1]}"
expect_error e3.0.log "${RANK_PID[0]}" "closed by rank 1" "rank 1 killed"
echo "PASS"
