#!/usr/bin/env bash
# Description: gcrd's private state (docs/security.md, "Private state") attacked by user nobody.
#  1. nobody makes gcrd's work directory first (in a sticky, world-writable parent, as
#     /var/tmp/gcr-0 was) and races to swap what appears in it: root's checkpoint is refused
#     with a message naming the directory, nothing lands in it, and the process runs on;
#  2. in gcrd's own work directory the same renamer gets nowhere, and the checkpoint restores;
#  3. nobody makes the socket's directory first: gcr refuses to talk to (or start) a gcrd there;
#  4. gcrd.log is a symlink: gcrd starts but never writes through it.
#
#   private_state_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"

# nobody's renamer: whatever appears under DIR is moved away and replaced by a symlink to nobody's
# own directory (where a forged action script would wait). Runs until killed.
renamer() { # DIR
  "${AS_NOBODY[@]}" bash -c 'while :; do for d in "$1"/* "$1"/.*new; do
      [[ -e $d && ! -L $d ]] || continue
      mv "$d" "$d.taken" 2>/dev/null && ln -s "$2" "$d" 2>/dev/null && echo "swapped $d"
    done; done' renamer "$1" "$N" >>"$T/renamer.log" 2>&1 &
  pids+=("$!")
  RENAMER=$!
}

step "1. a work directory nobody made first"
as_nobody mkdir -m 0777 "$SHARED/work"
renamer "$SHARED/work"
start "$T/a.log"
wait_steps "$T/a.log" 20
stop_gcrd
if out=$(GCR_WORK_DIR=$SHARED/work "$GCR" checkpoint "$P" -R --name squatted 2>&1); then
  bad "root checkpointed with a work directory nobody made first: $out"
elif [[ $out != *"$SHARED/work"*"belongs to uid"* ]]; then
  bad "the refusal does not say whose directory it is: $out"
fi
kill "$RENAMER" 2>/dev/null || true
[[ -z $(ls -A "$SHARED/work") ]] || bad "gcrd put something in nobody's directory: $(ls -A "$SHARED/work")"
[[ ! -s $T/renamer.log ]] || bad "nobody swapped gcrd's files: $(head -3 "$T/renamer.log")"
stop_gcrd

step "2. gcrd's own work directory, the renamer at it"
: >"$T/renamer.log"
renamer "$T/work"
before=$(checksums_in "$T/a.log")
"$GCR" checkpoint "$P" -R --name private >/dev/null || bad "checkpoint with a private work directory failed"
kill "$RENAMER" 2>/dev/null || true
[[ ! -s $T/renamer.log ]] || bad "nobody swapped gcrd's files: $(head -3 "$T/renamer.log")"
[[ $(stat -c '%U %a' "$T/work") == "root 700" ]] || bad "work directory is $(stat -c '%U %a' "$T/work")"
check_run "the checkpointed process" "$P" "$T/a.log" "$before"
restore_check private "$T/a.log" "the private checkpoint"
stop_gcrd

step "3. a socket directory nobody made first"
as_nobody mkdir -m 0777 "$SHARED/gcrd"
start "$T/b.log"
wait_steps "$T/b.log" 5
if out=$(GCR_GCRD_SOCKET=$SHARED/gcrd/gcrd.sock "$GCR" checkpoint "$P" -R 2>&1); then
  bad "root used a gcrd socket in nobody's directory: $out"
elif [[ $out != *"$SHARED/gcrd"* ]]; then
  bad "the refusal does not name the directory: $out"
fi
[[ -z $(ls -A "$SHARED/gcrd") ]] || bad "something of root's appeared in nobody's directory: $(ls -lA "$SHARED/gcrd")"
pgrep -f "gcrd --socket $SHARED/gcrd/" >/dev/null && bad "a gcrd was started on nobody's directory"
# gcrd itself refuses it too, when started by hand.
if out=$(LD_LIBRARY_PATH=$BUILD/simgpu timeout 5 "$BUILD/bin/gcrd" --socket "$SHARED/gcrd/gcrd.sock" 2>&1); then
  bad "gcrd listened in nobody's directory"
elif [[ $out != *"belongs to uid"* ]]; then
  bad "gcrd's refusal does not say whose directory it is: $out"
fi

step "4. gcrd.log a symlink"
mkdir -m 0700 "$T/logdir"
ln -s "$T/victim" "$T/logdir/gcrd.log"
GCR_GCRD_SOCKET=$T/logdir/gcrd.sock "$GCR" checkpoint "$P" -R --name logged >/dev/null 2>"$T/log-case.err" ||
  bad "checkpoint with gcrd.log a symlink failed: $(cat "$T/log-case.err")"
[[ ! -e $T/victim ]] || bad "gcrd wrote through the gcrd.log symlink: $(head -2 "$T/victim")"
pkill -f "gcrd --socket $T/logdir/" 2>/dev/null || true
kill -9 "$P" 2>/dev/null || true
finish
