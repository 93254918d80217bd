#!/usr/bin/env bash
# Description: root runs no program a user named in the environment (docs/security.md, "The
# environment of root's gcr"; issue 34, finding 8), tested as the attack: under `sudo -E` root's
# gcr gets a user's GCR_CRIU and GCR_GCRD, naming programs of user nobody. Before, root ran them;
# now each is ignored, saying so, and gcr goes on with its own.
#
#   root_env_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"

for evil in criu gcrd; do
  cat >"$N/evil-$evil" <<EOF
#!/bin/sh
touch "$N/ran-$evil"
exec false
EOF
  chmod 0755 "$N/evil-$evil"
  chown nobody:nogroup "$N/evil-$evil"
done

start "$T/a.log"
wait_steps "$T/a.log" 20

step "a checkpoint with nobody's GCR_CRIU and GCR_GCRD in root's environment"
stop_gcrd  # so that gcr starts one, from GCR_GCRD if it took it
if ! GCR_CRIU=$N/evil-criu GCR_GCRD=$N/evil-gcrd "$GCR" checkpoint "$P" -R >"$T/ck.out" 2>&1; then
  bad "the checkpoint failed: $(cat "$T/ck.out")"
fi
for evil in criu gcrd; do
  [[ ! -e $N/ran-$evil ]] || bad "root ran nobody's $evil (GCR_${evil^^})"
done
grep -q "GCR_GCRD=$N/evil-gcrd ignored" "$T/ck.out" || bad "gcr did not say it ignored GCR_GCRD: $(cat "$T/ck.out")"
check_run "the checkpointed process" "$P" "$T/a.log" 0
finish
