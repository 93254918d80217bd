# Shared by the CRIU plugin scenarios (one per file, each sourcing this): skips, a deterministic
# CUDA workload on simgpu, criu dump/restore through gcr's plugin, and cleanup of leftovers.
#
# usage: <scenario>.sh CRIU PLUGIN_DIR SIMGPU_DIR MLP_TRAIN [SECCOMP_EXEC]
# GCR_TEST_KEEP=1 keeps the work directory (images, CRIU logs, outputs).
# Exit: 0 pass, 1 fail, 77 skip (not root, no CRIU, `criu check` fails).
set -euo pipefail

CRIU=$1
PLUGIN_DIR=$2
SIMGPU_DIR=$3
MLP=$4

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root (CRIU dumps and restores processes with ptrace)"
[[ -x $CRIU ]] || skip "no CRIU at $CRIU (scripts/setup.sh builds it into .deps/criu)"
[[ -f $PLUGIN_DIR/gcr_criu_plugin.so ]] || skip "no plugin in $PLUGIN_DIR"
"$CRIU" check >/dev/null 2>&1 || skip "'$CRIU check' fails on this kernel: $("$CRIU" check 2>&1 | tail -1)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gcr-criu-test.XXXXXX")
PIDS=()  # every pid we started or restored: killed on the way out
T0=$(date +%s.%N)

cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [[ $rc != 0 && $rc != 77 ]]; then
    for f in "$WORK"/*.log "$WORK"/*.out "$WORK"/*.err; do
      [[ -f $f ]] || continue
      echo "--- $f (last 30 lines)"
      tail -30 "$f"
    done
  fi
  if [[ -n ${GCR_TEST_KEEP:-} ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf "== [%5.1fs] %s\n" "$(awk -v t0="$T0" -v t1="$(date +%s.%N)" "BEGIN{print t1 - t0}")" "$*"; }

# The workload: 120 steps of ~30 ms; its checksum depends on neither the delay nor timing.
MLP_ARGS=(--steps 120 --footprint 64M)
export SIMGPU_MEMORY=2G
export GCR_REAL_LIBCUDA=$SIMGPU_DIR/libcuda.so.1  # the plugin's driver, inside criu

# start_baseline: an uninterrupted run, in the background (no delay: about a second);
# baseline_wait: waits for it and sets WANT to its checksum.
start_baseline() {
  LD_LIBRARY_PATH=$SIMGPU_DIR "$MLP" "${MLP_ARGS[@]}" --quiet </dev/null >"$WORK/baseline.out" 2>&1 &
  BASELINE=$!
  PIDS+=("$BASELINE")
}
baseline_wait() {
  wait "$BASELINE" || fail "the uninterrupted run failed"
  WANT=$(awk '/^checksum /{print $2}' "$WORK/baseline.out")
  [[ -n $WANT ]] || fail "the uninterrupted run printed no checksum"
}

# start_mlp NAME: starts the workload in its own session (no terminal: no --shell-job needed),
# stdout appended to $WORK/NAME.out (O_APPEND: CRIU checks no size, so the file may be replaced
# before a restore); sets PID.
start_mlp() {
  local name=$1
  : >"$WORK/$name.out"
  LD_LIBRARY_PATH=$SIMGPU_DIR setsid "$MLP" "${MLP_ARGS[@]}" --step-delay-ms 20 \
    </dev/null >>"$WORK/$name.out" 2>>"$WORK/$name.err" &
  PID=$!
  PIDS+=("$PID")
}

# wait_steps FILE N: waits until FILE shows step N.
wait_steps() {
  local file=$1 n=$2 i
  for ((i = 0; i < 300; i++)); do
    grep -q "^step $n " "$file" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "$file never reached step $n"
}

# last_step FILE: the last step number FILE shows.
last_step() { awk '/^step /{n=$2} END{print n+0}' "$1"; }

# wait_checksum FILE: waits (up to 30 s) for the checksum line and prints the checksum.
wait_checksum() {
  local file=$1 i
  for ((i = 0; i < 600; i++)); do
    if grep -q '^checksum ' "$file" 2>/dev/null; then
      awk '/^checksum /{print $2}' "$file"
      return 0
    fi
    sleep 0.05
  done
  fail "$file has no checksum after 30 s"
}

# alive PID: true while PID runs (a zombie counts as gone).
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $state != Z ]]
}

# wait_gone PID: waits up to 10 s for PID to exit and be reaped (by us when it is our child, else
# by init: a restore needs the PID free, and a zombie holds it).
wait_gone() {
  local i
  for ((i = 0; i < 200; i++)); do
    if ! alive "$1"; then
      wait "$1" 2>/dev/null || true
      [[ -e /proc/$1 ]] || return 0
    fi
    sleep 0.05
  done
  alive "$1" && fail "pid $1 is still running"
  fail "pid $1 exited but nobody reaped it"
}

# dump IMG [criu options...]: criu dump of $PID through the plugin, log in IMG.dump.log.
dump() {
  local img=$1
  shift
  mkdir -p "$WORK/$img"
  "$CRIU" dump -t "$PID" -D "$WORK/$img" -L "$PLUGIN_DIR" -v4 -o "$WORK/$img.dump.log" "$@"
}

# restore IMG [criu options...]: criu restore -d through the plugin, log in IMG.restore.log.
restore() {
  local img=$1
  shift
  "$CRIU" restore -D "$WORK/$img" -L "$PLUGIN_DIR" -d -v4 -o "$WORK/$img.restore.log" "$@"
}

# log_has FILE TEXT: the CRIU log FILE contains TEXT.
log_has() { grep -qF -- "$2" "$1" || fail "$1 lacks '$2'"; }
