#!/usr/bin/env bash
# A process with a network namespace of its own, started as a user would (`unshare --net` from a
# shell, its output appended to a log): gcrd reaches its agent thread inside that namespace
# (Note [Rendezvous in the process's network namespace]), checkpoints it with -R and then for good,
# and the restore (CRIU brings the namespace back) finishes with the checksum of an uninterrupted
# run, in a network namespace that is again not the host's.
#
#   netns_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=netns-test
source "$(dirname "$0")/lib.sh"
command -v unshare > /dev/null || { echo "SKIP: unshare(1) is missing"; exit 77; }
command -v iptables-restore > /dev/null || { echo "SKIP: CRIU locks a network namespace with iptables-restore, which is missing (scripts/setup.sh installs it)"; exit 77; }
# A run steps slowly and holds before its last step while $T/slow exists (made before it starts,
# removed once its checkpoints are over): none finds the run ended however slow the machine, and
# the rest, the restores and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps 150 --step-delay-ms 10 --footprint 48M
     --delay-while "$T/slow" --hold-while "$T/slow")

LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")

: > "$T/slow"
unshare --net -- "$GCR" run -- "${MLP[@]}" >> "$T/a.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
wait_steps "$T/a.log" 30
[[ $(readlink /proc/$P/ns/net) != $(readlink /proc/self/ns/net) ]] || fail "unshare --net did not give the workload a namespace"
"$GCR" checkpoint "$P" --name first -R > "$T/c1.log" || fail "checkpoint -R of a process in its own network namespace"
kill -0 "$P" || fail "the process is gone after a --leave-running checkpoint"
wait_steps "$T/a.log" 60
"$GCR" checkpoint "$P" --name second --json > "$T/c2.json" || fail "the second checkpoint"
rm -f "$T/slow"
[[ $(json_field kind < "$T/c2.json") == gcr ]] || fail "the second checkpoint was not gcr's own: $(cat "$T/c2.json")"
wait "$P" 2> /dev/null || true
steps=$(steps_in "$T/a.log")
"$GCR" restore second --json > "$T/r.json" || fail "restore"
R=$(json_field pid < "$T/r.json")
pids+=("$R")
if [[ -e /proc/$R ]]; then
  [[ $(readlink /proc/$R/ns/net) != $(readlink /proc/self/ns/net) ]] || fail "the restored process shares the host's network namespace"
fi
wait_exit "$R" "$T/a.log"
got=$(checksum_after "$T/a.log" 0)
[[ $got == "$REF" ]] || fail "restored run ended with $got, an uninterrupted one with $REF"
echo "ok: checkpointed at step $steps inside its own network namespace; the restore ends with $REF"
