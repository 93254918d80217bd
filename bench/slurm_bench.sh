#!/usr/bin/env bash
# slurm_bench: from Slurm's preemption to the job working again (issue 36, docs/slurm.md). The
# tests' cluster (tests/integration/slurm/cluster.sh: three nodes as network namespaces, Debian's
# Slurm, Ceph RGW on the bridge as the bucket); the job: mp_train's 2 ranks on 2 nodes over TCP,
# B MiB of device memory per rank (--ballast-mib), 15 ms a step, in partition low. At step AT a
# job of partition high takes its first node (--exclusive): Slurm preempts the low job, which
#   gcr:        (sbatch --gcr --signal=B:USR1@10) is checkpointed live into the bucket at the
#               signal, requeues itself, and is restored on the other two nodes;
#   framework:  (sbatch --signal=USR1@10, mp_train --state: Note [A framework's checkpoint] in
#               tests/workloads/mp_train/trainer.h) writes its own state at the signal (every
#               rank its weights, moments and device memory, to the shared job directory), the
#               script requeues the job, and the ranks read it back when it starts again;
#   scratch:    (neither) is killed after GraceTime (10 s), requeued by Slurm, and starts again
#               from step 0.
# Measured from the high job's submission: the low job running again (Slurm's RUNNING, restart 1),
# and working again: rank 0 logging a step at or past AT once more. For gcr also the parts, from
# the supervisor's stamped lines: the checkpoint and its upload (signal -> in the bucket) and the
# pull and restore (the restart's first line -> restored).
#
#   bench/slurm_bench.sh [BUILD_DIR] [--mib 256,1024] [--at 300]
#
# Prints a table and writes bench/results/slurm-<time>.json. Asserts nothing about time. Needs
# root, Slurm, munge and Ceph (scripts/setup.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
set -- "${BENCH_ARGS[@]}"
MIB_LIST=256,1024
AT=300
while (($#)); do
  case $1 in
    --mib) MIB_LIST=$2; shift 2 ;;
    --at) AT=$2; shift 2 ;;
    *) echo "usage: $0 [BUILD_DIR] [--mib 256,1024] [--at 300]" >&2; exit 2 ;;
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
echo "optional $BUILD/lib/gcr/slurm/gcr_spank.so token=$SL/token store=s3://gcr-slurm/jobs" \
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
  local mode=$1 tag=$2 mib=$3 store listen="" state="" after=""
  case $mode in
    gcr) store='$GCR_SLURM_MASTER_ADDR' listen='--listen $GCR_SLURM_NODE_ADDR' ;;
    *) store='$MASTER' ;;
  esac
  [[ $mode != framework ]] || {
    state="--state $SL/jobs/$tag.state"
    after='[[ $rc != 75 ]] || scontrol requeue $SLURM_JOB_ID  # the state is written: again'
  }
  cat > "$SL/jobs/$tag.sh" << JOB
#!/bin/bash
export MASTER=\$(getent hosts \$(scontrol show hostnames \$SLURM_JOB_NODELIST | head -n 1) | cut -d' ' -f1)
srun --output=$SL/jobs/$tag-r%t.log --open-mode=append sh -c 'exec $BUILD/tests/workloads/mp_train \\
  --transport tcp --ranks 2 --rank \$SLURM_PROCID --store $store:29500 $listen $state \\
  --steps $((AT * 4)) --step-delay-ms 15 --ballast-mib $mib'
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
    framework) how=(--signal=USR1@10) ;;  # to the ranks, not the script
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
  wait_until 600 eval "tail -n +$((lines_before + 1)) $SL/jobs/$tag-r0.log | grep -q '^step '" ||
    fail "$tag: no step after the restart: $(tail -n 3 "$SL/jobs/$tag-r0.log")"
  local t_first
  t_first=$(now_ms)
  wait_until 600 eval "tail -n +$((lines_before + 1)) $SL/jobs/$tag-r0.log | awk -v at=$AT '/^step / && \$2 >= at {f=1} END {exit !f}'" ||
    fail "$tag: not working again: $(tail -n 3 "$SL/jobs/$tag-r0.log")"
  local t_working
  t_working=$(now_ms)
  local extra=""
  if [[ $mode == gcr ]]; then
    local sig in_bucket restart restored
    sig=$(stamp_ms "$SL/jobs/$tag.out" "got User defined signal")
    in_bucket=$(stamp_ms "$SL/jobs/$tag.out" "is in s3")
    restart=$(stamp_ms "$SL/jobs/$tag.out" "(restart 1)")
    restored=$(stamp_ms "$SL/jobs/$tag.out" "restored; it runs on")
    extra="$((in_bucket - sig)) $((restored - restart)) $((sig - t0))"
  fi
  scancel "$j" "$h"
  wait_until 120 eval "[[ \$(sq $j JobState) != RUNNING && \$(sq $h JobState) != RUNNING ]]" || true
  wait_until 60 nodes_idle || true
  echo "$((t_running - t0)) $((t_first - t0)) $((t_working - t0)) $extra"
}

printf '%-6s %-10s %12s %12s %12s %12s %12s\n' MiB mode running_s working_s ckpt+push_s pull+rest_s signal_s
json="{\"at_step\": $AT, \"step_delay_ms\": 15, \"cases\": ["
first=1
IFS=, read -ra mibs <<< "$MIB_LIST"
for mib in "${mibs[@]}"; do
  read -r g_run _ g_work g_ckpt g_rest g_lead <<< "$(run_case gcr "$mib")"
  read -r f_run _ f_work <<< "$(run_case framework "$mib")"
  read -r s_run _ s_work <<< "$(run_case scratch "$mib")"
  sec() { bc -l <<< "$1/1000"; }
  printf '%-6s %-10s %12.2f %12.2f %12.2f %12.2f %12.2f\n' "$mib" gcr "$(sec "$g_run")" "$(sec "$g_work")" \
    "$(sec "$g_ckpt")" "$(sec "$g_rest")" "$(sec "$g_lead")"
  printf '%-6s %-10s %12.2f %12.2f\n' "$mib" framework "$(sec "$f_run")" "$(sec "$f_work")"
  printf '%-6s %-10s %12.2f %12.2f\n' "$mib" scratch "$(sec "$s_run")" "$(sec "$s_work")"
  echo "       working again: framework / gcr = $(bc -l <<< "scale=2; $f_work/$g_work")x," \
    "scratch / gcr = $(bc -l <<< "scale=2; $s_work/$g_work")x"
  ((first)) || json+=", "
  first=0
  json+="{\"mib\": $mib, \"gcr\": {\"running_ms\": $g_run, \"working_ms\": $g_work, \"checkpoint_push_ms\": $g_ckpt, \"pull_restore_ms\": $g_rest, \"signal_after_ms\": $g_lead},"
  json+=" \"framework\": {\"running_ms\": $f_run, \"working_ms\": $f_work},"
  json+=" \"scratch\": {\"running_ms\": $s_run, \"working_ms\": $s_work}}"
done
json+="]}"
mkdir -p "$HERE/results"
echo "$json" > "$OUT"
echo "wrote $OUT"
