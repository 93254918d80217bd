# Shared by the container scenarios (runc, and plain `criu` driven as runc drives it): skips, a
# gcrd with its own store, an OCI bundle whose root file system is the host's directories bound
# read-only (the build and the test's directory read-write), and cleanup.
#
# Sourced after `set -euo pipefail` with the build dir as $1 and TEST_NAME set.
# Helpers: ../harness.sh's (fail, step, json_field, checksum_of, wait_steps, wait_until...), and
# wait_checksum, make_bundle, start_gcrd.
source "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"
BUILD=$(cd "$1" && pwd)
ROOT=$(cd "$BUILD/.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root (CRIU and runc)"
CRIU=${GCR_TEST_CRIU:-${GCR_CRIU:-$ROOT/.deps/criu/criu}}
[[ -x $CRIU ]] || skip "no CRIU at $CRIU (scripts/setup.sh builds it)"
[[ -f $BUILD/criu-plugin/gcr_criu_plugin.so ]] || skip "the CRIU plugin is not built"
"$CRIU" check > /dev/null 2>&1 || skip "'$CRIU check' fails on this kernel"
GCR=$BUILD/bin/gcr

close_inherited_fds
harness_dir "$TEST_NAME"
chmod 755 "$T"
export GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock GCR_WORK_DIR=$T/work GCR_QUIET=1
export SIMGPU_DEVICES=${SIMGPU_DEVICES:-1} SIMGPU_MEMORY=${SIMGPU_MEMORY:-1G}
# What runc hands CRIU, and CRIU its plugins (runc passes its whole environment).
export CRIU_LIBS_DIR=$BUILD/criu-plugin GCR_REAL_LIBCUDA=$BUILD/simgpu/libcuda.so.1
containers=()
pids=()
cleanup() {
  local rc=$?
  if declare -F cleanup_extra > /dev/null; then cleanup_extra; fi  # a scenario's own
  for c in "${containers[@]}"; do runc delete -f "$c" > /dev/null 2>&1 || true; done
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  pkill -f "gcrd --socket $T/" 2> /dev/null || true
  if [[ $rc != 0 && $rc != 77 ]]; then
    echo "--- logs (kept in $T) ---"
    for f in "$T"/*.log "$T"/*/dump.log "$T"/*/restore.log "$T"/*/*/dump.log "$T"/*/*/restore.log; do
      [[ -f $f ]] || continue
      echo "--- $f"
      grep -E "Error|gcr_criu_plugin|gcrd" "$f" | tail -n 25
    done
  elif [[ -z ${GCR_TEST_KEEP:-} ]]; then
    rm -rf "$T"
  fi
  exit $rc
}
trap cleanup EXIT

has_checksum() { [[ -n $(checksum_of "$1") ]]; }
wait_checksum() {  # LOG: until it ends with a checksum
  wait_until 60 has_checksum "$1" || fail "$1 never showed a checksum"
}

# start_gcrd SOCKET: a gcrd of its own on SOCKET (a second "host" gets another).
start_gcrd() {
  LD_LIBRARY_PATH=$BUILD/simgpu "$BUILD/bin/gcrd" --socket "$1" --detach > /dev/null 2>&1 < /dev/null ||
    fail "gcrd did not start on $1"
}

# make_bundle DIR LOG ARGS...: an OCI bundle whose process runs ARGS with stdout and stderr
# appended to LOG (a file under $T, which the container sees at the same path). The container has
# its own pid, network, ipc, uts and mount namespaces (runc spec's defaults).
make_bundle() {
  python3 "$ROOT/tests/integration/containers/make_bundle.py" "$1" "$2" "$T" "$ROOT" "${@:3}"
}
