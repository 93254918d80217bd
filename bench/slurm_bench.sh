#!/usr/bin/env bash
# slurm_bench: from Slurm's preemption to the job working again (issue 36, docs/slurm.md). The
# tests' cluster (tests/integration/slurm/cluster.sh: three nodes as network namespaces, Debian's
# Slurm, Ceph RGW on the bridge as the bucket); the job: mp_train's 2 ranks on 2 nodes over TCP,
# B MiB of device memory per rank (--ballast-mib), 15 ms a step, in partition low. At step AT a
# job of partition high takes its first node (--exclusive): Slurm preempts the low job, which
#   gcr:        (sbatch --gcr --signal=B:USR1@10) is checkpointed live into the store at the
#               signal (its first checkpoint), requeues itself, and is restored on the other two
#               nodes;
#   gcr-every:  the same with --gcr=every=5s: the checkpoint at the signal is incremental (or
#               the one under way serves);
#   framework:  (sbatch --signal=USR1@10, mp_train --state: Note [A framework's checkpoint] in
#               tests/workloads/mp_train/trainer.h) writes its own state at the signal (every
#               rank its weights, moments and device memory, to the shared job directory), the
#               script requeues the job, and the ranks read it back when it starts again;
#   scratch:    (no checkpoint: the script traps --signal=B:USR1 and requeues the job, as a job
#               that wants to come back at all must) starts again from step 0.
# Measured from the high job's submission: the low job running again (Slurm's RUNNING, restart 1),
# and working again: rank 0 logging a step at or past AT once more. For gcr also the parts, from
# the supervisor's stamped lines: the signal to the requeue (the checkpoint and its upload), the
# pull (the restart's first line to the restore's start), and the restore to working again.
# --store dir: gcr's store is a directory every node reaches (the job directory, where the
# framework writes its state) instead of the bucket.
#
#   bench/slurm_bench.sh [BUILD_DIR] [--mib 256,1024] [--at 300] [--store bucket|dir]
#
# Prints a table and writes bench/results/slurm-<time>.json. Asserts nothing about time. Needs
# root, Slurm, munge and Ceph (scripts/setup.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
set -- "${BENCH_ARGS[@]}"
MIB_LIST=256,1024
AT=300
STORE_KIND=bucket
while (($#)); do
  case $1 in
    --mib) MIB_LIST=$2; shift 2 ;;
    --at) AT=$2; shift 2 ;;
    --store) STORE_KIND=$2; shift 2 ;;
    *) echo "usage: $0 [BUILD_DIR] [--mib 256,1024] [--at 300] [--store bucket|dir]" >&2; exit 2 ;;
  esac
done
TEST_NAME=bench-slurm
set -- "$BUILD_ARG"
source "$HERE/../tests/integration/programs/lib.sh"
SLURM_GRACE=10
source "$HERE/../tests/integration/slurm/cluster.sh"
source "$HERE/../tests/integration/s3/ceph_lib.sh"
trap 'rc=$?; slurm_stop; ceph_stop; (exit $rc); cleanup' EXIT
OUT=$HERE/results/slurm-$(date -u +%Y-%m-%dT%H%M%S).json

slurm_start
CEPH_MEMSTORE_BYTES=$((8 << 30)) CEPH_RGW_ADDR=$(login_addr) ceph_start "$T/ceph" || fail "Ceph did not start"
s3_curl PUT gcr-slurm -o /dev/null
STORE=s3://gcr-slurm/jobs
[[ $STORE_KIND == bucket ]] || STORE=$SL/jobs/store
echo "optional $BUILD/lib/gcr/slurm/gcr_spank.so token=$SL/token store=$STORE" \
  "addresses=$SNET.128/25" > "$SL/etc/plugstack.conf"
export LD_LIBRARY_PATH=$BUILD/simgpu SIMGPU_MEMORY=4G

now_ms() { date +%s%3N; }
stamp_ms() {  # the time of the supervisor's first line saying TEXT in FILE, as ms since the epoch
  local t
  t=$(grep -m1 -- "$2" "$1" | awk '{print $2}')
  [[ -n $t ]] && date -d "$(date +%F) $t" +%s%3N || echo ""
}
last_step() { awk '/^step / {s=$2} END {print s+0}' "$1" 2> /dev/null || echo 0; }

make_job() {  # MODE TAG MIB
  local mode=$1 tag=$2 mib=$3 store listen="" state="" after="" before="" bg=""
  case $mode in
    gcr*) store='$GCR_SLURM_MASTER_ADDR' listen='--listen $GCR_SLURM_NODE_ADDR' ;;
    *) store='$MASTER' ;;
  esac
  [[ $mode != framework ]] || {
    state="--state $SL/jobs/$tag.state"
    after='[[ $rc != 75 ]] || scontrol requeue $SLURM_JOB_ID  # the state is written: again'
  }
  [[ $mode != scratch ]] || {  # what a job without a checkpoint does to come back at all
    before='requeue() { scontrol requeue $SLURM_JOB_ID; }; trap requeue USR1'
    bg=' &
wait'
  }
  cat > "$SL/jobs/$tag.sh" << JOB
#!/bin/bash
export MASTER=\$(getent hosts \$(scontrol show hostnames \$SLURM_JOB_NODELIST | head -n 1) | cut -d' ' -f1)
$before
srun --output=$SL/jobs/$tag-r%t.log --open-mode=append sh -c 'exec $BUILD/tests/workloads/mp_train \\
  --transport tcp --ranks 2 --rank \$SLURM_PROCID --store $store:29500 $listen $state \\
  --steps $((AT * 4)) --step-delay-ms 15 --ballast-mib $mib'$bg
rc=\$?
$after
JOB
}

# run_case MODE MIB: prints "running_ms first_step_ms working_ms [checkpoint_ms restore_ms
# signal_ms]", each from the high job's submission.
run_case() {
  local mode=$1 mib=$2 tag=$1-$2 how=() j h t0 t_running lines_before
  make_job "$mode" "$tag" "$mib"
  case $mode in
    gcr) how=(--gcr --signal=B:USR1@10) ;;
    gcr-every) how=(--gcr=every=5s --signal=B:USR1@10) ;;
    framework) how=(--signal=USR1@10) ;;  # to the ranks, not the script
    scratch) how=(--signal=B:USR1@10) ;;
  esac
  j=$(sbatch --parsable "${how[@]}" -p low -N2 --ntasks-per-node=1 --requeue --open-mode=append \
    --output="$SL/jobs/$tag.out" "$SL/jobs/$tag.sh")
  wait_until 300 eval "(( \$(last_step $SL/jobs/$tag-r0.log) >= $AT ))" ||
    fail "$tag: rank 0 did not reach step $AT: $(tail -n 3 "$SL/jobs/$tag-r0.log" "$SL/jobs/$tag.out")"
  t0=$(now_ms)
  h=$(sbatch --parsable -p high -N1 -w n1 --exclusive --output=/dev/null --wrap "sleep 900")
  wait_until 300 eval "[[ \$(sq $j Restarts) -ge 1 && \$(sq $j JobState) == RUNNING ]]" ||
    fail "$tag: not running again: $(tail -n 5 "$SL/jobs/$tag.out")"
  t_running=$(now_ms)
  lines_before=$(wc -l < "$SL/jobs/$tag-r0.log")
  wait_until 600 eval "tail -n +$((lines_before + 1)) $SL/jobs/$tag-r0.log | grep_quiet '^step '" ||
    fail "$tag: no step after the restart: $(tail -n 3 "$SL/jobs/$tag-r0.log")"
  local t_first
  t_first=$(now_ms)
  wait_until 600 eval "tail -n +$((lines_before + 1)) $SL/jobs/$tag-r0.log | awk -v at=$AT '/^step / && \$2 >= at {f=1} END {exit !f}'" ||
    fail "$tag: not working again: $(tail -n 3 "$SL/jobs/$tag-r0.log")"
  local t_working
  t_working=$(now_ms)
  local extra=""
  if [[ $mode == gcr* ]]; then
    local sig requeued restart restoring
    # The signal; the requeue once the checkpoint is in the store (with every=, the one under
    # way then, if any, else a new one); the restart's first line; the restore's start.
    sig=$(stamp_ms "$SL/jobs/$tag.out" "got User defined signal")
    requeued=$(stamp_ms "$SL/jobs/$tag.out" "requeued (scontrol requeue)")
    restart=$(stamp_ms "$SL/jobs/$tag.out" "(restart 1)")
    restoring=$(stamp_ms "$SL/jobs/$tag.out" "restoring step")
    extra="$((requeued - sig)) $((restoring - restart)) $((t_working - restoring)) $((sig - t0))"
  fi
  scancel "$j" "$h"
  wait_until 120 eval "[[ \$(sq $j JobState) != RUNNING && \$(sq $h JobState) != RUNNING ]]" || true
  wait_until 60 nodes_idle || true
  echo "$((t_running - t0)) $((t_first - t0)) $((t_working - t0)) $extra"
}

printf '%-6s %-10s %10s %10s %12s %10s %12s %10s\n' MiB mode running_s working_s sig-requeue pull_s restore-work signal_s
json="{\"at_step\": $AT, \"step_delay_ms\": 15, \"gcr_store\": \"$STORE_KIND\", \"cases\": ["
first=1
IFS=, read -ra mibs <<< "$MIB_LIST"
for mib in "${mibs[@]}"; do
  sec() { bc -l <<< "scale=2; $1/1000"; }
  ((first)) || json+=", "
  first=0
  json+="{\"mib\": $mib"
  for mode in gcr gcr-every framework scratch; do
    read -r run _ work ckpt pull rest lead <<< "$(run_case "$mode" "$mib")"
    eval "work_${mode//-/_}=$work"
    if [[ $mode == gcr* ]]; then
      printf '%-6s %-10s %10.2f %10.2f %12.2f %10.2f %12.2f %10.2f\n' "$mib" "$mode" "$(sec "$run")" \
        "$(sec "$work")" "$(sec "$ckpt")" "$(sec "$pull")" "$(sec "$rest")" "$(sec "$lead")"
      json+=", \"$mode\": {\"running_ms\": $run, \"working_ms\": $work, \"signal_to_requeue_ms\": $ckpt,"
      json+=" \"pull_ms\": $pull, \"restore_to_working_ms\": $rest, \"signal_after_ms\": $lead}"
    else
      printf '%-6s %-10s %10.2f %10.2f\n' "$mib" "$mode" "$(sec "$run")" "$(sec "$work")"
      json+=", \"$mode\": {\"running_ms\": $run, \"working_ms\": $work}"
    fi
  done
  json+="}"
  echo "       working again, against gcr-every: gcr $(bc -l <<< "scale=2; $work_gcr/$work_gcr_every")x," \
    "framework $(bc -l <<< "scale=2; $work_framework/$work_gcr_every")x, scratch $(bc -l <<< "scale=2; $work_scratch/$work_gcr_every")x"
done
json+="]}"
mkdir -p "$HERE/results"
echo "$json" > "$OUT"
echo "wrote $OUT"
