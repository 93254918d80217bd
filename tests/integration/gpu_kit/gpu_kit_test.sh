#!/usr/bin/env bash
# gpu_kit_test.sh SOURCE_DIR BUILD_DIR: the real-GPU kit's CPU-side checks (see CMakeLists.txt).
set -euo pipefail
SRC=$1 BUILD=$2
KIT=$SRC/bench/gpu
T=$(mktemp -d /tmp/gcr-gpu-kit.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# 1. The scripts parse; the Python compiles (into $T, leaving the tree clean).
for s in make_bundle.sh run_kit.sh; do bash -n "$KIT/$s" || fail "bash -n $s"; done
for p in train_torch.py summarize.py ddp_gloo.py; do
  python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
    "$KIT/$p" "$T/$p.pyc" || fail "py_compile $p"
done
python3 "$KIT/train_torch.py" --help > /dev/null || fail "train_torch.py --help (needs no torch)"
python3 "$KIT/ddp_gloo.py" --help > /dev/null || fail "ddp_gloo.py --help (needs no torch)"
pass "syntax"

# 2. summarize.py on the fixtures: the rows and figures expected.
cp -r "$SRC/tests/integration/gpu_kit/fixtures" "$T/out"
python3 "$KIT/summarize.py" "$T/out" || fail "summarize.py"
S=$T/out/summary.md
for want in '| p0-preflight | ok | 3 |' '| p1-platform | ok | 12 | device=NVIDIA_H200' 'd2d_gbps=1900.00' \
            '| p2-workloads | fail 1 | 7 | checksums_equal=0' '| p3-mlp | timeout | 140 | footprint=4G' \
            'ckpt_live_stall_ms=812.4' '| p4-torch | not run |' \
            '| p5-driver | fail 1 | 2 | error=cuCheckpointProcessLock:CUDA_ERROR_NOT_SUPPORTED' '- h2d_pageable_gbps: 20.30'; do
  grep -qF -- "$want" "$S" || { cat "$S"; fail "summary.md lacks: $want"; }
done
python3 "$KIT/summarize.py" "$T/nonexistent" 2>/dev/null && fail "summarize.py on a missing folder succeeded"
pass "summarize.py"

# 3. The probes compile against the toolkit's cuda.h, and run on simgpu.
CUDA_INC=$(awk -F= '/^GCR_CUDA_ROOT:/ {print $2 "/include"}' "$BUILD/CMakeCache.txt" 2>/dev/null)
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
SIM=$BUILD/simgpu
for p in platform_probe driver_ckpt_probe; do
  g++ -O1 -std=c++17 -x c++ -I"$CUDA_INC" "$KIT/$p.cu" -L"$SIM" -l:libcuda.so.1 -pthread -o "$T/$p" \
    || fail "$p does not compile"
done
export SIMGPU_MEMORY=2G SIMGPU_DEVICES=1
LD_LIBRARY_PATH=$SIM timeout 60 "$T/platform_probe" --size 16M --reps 1 > "$T/pp.log" || fail "platform_probe on simgpu"
grep -q '^@kit .*d2d_gbps=' "$T/pp.log" || fail "platform_probe printed no d2d_gbps"
LD_LIBRARY_PATH=$SIM timeout 60 "$T/driver_ckpt_probe" --bytes 16M --parked > "$T/dcp.log" || { cat "$T/dcp.log"; fail "driver_ckpt_probe on simgpu"; }
grep -q '^@kit .*vmm_same_addr=1 data_ok=1' "$T/dcp.log" || { cat "$T/dcp.log"; fail "driver_ckpt_probe: VMM not intact on simgpu"; }
grep -q '^@kit .*lock_ms=.* unlock_ms=' "$T/dcp.log" || fail "driver_ckpt_probe printed no timings"
pass "probes"

# 4. make_bundle.sh: a dry run, then a real bundle of this build.
if [[ ! -x $SRC/.deps/criu/criu ]]; then
  echo "skip: no CRIU in $SRC/.deps/criu (scripts/setup.sh builds it); the bundle is not checked"
  exit 77
fi
bash "$KIT/make_bundle.sh" "$BUILD" --dry-run > "$T/dry.txt" || fail "make_bundle.sh --dry-run"
for want in bin/gcr bin/gcrd interpose/libcuda.so.1 criu-plugin/gcr_criu_plugin.so workloads/smoke \
            workloads/mlp_train libexec/criu lib/libzstd.so.1; do
  grep -q "^$want <- " "$T/dry.txt" || fail "dry run does not list $want"
done
grep -Eq '^lib/.*/?(libc|libm|libpthread|libdl|librt|libcuda)\.so' "$T/dry.txt" && fail "dry run copies a core library"
[[ ! -e $T/bundle ]] || fail "dry run wrote something"
bash "$KIT/make_bundle.sh" "$BUILD" --no-build --out "$T/bundle" || fail "make_bundle.sh"
B=$T/bundle
size=$(du -sm "$B" | cut -f1)
((size < 60)) || fail "bundle is $size MiB"
LD_LIBRARY_PATH=$B/lib "$B/bin/gcr" --version | grep '^gcr ' > /dev/null || fail "bundle's gcr does not start"
"$B/bin/criu" --version | grep Version > /dev/null || fail "bundle's criu does not start"
# gcr's path discovery inside the bundle: interposer and plugin found by layout, not by env.
[[ -f $B/interpose/libcuda.so.1 && -f $B/criu-plugin/gcr_criu_plugin.so && -x $B/bin/gcrd ]] || fail "bundle layout"
env -u GCR_INTERPOSER LD_LIBRARY_PATH=$B/lib:$SIM GCR_REAL_LIBCUDA=$SIM/libcuda.so.1 \
  "$B/bin/gcr" run -- "$B/workloads/smoke" | grep 'smoke: OK' > /dev/null || fail "bundle's gcr run smoke on simgpu"
pass "bundle ($size MiB)"
