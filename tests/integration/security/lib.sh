# shellcheck shell=bash
# Shared by the security tests (one attack per file, each sourcing this): the failure tests'
# environment and helpers (../failure/lib.sh: a private $T under /var/tmp, root's gcrd, store and
# work directory in it, mlp_train's reference checksum $REF, start, check_run, restore_check,
# gcrd_pid, stop_gcrd, bad, step, finish), plus the attacker: user nobody.
#
#   as_nobody CMD...   runs CMD as nobody:nogroup, no supplementary groups; in the background,
#                      "${AS_NOBODY[@]}" CMD & (so that $! is CMD's pid)
#   $N                 a directory of nobody's own inside $T (mode 0755)
#   $SHARED            a world-writable sticky directory inside $T, as /var/tmp and /tmp are
#   $FORGE             tests/integration/security/gcr_forge (what a hostile process can say)
source "$(dirname "${BASH_SOURCE[0]}")/../failure/lib.sh"
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: no setpriv (util-linux)"; exit 77; }
AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
as_nobody() { "${AS_NOBODY[@]}" "$@"; }
as_nobody test -x "$GCR" || { echo "SKIP: user nobody cannot run $GCR (make the build tree world-readable)"; exit 77; }
N=$T/nobody
mkdir -p "$N" && chown nobody:nogroup "$N"
SHARED=$T/shared
mkdir -m 1777 "$SHARED"
FORGE=${GCR_FORGE:-$BUILD/tests/integration/security/gcr_forge}
[[ -x $FORGE ]] || fail "gcr_forge not built in $BUILD"
# CRIU dumps another user's process only with CAP_SYS_RESOURCE (prlimit on it): where root lacks
# it (some containers), the attacks that need nobody's process dumped run it as root instead.
# gcrd treats a process's claims and shared memory the same whoever owns it.
if (( (0x$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24) & 1 )); then
  AS_ATTACKER=("${AS_NOBODY[@]}")
  ATTACKER=nobody
else
  AS_ATTACKER=(env)
  ATTACKER=root
  echo "note: root lacks CAP_SYS_RESOURCE here (CRIU cannot dump nobody's processes): the hostile processes CRIU must dump run as root"
fi
# A longer mlp_train (STEPS_LONG steps), for attacks that need it running through a slow drain;
# its reference checksum is REF_LONG.
STEPS_LONG=600
MLP_LONG=("$MLP_BIN" --steps "$STEPS_LONG" --step-delay-ms 15 --footprint 32M --streams 2)
long_reference() {
  LD_LIBRARY_PATH=$BUILD/simgpu "$MLP_BIN" --steps "$STEPS_LONG" --footprint 32M --quiet >"$T/ref-long.log" 2>&1
  REF_LONG=$(checksum_of "$T/ref-long.log")
  [[ -n $REF_LONG ]] || fail "the long reference run printed no checksum"
}
# It steps slowly and holds before its last step while $LONG_SLOW exists: a test removes it
# (go_on_long) once its checkpoints are over, however long they took on a busy machine.
LONG_SLOW=$T/long-slow
start_long() { # LOG: the long mlp_train under `gcr run` as root; sets P
  : >"$1"
  : >"$LONG_SLOW"
  setsid "$GCR" run -- "${MLP_LONG[@]}" --delay-while "$LONG_SLOW" --hold-while "$LONG_SLOW" >>"$1" 2>&1 </dev/null &
  P=$!
  pids+=("$P")
}
go_on_long() { rm -f "$LONG_SLOW"; }
# nobody's process under gcr: a program of nobody's own, which root's gcrd checkpoints.
start_nobody() { # LOG: mlp_train as nobody under `gcr run`; sets P
  : >"$1"
  chown nobody:nogroup "$1"
  "${AS_NOBODY[@]}" setsid "$GCR" run -- "${MLP[@]}" >>"$1" 2>&1 </dev/null &
  P=$!
  pids+=("$P")
}
# json_of KEY: a field of the JSON object on stdin.
json_of() { python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d.get('$1',''))"; }
