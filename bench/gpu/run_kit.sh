#!/usr/bin/env bash
# bench/gpu/run_kit.sh OUT_DIR: gcr on a real NVIDIA GPU, end to end, in under 9 minutes.
#
# Runs from the repository root of a working tree that carries gpu-bundle/ (bench/gpu/make_bundle.sh).
# Each phase has its own time limit and writes OUT_DIR/<phase>.log and OUT_DIR/<phase>.status
# ("ok", "fail RC" or "timeout", then its seconds); a failed phase does not stop the next one.
# Logs carry "@kit key=value" lines; bench/gpu/summarize.py turns them into OUT_DIR/summary.md.
#
#   p0-preflight  every piece starts: nvidia-smi, the bundle's binaries, criu check, torch, nvcc
#   p1-platform   cuInit and context time, pinned/pageable H2D/D2H bandwidth, D2D (platform_probe.cu)
#   p2-workloads  smoke and mlp_train on the driver with and without gcr; interposer cost per launch
#   p3-mlp        mlp_train at GCR_KIT_FOOTPRINT (4G): gcr checkpoint -R, restore; --stop-copy, restore
#   p4-torch      train_torch.py under gcr run: same losses; checkpoint with -R and without, restore
#   p5-driver     the driver's checkpoint: lock/checkpoint/restore/unlock times with memory resident
#                 and parked, VMM addresses, the driver's threads (driver_ckpt_probe.cu)
#   p6-gloo       a torch.distributed job of 2 ranks (gloo: TCP between them) on one GPU, each rank
#                 under gcr run: gcr checkpoint --job -R at step 60, both ranks end as a plain run
#                 does; the checkpoint restored ends so too (issue 35, docs/jobs.md)
#
# Environment: GCR_BUNDLE (default gpu-bundle), GCR_KIT_FOOTPRINT (4G), GCR_KIT_PHASES (all; e.g.
# "p0-preflight p3-mlp"). Checkpoint phases need root (CRIU).
set -euo pipefail

OUT=${1:?usage: run_kit.sh OUT_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export OUT ROOT
export KIT=$ROOT/bench/gpu
export BUNDLE=${GCR_BUNDLE:-$ROOT/gpu-bundle}
[[ $BUNDLE = /* ]] || BUNDLE=$ROOT/$BUNDLE
export FOOTPRINT=${GCR_KIT_FOOTPRINT:-4G}
PHASES=${GCR_KIT_PHASES:-p0-preflight p1-platform p2-workloads p3-mlp p4-torch p5-driver p6-gloo}

# The bundle's libraries; libstdc++/libgcc_s from the bundle only when the host's are too old.
LIBPATH=$BUNDLE/lib
if ! LD_LIBRARY_PATH=$LIBPATH "$BUNDLE/bin/gcr" --version >/dev/null 2>&1; then LIBPATH=$LIBPATH:$BUNDLE/lib/cxx; fi
export LD_LIBRARY_PATH=$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The real driver, wherever this host keeps it.
if [[ -z ${GCR_REAL_LIBCUDA:-} ]]; then
  # awk reads to the end: exiting early could kill ldconfig with SIGPIPE, and pipefail this script.
  d=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64|AArch64/ && !found {print $NF; found = 1}')
  [[ -n $d ]] && export GCR_REAL_LIBCUDA=$d
fi
export GCR=$BUNDLE/bin/gcr GCR_CRIU=$BUNDLE/bin/criu W=$BUNDLE/workloads
export GCR_STORE=$OUT/work/store GCR_GCRD_SOCKET=$OUT/work/gcrd.sock GCR_WORK_DIR=$OUT/work/gcr GCR_QUIET=1
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$PATH:$CUDA_HOME/bin
mkdir -p "$OUT/work" "$OUT/bin"

# ---- helpers (exported: each phase runs in its own bash under timeout) ----
kit() { echo "@kit $*"; }
last_step() { awk '/^step/ {s=$2} END {print s+0}' "$1"; }
field_of() { awk -v k="$1" '$1 == k {v=$2} END {print v}' "$2"; }  # KEY LOG: last "KEY value"
wait_step() {  # LOG N [SECONDS]
  local end=$((SECONDS + ${3:-60}))
  while (($(last_step "$1") < $2)); do
    ((SECONDS < end)) || { echo "no step $2 in $1 after ${3:-60}s" >&2; return 1; }
    sleep 0.05
  done
}
wait_gone() {  # PID [SECONDS]
  local end=$((SECONDS + ${2:-60}))
  while kill -0 "$1" 2>/dev/null; do
    ((SECONDS < end)) || { echo "pid $1 still there after ${2:-60}s" >&2; return 1; }
    sleep 0.05
  done
}
jkit() {  # PREFIX JSON_FILE: gcr's --json figures as @kit lines (times in ms)
  python3 - "$1" "$2" <<'PY'
import json, sys
p, f = sys.argv[1], sys.argv[2]
d = json.load(open(f))
d = d[0] if isinstance(d, list) else d
out = []
for k, v in sorted(d.items()):
    if k.startswith("time.") and k.endswith("_ns"):
        out.append(f"{p}_{k[5:-3]}_ms={int(v) / 1e6:.1f}")
    elif k in ("region_bytes", "dirty_bytes", "regions", "error", "kind") or k.startswith("stat."):
        out.append(f"{p}_{k.replace('stat.', '')}={str(v).replace(' ', '_')}")
print("@kit " + " ".join(out))
PY
}
compile_probe() {  # SOURCE OUTPUT
  if command -v nvcc >/dev/null; then nvcc -O2 -std=c++17 -o "$2" "$1" -lcuda
  else g++ -O2 -std=c++17 -x c++ -I"$CUDA_HOME/include" -o "$2" "$1" -lcuda -pthread; fi
}
prefix_kit() { awk -v p="$1" '$1 == "@kit" {for (i = 2; i <= NF; i++) $i = p $i} {print}'; }
stop_gcrd() { pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true; }
export -f prefix_kit kit last_step field_of wait_step wait_gone jkit compile_probe stop_gcrd

# ---- phases ----
p0-preflight() {
  local bad=0
  try() { local what=$1; shift; if "$@" > "$OUT/work/try.out" 2>&1; then kit "start_$what=ok"; else kit "start_$what=FAIL"; bad=1; fi; head -5 "$OUT/work/try.out"; }
  kit "libpath=$LD_LIBRARY_PATH real_libcuda=${GCR_REAL_LIBCUDA:-none} uid=$(id -u)"
  cat "$BUNDLE/MANIFEST" | grep '^#' || true
  try nvidia_smi nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  try gcr "$GCR" --version
  try gcrd env LD_LIBRARY_PATH="$(dirname "${GCR_REAL_LIBCUDA:-/x/y}"):$LD_LIBRARY_PATH" "$BUNDLE/bin/gcrd" --help
  try criu "$GCR_CRIU" --version
  try criu_check "$GCR_CRIU" check
  try smoke "$W/smoke"
  try mlp_train "$W/mlp_train" --steps 2
  try gcr_run_smoke "$GCR" run -- "$W/smoke"
  try torch python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available()); assert torch.cuda.is_available()'
  try nvcc nvcc --version
  return $bad
}
p1-platform() {
  compile_probe "$KIT/platform_probe.cu" "$OUT/bin/platform_probe"
  "$OUT/bin/platform_probe" --size 1G --reps 5
}
p2-workloads() {
  "$W/smoke" | tail -1
  "$GCR" run -- "$W/smoke" | tail -1
  local args=(--steps 200 --footprint 256M --quiet)
  "$W/mlp_train" "${args[@]}" > "$OUT/work/mlp-direct.log"
  "$GCR" run -- "$W/mlp_train" "${args[@]}" > "$OUT/work/mlp-gcr.log"
  local a b
  a=$(field_of checksum "$OUT/work/mlp-direct.log") b=$(field_of checksum "$OUT/work/mlp-gcr.log")
  kit "mlp_checksum_direct=$a mlp_checksum_gcr=$b checksums_equal=$([[ -n $a && $a == "$b" ]] && echo 1 || echo 0)"
  "$W/interpose_bench_probe" --iters 100000 --reps 5 > "$OUT/work/probe-direct.log"
  LD_PRELOAD=$BUNDLE/interpose/libcuda.so.1 GCR_REAL_LIBCUDA=${GCR_REAL_LIBCUDA:-libcuda.so.1} \
    "$W/interpose_bench_probe" --iters 100000 --reps 5 > "$OUT/work/probe-gcr.log"
  cat "$OUT/work/probe-direct.log" "$OUT/work/probe-gcr.log"
  for k in launch_empty_ns launch_args_ns memcpy_async_ns; do
    a=$(awk -v k=$k '$1 == k {m=$2; for (i=3;i<=NF;i++) if ($i<m) m=$i; print m}' "$OUT/work/probe-direct.log")
    b=$(awk -v k=$k '$1 == k {m=$2; for (i=3;i<=NF;i++) if ($i<m) m=$i; print m}' "$OUT/work/probe-gcr.log")
    kit "${k%_ns}_direct_ns=$a ${k%_ns}_gcr_ns=$b"
  done
  [[ -n $a && $(field_of checksum "$OUT/work/mlp-direct.log") == "$(field_of checksum "$OUT/work/mlp-gcr.log")" ]]
}
p3-mlp() {
  local mlp=("$W/mlp_train" --steps 400 --footprint "$FOOTPRINT" --step-delay-ms 10 --streams 2)
  "${mlp[@]}" > "$OUT/work/mlp-ref.log"
  local ref; ref=$(field_of checksum "$OUT/work/mlp-ref.log")
  kit "footprint=$FOOTPRINT mlp_ref_checksum=$ref"
  local ok=1 P got
  # gcr: live checkpoint, kill, restore
  setsid "$GCR" run -- "${mlp[@]}" >> "$OUT/work/mlp-live.log" 2>&1 < /dev/null & P=$!
  wait_step "$OUT/work/mlp-live.log" 100 60
  "$GCR" checkpoint "$P" --name mlp-live -R --json > "$OUT/mlp-ckpt-live.json" || ok=0
  jkit ckpt_live "$OUT/mlp-ckpt-live.json" || true
  wait_step "$OUT/work/mlp-live.log" 150 60; kill -9 "$P"; wait_gone "$P" 10 || true
  "$GCR" restore mlp-live --json > "$OUT/mlp-restore-live.json" || ok=0
  jkit restore_live "$OUT/mlp-restore-live.json" || true
  wait_gone "$P" 60 || ok=0
  got=$(field_of checksum "$OUT/work/mlp-live.log"); kit "live_checksum=$got live_equal=$([[ $got == "$ref" ]] && echo 1 || echo 0)"
  [[ $got == "$ref" ]] || ok=0
  # the baseline: --stop-copy (the process is gone after the checkpoint), restore
  setsid "$GCR" run -- "${mlp[@]}" >> "$OUT/work/mlp-sc.log" 2>&1 < /dev/null & P=$!
  wait_step "$OUT/work/mlp-sc.log" 100 60
  "$GCR" checkpoint "$P" --name mlp-sc --stop-copy --json > "$OUT/mlp-ckpt-stopcopy.json" || ok=0
  jkit ckpt_stopcopy "$OUT/mlp-ckpt-stopcopy.json" || true
  wait_gone "$P" 10 || true
  "$GCR" restore mlp-sc --json > "$OUT/mlp-restore-stopcopy.json" || ok=0
  jkit restore_stopcopy "$OUT/mlp-restore-stopcopy.json" || true
  wait_gone "$P" 60 || ok=0
  got=$(field_of checksum "$OUT/work/mlp-sc.log"); kit "stopcopy_checksum=$got stopcopy_equal=$([[ $got == "$ref" ]] && echo 1 || echo 0)"
  [[ $got == "$ref" ]] || ok=0
  "$GCR" image du || true
  ((ok))
}
p4-torch() {
  local py=(python3 "$KIT/train_torch.py" --steps 300) ok=1 P ref got
  "${py[@]}" > "$OUT/work/torch-ref.log"
  ref=$(field_of final_loss "$OUT/work/torch-ref.log")
  "$GCR" run -- "${py[@]}" > "$OUT/work/torch-gcr.log"
  got=$(field_of final_loss "$OUT/work/torch-gcr.log")
  cmp -s <(grep '^step' "$OUT/work/torch-ref.log") <(grep '^step' "$OUT/work/torch-gcr.log") && kit "torch_losses_equal=1" || { kit "torch_losses_equal=0"; ok=0; }
  kit "torch_ref_final_loss=$ref torch_gcr_final_loss=$got"
  # live checkpoint (-R), the run goes on; then restore that checkpoint once the run has ended
  setsid "$GCR" run -- "${py[@]}" --step-delay-ms 20 >> "$OUT/work/torch-live.log" 2>&1 < /dev/null & P=$!
  wait_step "$OUT/work/torch-live.log" 100 60
  "$GCR" checkpoint "$P" --name torch-live -R --json > "$OUT/torch-ckpt-live.json" || ok=0
  jkit torch_ckpt_live "$OUT/torch-ckpt-live.json" || true
  wait_gone "$P" 60 || ok=0
  got=$(field_of final_loss "$OUT/work/torch-live.log"); kit "torch_live_final_loss=$got torch_live_equal=$([[ $got == "$ref" ]] && echo 1 || echo 0)"
  [[ $got == "$ref" ]] || ok=0
  : > "$OUT/work/torch-live.log"  # the restored run appends its own steps
  "$GCR" restore torch-live --json > "$OUT/torch-restore-live.json" || ok=0
  jkit torch_restore_live "$OUT/torch-restore-live.json" || true
  wait_gone "$P" 60 || ok=0
  got=$(field_of final_loss "$OUT/work/torch-live.log"); kit "torch_live_restored_final_loss=$got torch_live_restored_equal=$([[ $got == "$ref" ]] && echo 1 || echo 0)"
  [[ $got == "$ref" ]] || ok=0
  # checkpoint without -R: the process is gone; restore it
  setsid "$GCR" run -- "${py[@]}" --step-delay-ms 20 >> "$OUT/work/torch-stop.log" 2>&1 < /dev/null & P=$!
  wait_step "$OUT/work/torch-stop.log" 100 60
  "$GCR" checkpoint "$P" --name torch-stop --json > "$OUT/torch-ckpt-stop.json" || ok=0
  jkit torch_ckpt_stop "$OUT/torch-ckpt-stop.json" || true
  wait_gone "$P" 10 || true
  "$GCR" restore torch-stop --json > "$OUT/torch-restore-stop.json" || ok=0
  jkit torch_restore_stop "$OUT/torch-restore-stop.json" || true
  wait_gone "$P" 60 || ok=0
  got=$(field_of final_loss "$OUT/work/torch-stop.log"); kit "torch_stop_final_loss=$got torch_stop_equal=$([[ $got == "$ref" ]] && echo 1 || echo 0)"
  [[ $got == "$ref" ]] || ok=0
  ((ok))
}
p5-driver() {
  compile_probe "$KIT/driver_ckpt_probe.cu" "$OUT/bin/driver_ckpt_probe"
  local ok=0
  "$OUT/bin/driver_ckpt_probe" --bytes "$FOOTPRINT" | prefix_kit resident_ || ok=1
  "$OUT/bin/driver_ckpt_probe" --bytes "$FOOTPRINT" --parked | prefix_kit parked_ || ok=1
  return $ok
}
p6-gloo() {
  local py=(python3 "$KIT/ddp_gloo.py" --steps 200) ok=1 P0 P1 ref got
  "${py[@]}" --rank 0 --port 29511 > "$OUT/work/gloo-ref0.log" 2>&1 & P0=$!
  "${py[@]}" --rank 1 --port 29511 > "$OUT/work/gloo-ref1.log" 2>&1
  wait "$P0"
  ref=$(grep '^step' "$OUT/work/gloo-ref0.log" | tail -n 1)
  "$GCR" run -- "${py[@]}" --rank 0 --port 29512 --step-delay-ms 20 > "$OUT/work/gloo0.log" 2>&1 & P0=$!
  "$GCR" run -- "${py[@]}" --rank 1 --port 29512 --step-delay-ms 20 > "$OUT/work/gloo1.log" 2>&1 & P1=$!
  wait_step "$OUT/work/gloo0.log" 60 60
  "$GCR" checkpoint --job "$P0" "$P1" --name gloo-live -R --json > "$OUT/gloo-ckpt.json" || ok=0
  jkit gloo_ckpt "$OUT/gloo-ckpt.json" || true
  wait_gone "$P0" 90 || ok=0
  wait_gone "$P1" 30 || ok=0
  got=$(grep '^step' "$OUT/work/gloo0.log" | tail -n 1)
  kit "gloo_live_equal=$([[ $got == "$ref" ]] && echo 1 || echo 0)"
  [[ $got == "$ref" ]] || ok=0
  : > "$OUT/work/gloo0.log"
  "$GCR" restore gloo-live --json > "$OUT/gloo-restore.json" || ok=0
  jkit gloo_restore "$OUT/gloo-restore.json" || true
  wait_step "$OUT/work/gloo0.log" 199 90 || ok=0
  got=$(grep '^step' "$OUT/work/gloo0.log" | tail -n 1)
  kit "gloo_restored_equal=$([[ $got == "$ref" ]] && echo 1 || echo 0)"
  [[ $got == "$ref" ]] || ok=0
  ((ok))
}
export -f p0-preflight p1-platform p2-workloads p3-mlp p4-torch p5-driver p6-gloo

declare -A LIMIT=([p0-preflight]=45 [p1-platform]=60 [p2-workloads]=60 [p3-mlp]=140 [p4-torch]=110 [p5-driver]=45 [p6-gloo]=80)
START=$SECONDS
for p in $PHASES; do
  [[ -n ${LIMIT[$p]:-} ]] || { echo "run_kit.sh: no phase $p" >&2; continue; }
  echo "== $p (limit ${LIMIT[$p]}s)"
  t0=$SECONDS
  set +e
  timeout -k 10 "${LIMIT[$p]}" bash -o pipefail -c "set -e; $p" > "$OUT/$p.log" 2>&1
  rc=$?
  set -e
  if ((rc == 0)); then st=ok; elif ((rc == 124 || rc == 137)); then st=timeout; else st="fail $rc"; fi
  echo "$st $((SECONDS - t0))" > "$OUT/$p.status"
  echo "   $st in $((SECONDS - t0))s; log $OUT/$p.log"
  stop_gcrd
done
echo "== total $((SECONDS - START))s"
python3 "$KIT/summarize.py" "$OUT" && echo "summary: $OUT/summary.md"
