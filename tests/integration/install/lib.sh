# Shared by the install tests: sourced after `set -euo pipefail` with the build dir as $1 and
# TEST_NAME set. Skips (77) without root; a private store, socket and work dir; the reference
# checksum of mlp_train; cleanup of what the test started (add pids to `pids`).
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
[[ $(id -u) == 0 ]] || { echo "SKIP: installing and CRIU need root"; exit 77; }
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"
close_inherited_fds
# Only what an installed gcr finds by itself: no build-tree CRIU, no pointers into the build.
unset GCR_CRIU GCR_CRIU_PLUGIN_DIR GCR_INTERPOSER GCR_REAL_LIBCUDA GCR_GCRD LD_LIBRARY_PATH LD_PRELOAD
harness_dir "$TEST_NAME"
export GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock GCR_WORK_DIR=$T/work GCR_QUIET=1
export SIMGPU_DEVICES=1 SIMGPU_MEMORY=1G
pids=()
extra_cleanup() { :; }
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
  extra_cleanup
  if [[ $rc != 0 ]]; then
    echo "--- logs (kept in $T) ---"
    tail -n 8 "$T"/*.log "$T"/gcrd.log 2>/dev/null || true
  else
    rm -rf "$T"
  fi
  exit $rc
}
trap cleanup EXIT
# The workload, copied out of the build tree (it is not part of an install).
cp "$BUILD/tests/workloads/mlp_train" "$T/mlp_train"
MLP=("$T/mlp_train" --steps 80 --step-delay-ms 12 --footprint 8M --streams 2)
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"

