#!/usr/bin/env bash
# A multi-process job under gcr (issue 13, Note [Job checkpoint] in daemon/job.h):
# mp_train's ranks share device memory through every path real programs use (POSIX fds over
# SCM_RIGHTS, pidfd_getfd, an owner's proxy export, CUDA IPC) and all-reduce with kernels that spin
# on each other's flags. Started from this script's shell under `gcr run`:
#   a: 4 ranks, rank 2 lagging: a checkpoint of one rank alone is refused before anything stops,
#      naming the peer outside its tree; two --leave-running checkpoints of the launcher (the job)
#      at random moments, the second incremental; the job finishes bit-identical to the
#      single-process reference on every rank; each checkpoint restored (on demand: the ranks run
#      while their memory loads) finishes so too;
#   b: a checkpoint that ends the job, then its restore on the other GPU (--device 1);
#   c: a cut that cannot be reached within --timeout (a rank that lags 3 s) gives every process
#      back, names the rank, and the job finishes right;
#   d: gcrd killed (-9) while every rank's memory is parked in it: each rank's keeper gives its
#      memory back (Note [Parked memory outlives gcrd]) and the job finishes right;
#   e: a job spread over two GPUs (rank r on GPU r) checkpointed, and restored with the GPUs
#      swapped (--device-map 0=1,1=0);
#   f: 2 ranks that also meet at a barrier of stream memory operations before each all-reduce
#      (cuStreamWriteValue64 to the peer's flag, cuStreamWaitValue64 on their own, then a host
#      wait), rank 1 lagging 200 ms before its write while rank 0's stream and host wait on it:
#      two -R checkpoints at random moments each reach a cut (the laggard's write issued before
#      anything drains), bit-identical, and restored so;
#   g: a cut while rank 0's stream waits on a barrier write rank 1 has not issued, and rank 0 has
#      issued no kernel since (--barrier-gap-ms: it sleeps after its barrier, rank 1 lags before
#      its own): stream memory operations on shared memory count as communication, so rank 1 runs
#      on to its write before anything drains; bit-identical, and restored so.
#
#   mp_train_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
export SIMGPU_DEVICES=2
TEST_NAME=mp-train
source "$(dirname "$0")/lib.sh"
# A job steps slowly and holds before its last step while $T/slow exists (slow makes it, go_on
# removes it once the job's checkpoints are taken): no checkpoint finds the job ended however slow
# the machine, and the rest of the run and its restores go at full speed.
MP=("$BUILD/tests/workloads/mp_train" --steps 200 --step-delay-ms 10 --delay-while "$T/slow"
    --hold-while "$T/slow")
slow() { : > "$T/slow"; }
go_on() { rm -f "$T/slow"; }

LD_LIBRARY_PATH=$BUILD/simgpu "${MP[@]}" --ranks 1 --quiet > "$T/ref.log" 2>&1 || fail "reference: $(tail -3 "$T/ref.log")"
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "the reference printed no checksum"
ranks_matching() { grep -cE "^(rank [0-9]+ )?checksum $REF\$" "$1" || true; }
ranks_ended() { grep -cE "^(rank [0-9]+ )?checksum " "$1" || true; }
every_rank_matches() {  # LOG RANKS WHAT
  [[ $(ranks_ended "$1") == "$2" && $(ranks_matching "$1") == "$2" ]] ||
    fail "$3: $(ranks_matching "$1") of $2 ranks ended with the reference checksum $REF: $(grep checksum "$1" | tr '\n' ' ')"
  echo "ok: $3: every rank matches $REF"
}
wait_ranks() {  # LAUNCHER N
  for _ in $(seq 1 500); do [[ $(pgrep -c -P "$1" -f mp_train || true) == "$2" ]] && return 0; sleep 0.02; done
  fail "launcher $1 did not start $2 ranks: $(ps -o pid,args --ppid "$1")"
}
# Restores ID, waits for the job to end, and checks that each of its RANKS appended the reference
# checksum to LOG.
restore_job() {  # ID LOG RANKS [RESTORE OPTIONS...]
  local before rp
  go_on
  before=$(ranks_ended "$2")
  "$GCR" restore "$1" "${@:4}" --json > "$T/restore-$1.json" 2> "$T/restore-$1.err" ||
    fail "gcr restore $1: $(cat "$T/restore-$1.err" "$T/restore-$1.json" | head -n 20)"
  rp=$(json_field pid < "$T/restore-$1.json")
  pids+=("$rp")
  [[ $(json_field mode < "$T/restore-$1.json") == on-demand ]] ||
    fail "the restore of $1 did not load on demand: $(json_field mode < "$T/restore-$1.json")"
  wait_gone "$rp"
  local ended matching
  ended=$(( $(ranks_ended "$2") - before ))
  [[ $ended == "$3" ]] || fail "the restore of $1 (pid $rp): $ended of $3 ranks ended: $(tail -n 8 "$2")"
  matching=$(tail -n 40 "$2" | grep -E "checksum " | tail -n "$3" | grep -cE "checksum $REF\$" || true)
  [[ $matching == "$3" ]] || fail "the restore of $1: $matching of $3 ranks ended with $REF: $(tail -n 8 "$2")"
  echo "ok: the restore of $1 (pid $rp): every rank ended with $REF"
}

# Starts a job of RANKS ranks (log $T/TAG.log), checkpoints it at a random step without
# --leave-running (tag mp-TAG1, report $T/TAG1.json) and waits until every process of its tree is
# gone, none having finished.
checkpoint_ending_job() {  # TAG RANKS [MP_TRAIN OPTIONS...]
  local tag=$1 n=$2 tree p
  slow
  launch "$T/$tag.log" "${MP[@]}" --ranks "$n" "${@:3}"
  disown "$P"
  wait_ranks "$P" "$n"
  wait_steps "$T/$tag.log" $((RANDOM % 40 + 5))
  tree=$(tree_of "$P" | tr '\n' ' ')
  pids+=($tree)
  checkpoint_json "$T/${tag}1.json" "$P" --name "mp-${tag}1"
  for p in $tree; do wait_gone "$p"; done
  [[ $(ranks_ended "$T/$tag.log") == 0 ]] || fail "job $tag finished before its checkpoint ended it"
}

echo "== a: 4 ranks under gcr, rank 2 lagging"
# Slower steps (the checksum does not depend on them): gcr ps and two checkpoints fit in the run
# even on a loaded machine.
slow
launch "$T/a.log" "${MP[@]}" --ranks 4 --lag-rank 2 --lag-ms 5 --step-delay-ms 25
wait_ranks "$P" 4
RANK=$(pgrep -P "$P" -f "rank 1" | head -n 1 || true)
[[ -n $RANK ]] || fail "no rank 1 under launcher $P: $(ps -o pid,args --ppid "$P")"
wait_steps "$T/a.log" 3
# gcr ps says which processes share device memory with which (a ring: each with its neighbours).
# A rank its 2 s did not reach (a loaded machine) is a row with an error: asked again.
ps_shows_ring() {
  "$GCR" ps --json | python3 -c "
import json, sys
ranks = {int(p) for p in sys.argv[1:]}
rows = [r for r in json.load(sys.stdin) if r['pid'] in ranks]
assert len(rows) == 4, 'gcr ps lists %d of the 4 ranks' % len(rows)
for r in rows:
    assert 'error' not in r, r
    peers = set(r['shares_with'])
    assert r['shared_regions'] > 0 and len(peers) == 2 and peers <= ranks, r
" $(pgrep -P "$P" -f mp_train)
}
for try in 1 2 3 4 5; do
  ps_shows_ring && break
  (( try < 5 )) || fail "gcr ps does not show the ranks' sharing: $("$GCR" ps)"
  sleep 0.2
done
rc=0
"$GCR" checkpoint "$RANK" -R > "$T/alone.out" 2> "$T/alone.err" || rc=$?
[[ $rc == 8 ]] || fail "checkpoint of rank $RANK alone: exit $rc, expected 8: $(cat "$T/alone.err")"
grep -q "not in the tree of process $RANK" "$T/alone.err" || fail "the refusal does not name the peer outside the tree: $(cat "$T/alone.err")"
echo "refused (rank $RANK alone): $(head -c 300 "$T/alone.err")"
first=$((RANDOM % 40 + 5))
wait_steps "$T/a.log" "$first"
checkpoint_json "$T/a1.json" "$P" --name mp-a1 -R
[[ $(json_field processes < "$T/a1.json") == 4 ]] || fail "the job checkpoint took $(json_field processes < "$T/a1.json") processes, expected 4"
[[ $(json_field shared_regions < "$T/a1.json") -gt 0 ]] || fail "the job checkpoint found no shared memory"
echo "checkpoint 1 at step ~$first: $(json_field shared_regions < "$T/a1.json") shared regions, cut in $(json_field time.cut_ns < "$T/a1.json") ns, stall $(json_field time.stall_ns < "$T/a1.json") ns"
wait_steps "$T/a.log" $((first + 15))
checkpoint_json "$T/a2.json" "$P" --name mp-a2 -R
echo "checkpoint 2: $(json_field dirty_bytes < "$T/a2.json") of $(json_field region_bytes < "$T/a2.json") device bytes changed," \
     "$(json_field stat.new_bytes < "$T/a2.json") new bytes, $(json_field stat.dup_parent_bytes < "$T/a2.json") taken from checkpoint 1"
# Incremental: what did not change since the first comes from it (its chunks are not stored again;
# every rank writes its slab and its mailboxes every step, so here all of it is read again).
[[ $(json_field stat.dup_parent_bytes < "$T/a2.json") -gt 0 ]] ||
  fail "the second checkpoint took nothing from the first: $(cat "$T/a2.json")"
go_on
wait "$P" || fail "the job failed after its checkpoints: $(tail -5 "$T/a.log")"
every_rank_matches "$T/a.log" 4 "the job checkpointed twice"
restore_job "$(json_field id < "$T/a1.json")" "$T/a.log" 4
restore_job "$(json_field id < "$T/a2.json")" "$T/a.log" 4

echo "== b: a checkpoint that ends the job, then its restore"
checkpoint_ending_job b 2
restore_job "$(json_field id < "$T/b1.json")" "$T/b.log" 2 --device 1

echo "== c: a cut that cannot be reached in time"
LD_LIBRARY_PATH=$BUILD/simgpu "${MP[@]}" --ranks 1 --quiet --steps 6 > "$T/ref6.log" 2>&1 || fail "reference: $(tail -3 "$T/ref6.log")"
REF=$(checksum_of "$T/ref6.log")
slow
launch "$T/c.log" "${MP[@]}" --ranks 2 --lag-rank 1 --lag-ms 3000 --steps 6
wait_ranks "$P" 2
sleep 1
rc=0
"$GCR" checkpoint "$P" -R --timeout 0.5 > "$T/c.out" 2> "$T/c.err" || rc=$?
[[ $rc == 10 ]] || fail "a cut past --timeout: exit $rc, expected 10: $(cat "$T/c.err")"
grep -q "did not reach a consistent cut" "$T/c.err" || fail "the error does not say the cut was not reached: $(cat "$T/c.err")"
echo "refused: $(head -c 300 "$T/c.err")"
go_on
wait "$P" || fail "the job failed after the abandoned cut: $(tail -5 "$T/c.log")"
every_rank_matches "$T/c.log" 2 "the job whose cut was abandoned"
[[ $("$GCR" image ls --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['checkpoints']))") == 3 ]] ||
  fail "a refused checkpoint left an image"

echo "== d: gcrd killed while the job's memory is parked in it"
REF=$(checksum_of "$T/ref.log")
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
slow
launch "$T/d.log" "${MP[@]}" --ranks 3 --lag-rank 1 --lag-ms 5
wait_ranks "$P" 3
wait_steps "$T/d.log" $((RANDOM % 30 + 5))
rc=0
GCR_GCRD_PAUSE_AT=parked:60 "$GCR" checkpoint "$P" -R > "$T/d.out" 2> "$T/d.err" &
CK=$!
for _ in $(seq 1 1000); do grep -q "paused at parked" "$T/gcrd.log" 2>/dev/null && break; sleep 0.02; done
grep -q "paused at parked" "$T/gcrd.log" || fail "gcrd did not reach the park: $(tail -5 "$T/gcrd.log")"
pkill -9 -f "gcrd --socket $GCR_GCRD_SOCKET"
wait "$CK" || rc=$?
[[ $rc != 0 ]] || fail "the checkpoint succeeded although gcrd was killed"
echo "gcr said (exit $rc): $(head -c 200 "$T/d.err")"
go_on
wait "$P" || fail "the job failed after gcrd died with its memory parked: $(tail -5 "$T/d.log")"
every_rank_matches "$T/d.log" 3 "the job whose gcrd died during its checkpoint"

echo "== e: a job over two GPUs, restored with the GPUs swapped"
checkpoint_ending_job e 2 --spread
"$GCR" image inspect mp-e1 --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
devs = sorted({o['device'] for o in d['objects'] if o.get('kind') == 'region'})
sys.exit(0 if devs == [0, 1] else 'the job used GPUs %s, expected [0, 1]' % devs)" || fail "the spread job's image"
for bad_map in 0=1,1=1 0=1 0=1,1=7 0:1; do
  rc=0
  "$GCR" restore mp-e1 --device-map "$bad_map" > "$T/bad-map.out" 2>&1 || rc=$?
  [[ $rc != 0 ]] || fail "restore with --device-map $bad_map succeeded"
  echo "refused --device-map $bad_map (exit $rc): $(head -c 160 "$T/bad-map.out")"
done
restore_job "$(json_field id < "$T/e1.json")" "$T/e.log" 2 --device-map 0=1,1=0

echo "== f: a barrier of stream memory operations, rank 1 lagging before its write"
slow
launch "$T/f.log" "${MP[@]}" --ranks 2 --memop-barrier --lag-rank 1 --lag-ms 200
wait_ranks "$P" 2
at=$((RANDOM % 20 + 8))
for k in 1 2; do
  wait_steps "$T/f.log" "$at"
  checkpoint_json "$T/f$k.json" "$P" --name "mp-f$k" -R --timeout 5
  echo "checkpoint $k at step ~$at: cut in $(json_field time.cut_ns < "$T/f$k.json") ns, stall $(json_field time.stall_ns < "$T/f$k.json") ns"
  at=$((at + RANDOM % 20 + 8))
done
go_on
wait "$P" || fail "the job failed after its checkpoints: $(tail -5 "$T/f.log")"
every_rank_matches "$T/f.log" 2 "the memory-operation barrier job checkpointed twice"
restore_job "$(json_field id < "$T/f2.json")" "$T/f.log" 2

echo "== g: a stream waiting on a barrier write not issued yet, no kernel after it"
G=(--ranks 2 --memop-barrier --lag-rank 1 --lag-ms 1500 --barrier-gap-ms 1500)
LD_LIBRARY_PATH=$BUILD/simgpu "$BUILD/tests/workloads/mp_train" --steps 8 --ranks 1 --quiet > "$T/ref8.log" 2>&1 || fail "reference: $(tail -3 "$T/ref8.log")"
REF=$(checksum_of "$T/ref8.log")
launch "$T/g.log" "$BUILD/tests/workloads/mp_train" --steps 8 "${G[@]}"
wait_ranks "$P" 2
wait_steps "$T/g.log" 5  # steps 0-4 done: step 5 is one rank 1 lags in
sleep 0.4                # rank 0 now sleeps after its barrier; rank 1 before its write
checkpoint_json "$T/g1.json" "$P" --name mp-g1 -R --timeout 8
echo "checkpoint during the barrier: cut in $(json_field time.cut_ns < "$T/g1.json") ns"
go_on
wait "$P" || fail "the job failed after its checkpoint: $(tail -5 "$T/g.log")"
every_rank_matches "$T/g.log" 2 "the job cut inside its barrier"
restore_job "$(json_field id < "$T/g1.json")" "$T/g.log" 2
echo "PASS"
