#!/usr/bin/env bash
# Programs started the way users start them (issue 12): a background job of a script, a job of an
# interactive shell on a real terminal (script(1)), a pipeline member (| tee), a child of a shell
# script, nohup. Each is checkpointed at a random moment, runs on and writes more output, and is
# then restored from the earlier checkpoint: the restored run must end bit-identical to an
# uninterrupted one, with its output where `gcr restore --help` says it goes.
#
#   shell_jobs_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=shell-jobs
source "$(dirname "$0")/lib.sh"
STEPS=90
# A run steps slowly and holds before its last step while $T/slow exists (made before each start,
# removed once its checkpoint is taken): no checkpoint finds the run ended however slow the
# machine, and the rest, the restores and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps $STEPS --step-delay-ms 12 --footprint 8M --streams 2
     --delay-while "$T/slow" --hold-while "$T/slow")
command -v script > /dev/null || { echo "SKIP: script(1) (bsdutils) is not installed"; exit 77; }
# Started where the session leader is outside the pid namespace (the ctest entries that run this
# under unshare): what CRIU refuses without gcr's patches 0002 and 0004 (docs/criu-patches.md).
if session_outside_namespace; then
  needs_criu session-outside-pidns
  [[ $(awk '/^NSpgid/ {print $NF}' /proc/self/status) == 0 ]] || needs_criu shell-job-group
fi

echo "== reference: mlp_train without gcr"
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
[[ -n $REF ]] || fail "reference run printed no checksum"

restored_pid() { json_field pid < "$1"; }
expect_ref() {  # LOG WHAT [BYTES]: the last checksum in LOG (past its first BYTES) is the reference
  local got
  got=$(checksum_after "$1" "${3:-0}")
  [[ $got == "$REF" ]] || fail "$2 ended with '$got', expected $REF ($1)"
  echo "ok: $2"
}

echo "== a background job of a script, output to a log (> log 2>&1 &): not a session leader"
: > "$T/slow"
"$GCR" run -- "${MLP[@]}" > "$T/bg.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/bg.log" $((RANDOM % 30 + 5))
"$GCR" checkpoint "$P" -R --name bg --json > "$T/bg.json" || fail "checkpoint of a background job"
rm -f "$T/slow"
wait_exit "$P" "$T/bg.log"
expect_ref "$T/bg.log" "the original run after a live checkpoint"
LEN=$(stat -c %s "$T/bg.log")
"$GCR" restore bg --json > "$T/bg-r.json" || fail "restore bg"
R=$(restored_pid "$T/bg-r.json")
pids+=("$R")
wait_gone "$R"
(( $(stat -c %s "$T/bg.log") > LEN )) || fail "the restored run did not append to bg.log"
expect_ref "$T/bg.log" "restored background job (appended to its grown log)" "$LEN"

echo "== a job of an interactive shell on a terminal"
: > "$T/slow"
# The job writes to the terminal script(1) gives the shell; the typescript records it.
script -qfec "bash --norc -i -c '\"$GCR\" run -- ${MLP[*]} & echo \$! > $T/tty.pid; wait'" \
  "$T/tty.typescript" > /dev/null 2>&1 < /dev/null &
pids+=("$!")
for _ in $(seq 1 500); do [[ -s $T/tty.pid ]] && break; sleep 0.02; done
P=$(cat "$T/tty.pid")
pids+=("$P")
wait_steps "$T/tty.typescript" $((RANDOM % 30 + 5))
[[ $(readlink /proc/$P/fd/1) == /dev/pts/* ]] || fail "the job's stdout is not a terminal: $(readlink /proc/$P/fd/1)"
if ! criu_has terminal-onto-any-file; then
  # A CRIU without 0001 could not restore it: refused before anything stops, the job runs on.
  rc=0
  "$GCR" checkpoint "$P" -R --name tty > "$T/tty.out" 2>&1 || rc=$?
  rm -f "$T/slow"
  [[ $rc == 8 ]] && grep -q "lacks terminal-onto-any-file" "$T/tty.out" ||
    fail "a checkpoint of a job on a terminal with this CRIU: exit $rc: $(cat "$T/tty.out")"
  wait_exit "$P" "$T/tty.typescript"
  tr -d '\r' < "$T/tty.typescript" > "$T/tty.log"
  expect_ref "$T/tty.log" "the job on the terminal, its checkpoint refused (this CRIU lacks terminal-onto-any-file)"
else
  "$GCR" checkpoint "$P" -R --name tty || fail "checkpoint of a job on a terminal"
  rm -f "$T/slow"
  wait_exit "$P" "$T/tty.typescript"
  tr -d '\r' < "$T/tty.typescript" > "$T/tty.log"
  expect_ref "$T/tty.log" "the original job on the terminal"
  echo "-- restored with its terminal output into a file (gcr restore NAME > FILE)"
  # The summary goes to stderr: stdout is the process's now.
  "$GCR" restore tty > "$T/tty-file.out" 2> "$T/tty-restore.err" || fail "restore tty > file: $(cat "$T/tty-restore.err")"
  grep -q '^restored checkpoint' "$T/tty-restore.err" || fail "no summary on stderr: $(cat "$T/tty-restore.err")"
  wait_for "$T/tty-file.out" '^checksum'
  expect_ref "$T/tty-file.out" "terminal job restored into a file"
  echo "-- restored on another terminal"
  script -qfec "\"$GCR\" restore tty; for i in \$(seq 600); do grep -q ^checksum $T/tty2.typescript && break; sleep 0.05; done" \
    "$T/tty2.typescript" > /dev/null 2>&1 < /dev/null || fail "restore on a terminal"
  tr -d '\r' < "$T/tty2.typescript" > "$T/tty2.log"
  expect_ref "$T/tty2.log" "terminal job restored on another terminal"
fi

echo "== a pipeline member (gcr run ... | tee LOG)"
: > "$T/slow"
bash -c 'echo $$ > "$1"; shift; exec "$@" 2>&1' _ "$T/pipe.pid" "$GCR" run -- "${MLP[@]}" | tee "$T/pipe.log" > /dev/null &
pids+=("$!")
for _ in $(seq 1 500); do [[ -s $T/pipe.pid ]] && break; sleep 0.02; done
P=$(cat "$T/pipe.pid")
pids+=("$P")
wait_steps "$T/pipe.log" $((RANDOM % 30 + 5))
"$GCR" checkpoint "$P" -R --name pipe || fail "checkpoint of a pipeline member"
rm -f "$T/slow"
wait_exit "$P" "$T/pipe.log"
expect_ref "$T/pipe.log" "the original pipeline"
"$GCR" restore pipe | tee "$T/pipe2.log" > /dev/null || fail "gcr restore pipe | tee"
# tee ends when the restored process closes the pipe, that is when it has finished.
expect_ref "$T/pipe2.log" "pipeline member restored into a new pipeline"
"$GCR" restore pipe --stdout "$T/pipe3.log" --json > "$T/pipe3.json" || fail "restore --stdout"
wait_gone "$(restored_pid "$T/pipe3.json")"
expect_ref "$T/pipe3.log" "pipeline member restored with --stdout FILE"
"$GCR" restore pipe --detach --log "$T/pipe4.log" --json > "$T/pipe4.json" || fail "restore --detach"
wait_gone "$(restored_pid "$T/pipe4.json")"
expect_ref "$T/pipe4.log" "pipeline member restored with --detach"

echo "== the child of a shell script; checkpoint without -R ends it, the script goes on"
: > "$T/slow"
cat > "$T/job.sh" <<EOF
#!/bin/bash
"$GCR" run -- ${MLP[*]} > "$T/script.log" 2>&1 &
echo \$! > "$T/script.pid"
wait
echo "job.sh: the job ended with \$?" > "$T/script.status"
EOF
bash "$T/job.sh" &
pids+=("$!")
for _ in $(seq 1 500); do [[ -s $T/script.pid ]] && break; sleep 0.02; done
P=$(cat "$T/script.pid")
pids+=("$P")
wait_steps "$T/script.log" $((RANDOM % 30 + 5))
"$GCR" checkpoint "$P" --name script || fail "checkpoint of a script's child"
rm -f "$T/slow"
wait_for "$T/script.status" "ended"
"$GCR" restore script --json > "$T/script-r.json" || fail "restore script"
wait_gone "$(restored_pid "$T/script-r.json")"
expect_ref "$T/script.log" "script's child restored after a checkpoint that ended it"

echo "== nohup"
: > "$T/slow"
nohup "$GCR" run -- "${MLP[@]}" > "$T/nohup.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/nohup.log" $((RANDOM % 30 + 5))
"$GCR" checkpoint "$P" -R --name nohup || fail "checkpoint under nohup"
rm -f "$T/slow"
wait_exit "$P" "$T/nohup.log"
LEN=$(stat -c %s "$T/nohup.log")
"$GCR" restore nohup --json > "$T/nohup-r.json" || fail "restore nohup"
wait_gone "$(restored_pid "$T/nohup-r.json")"
expect_ref "$T/nohup.log" "nohup job restored" "$LEN"

echo "== gcr run --detach"
: > "$T/slow"
P=$("$GCR" run --detach --log "$T/detach.log" -- "${MLP[@]}")
pids+=("$P")
[[ $(ps -o sid= -p "$P" | tr -d ' ') == "$P" ]] || fail "gcr run --detach did not make $P a session leader"
wait_steps "$T/detach.log" $((RANDOM % 30 + 5))
"$GCR" checkpoint "$P" --name detach || fail "checkpoint of a detached run"
rm -f "$T/slow"
wait_gone "$P"
"$GCR" restore detach --json > "$T/detach-r.json" || fail "restore detach"
wait_gone "$(restored_pid "$T/detach-r.json")"
expect_ref "$T/detach.log" "detached run restored"

echo "== a pid still held by a zombie (a parent that does not reap, as some container inits)"
: > "$T/slow"
python3 - "$T/zombie.pid" "$T/zombie.log" "$GCR" "${MLP[@]}" <<'EOF' &
import subprocess, sys, time
pidfile, log, gcr, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
p = subprocess.Popen([gcr, "run", "--"] + cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
open(pidfile, "w").write(str(p.pid))
time.sleep(300)  # never waits for p: once it ends, it stays a zombie
EOF
pids+=("$!")
for _ in $(seq 1 500); do [[ -s $T/zombie.pid ]] && break; sleep 0.02; done
P=$(cat "$T/zombie.pid")
wait_steps "$T/zombie.log" $((RANDOM % 30 + 5))
"$GCR" checkpoint "$P" --name zombie || fail "checkpoint of a non-reaped child"
rm -f "$T/slow"
for _ in $(seq 1 250); do [[ $(awk '{print $3}' /proc/$P/stat 2>/dev/null) == Z ]] && break; sleep 0.02; done
[[ $(awk '{print $3}' /proc/$P/stat) == Z ]] || fail "pid $P is not a zombie after the checkpoint"
"$GCR" restore zombie --json > "$T/zombie-r.json" || fail "restore while a zombie holds the pid"
[[ $(json_field new_pid_namespace < "$T/zombie-r.json") == 1 ]] || fail "the zombie's pid was not counted as taken"
wait_gone "$(restored_pid "$T/zombie-r.json")"
expect_ref "$T/zombie.log" "restored beside the zombie holding its pid, in a PID namespace"

echo "PASS"
