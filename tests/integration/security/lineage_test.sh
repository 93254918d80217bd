#!/usr/bin/env bash
# Description: a forged lineage (docs/security.md, "Lineage"). A process under gcr names another
# process's checkpoint as its own last one (new_epoch over its control channel, as any program
# can), every region clean since: its next checkpoint must not take that checkpoint as parent
# (gcrd's own record decides: a full checkpoint), and lineage gcrd did record still works: the
# checkpoint after that is incremental on it, restores to the reference checksum, and the
# restored process's own next checkpoint builds on the one it came from.
#
#   lineage_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
long_reference
parent_of() { "$GCR" image inspect "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin).get('parent') or '')"; }
id_of() { "$GCR" image inspect "$1" --json | json_of id; }

step "the victim's checkpoint"
start "$T/victim.log"
wait_steps "$T/victim.log" 20
"$GCR" checkpoint "$P" -R --name victim >/dev/null || fail "checkpoint of the victim"
VICTIM_ID=$(id_of victim)
[[ -n $VICTIM_ID ]] || fail "no id for the victim's checkpoint"
owner=$("$GCR" image inspect victim --json | python3 -c "import json,sys; print(json.load(sys.stdin)['meta'].get('owner_uid',''))")
[[ $owner == 0 ]] || bad "the manifest records owner_uid '$owner', not 0"

step "the attacker's ($ATTACKER's) process, checkpointed once"
: >"$T/a.log"
"${AS_ATTACKER[@]}" setsid "$GCR" run -- "${MLP_LONG[@]}" >>"$T/a.log" 2>&1 </dev/null &
A=$!
pids+=("$A")
wait_steps "$T/a.log" 20
"$GCR" checkpoint "$A" -R --name a1 >/dev/null || fail "checkpoint a1"

step "it claims the victim's checkpoint as its last one"
"${AS_ATTACKER[@]}" "$FORGE" new-epoch "$A" "$VICTIM_ID" || fail "gcr_forge new-epoch"
"$GCR" checkpoint "$A" -R --name a2 >"$T/a2.out" 2>&1 || fail "checkpoint a2: $(cat "$T/a2.out")"
p=$(parent_of a2)
[[ $p != "$VICTIM_ID"* || -z $VICTIM_ID ]] || bad "a2's parent is the victim's checkpoint $VICTIM_ID"
[[ -z $p ]] || bad "a2 has parent '$p'; with the process's claim and gcrd's record apart it must be full"

step "the lineage gcrd recorded goes on"
"$GCR" checkpoint "$A" -R --name a3 >/dev/null || fail "checkpoint a3"
[[ $(parent_of a3) == "$(id_of a2)" ]] || bad "a3's parent is '$(parent_of a3)', not a2 ($(id_of a2))"
REF=$REF_LONG check_run "the attacker's process" "$A" "$T/a.log" 0
before=$(checksums_in "$T/a.log")
out=$("$GCR" restore a3 --json) || fail "restore of a3: $out"
R=$(json_of pid <<<"$out")
pids+=("$R")
"$GCR" checkpoint "$R" -R --name r1 >/dev/null || bad "checkpoint of the restored process"
[[ $(parent_of r1) == "$(id_of a3)" ]] || bad "the restored process's checkpoint has parent '$(parent_of r1)', not a3"
REF=$REF_LONG check_run "restored from a3" "$R" "$T/a.log" "$before"
finish
