# Shared by the container scenarios (runc, and plain `criu` driven as runc drives it): skips, a
# gcrd with its own store, an OCI bundle whose root file system is the host's directories bound
# read-only (the build and the test's directory read-write), and cleanup.
#
# Sourced after `set -euo pipefail` with the build dir as $1 and TEST_NAME set.
# Helpers: fail, step, json_field, checksum_of, steps_in, wait_steps, make_bundle, start_gcrd.
BUILD=$(cd "$1" && pwd)
ROOT=$(cd "$BUILD/.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root (CRIU and runc)"
CRIU=${GCR_TEST_CRIU:-${GCR_CRIU:-$ROOT/.deps/criu/criu}}
[[ -x $CRIU ]] || skip "no CRIU at $CRIU (scripts/setup.sh builds it)"
[[ -f $BUILD/criu-plugin/gcr_criu_plugin.so ]] || skip "the CRIU plugin is not built"
"$CRIU" check > /dev/null 2>&1 || skip "'$CRIU check' fails on this kernel"
GCR=$BUILD/bin/gcr

for fd in /proc/$$/fd/*; do  # ctest's log file must not reach the workload (see checkpoint/lib.sh)
  fd=${fd##*/}
  if (( fd > 2 )); then eval "exec $fd>&-" 2> /dev/null || true; fi
done
T=$(mktemp -d "/var/tmp/gcr-$TEST_NAME.XXXXXX")
chmod 755 "$T"
export GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock GCR_WORK_DIR=$T/work GCR_QUIET=1
export SIMGPU_DEVICES=${SIMGPU_DEVICES:-1} SIMGPU_MEMORY=${SIMGPU_MEMORY:-1G}
# What runc hands CRIU, and CRIU its plugins (runc passes its whole environment).
export CRIU_LIBS_DIR=$BUILD/criu-plugin GCR_REAL_LIBCUDA=$BUILD/simgpu/libcuda.so.1
containers=()
pids=()
T0=$(date +%s.%N)
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

fail() { echo "FAIL: $*"; exit 1; }
step() { printf "== [%5.1fs] %s\n" "$(awk -v t0="$T0" -v t1="$(date +%s.%N)" 'BEGIN{print t1 - t0}')" "$*"; }
json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d.get('$1',''))"; }
checksum_of() { awk '/^checksum/ {c=$2} END {print c}' "$1"; }
steps_in() { grep -c '^step' "$1" 2> /dev/null || true; }
wait_steps() {  # LOG N
  for _ in $(seq 1 1500); do
    [[ $(steps_in "$1") -ge $2 ]] && return 0
    sleep 0.02
  done
  fail "$1 did not reach step $2"
}
wait_checksum() {  # LOG: until it ends with a checksum
  for _ in $(seq 1 3000); do
    [[ -n $(checksum_of "$1") ]] && return 0
    sleep 0.02
  done
  fail "$1 never showed a checksum"
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
