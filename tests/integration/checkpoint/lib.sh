# Shared by the end-to-end checkpoint tests: sourced after `set -euo pipefail` with the build dir
# as $1 and TEST_NAME set. Skips (exit 77) without root; gives each test its own store, gcrd and
# work dir under /var/tmp, kept on failure with the tails of its logs; kills what the test started
# (add pids to `pids`). The helpers (fail, wait_until, json_field, checksum_of, steps_in,
# wait_steps, wait_exit, wait_for, wait_gone...) are ../harness.sh's; here: checksum_after and
# stop_gcrd.
source "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"
BUILD=$(cd "$1" && pwd)
[[ $(id -u) == 0 ]] || { echo "SKIP: CRIU needs root"; exit 77; }
GCR=$BUILD/bin/gcr
[[ -x $GCR && -x $BUILD/bin/gcrd ]] || { echo "FAIL: gcr or gcrd not built in $BUILD"; exit 1; }

close_inherited_fds
harness_dir "$TEST_NAME"
export GCR_STORE=$T/store GCR_GCRD_SOCKET=$T/gcrd.sock GCR_WORK_DIR=$T/work GCR_QUIET=1
export SIMGPU_DEVICES=${SIMGPU_DEVICES:-1} SIMGPU_MEMORY=${SIMGPU_MEMORY:-1G}
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # Restores into PID namespaces leave criu running as the namespace's init.
  pkill -9 -f "unshare --pid --fork --kill-child --mount-proc .* -D $GCR_WORK_DIR" 2>/dev/null || true
  pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
  if [[ $rc != 0 ]]; then
    echo "--- logs (kept in $T) ---"
    tail -n 8 "$T"/*.log 2>/dev/null || true
    tail -n 20 "$(dirname "$GCR_GCRD_SOCKET")/gcrd.log" 2>/dev/null || true
  else
    rm -rf "$T"
  fi
  exit $rc
}
trap cleanup EXIT

gcrd_running() { pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" > /dev/null; }
stop_gcrd() {  # this test's gcrd, waited for: the next gcr command starts one with today's environment
  pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
  wait_until 10 eval '! gcrd_running' || fail "this test's gcrd did not exit"
}
# The checksum a restored run appended: the last one in LOG past its first BYTES bytes.
checksum_after() { tail -c +$(($2 + 1)) "$1" | awk '/^checksum/ {c=$2} END {print c}'; }
