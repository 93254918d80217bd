#!/usr/bin/env bash
# Description: a user who is not root checkpoints and restores their own process with their own
# gcrd (docs/security.md, "Who runs CRIU"). User nobody runs mlp_train under gcr and talks to a
# gcrd of its own, which runs CRIU with --unprivileged. Without the file capabilities CRIU needs,
# the checkpoint is refused with the setcap command to run, and the process runs on; with them
# (a copy of CRIU with cap_checkpoint_restore,cap_sys_ptrace+eip), a stopping checkpoint and a
# live one both restore to the reference checksum. Skipped where the kernel has no
# CAP_CHECKPOINT_RESTORE or setcap is missing.
#
#   unprivileged_test.sh BUILD_DIR CRIU   (needs root to set it up; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
(($(cat /proc/sys/kernel/cap_last_cap) >= 40)) || { echo "SKIP: no CAP_CHECKPOINT_RESTORE (Linux < 5.9)"; exit 77; }
command -v setcap >/dev/null || { echo "SKIP: no setcap (libcap2-bin)"; exit 77; }
MLP=("$MLP_BIN" --steps 120 --step-delay-ms 15 --footprint 8M --streams 2)
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" >"$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")

# CRIU as a user runs it: a copy with the capabilities (and one without), where nobody can run it.
mkdir -p "$T/criu-caps" "$T/criu-plain"
cp "$REAL_CRIU" "$T/criu-caps/criu"
cp "$REAL_CRIU" "$T/criu-plain/criu"
# With set-up's record of its patches, which a user who is not root cannot probe all of.
for rec in "$(dirname "$REAL_CRIU")/.gcr-criu-version" "$(dirname "$REAL_CRIU")/../.gcr-criu-version"; do
  [[ -f $rec ]] && cp "$rec" "$T/criu-caps/" && cp "$rec" "$T/criu-plain/" && break
done
setcap cap_checkpoint_restore,cap_sys_ptrace+eip "$T/criu-caps/criu" ||
  { echo "SKIP: setcap failed (no file capabilities on $T's file system)"; exit 77; }
chmod 755 "$T/criu-caps" "$T/criu-plain"
# nobody's own world: home, runtime directory (its gcrd's socket and work), store.
mkdir -p "$N/home" "$N/run"
chown nobody:nogroup "$N/home" "$N/run"
chmod 700 "$N/run"
user_env=(env -u GCR_GCRD_SOCKET -u GCR_WORK_DIR HOME="$N/home" XDG_RUNTIME_DIR="$N/run"
  GCR_STORE="$N/home/store" GCR_QUIET=1)
as_user() { "${AS_NOBODY[@]}" "${user_env[@]}" "$@"; }
start_user() { # LOG: mlp_train as nobody under gcr; sets P
  : >"$1"
  chown nobody:nogroup "$1"
  "${AS_NOBODY[@]}" "${user_env[@]}" "$GCR" run -- "${MLP[@]}" >>"$1" 2>&1 </dev/null &
  P=$!
  pids+=("$P")
}

step "without the capabilities: refused, saying what to do; the process runs on"
start_user "$T/a.log"
wait_steps "$T/a.log" 10
rc=0
as_user GCR_CRIU="$T/criu-plain/criu" "$GCR" checkpoint "$P" --name plain >"$T/plain.out" 2>&1 || rc=$?
[[ $rc != 0 ]] || fail "nobody's checkpoint succeeded with a CRIU that has no capabilities"
grep -q "setcap cap_checkpoint_restore,cap_sys_ptrace+eip" "$T/plain.out" ||
  fail "the refusal does not say what to do: $(cat "$T/plain.out")"
echo "refused (exit $rc): $(head -c 250 "$T/plain.out")"
pkill -9 -u nobody -f "gcrd --socket $T/" 2>/dev/null || true  # its next gcrd gets the other CRIU
check_run "the process whose checkpoint was refused" "$P" "$T/a.log" 0

step "a stopping checkpoint by nobody's own gcrd, restored"
start_user "$T/b.log"
wait_steps "$T/b.log" $((RANDOM % 40 + 10))
as_user GCR_CRIU="$T/criu-caps/criu" "$GCR" checkpoint "$P" --name stop ||
  fail "nobody's checkpoint with a capable CRIU"
wait_gone "$P" 10 || fail "the checkpointed process did not end"
as_user GCR_CRIU="$T/criu-caps/criu" "$GCR" restore stop || fail "nobody's restore"
check_run "the restored run" "$P" "$T/b.log" 0

step "a live checkpoint, restored after the run ended"
start_user "$T/c.log"
wait_steps "$T/c.log" $((RANDOM % 40 + 10))
as_user GCR_CRIU="$T/criu-caps/criu" "$GCR" checkpoint "$P" -R --name live ||
  fail "nobody's live checkpoint"
check_run "the run with a live checkpoint" "$P" "$T/c.log" 0
as_user GCR_CRIU="$T/criu-caps/criu" "$GCR" restore live || fail "nobody's restore of the live one"
check_run "the restored live checkpoint" "$P" "$T/c.log" 1
finish
