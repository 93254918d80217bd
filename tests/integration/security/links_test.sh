#!/usr/bin/env bash
# Description: root never follows a user's link (docs/security.md, "Links"; issue 34, findings 2
# and 3), tested as the attack by user nobody:
#  - a trace root writes where it is asked (`gcr checkpoint --trace FILE` in a directory nobody
#    can write): nobody plants links at FILE and at every name the trace's temporary file could
#    have (FILE.tmp.PID for the next pids), each to a file of root's; root's files must be
#    untouched, and FILE a plain file of root's, mode 0600;
#  - root's `gcr image gc` on a store nobody can write: nobody makes the store's tmp/ a link to a
#    directory of root's, then its gc.lock a link to a path in a directory of root's; gc must
#    refuse each (saying which link), delete nothing of root's and create nothing there.
#
#   links_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"

VICTIM=$T/victim  # root's: nobody can neither read nor write in it
mkdir -m 0700 "$VICTIM"
for f in precious trace-target; do echo "root's $f" >"$VICTIM/$f"; done
victim_intact() {
  [[ $(cat "$VICTIM/precious") == "root's precious" && $(cat "$VICTIM/trace-target") == "root's trace-target" ]]
}

step "a trace written into a directory nobody can write"
start "$T/a.log"
wait_steps "$T/a.log" 20
out=$N/trace.json
as_nobody ln -s "$VICTIM/trace-target" "$out"
# One process plants them all (each `ln` would take a pid of the range itself).
next=$(cat /proc/sys/kernel/ns_last_pid)
as_nobody /usr/bin/python3 -c "
import os, sys
for pid in range($next, $next + 400):
    os.symlink('$VICTIM/precious', '$out.tmp.%d' % pid)"
if "$GCR" checkpoint "$P" -R --trace "$out" >"$T/trace.out" 2>&1; then
  victim_intact || bad "root's files were written through nobody's links: $(head -c 200 "$VICTIM/precious"; head -c 200 "$VICTIM/trace-target")"
  [[ -f $out && ! -L $out ]] || bad "$out is not a plain file after the trace: $(ls -l "$out")"
  [[ $(stat -c '%u %a' "$out") == "0 600" ]] || bad "the trace is $(stat -c '%U %a' "$out"), not root's 0600"
  grep -q traceEvents "$out" || bad "the trace holds no events: $(head -c 200 "$out")"
elif grep -q "eBPF\|bpf" "$T/trace.out"; then
  echo "SKIP the trace attack: no eBPF here ($(tail -n 1 "$T/trace.out"))"
else
  bad "gcr checkpoint --trace failed: $(cat "$T/trace.out")"
fi
check_run "the traced process" "$P" "$T/a.log" 0

step "root's gc on a store nobody can write, its tmp/ made a link"
cp -a "$GCR_STORE" "$N/store"  # a store nobody can write: root's copied, made nobody's
chown -R nobody:nogroup "$N/store"
[[ -d $N/store/tmp ]] || fail "the store has no tmp/ ($(ls -la "$N/store" 2>&1))"
as_nobody rmdir "$N/store/tmp"
as_nobody ln -s "$VICTIM" "$N/store/tmp"
if gc=$(GCR_STORE=$N/store "$GCR" image gc 2>&1); then
  bad "gc went through a tmp/ that is a link: $gc"
elif [[ $gc != *"tmp is not a directory of the store"* ]]; then
  bad "gc's refusal does not name the link: $gc"
fi
victim_intact || bad "gc deleted or changed root's files through nobody's tmp/ link: $(ls -la "$VICTIM")"

step "root's gc on a store nobody can write, its gc.lock made a link"
as_nobody rm "$N/store/tmp"
as_nobody mkdir "$N/store/tmp"
as_nobody rm -f "$N/store/gc.lock"
as_nobody ln -s "$VICTIM/created-by-gc" "$N/store/gc.lock"
if gc=$(GCR_STORE=$N/store "$GCR" image gc 2>&1); then
  bad "gc took a gc.lock that is a link: $gc"
elif [[ $gc != *"gc.lock is a symbolic link"* ]]; then
  bad "gc's refusal does not name the link: $gc"
fi
[[ ! -e $VICTIM/created-by-gc ]] || bad "gc created $VICTIM/created-by-gc through nobody's gc.lock link"
victim_intact || bad "root's files changed"
finish
