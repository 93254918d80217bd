# Shared by the end-to-end checkpoint tests: sourced after `set -euo pipefail` with the build dir
# as $1 and TEST_NAME set. Skips (exit 77) without root; gives each test its own store, gcrd and
# work dir under /var/tmp, kept on failure with the tails of its logs; kills what the test started
# (add pids to `pids`). Helpers: fail, json_field, checksum_of, checksum_after, steps_in,
# wait_steps, wait_exit, wait_for.
BUILD=$(cd "$1" && pwd)
[[ $(id -u) == 0 ]] || { echo "SKIP: CRIU needs root"; exit 77; }
GCR=$BUILD/bin/gcr
[[ -x $GCR && -x $BUILD/bin/gcrd ]] || { echo "FAIL: gcr or gcrd not built in $BUILD"; exit 1; }

# Close what this shell inherited beyond stdio (ctest leaves its log file open in the tests it
# runs): a workload inheriting such a file would make CRIU's restore check that file's size.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
done
T=$(mktemp -d "/var/tmp/gcr-$TEST_NAME.XXXXXX")
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

fail() { echo "FAIL: $*"; exit 1; }
stop_gcrd() {  # this test's gcrd, waited for: the next gcr command starts one with today's environment
  pkill -f "gcrd --socket $GCR_GCRD_SOCKET" 2>/dev/null || true
  for _ in $(seq 1 500); do pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" > /dev/null || return 0; sleep 0.02; done
  fail "this test's gcrd did not exit"
}
json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d.get('$1',''))"; }
checksum_of() { awk '/^checksum/ {c=$2} END {print c}' "$1"; }
# The checksum a restored run appended: the last one in LOG past its first BYTES bytes.
checksum_after() { tail -c +$(($2 + 1)) "$1" | awk '/^checksum/ {c=$2} END {print c}'; }
steps_in() { grep -c '^step' "$1" 2>/dev/null || true; }
wait_steps() {  # LOG N: wait until the log shows N steps
  for _ in $(seq 1 1000); do
    [[ $(steps_in "$1") -ge $2 ]] && return 0
    sleep 0.02
  done
  fail "$1 did not reach step $2"
}
wait_exit() {  # PID LOG: wait until the process is gone and the log has a checksum
  for _ in $(seq 1 3000); do
    if ! kill -0 "$1" 2>/dev/null && [[ -n $(checksum_of "$2") ]]; then return 0; fi
    sleep 0.02
  done
  fail "process $1 did not finish (log $2)"
}
wait_for() {  # LOG PATTERN
  for _ in $(seq 1 1500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.02; done
  fail "$1 never showed '$2'"
}
