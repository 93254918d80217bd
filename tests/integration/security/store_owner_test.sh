#!/usr/bin/env bash
# Description: checkpoints and stores of other users (docs/security.md, "Store"). A checkpoint
# records its owner (META owner_uid). Root's gcrd refuses to restore from a store another user
# can write (it would run CRIU as root on that user's images), with a message that says so;
# nobody's own gcrd refuses to restore a checkpoint that is root's, before CRIU runs, and nobody's
# `gcr image ls` does not show it.
#
#   store_owner_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"

step "root's checkpoint records its owner"
start "$T/a.log"
wait_steps "$T/a.log" 20
"$GCR" checkpoint "$P" -R --name mine >/dev/null || fail "checkpoint"
owner=$("$GCR" image inspect mine --json | python3 -c "import json,sys; print(json.load(sys.stdin)['meta'].get('owner_uid',''))")
[[ $owner == 0 ]] || bad "META owner_uid is '$owner', not 0"
check_run "the checkpointed process" "$P" "$T/a.log" 0

step "root restores from a store nobody owns"
cp -a "$GCR_STORE" "$N/store"
chown -R nobody:nogroup "$N/store"
if out=$(GCR_STORE=$N/store "$GCR" restore mine 2>&1); then
  bad "root restored from nobody's store: $out"
elif [[ $out != *"only root can write"* ]]; then
  bad "the refusal does not say why: $out"
fi
before=$(checksums_in "$T/a.log")
restore_check mine "$T/a.log" "root's store is still restored"

step "nobody restores root's checkpoint with its own gcrd"
chmod 0666 "$T/a.log"  # the process's stdout: nobody may reopen it, so that only ownership refuses
if out=$(env HOME="$N" GCR_STORE="$N/store" GCR_GCRD_SOCKET="$N/gcrd/gcrd.sock" GCR_WORK_DIR="$N/work" \
  "${AS_NOBODY[@]}" "$GCR" restore mine 2>&1); then
  bad "nobody restored root's checkpoint: $out"
elif [[ $out != *"belongs to uid 0"* ]]; then
  bad "the refusal does not name the owner: $out"
fi
pkill -f "gcrd --socket $N/" 2>/dev/null || true

step "nobody lists that store: root's checkpoint is not shown"
listed=$(env HOME="$N" GCR_STORE="$N/store" "${AS_NOBODY[@]}" "$GCR" image ls --json 2>&1) || bad "nobody's image ls failed: $listed"
[[ $listed != *'"mine"'* ]] || bad "nobody sees root's checkpoint: $listed"
finish
