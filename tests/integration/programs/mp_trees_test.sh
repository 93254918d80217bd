#!/usr/bin/env bash
# A job of process trees started apart (issue 13, Note [A job of several trees] in
# daemon/job.h): mp_train's ranks started by hand from this script's shell, each under its
# own `gcr run` with no launcher above them, sharing device memory (every transport) and talking
# over unix sockets between the trees.
#   a: one rank alone is refused before anything stops, naming its peer and --job; two
#      --leave-running checkpoints of `--job R0 R1` at random moments (the second incremental);
#      both ranks finish bit-identical to the single-process reference; each checkpoint restored
#      (both trees, their sockets connected again, memory on demand) finishes so too;
#   b: a --job checkpoint that ends both trees, restored: bit-identical;
#   c: bad input: --job with one pid, a pid named twice, a pid inside another's tree and two
#      trees joined by a pipe are refused, and the job runs on (a restore while the job's pids are
#      in use is refused in a);
#   d: bytes in flight between the trees: a CUDA process under gcr that has not read what a
#      process of another tree sent it; the --job checkpoint fails (exit 9) after both trees were
#      dumped and stopped, both run on, the bytes are still there to read, and once read the same
#      checkpoint succeeds;
#   e: gcrd killed (-9) once both trees are dumped and stopped (a checkpoint without -R): the
#      ranks' keepers continue every tree of the job and give each rank its memory back; both
#      finish bit-identical.
#
#   mp_trees_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=mp-trees
source "$(dirname "$0")/lib.sh"
# A job steps slowly and holds before its last step while $T/slow exists (start_ranks makes it,
# go_on removes it once the job's checkpoints are over): no checkpoint finds the job ended however
# slow the machine, and the rest, the restores and the reference go at full speed.
MP=("$BUILD/tests/workloads/mp_train" --steps 150 --step-delay-ms 25 --delay-while "$T/slow"
    --hold-while "$T/slow")
go_on() { rm -f "$T/slow"; }

LD_LIBRARY_PATH=$BUILD/simgpu "${MP[@]}" --ranks 1 --quiet > "$T/ref.log" 2>&1 || fail "reference: $(tail -3 "$T/ref.log")"
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "the reference printed no checksum"
matches() { grep -cE "^(rank [0-9]+ )?checksum $REF\$" "$1" || true; }
ended() { grep -cE "^(rank [0-9]+ )?checksum " "$1" || true; }

# Starts rank 0 and rank 1 of job TAG apart, each `gcr run mp_train --rank R` from this shell into
# $T/TAG.R.log; sets R0 and R1.
start_ranks() {  # TAG
  : > "$T/slow"
  launch "$T/$1.0.log" "${MP[@]}" --ranks 2 --rank 0 --job "$1-$$"
  R0=$P
  launch "$T/$1.1.log" "${MP[@]}" --ranks 2 --rank 1 --job "$1-$$"
  R1=$P
}
both_match() {  # TAG BEFORE WHAT: each rank's log gained one checksum line, the reference's
  local r
  for r in 0 1; do
    [[ $(ended "$T/$1.$r.log") == $(($2 + 1)) && $(matches "$T/$1.$r.log") == $(($2 + 1)) ]] ||
      fail "$3: rank $r's log: $(grep -E checksum "$T/$1.$r.log" | tr '\n' ' ') (reference $REF); tail: $(tail -n 3 "$T/$1.$r.log")"
  done
  echo "ok: $3: both ranks match $REF"
}
# Restores ID (both trees), waits until both are gone, and checks their logs.
restore_trees() {  # ID TAG BEFORE
  local rp others p
  go_on
  "$GCR" restore "$1" --json > "$T/restore-$1.json" 2> "$T/restore-$1.err" ||
    fail "gcr restore $1: $(cat "$T/restore-$1.err" "$T/restore-$1.json" | head -n 20)"
  rp=$(json_field pid < "$T/restore-$1.json")
  others=$(json_field job_pids < "$T/restore-$1.json")
  [[ -n $rp && -n $others ]] || fail "the restore of $1 names pid '$rp' and other trees '$others'"
  pids+=("$rp" ${others//,/ })
  for p in "$rp" ${others//,/ }; do wait_gone "$p"; done
  both_match "$2" "$3" "the restore of $1 (pids $rp and $others)"
}

echo "== a: two ranks started apart, checkpointed as one job"
start_ranks a
wait_steps "$T/a.0.log" 3
rc=0
"$GCR" checkpoint "$R0" -R > "$T/alone.out" 2> "$T/alone.err" || rc=$?
[[ $rc == 8 ]] || fail "checkpoint of rank 0 alone: exit $rc, expected 8: $(cat "$T/alone.err")"
grep -q "process $R1" "$T/alone.err" && grep -q -- "--job" "$T/alone.err" ||
  fail "the refusal does not name the peer (process $R1) and --job: $(cat "$T/alone.err")"
echo "refused (rank 0 alone): $(head -c 300 "$T/alone.err")"
first=$((RANDOM % 30 + 5))
wait_steps "$T/a.0.log" "$first"
checkpoint_json "$T/a1.json" --job "$R0" "$R1" --name trees-a1 -R
[[ $(json_field processes < "$T/a1.json") == 2 ]] || fail "the job checkpoint took $(json_field processes < "$T/a1.json") processes, expected 2"
[[ $(json_field shared_regions < "$T/a1.json") -gt 0 ]] || fail "the job checkpoint found no shared memory"
echo "checkpoint 1 at step ~$first: $(json_field shared_regions < "$T/a1.json") shared regions, stall $(json_field time.stall_ns < "$T/a1.json") ns"
rc=0
"$GCR" restore trees-a1 > "$T/busy.out" 2> "$T/busy.err" || rc=$?
[[ $rc == 9 ]] || fail "a restore while the job's pids are in use: exit $rc, expected 9: $(cat "$T/busy.err")"
echo "refused, a restore while the job runs (exit $rc): $(head -c 200 "$T/busy.err")"
wait_steps "$T/a.0.log" $((first + 15))
checkpoint_json "$T/a2.json" --job "$R0" "$R1" --name trees-a2 -R
[[ $(json_field stat.dup_parent_bytes < "$T/a2.json") -gt 0 ]] ||
  fail "the second checkpoint took nothing from the first: $(cat "$T/a2.json")"
echo "checkpoint 2: $(json_field stat.new_bytes < "$T/a2.json") new bytes, $(json_field stat.dup_parent_bytes < "$T/a2.json") from checkpoint 1"
go_on
wait "$R0" || fail "rank 0 failed after the checkpoints: $(tail -5 "$T/a.0.log")"
wait "$R1" || fail "rank 1 failed after the checkpoints: $(tail -5 "$T/a.1.log")"
both_match a 0 "the job checkpointed twice"
restore_trees "$(json_field id < "$T/a1.json")" a 1
restore_trees "$(json_field id < "$T/a2.json")" a 2

echo "== b: a --job checkpoint that ends both trees, then its restore"
start_ranks b
wait_steps "$T/b.0.log" $((RANDOM % 40 + 5))
checkpoint_json "$T/b1.json" --job "$R1" "$R0" --name trees-b1
wait_gone "$R0"
wait_gone "$R1"
[[ $(ended "$T/b.0.log") == 0 && $(ended "$T/b.1.log") == 0 ]] || fail "job b finished before its checkpoint ended it"
restore_trees "$(json_field id < "$T/b1.json")" b 0

echo "== c: bad input"
start_ranks c
wait_steps "$T/c.0.log" 3
refused() {  # EXIT WHAT ARGS...: gcr ARGS fails with EXIT
  local want=$1 what=$2 rc=0
  shift 2
  "$GCR" "$@" > "$T/c.out" 2> "$T/c.err" || rc=$?
  [[ $rc == "$want" ]] || fail "$what: exit $rc, expected $want: $(cat "$T/c.err" "$T/c.out")"
  echo "refused, $what (exit $rc): $(head -c 200 "$T/c.err")"
}
refused 2 "--job with one pid" checkpoint --job "$R0" -R
refused 2 "a pid named twice" checkpoint --job "$R0" "$R0" -R
sh -c 'sleep 30' &
SLEEPER=$!
pids+=("$SLEEPER")
refused 2 "a pid inside another's tree" checkpoint --job $$ "$SLEEPER" -R
kill "$SLEEPER" 2>/dev/null || true
sleep 30 | sleep 31 &  # two trees (siblings under this shell) joined by a pipe
READS=$!
WRITES=$(pgrep -x -P $$ -f "sleep 30" || true)
pids+=("$READS" $WRITES)
[[ -n $WRITES ]] || fail "no 'sleep 30' writing into the pipe"
refused 8 "two trees joined by a pipe" checkpoint --job "$WRITES" "$READS" -R
grep -q "a pipe to or from the tree of process" "$T/c.err" || fail "the refusal does not name the pipe: $(cat "$T/c.err")"
kill "$READS" $WRITES 2>/dev/null || true
go_on
wait "$R0" || fail "rank 0 failed after the refusals: $(tail -5 "$T/c.0.log")"
wait "$R1" || fail "rank 1 failed after the refusals: $(tail -5 "$T/c.1.log")"
both_match c 0 "the job after the refusals"

echo "== d: bytes in flight between the trees"
cat > "$T/holder.py" <<'PY'
import ctypes, os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + sys.argv[1])
s.listen(1)
c, _ = s.accept()
c.sendall(b"hello")  # never read until the flag file appears
print("sent", flush=True)
while not os.path.exists(sys.argv[2] + ".end"):
    time.sleep(0.02)
print("holder ends", flush=True)
PY
cat > "$T/reader.py" <<'PY'
import ctypes, os, socket, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
ctx, dev, mem = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(mem), 1 << 20) == 0
assert cuda.cuMemsetD8_v2(mem, 7, 1 << 20) == 0 and cuda.cuCtxSynchronize() == 0
for _ in range(500):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + sys.argv[1])
        break
    except OSError:
        time.sleep(0.02)
print("connected", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
print("read", s.recv(16).decode(), flush=True)
while not os.path.exists(sys.argv[2] + ".end"):
    time.sleep(0.02)
out = (ctypes.c_ubyte * 16)()
assert cuda.cuMemcpyDtoH_v2(out, mem, 16) == 0
print("device", bytes(out).hex(), flush=True)
PY
python3 "$T/holder.py" "gcr-inflight-$$" "$T/flag" > "$T/holder.log" 2>&1 &
HOLDER=$!
pids+=("$HOLDER")
launch "$T/reader.log" python3 "$T/reader.py" "gcr-inflight-$$" "$T/flag"
READER=$P
for _ in $(seq 1 500); do grep -q sent "$T/holder.log" && grep -q connected "$T/reader.log" && break; sleep 0.02; done
grep -q connected "$T/reader.log" || fail "the reader did not connect: $(cat "$T/reader.log")"
refused 9 "bytes in flight between the trees" checkpoint --job "$READER" "$HOLDER" -R
grep -q "bytes were in flight" "$T/c.err" || fail "the error does not say what was in flight: $(cat "$T/c.err")"
kill -0 "$READER" && kill -0 "$HOLDER" || fail "a process of the job did not run on after the failed checkpoint"
ps -o stat= -p "$READER" "$HOLDER" | grep_quiet T && fail "a process of the job was left stopped: $(ps -o pid,stat,args -p "$READER" "$HOLDER")"
touch "$T/flag"
for _ in $(seq 1 500); do grep -q "^read" "$T/reader.log" && break; sleep 0.02; done
grep -q "^read hello" "$T/reader.log" || fail "the bytes in flight were lost: $(cat "$T/reader.log")"
echo "ok: the failed checkpoint lost nothing: $(grep '^read' "$T/reader.log")"
checkpoint_json "$T/d1.json" --job "$READER" "$HOLDER" -R
echo "ok: with nothing in flight, the --job checkpoint of a CUDA process and a plain one: $(json_field id < "$T/d1.json" | head -c 12)"
touch "$T/flag.end"
wait "$READER" || fail "the reader failed: $(cat "$T/reader.log")"
grep -q "^device 07070707" "$T/reader.log" || fail "the reader's device memory after the checkpoints: $(cat "$T/reader.log")"
wait "$HOLDER" || true

echo "== e: gcrd killed while both trees are dumped and stopped"
stop_gcrd  # the next command starts one with GCR_GCRD_PAUSE_AT
start_ranks e
wait_steps "$T/e.0.log" $((RANDOM % 30 + 5))
rc=0
GCR_GCRD_PAUSE_AT=dumped:60 "$GCR" checkpoint --job "$R0" "$R1" > "$T/e.out" 2> "$T/e.err" &
CK=$!
for _ in $(seq 1 1500); do grep -q "paused at dumped" "$T/gcrd.log" 2>/dev/null && break; sleep 0.02; done
grep -q "paused at dumped" "$T/gcrd.log" || fail "gcrd did not reach the dump's end: $(tail -5 "$T/gcrd.log")"
ps -o stat= -p "$R0" "$R1" | grep_quiet T || fail "the trees were not left stopped by their dumps: $(ps -o pid,stat -p "$R0" "$R1")"
pkill -9 -f "gcrd --socket $GCR_GCRD_SOCKET"
wait "$CK" || rc=$?
[[ $rc != 0 ]] || fail "the checkpoint succeeded although gcrd was killed"
echo "gcr said (exit $rc): $(head -c 200 "$T/e.err")"
go_on
wait "$R0" || fail "rank 0 failed after gcrd died: $(tail -5 "$T/e.0.log")"
wait "$R1" || fail "rank 1 failed after gcrd died: $(tail -5 "$T/e.1.log")"
both_match e 0 "the job whose gcrd died with both trees stopped"
echo "PASS"
