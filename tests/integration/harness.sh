# shellcheck shell=bash
# The integration tests' harness, sourced by each suite's lib.sh after `set -euo pipefail`: one
# definition of what every end-to-end test needs. Tests wait for conditions, never for fixed
# times (a user's machine is busy too): every wait here polls, with a limit that only bounds a
# hang.
#
#   harness_dir NAME           a private directory for the test under /var/tmp: sets T
#   close_inherited_fds        closes what this shell inherited beyond stdio (ctest leaves its log
#                              file open in the tests it runs: a workload inheriting it would make
#                              CRIU's restore check that file's size)
#   pids+=(PID)                what the suite's cleanup kills on the way out
#   fail TEXT                  the test fails now; bad TEXT: a failed check, the test goes on and
#                              `finish` fails it at the end; step TEXT: a timestamped heading
#   wait_until SECONDS CMD...  polls CMD every 20 ms: 0 once it succeeds, 1 after SECONDS
#   alive PID                  PID runs (a zombie counts as gone)
#   wait_gone PID [SECONDS]    until PID is gone, and reaped when it is this shell's child (a
#                              restore needs the pid free); 1 after SECONDS (default 60), saying so
#   checksum_of LOG, checksums_in LOG, steps_in LOG     what a workload's log shows
#   wait_steps LOG N           until LOG shows N steps (fails after 60 s)
#   wait_exit PID LOG          until PID is gone and LOG has a checksum (fails after 60 s)
#   wait_for LOG PATTERN       until LOG has a line matching PATTERN (fails after 30 s)
#   grep_quiet ARGS...         grep -q that reads its input to the end: under pipefail a grep -q
#                              leaving at its first match can kill the writer with SIGPIPE, and
#                              `cmd | grep -q X` then fails on a match (or `&& fail` never runs)
#   json_field KEY             a field of the JSON object (or first object of the list) on stdin
#   free_port                  a TCP port below the kernel's ephemeral range (so no outgoing
#                              connection is given it) that no socket here uses now
#   criu_has NAME              the CRIU gcr runs here has capability NAME of gcr's patches (gcr
#                              doctor --capability; $GCR); needs_criu NAME: skips (77) saying why
#                              when it has not (docs/criu-patches.md: run against a stock CRIU)

T0=$(date +%s.%N)
grep_quiet() { grep "$@" > /dev/null; }
problems=()

harness_dir() {
  T=$(mktemp -d "/var/tmp/gcr-$1.XXXXXX")
}

close_inherited_fds() {
  local fd
  for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}

fail() {
  echo "FAIL: $*"
  exit 1
}
bad() {
  echo "FAIL: $*"
  problems+=("$*")
}
step() { printf "== [%5.1fs] %s\n" "$(awk -v t0="$T0" -v t1="$(date +%s.%N)" 'BEGIN{print t1 - t0}')" "$*"; }
finish() {
  if ((${#problems[@]})); then
    echo "${#problems[@]} check(s) failed:"
    printf '  - %s\n' "${problems[@]}"
    exit 1
  fi
  step "PASS"
}

wait_until() {
  local limit=$1 i
  shift
  for ((i = 0; i < limit * 50; i++)); do
    "$@" && return 0
    sleep 0.02
  done
  "$@"
}

alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $state != Z ]]
}

gone_and_reaped() {
  alive "$1" && return 1
  wait "$1" 2>/dev/null || true
  [[ ! -e /proc/$1 ]]
}
wait_gone() {
  wait_until "${2:-60}" gone_and_reaped "$1" && return 0
  echo "wait_gone: process $1 still $(alive "$1" && echo runs || echo "waits to be reaped") after ${2:-60} s" >&2
  return 1
}

checksum_of() { awk '/^checksum/ {c=$2} END {print c}' "$1"; }
checksums_in() { grep -c '^checksum' "$1" 2>/dev/null || true; }
steps_in() { grep -c '^step' "$1" 2>/dev/null || true; }

has_steps() { [[ $(steps_in "$1") -ge $2 ]]; }
wait_steps() {
  wait_until 60 has_steps "$1" "$2" || fail "$1 did not reach step $2 (at $(steps_in "$1"))"
}
exited_with_checksum() { ! kill -0 "$1" 2>/dev/null && [[ -n $(checksum_of "$2") ]]; }
wait_exit() {
  wait_until 60 exited_with_checksum "$1" "$2" || fail "process $1 did not finish (log $2)"
}
log_shows() { grep -q "$2" "$1" 2>/dev/null; }
wait_for() {
  wait_until 30 log_shows "$1" "$2" || fail "$1 never showed '$2'"
}

free_port() {
  local p _
  for _ in $(seq 1 500); do
    p=$((10000 + RANDOM % 22000))
    ss -tanH "( sport = :$p or dport = :$p )" 2> /dev/null | grep_quiet . || { echo "$p"; return 0; }
  done
  return 1
}
# json_field KEY < JSON: a top-level field of a JSON object (of a list's first), as Python prints
# it; nothing on stdin (a command that printed no JSON) gives an empty field. An integer or a plain
# string of gcr's own output (an object, or a list of them, a key a line) is read by bash itself: a
# test reads fields between checkpoints of a running workload, and on a busy machine a Python
# start there took seconds of its run.
json_field() {
  local text="" line v want="  \"$1\": "
  IFS= read -r -d '' text || true
  [[ $text == "["* ]] && want="  $want"  # a list's first object: two spaces further in
  if [[ $text == "{"* || $text == "["* ]]; then
    while IFS= read -r line; do
      [[ $text == "["* && $line == "  }"* ]] && break  # past the first object
      [[ $line == "$want"* ]] || continue
      v=${line#"$want"}
      v=${v%,}
      if [[ $v =~ ^-?[0-9]+$ ]]; then
        echo "$v"
        return
      fi
      if [[ $v =~ ^\"[^\"\\]*\"$ ]]; then
        v=${v#\"}
        echo "${v%\"}"
        return
      fi
      break
    done <<< "$text"
  fi
  python3 -c "import json,sys; t=sys.stdin.read().strip(); d=json.loads(t) if t else {}; d=(d[0] if d else {}) if isinstance(d,list) else d; print(d.get('$1',''))" <<< "$text"
}

criu_has() { "$GCR" doctor --capability "$1" > /dev/null 2>&1; }
# The test's own session has no leader in its pid namespace (NSsid's last is 0): a runner that
# makes no session (a CI job) started it. What it starts as a shell would are dumped as such.
session_outside_namespace() { [[ $(awk '/^NSsid:/ {print $NF}' /proc/self/status) == 0 ]]; }
# A test that checkpoints what it starts in its own session, on a CRIU that can dump that here.
needs_dumpable_session() {
  if session_outside_namespace && ! criu_has session-outside-pidns; then
    echo "SKIP: this test runs in a session whose leader is outside its pid namespace (a runner that makes no session), which this CRIU (${GCR_CRIU:-the default}) cannot dump: it lacks session-outside-pidns"
    exit 77
  fi
}
needs_criu() {
  local name
  for name in "$@"; do
    criu_has "$name" || { echo "SKIP: this CRIU (${GCR_CRIU:-the default}) lacks $name: $("$GCR" doctor --capability "$name" 2>&1 | head -1)"; exit 77; }
  done
}
