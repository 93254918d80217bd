#!/usr/bin/env bash
# slurm_bench: from Slurm's preemption to the job working again (issue 36, docs/slurm.md). The
# tests' cluster (tests/integration/slurm/cluster.sh: three nodes as network namespaces, Debian's
# Slurm, Ceph RGW on the bridge as the bucket); the job: mp_train's 2 ranks on 2 nodes over TCP,
# B MiB of device memory per rank (--ballast-mib), 15 ms a step, in partition low. At step AT a
# job of partition high takes its first node (--exclusive): Slurm preempts the low job, which
#   gcr:      (sbatch --gcr --signal=B:USR1@10) is checkpointed live into the bucket at the signal,
#             requeues itself, and is restored on the other two nodes;
#   scratch:  (no --gcr, the baseline) is killed after GraceTime, requeued by Slurm, and starts
#             again from step 0 on the other two nodes.
# Measured from the high job's submission: the low job running again (Slurm's RUNNING, restart 1),
# and working again: rank 0 logging a step at or past AT once more. For gcr also the parts, from
# the supervisor's stamped lines: the checkpoint and its upload (signal -> in the bucket), the
# pull and restore (the restart's first line -> restored).
# A framework-style checkpoint (the workload writing its state at the signal and reading it when
# requeued) is modelled, since mp_train has no state file: writing and reading B MiB per rank to
# the bucket (PUT and GET of that much, timed here), plus the requeue and the job's start as gcr
# measured them, plus the steps from 0 to the first logged step (the job's own start-up).
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

make_job() {  # TAG MIB
  cat > "$SL/jobs/$1.sh" << JOB
#!/bin/bash
srun --output=$SL/jobs/$1-r%t.log --open-mode=append sh -c 'exec $BUILD/tests/workloads/mp_train \\
  --transport tcp --ranks 2 --rank \$SLURM_PROCID --store \$GCR_SLURM_MASTER_ADDR:29500 \\
  --listen \$GCR_SLURM_NODE_ADDR --steps $((AT * 4)) --step-delay-ms 15 --ballast-mib $2'
JOB
}

# run_case MODE MIB: prints "running_ms first_step_ms working_ms [checkpoint_ms restore_ms
# signal_ms]", each from the high job's submission.
run_case() {
  local mode=$1 mib=$2 tag=$1-$2 gcr=() j h t0 t_running lines_before
  make_job "$tag" "$mib"
  # Without gcr the ranks still need the job's addresses, which only --gcr's plugin gives: the
  # baseline listens on its node's own address instead.
  [[ $mode == gcr ]] && gcr=(--gcr --signal=B:USR1@10) ||
    sed -i 's/\$GCR_SLURM_MASTER_ADDR/$(getent hosts $(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1) | cut -d" " -f1)/; s/--listen \$GCR_SLURM_NODE_ADDR//' "$SL/jobs/$tag.sh"
  j=$(sbatch --parsable "${gcr[@]}" -p low -N2 --ntasks-per-node=1 --requeue --open-mode=append \
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

# The modelled framework checkpoint's I/O: B MiB per rank written to and read from the bucket.
io_ms() {  # MIB: "put_ms get_ms" of one rank's state (the ranks write theirs side by side)
  head -c "$(($1 << 20))" /dev/urandom > "$T/state"
  local a b c
  a=$(now_ms)
  s3_curl PUT "gcr-slurm/state-$1" --data-binary @"$T/state" -o /dev/null
  b=$(now_ms)
  s3_curl GET "gcr-slurm/state-$1" -o "$T/state.back"
  c=$(now_ms)
  rm -f "$T/state" "$T/state.back"
  echo "$((b - a)) $((c - b))"
}

printf '%-6s %-9s %12s %12s %12s %12s %12s\n' MiB mode running_s working_s ckpt+push_s pull+rest_s signal_lead
json="{\"at_step\": $AT, \"step_delay_ms\": 15, \"cases\": ["
first=1
IFS=, read -ra mibs <<< "$MIB_LIST"
for mib in "${mibs[@]}"; do
  read -r g_run _ g_work g_ckpt g_rest g_lead <<< "$(run_case gcr "$mib")"
  read -r s_run s_first s_work <<< "$(run_case scratch "$mib")"
  read -r put get <<< "$(io_ms "$mib")"
  # Framework-style: gcr's timeline with its checkpoint replaced by the state's PUT, then the
  # fresh start a requeued job makes (running to its first step, as the baseline's) and the GET.
  f_work=$((g_run - g_ckpt + put + (s_first - s_run) + get))
  printf '%-6s %-9s %12.2f %12.2f %12.2f %12.2f %12.2f\n' "$mib" gcr "$(bc -l <<< "$g_run/1000")" \
    "$(bc -l <<< "$g_work/1000")" "$(bc -l <<< "$g_ckpt/1000")" "$(bc -l <<< "$g_rest/1000")" "$(bc -l <<< "$g_lead/1000")"
  printf '%-6s %-9s %12.2f %12.2f\n' "$mib" scratch "$(bc -l <<< "$s_run/1000")" "$(bc -l <<< "$s_work/1000")"
  printf '%-6s %-9s %12s %12.2f   (modelled: state PUT %.2f s + GET %.2f s per rank)\n' "$mib" framework - \
    "$(bc -l <<< "$f_work/1000")" "$(bc -l <<< "$put/1000")" "$(bc -l <<< "$get/1000")"
  echo "       working again: scratch / gcr = $(bc -l <<< "scale=1; $s_work/$g_work")x, framework / gcr = $(bc -l <<< "scale=1; $f_work/$g_work")x"
  ((first)) || json+=", "
  first=0
  json+="{\"mib\": $mib, \"gcr\": {\"running_ms\": $g_run, \"working_ms\": $g_work, \"checkpoint_push_ms\": $g_ckpt, \"pull_restore_ms\": $g_rest, \"signal_after_ms\": $g_lead},"
  json+=" \"scratch\": {\"running_ms\": $s_run, \"first_step_ms\": $s_first, \"working_ms\": $s_work},"
  json+=" \"framework_modelled\": {\"working_ms\": $f_work, \"state_put_ms\": $put, \"state_get_ms\": $get}}"
done
json+="]}"
mkdir -p "$HERE/results"
echo "$json" > "$OUT"
echo "wrote $OUT"
