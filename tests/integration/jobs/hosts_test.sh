#!/usr/bin/env bash
# A job across hosts (issue 35, Note [A job across hosts] in daemon/job_link.h): mp_train's ranks
# started on their own on three hosts (network namespaces with a gcrd each, hosts.sh), talking
# over TCP (--transport tcp: a store on rank 0 every rank keeps a connection to, a ring of
# connections, proxy threads that relay what the streams wait on), checkpointed from host 0 with
# `gcr checkpoint --job P0 P1@HOST1 P2@HOST2`:
#   a: 3 ranks on 3 hosts, two --leave-running checkpoints at random moments (the second
#      incremental); the job runs on and every rank ends with the single-process reference
#      checksum; every host lists both; each restored on the same hosts ends so too;
#   c: with rank 1 lagging (the others' streams waiting on flags its proxy will set) and a barrier
#      of the store every 3 steps (the others blocked in a receive): a checkpoint that ends the
#      job, its restore, a live checkpoint of the restored job, and that one's restore: each run
#      ends with the reference;
#   b: faults before the commit: a participant's gcrd killed with the job parked in it, the
#      coordinator's gcrd killed so, the link to a host cut while its part is quiesced (every
#      packet dropped: --host-timeout ends the wait), a participant's gcrd killed once its ranks
#      are dumped by a checkpoint that stops the job (stopped, their sockets in TCP repair mode:
#      its keepers end repair mode and let them go on) -- each time the checkpoint fails, no host
#      lists it, every rank runs on (nothing left parked, frozen or locked) and the job ends with
#      the reference;
#   d: faults after the commit (the coordinator paused once the job's manifest is committed):
#      a participant's gcrd killed then (its part stays unnamed: the coordinator says so), or the
#      coordinator's gcrd killed then (every part is left in doubt) -- the job runs on, host 0
#      lists the checkpoint, and its restore ends with the reference;
#   p: 2 ranks on hosts 0 and 3 checkpointed every second (gcr checkpoint --job --every 1s
#      --keep 2 --peer-copies 1: each part copied into the other host's memory, gcrd
#      --peer-memory); gcr ps shows the schedule and its tiers, each host keeps two; host 3 lost
#      right after a checkpoint: `gcr restore --latest` with --place HOST3=HOST2 reads host 3's
#      part from host 0's memory, loses at most the steps since that checkpoint, and the job ends
#      with its reference;
#   q: (last) 2 ranks on new hosts 4 and 5, checkpointed every second from host 4 with a copy in
#      each other's memory; host 4, the coordinator, lost: `gcr restore --latest` on host 5 with
#      --place HOST4=HOST6 places host 4's part (the job's manifest) from host 5's memory on host
#      6, whose gcrd restores the job (rank 1 on host 5 again); without --place it says what to
#      give; the job ends with its reference;
#   (m runs before e, which deletes host 1)
#   e: 2 ranks on hosts 0 and 1, a live checkpoint with --copy-parts (host 1's part copied to
#      host 0), then host 1 lost (its namespace deleted, its rank with it): restored with
#      --place HOST1=HOST2, rank 1 comes back on the spare host 2 with host 1's address, rank 0
#      reaches it there, and both end with the reference;
#   m: 2 ranks on hosts 0 and 1, rank 1 on an address of its own: `gcr migrate` of rank 1 to the
#      spare host 2 while the job runs (--job naming rank 0 on host 0): pre-copy rounds, then a
#      stop in which rank 0 is held still; rank 1 runs on host 2 with its address, rank 0 with its
#      pid, and both end with the reference; then moves that fail in their stop, the destination's
#      gcrd killed once the rank is dumped, or rank 0's gcrd killed while it holds rank 0 still:
#      rank 1 runs on where it was with its address, rank 0 runs on, and both end so.
#
#   hosts_test.sh BUILD_DIR      (needs root for CRIU, namespaces and iptables; exits 77 to skip)
#   JOB_TEST_ONLY="b4 d1"        runs only those scenarios (a, c, b1..b4, d1, d2, p, e, m, q);
#                                ctest runs three such groups side by side (jobs.hosts,
#                                jobs.hosts_move, jobs.hosts_tiers: ./CMakeLists.txt)
set -euo pipefail
TEST_NAME=job-hosts
source "$(dirname "$0")/../programs/lib.sh"
command -v iptables-restore > /dev/null || { echo "SKIP: iptables-restore is missing"; exit 77; }
NET=10.$((100 + $$ % 100)).$(($$ % 250))
HOSTS=4                # host 3: scenario p's alone
HOST_PEER_MEMORY=256M  # every gcrd keeps peers' copies (scenario p)
source "$(dirname "$0")/hosts.sh"
trap 'rc=$?; cleanup_hosts; (exit $rc); cleanup' EXIT
MP=("$BUILD/tests/workloads/mp_train" --transport tcp --steps 240 --step-delay-ms 15 --ballast-mib 8)
STORE_PORT=29500
JOB_EXTRA=()  # more of mp_train's flags for every rank of the next start_job

LD_LIBRARY_PATH=$BUILD/simgpu "$BUILD/tests/workloads/mp_train" --ranks 1 --steps 240 --quiet > "$T/ref.log" 2>&1 ||
  fail "reference: $(tail -n 3 "$T/ref.log")"
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "the reference printed no checksum"
rank_checksum() { awk '/checksum/ {c=$NF} END {print c}' "$1"; }
rank_checksums() { grep -c checksum "$1" 2> /dev/null || true; }

# A job's ranks (and their restores) step slowly and hold before their last step while
# $T/TAG.slow exists, so that no checkpoint finds the job ended however slow the machine:
# job_ends_right removes it, and the rest of the run goes at full speed.
slow_flags() {  # TAG
  : > "$T/$1.slow"
  echo --delay-while "$T/$1.slow" --hold-while "$T/$1.slow"
}
# start_job TAG N: ranks 0..N-1 on hosts 0..N-1, logs $T/TAG-rR.log; sets R (their pids).
start_job() {
  local tag=$1 n=$2 r
  R=()
  for ((r = 0; r < n; r++)); do
    launch_on "$r" "$T/$tag-r$r.log" "${MP[@]}" --ranks "$n" --rank "$r" --store "$(host_addr 0):$STORE_PORT" \
      $(slow_flags "$tag") "${JOB_EXTRA[@]}"
    R+=("$P")
  done
}
job_args() {  # the --job arguments of pids R from host 0
  local r out=("${R[0]}")
  for ((r = 1; r < ${#R[@]}; r++)); do out+=("${R[r]}@$(host_gcrd "$r")"); done
  echo "${out[@]}"
}
checkpoint_job() {  # OUT ARGS...: from host 0, or fail with what it said
  local out=$1
  shift
  on_host 0 "$GCR" checkpoint --job $(job_args) --token-file "$T/token" "$@" --json > "$out" 2> "$out.err" ||
    fail "gcr checkpoint --job $*: $(cat "$out.err" "$out" | head -n 20)"
}
# Waits for every rank of TAG (N ranks) to end with one more checksum than BEFORE (a list), each REF.
job_ends_right() {  # TAG N BEFORE...
  local tag=$1 n=$2 r
  shift 2
  local before=("$@")
  rm -f "$T/$tag.slow"
  for ((r = 0; r < n; r++)); do
    wait_until 120 eval "(( \$(rank_checksums $T/$tag-r$r.log) > ${before[r]:-0} ))" ||
      fail "$tag: rank $r did not finish: $(tail -n 3 "$T/$tag-r$r.log")"
    [[ $(rank_checksum "$T/$tag-r$r.log") == "$REF" ]] ||
      fail "$tag: rank $r ended with $(rank_checksum "$T/$tag-r$r.log"), expected $REF"
  done
}
counts_of() {  # TAG N: each rank's checksum lines so far
  local r out=()
  for ((r = 0; r < $2; r++)); do out+=("$(rank_checksums "$T/$1-r$r.log")"); done
  echo "${out[@]}"
}
listed_on() {  # I NAME: host I lists checkpoint NAME
  on_host "$1" "$GCR" image ls --json | python3 -c "import json,sys; sys.exit(0 if any('$2' in c.get('tags',[]) for c in json.load(sys.stdin)['checkpoints']) else 1)"
}
no_locks() {
  local i
  for ((i = 0; i < HOSTS; i++)); do
    if ip netns exec "$(host_ns "$i")" iptables -S 2> /dev/null | grep_quiet -- "-N GCR-"; then
      echo "host $i: $(ip netns exec "$(host_ns "$i")" iptables -S | grep GCR- | tr '\n' ';')"
      grep -h "unlocking" "$T"/h*/gcrd.log || true
      return 1
    fi
  done
}
# Restores NAME from host 0; sets R to the restored ranks' pids (rank order).
restore_job() {  # NAME
  on_host 0 "$GCR" restore "$1" --token-file "$T/token" --json > "$T/restore-$1.json" 2> "$T/restore-$1.err" ||
    fail "gcr restore $1: $(cat "$T/restore-$1.err" "$T/restore-$1.json" | head -n 20)"
  R=("$(json_field pid < "$T/restore-$1.json")")
  local i
  for ((i = 0; ; i++)); do
    local p
    p=$(json_field "remote_pids.$i" < "$T/restore-$1.json")
    [[ -n $p ]] || break
    R+=("$p")
    pids+=("$p")
  done
  pids+=("${R[0]}")
  echo "ok: $1 restored as pids ${R[*]}"
}

# in_host_ns PID I: PID runs in host I's network namespace (waited for a little: a restored
# process's namespace is read as soon as its restore answers); else says where it is.
in_host_ns() {
  wait_until 10 eval "[[ \$(ip netns identify $1 2> /dev/null) == \"$(host_ns "$2")\" ]]" && return 0
  echo "process $1 is in '$(ip netns identify "$1" 2>&1 | tr '\n' ' ')' ($(readlink "/proc/$1/ns/net" 2>&1)), not host $2's $(host_ns "$2") ($(ip netns exec "$(host_ns "$2")" readlink /proc/self/ns/net 2>&1)); state $(awk '/^State/ {print $2}' "/proc/$1/status" 2>&1)"
  return 1
}
wanted() { [[ -z ${JOB_TEST_ONLY:-} || " $JOB_TEST_ONLY " == *" $1 "* ]]; }

if wanted a; then
step "a: 3 ranks on 3 hosts, two live checkpoints at random moments"
start_job a 3
first=$((RANDOM % 30 + 10))
wait_steps "$T/a-r0.log" "$first"
checkpoint_job "$T/a1.json" -R --name a1
[[ $(json_field job_hosts < "$T/a1.json") == 3 ]] || fail "a1 spans $(json_field job_hosts < "$T/a1.json") hosts, expected 3"
echo "ok: a1 at step ~$first, stall $(json_field time.stall_ns < "$T/a1.json") ns"
wait_steps "$T/a-r0.log" $((first + 30 + RANDOM % 30))
checkpoint_job "$T/a2.json" -R --name a2
echo "ok: a2, stall $(json_field time.stall_ns < "$T/a2.json") ns"
job_ends_right a 3 0 0 0
echo "ok: the job ran on through both checkpoints and every rank ended with $REF"
for i in 0 1 2; do
  listed_on "$i" a1 && listed_on "$i" a2 || fail "host $i does not list a1 and a2: $(on_host "$i" "$GCR" image ls)"
done
no_locks || fail "a lock of gcrd's is left"
for name in a1 a2; do
  before=($(counts_of a 3))
  restore_job "$name"
  job_ends_right a 3 "${before[@]}"
  echo "ok: $name restored on the same hosts; every rank ended with $REF"
done

fi

if wanted c; then
step "c: checkpoint (the job ends), restore, live checkpoint of the restored job, restore"
# Rank 1 lags before its all-reduce every 4th step while the others' streams wait on flags only
# its proxy's sends will set, and every 3rd step all meet at a barrier of the store, the others
# blocked in a receive: the checkpoints come at random moments among these.
JOB_EXTRA=(--lag-rank 1 --lag-ms 100 --store-every 3)
start_job c 3
JOB_EXTRA=()
wait_steps "$T/c-r0.log" $((RANDOM % 40 + 10))
checkpoint_job "$T/c1.json" --name c1
for p in "${R[@]}"; do wait_gone "$p" 30 || fail "c1: the job runs on after a checkpoint without -R"; done
before=($(counts_of c 3))
restore_job c1
n=$(steps_in "$T/c-r0.log")
wait_steps "$T/c-r0.log" $((n + 10 + RANDOM % 20))
checkpoint_job "$T/c2.json" -R --name c2
job_ends_right c 3 "${before[@]}"
before=($(counts_of c 3))
restore_job c2
job_ends_right c 3 "${before[@]}"
echo "ok: checkpoint, restore, checkpoint, restore: every rank ended with $REF"
no_locks || fail "a lock of gcrd's is left"
fi

pauses_in() { grep -c "paused at $2" "$(host_log "$1")" 2> /dev/null || true; }  # I POINT
# A checkpoint that must fail before its commit, with host I's gcrd paused at PHASE and then
# killed (or its link cut, with CUT=1); the job runs on and ends right, nothing is listed.
fault() {  # TAG I PHASE
  local tag=$1 i=$2 phase=$3
  start_host_gcrd "$i" GCR_GCRD_PAUSE_AT="$phase:${PAUSE_S:-60}"
  local paused
  paused=$(pauses_in "$i" "$phase")
  start_job "$tag" 2
  wait_steps "$T/$tag-r0.log" $((RANDOM % 20 + 10))
  on_host 0 "$GCR" checkpoint --job $(job_args) --token-file "$T/token" ${LIVE--R} --name "$tag" \
    --host-timeout 3 > "$T/$tag.out" 2>&1 &
  local c=$!
  wait_until 30 eval "(( \$(pauses_in $i $phase) > $paused ))" ||
    fail "$tag: host $i's gcrd did not reach $phase: $(tail -n 5 "$(host_log "$i")")"
  if [[ ${CUT:-0} == 1 ]]; then
    cut_host "$i"
  else
    pkill -9 -f "gcrd --socket $T/h$i/gcrd.sock"
  fi
  local rc=0
  wait "$c" || rc=$?
  [[ $rc != 0 ]] || fail "$tag: the checkpoint succeeded: $(cat "$T/$tag.out")"
  if [[ ${CUT:-0} == 1 ]]; then
    # The part on the cut host gives up on its coordinator too once its pause is over (its own
    # wait times out), then the link comes back and the job's connections carry on.
    wait_until 60 grep -q "job_part failed" "$(host_log "$i")" ||
      fail "$tag: the part on the cut host did not give up: $(tail -n 5 "$(host_log "$i")")"
    mend_host "$i"
  fi
  start_host_gcrd "$i"
  job_ends_right "$tag" 2 0 0
  for h in 0 1; do
    ! listed_on "$h" "$tag" || fail "$tag: host $h lists the checkpoint that failed"
  done
  no_locks || fail "$tag: a lock of gcrd's is left"
  echo "ok: $tag: refused ($(grep -m1 gcr: "$T/$tag.out" | cut -c1-150)); the job ran on and ended with $REF; nothing listed"
}

step "b: faults before the commit"
wanted b1 && fault b1 1 parked
wanted b2 && fault b2 0 parked
wanted b3 && CUT=1 PAUSE_S=5 fault b3 1 quiesced
# A checkpoint that stops the job, its ranks dumped, stopped, their sockets in repair mode: its
# keepers end repair mode and let them go on.
wanted b4 && LIVE= fault b4 1 dumped
# A checkpoint whose coordinator (host 0) is paused once the job's manifest is committed, while
# host I's gcrd is killed: the checkpoint stands, and restores.
after_commit() {  # TAG I
  local tag=$1 i=$2
  start_host_gcrd 0 GCR_GCRD_PAUSE_AT="job-committed:${PAUSE_S:-60}"
  local paused
  paused=$(pauses_in 0 job-committed)
  start_job "$tag" 2
  wait_steps "$T/$tag-r0.log" $((RANDOM % 20 + 10))
  on_host 0 "$GCR" checkpoint --job $(job_args) --token-file "$T/token" -R --name "$tag" --host-timeout 5 \
    > "$T/$tag.out" 2>&1 &
  local c=$!
  wait_until 60 eval "(( \$(pauses_in 0 job-committed) > $paused ))" ||
    fail "$tag: the coordinator did not commit: $(tail -n 5 "$(host_log 0)" "$T/$tag.out")"
  pkill -9 -f "gcrd --socket $T/h$i/gcrd.sock"
  local rc=0
  wait "$c" || rc=$?
  if ((i == 0)); then
    [[ $rc != 0 ]] || fail "$tag: gcr checkpoint succeeded with its gcrd killed"
  else
    [[ $rc == 0 ]] || fail "$tag: the committed checkpoint failed: $(cat "$T/$tag.out")"
    grep -q "not every host heard" "$T/$tag.out" || fail "$tag: no word of the host that did not hear: $(cat "$T/$tag.out")"
  fi
  start_host_gcrd "$i"
  job_ends_right "$tag" 2 0 0
  listed_on 0 "$tag" || fail "$tag: host 0 does not list the committed checkpoint"
  no_locks || fail "$tag: a lock of gcrd's is left after the checkpoint"
  local before
  before=($(counts_of "$tag" 2))
  restore_job "$tag"
  job_ends_right "$tag" 2 "${before[@]}"
  echo "ok: $tag: host $i's gcrd killed after the commit; the job ran on, and the checkpoint restored ends with $REF"
}

step "d: faults after the commit"
wanted d1 && PAUSE_S=4 after_commit d1 1
wanted d2 && PAUSE_S=30 after_commit d2 0
start_host_gcrd 0

# The field F of host H's schedule of pid P (gcr ps --json), '' if none; what gcr ps said stays
# in $T/ps.json and $T/ps.err for a failure to show (last_ps).
schedule_field() {  # H P F
  on_host "$1" "$GCR" ps --json > "$T/ps.json" 2> "$T/ps.err" || true
  python3 -c "
import json, sys
for p in json.load(sys.stdin):
    if p['pid'] == $2: print(p.get('every', {}).get('$3', ''))" < "$T/ps.json" 2>> "$T/ps.err"
}
last_ps() { echo "gcr ps --json said: $(head -c 2000 "$T/ps.json") $(head -c 1000 "$T/ps.err")"; }
copies_done() { [[ $(schedule_field "$1" "$2" count) -ge $3 && $(schedule_field "$1" "$2" tiers) == local+peers ]]; }
holds_copy_of() { grep -q " $2\$" "$(host_memory "$1")/tier.index" 2> /dev/null; }  # I ORIGIN
# H P JSON TAG: the restored job (rank 0 pid P on host H) is checkpointed every second again,
# its checkpoints counting on from the one it was restored from, with its copies made.
scheduled_again() {
  [[ $(json_field every_ms < "$3") == 1000 ]] || fail "$4: the restored job is not scheduled again: $(cat "$3")"
  local from
  from=$(schedule_field "$1" "$2" count)
  ((from >= 2)) || fail "$4: the schedule counts from '$from', not from the checkpoint restored; $(last_ps)"
  wait_until 60 copies_done "$1" "$2" $((from + 1)) ||
    fail "$4: the restored job was not checkpointed again: $(on_host "$1" "$GCR" ps --json)"
}
# TAG: the restored job (rank 0's log $T/TAG-r0.log past byte `size`) resumed no more steps back
# than the newest copied checkpoint's age (`age`, plus `gap` to the loss) allows, from
# `killed_at`; sets resumed_at and lost; then both ranks end with the reference of p and q.
resumed_within_age() {
  local tag=$1 most
  wait_until 60 eval '[[ $(tail -c +$((size + 1)) "$T/$tag-r0.log" | grep -c "^step") -ge 1 ]]' || fail "$tag: the restored rank 0 printed no step"
  resumed_at=$(tail -c +$((size + 1)) "$T/$tag-r0.log" | awk '/^step/ && s == "" {s = $2} END {print s}')  # reads it all: no SIGPIPE for tail
  lost=$((killed_at - resumed_at + 1))
  most=$(((age + gap) / 10 + 3))
  ((lost >= 0 && lost <= most)) ||
    fail "$tag: rank 0 was at step $killed_at, resumed at step $resumed_at: $lost steps lost, at most $most expected (the newest copied checkpoint was $age ms old)"
  local main=$REF
  REF=$REF_P
  job_ends_right "$tag" 2 "${before[@]}"
  REF=$main
}
# Scenarios p and q: a job long enough to be checkpointed a few times, and lose a host, mid-run.
MP_P=("$BUILD/tests/workloads/mp_train" --transport tcp --steps 2500 --step-delay-ms 10 --ballast-mib 8)
REF_P=
reference_p() {
  [[ -n $REF_P ]] && return 0
  LD_LIBRARY_PATH=$BUILD/simgpu "$BUILD/tests/workloads/mp_train" --ranks 1 --steps 2500 --quiet > "$T/ref-p.log" 2>&1 ||
    fail "reference p: $(tail -n 3 "$T/ref-p.log")"
  REF_P=$(checksum_of "$T/ref-p.log")
}
if wanted p; then
  step "p: checkpointed every second, each part copied into the other host's memory; a host lost"
  # Ranks on hosts 0 and 3 (host 3 is this scenario's alone); host 2 is the spare.
  reference_p
  launch_on 0 "$T/p-r0.log" "${MP_P[@]}" --ranks 2 --rank 0 --store "$(host_addr 0):$STORE_PORT" \
    $(slow_flags p)
  p0=$P
  launch_on 3 "$T/p-r1.log" "${MP_P[@]}" --ranks 2 --rank 1 --store "$(host_addr 0):$STORE_PORT" \
    $(slow_flags p)
  p1=$P
  wait_steps "$T/p-r0.log" 20
  on_host 0 "$GCR" checkpoint --job "$p0" "$p1@$(host_gcrd 3)" --token-file "$T/token" --every 1s --keep 2 \
    --peer-copies 1 --name pj > "$T/p-every.out" 2>&1 || fail "gcr checkpoint --every: $(cat "$T/p-every.out")"
  grep -q "every 1.00 s as pj.N" "$T/p-every.out" || fail "gcr checkpoint --every said: $(cat "$T/p-every.out")"
  wait_until 60 copies_done 0 "$p0" 2 ||
    fail "p: host 0's schedule: $(on_host 0 "$GCR" ps --json)"
  holds_copy_of 0 "$(host_gcrd 3)" && holds_copy_of 3 "$(host_gcrd 0)" ||
    fail "p: the hosts' memory holds $(cat "$(host_memory 0)/tier.index" "$(host_memory 3)/tier.index" 2>&1)"
  on_host 0 "$GCR" ps | grep_quiet "in local+peers, a job of 2 hosts" || fail "p: gcr ps shows $(on_host 0 "$GCR" ps)"
  on_host 3 "$GCR" ps | grep_quiet "^peer memory: [1-9][0-9]* copies of other hosts' job parts" ||
    fail "p: gcr ps on host 3 does not show what it keeps: $(on_host 3 "$GCR" ps)"
  # Only the newest two are kept, on both hosts: pj.K-1 and pj.K. A cycle commits pj.K+1 before
  # it removes pj.K-1, so three show for a moment: kept is what a cycle leaves.
  parts_kept() {
    kept=$(on_host 3 "$GCR" image ls --json | python3 -c "
import json, sys
print(len([t for c in json.load(sys.stdin)['checkpoints'] for t in c.get('tags', []) if t.startswith('pj.')]))")
    ((kept <= 2))
  }
  wait_until 60 parts_kept || fail "p: host 3 keeps $kept parts of pj (--keep 2)"
  # Host 3 lost right after a checkpoint whose copies are made: its rank's work since is what is lost.
  wait_until 60 eval '[[ $(schedule_field 0 "$p0" tiers) == local+peers ]]' || fail "p: the copies are not made"
  schedule=$(on_host 0 "$GCR" ps | grep "a job of 2 hosts" || true)
  t0=$(date +%s%N)  # before the age is read: age + gap bounds how long ago the state was cut
  age=$(schedule_field 0 "$p0" last_age_ms)
  [[ -z $(rank_checksum "$T/p-r0.log") ]] || fail "p: the job ended before host 3 could be lost (a slower machine than this test allows)"
  remove_host 3
  gap=$((($(date +%s%N) - t0) / 1000000))
  kill -9 "$p0" 2> /dev/null || true  # as a scheduler ends a job that lost a node (it may hang)
  wait_gone "$p0" 60 || fail "p: rank 0 did not end"
  before=($(counts_of p 2))
  killed_at=$(awk '/^step/ {s = $2} END {print s}' "$T/p-r0.log")
  size=$(stat -c %s "$T/p-r0.log")
  on_host 0 "$GCR" restore --latest pj --token-file "$T/token" --place "$(host_gcrd 3)=$(host_gcrd 2)" --json \
    > "$T/restore-p.json" 2> "$T/restore-p.err" ||
    fail "gcr restore --latest pj --place: $(cat "$T/restore-p.err" "$T/restore-p.json" | head -n 20)"
  [[ $(json_field remote_from.0 < "$T/restore-p.json") == "this host's peer memory" ]] ||
    fail "p: host 3's part was not read from host 0's memory: $(cat "$T/restore-p.json")"
  [[ $(json_field remote.0 < "$T/restore-p.json") == "$(host_gcrd 2)" ]] ||
    fail "p: rank 1 was not restored on host 2: $(cat "$T/restore-p.json")"
  pids+=("$(json_field pid < "$T/restore-p.json")" "$(json_field remote_pids.0 < "$T/restore-p.json")")
  # Checkpointed every second again, from host 0, counting on (Note [Checkpoints every period]).
  scheduled_again 0 "$(json_field pid < "$T/restore-p.json")" "$T/restore-p.json" p
  resumed_within_age p
  echo "ok: host 3 lost at step $killed_at; restored from host 0's memory on host 2 at step $resumed_at ($lost steps again; the newest checkpoint was $age ms old); ended with the reference"
  echo "   (host 0's schedule then: $schedule)"
fi

# start_move_job TAG A: ranks 0 and 1 on hosts 0 and 1, rank 1 on its own address rank_addr A.
start_move_job() {
  local tag=$1
  give_rank_address 1 "$2"
  R=()
  launch_on 0 "$T/$tag-r0.log" "${MP[@]}" --ranks 2 --rank 0 --store "$(host_addr 0):$STORE_PORT" \
    --store-every 4 $(slow_flags "$tag")
  R+=("$P")
  launch_on 1 "$T/$tag-r1.log" "${MP[@]}" --ranks 2 --rank 1 --store "$(host_addr 0):$STORE_PORT" \
    --store-every 4 --listen "$(rank_addr "$2")" $(slow_flags "$tag")
  R+=("$P")
  wait_steps "$T/$tag-r0.log" $((RANDOM % 30 + 10))
}
move_rank1() {  # TAG [gcr migrate flags...]: rank 1 to host 2, from host 1
  local tag=$1
  shift
  on_host 1 "$GCR" migrate "${R[1]}" --to "$(host_gcrd 2)" --token-file "$T/token" \
    --job "${R[0]}@$(host_gcrd 0)" --json "$@" > "$T/$tag.json" 2> "$T/$tag.err"
}
# A move that fails during its stop (host I's gcrd paused at POINT, then host K's gcrd killed):
# rank 1 runs on where it was with its address, rank 0 runs on, nothing is left held or locked.
failed_move() {  # TAG A I POINT K
  local tag=$1 a=$2 i=$3 point=$4 k=$5
  start_host_gcrd "$i" GCR_GCRD_PAUSE_AT="$point:${PAUSE_S:-30}"
  local paused
  paused=$(pauses_in "$i" "$point")
  start_move_job "$tag" "$a"
  move_rank1 "$tag" --rounds 0 &
  local c=$!
  wait_until 60 eval "(( \$(pauses_in $i $point) > $paused ))" ||
    fail "$tag: host $i's gcrd did not reach $point: $(tail -n 5 "$(host_log "$i")")"
  pkill -9 -f "gcrd --socket $T/h$k/gcrd.sock"
  local rc=0
  wait "$c" || rc=$?
  [[ $rc != 0 ]] || fail "$tag: the move succeeded: $(cat "$T/$tag.json")"
  kill -0 "${R[1]}" && [[ $(ip netns identify "${R[1]}") == "$(host_ns 1)" ]] ||
    fail "$tag: rank 1 does not run on host 1 after the failed move: $(cat "$T/$tag.err")"
  start_host_gcrd "$k"
  ((i == k)) || start_host_gcrd "$i"
  has_address 1 "$(rank_addr "$a")" && ! has_address 2 "$(rank_addr "$a")" ||
    fail "$tag: rank 1's address is not back on host 1 alone"
  job_ends_right "$tag" 2 0 0
  no_locks || fail "$tag: a lock of gcrd's is left"
  echo "ok: $tag: $(grep -m1 gcr "$T/$tag.err" | cut -c1-160); both ranks ran on and ended with $REF"
}

if wanted m; then
  step "m: one rank moved to the spare host while the job runs"
  start_move_job m 1
  move_rank1 m1 || fail "m1: gcr migrate --job: $(cat "$T/m1.err" "$T/m1.json" | head -n 30)"
  moved=$(json_field destination_pid < "$T/m1.json")
  pids+=("$moved")
  where=$(in_host_ns "$moved" 2) || fail "m1: rank 1 ($moved) is not in host 2's namespace: $where: $(cat "$T/m1.json")"
  kill -0 "${R[0]}" || fail "m1: rank 0 is gone"
  stop=$(json_field job_stop_ns < "$T/m1.json")
  ((stop > 0)) || fail "m1: no job-wide stop reported: $(cat "$T/m1.json")"
  has_address 2 "$(rank_addr 1)" && ! has_address 1 "$(rank_addr 1)" ||
    fail "m1: rank 1's address did not move to host 2"
  no_locks || fail "m1: a lock of gcrd's is left"
  job_ends_right m 2 0 0
  echo "ok: m1: rank 1 moved to host 2 ($(json_field rounds < "$T/m1.json") rounds, downtime $(json_field downtime_ns < "$T/m1.json") ns, rank 0 held $stop ns); both ended with $REF"
  # The destination's gcrd gone once the rank is dumped; the bystander's gcrd gone while it holds
  # rank 0 still (the kernel lets a dead tracer's threads go).
  PAUSE_S=5 failed_move m2 2 1 dumped 2
  failed_move m3 3 0 bystander-frozen 0
fi
if wanted e; then
  step "e: a host lost; its rank restored on the spare host"
  start_job e 2
  wait_steps "$T/e-r0.log" $((RANDOM % 30 + 10))
  checkpoint_job "$T/e1.json" -R --copy-parts --name e1
  rank0=${R[0]}
  n=$(steps_in "$T/e-r0.log")
  wait_steps "$T/e-r0.log" $((n + 5))
  remove_host 1
  wait_gone "$rank0" 60 || fail "e: rank 0 runs on without its peer"
  before=($(counts_of e 2))
  on_host 0 "$GCR" restore e1 --token-file "$T/token" --place "$(host_gcrd 1)=$(host_gcrd 2)" --json \
    > "$T/restore-e1.json" 2> "$T/restore-e1.err" ||
    fail "gcr restore e1 --place: $(cat "$T/restore-e1.err" "$T/restore-e1.json" | head -n 20)"
  [[ $(json_field remote.0 < "$T/restore-e1.json") == "$(host_gcrd 2)" ]] ||
    fail "e: rank 1 was not restored on host 2: $(cat "$T/restore-e1.json")"
  moved=$(json_field remote_pids.0 < "$T/restore-e1.json")
  pids+=("$(json_field pid < "$T/restore-e1.json")" "$moved")
  where=$(in_host_ns "$moved" 2) || fail "e: restored rank 1 ($moved) is not in host 2's namespace: $where"
  job_ends_right e 2 "${before[@]}"
  echo "ok: host 1 lost; its rank restored on host 2 (pid $moved, host 1's address taken); every rank ended with $REF"
fi
if wanted q; then
  step "q: the coordinator's host lost; restored from the other host, the coordinator's part from its memory"
  for i in 4 5 6; do
    make_host $i
    start_host_gcrd $i
  done
  reference_p
  launch_on 4 "$T/q-r0.log" "${MP_P[@]}" --ranks 2 --rank 0 --store "$(host_addr 4):$STORE_PORT" \
    $(slow_flags q)
  q0=$P
  launch_on 5 "$T/q-r1.log" "${MP_P[@]}" --ranks 2 --rank 1 --store "$(host_addr 4):$STORE_PORT" \
    $(slow_flags q)
  q1=$P
  wait_steps "$T/q-r0.log" 20
  # Into a store of the user's, not the one host 4's gcrd serves (its part is put there for host 5).
  on_host 4 env GCR_STORE="$T/h4/user-store" "$GCR" checkpoint --job "$q0" "$q1@$(host_gcrd 5)" \
    --token-file "$T/token" --every 1s --keep 2 --peer-copies 1 --name qj > "$T/q-every.out" 2>&1 ||
    fail "gcr checkpoint --every: $(cat "$T/q-every.out")"
  wait_until 60 copies_done 4 "$q0" 2 || fail "q: host 4's schedule: $(on_host 4 "$GCR" ps --json)"
  wait_until 60 eval '[[ $(schedule_field 4 "$q0" tiers) == local+peers ]]' || fail "q: the copies are not made"
  t0=$(date +%s%N)  # before the age is read: age + gap bounds how long ago the state was cut
  age=$(schedule_field 4 "$q0" last_age_ms)
  [[ -z $(rank_checksum "$T/q-r0.log") ]] || fail "q: the job ended before host 4 could be lost"
  remove_host 4  # the coordinator: its gcrd, its store, its schedule gone
  gap=$((($(date +%s%N) - t0) / 1000000))
  kill -9 "$q1" 2> /dev/null || true  # as a scheduler ends a job that lost a node (it may hang)
  wait_gone "$q1" 60 || fail "q: rank 1 did not end"
  before=($(counts_of q 2))
  killed_at=$(awk '/^step/ {s = $2} END {print s}' "$T/q-r0.log")  # rank 0 prints the steps
  size=$(stat -c %s "$T/q-r0.log")
  on_host 5 "$GCR" restore --latest qj --token-file T --place "$(host_gcrd 4)=$(host_gcrd 6)" > /dev/null 2>&1 &&
    fail "q: a restore with a missing token file was taken"
  on_host 5 "$GCR" restore --latest qj --token-file "$T/token" > "$T/restore-q0.out" 2>&1 &&
    fail "q: a restore without --place for the lost coordinator was taken"
  grep -q -- "--place $(host_gcrd 4)=" "$T/restore-q0.out" || fail "q: without --place it said: $(cat "$T/restore-q0.out")"
  on_host 5 "$GCR" restore --latest qj --token-file "$T/token" --place "$(host_gcrd 4)=$(host_gcrd 6)" --json \
    > "$T/restore-q.json" 2> "$T/restore-q.err" ||
    fail "gcr restore --latest qj on host 5: $(cat "$T/restore-q.err" "$T/restore-q.json" | head -n 20)"
  [[ $(json_field restored_on < "$T/restore-q.json") == "$(host_gcrd 6)" ]] ||
    fail "q: the job's coordinator part was not restored on host 6: $(cat "$T/restore-q.json")"
  [[ $(json_field remote.0 < "$T/restore-q.json") == "$(host_gcrd 5)" ]] ||
    fail "q: rank 1 was not restored on host 5: $(cat "$T/restore-q.json")"
  moved=$(json_field pid < "$T/restore-q.json")
  pids+=("$moved" "$(json_field remote_pids.0 < "$T/restore-q.json")")
  scheduled_again 6 "$moved" "$T/restore-q.json" q  # by its new coordinator
  where=$(in_host_ns "$moved" 6) || fail "q: restored rank 0 ($moved) is not in host 6's namespace: $where"
  resumed_within_age q
  echo "ok: host 4 (the coordinator) lost at step $killed_at; restored from host 5: rank 0 on host 6 from host 5's memory, at step $resumed_at ($lost steps again; the newest checkpoint was $age ms old); ended with the reference"
fi
step "PASS"
