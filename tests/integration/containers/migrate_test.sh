#!/usr/bin/env bash
# gcr migrate between two "hosts" on one machine: the destination gcrd runs in a network namespace
# of its own, reached over a veth pair (10.77.0.1 <-> 10.77.0.2), with its own store and socket.
# Steps a-g use the bare link (so that a destination gcrd killed is seen at once, connections
# refused); h goes over a shaped one: tc tbf at 10 Gbit/s on both ends and tests/link/delay_relay
# holding each byte 0.5 ms each way (these kernels have no sch_netem).
#   a. at a random moment: the run ends on the destination with the checksum of an uninterrupted
#      one, from memory mostly staged on its GPU during pre-copy; the source is gone
#   b. a wrong token: refused before the process is touched; it runs on here
#   c. the destination cannot restore (too little GPU memory there): the source runs on
#   c2. a destination started without --allow-uids refuses a process of root's (its images say
#      who it would run as); the source runs on
#   d. the destination gcrd killed after the commit, before it restores: the source runs on
#   e. the migrate command killed after the commit: the destination runs it, the source is gone
#   f. a process not under gcr: refused, it runs on
#   g. the source gcrd killed after the commit: its keeper ends the source (handed over), the
#      destination runs it
#   h. over the shaped link at a random moment: as a.
#   i. the link cut without a word (iptables DROP both ways) at a random moment of the pre-copy:
#      gcr migrate fails within its network timeout, the source runs on
#   j. the link cut after the destination got the restore request: the source, unable to learn
#      whether it restored, ends; the destination runs it
#   k. gcr image push/pull to and from the destination's store (gcr://HOST:PORT): a checkpoint
#      pushed and staged on the destination's GPU (again: nothing moves; a wrong token: refused;
#      --stage to a directory: refused; what was staged freed after GCR_STAGE_HOLD_S), pulled back
#      into an empty store, and restored from there
#      to the checksum of an uninterrupted run
#   l. (before k) while the destination holds the restore, nobody turns the process's log into a
#      link to a file of root's: the destination opens no file through it and refuses; the source
#      runs on
# In each case exactly one copy ends the run.
#
#   migrate_test.sh BUILD_DIR      (needs root and CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=migrate-test
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/two_hosts.sh"

# Each run steps slowly and holds before its last step while $T/slow exists (start_job makes it,
# ends_once removes it): no migration finds the run ended however slow the machine, and the rest
# goes at full speed (the reference, with no $T/slow, too).
MLP=("$BUILD/tests/workloads/mlp_train" --steps 300 --step-delay-ms 10 --footprint 64M
     --delay-while "$T/slow" --hold-while "$T/slow")
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
start_gcrd "$GCR_GCRD_SOCKET"

# start_job LOG: the workload under gcr as a user starts a background job; sets P.
start_job() {
  : > "$T/slow"
  "$GCR" run -- "${MLP[@]}" < /dev/null >> "$1" 2>&1 &
  P=$!
  pids+=("$P")
  wait_steps "$1" $((RANDOM % 40 + 20))
}
migrate() { "$GCR" migrate "$P" --to "$DEST" --token-file "$T/token" "$@"; }
# migrate_to_commit NAME SECONDS: a destination that pauses SECONDS at the restore, a job, and a
# migration run in the background (M) until the destination holds the restore request: the
# source is committed.
migrate_to_commit() {
  dest_gcrd "$1" GCR_GCRD_PAUSE_AT=request:$2
  start_job "$T/$1.log"
  migrate > /dev/null 2> "$T/$1.err" &
  M=$!
  for _ in $(seq 1 1000); do grep -q "paused at request" "$DEST_LOG" 2> /dev/null && break; sleep 0.02; done
  grep -q "paused at request" "$DEST_LOG" || fail "the destination never got the restore"
}

step "a. migrate at a random moment"
dest_gcrd a
start_job "$T/a.log"
migrate --json --trace "$T/a.trace.json" > "$T/a.json" 2> "$T/a.err" || fail "gcr migrate: $(cat "$T/a.err")"
wait_until 5 source_gone "$P" || fail "the source still runs after the migration"
ends_once "$T/a.log"
(( $(json_field staged_bytes < "$T/a.json") > 0 )) || fail "the destination restored nothing it had staged: $(cat "$T/a.json")"
# --trace: gcrd's phases of each round and of the stop, and (with eBPF) the source's threads held
# by the stop until they ended, for at least the stop's own stall.
python3 - "$T/a.trace.json" "$T/a.json" "$P" <<'PY' || fail "the migration's trace: see above"
import json, sys
trace, report, pid = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "gcrd"}
for want in ("round 1 stall", "round 1 dump", "stop stall", "stop dump"):
    if want not in names:
        sys.exit(f"FAIL: gcrd phase '{want}' missing from the trace: {sorted(names)}")
if report.get("trace.kernel") == 1:
    held = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid") == pid
            and e["name"] in ("traced (CRIU)", "waiting at gcr's gate")]
    if not held:
        sys.exit("FAIL: the source's threads were never seen held")
    if report["trace.stall_ns"] < report["stop_stall_ns"] * 0.5:
        sys.exit(f"FAIL: kernel-measured stall {report['trace.stall_ns']} ns, gcrd's stop alone {report['stop_stall_ns']} ns")
    print(f"trace: kernel-measured stall of the source {report['trace.stall_ns'] // 1000000} ms")
else:
    print("trace: gcrd's phases only (" + str(report.get("trace.note.0")) + ")")
PY
echo "ok: $(json_field rounds < "$T/a.json") pre-copy round(s), $(( $(json_field staged_bytes < "$T/a.json") >> 20 )) MiB staged on the destination's GPU, $(json_field last_sent_bytes < "$T/a.json") bytes sent while stopped, downtime $(( $(json_field downtime_ns < "$T/a.json") / 1000000 )) ms; the destination ended with $REF"

step "b. a wrong token"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$T/bad-token"
chmod 600 "$T/bad-token"
start_job "$T/b.log"
if "$GCR" migrate "$P" --to "$DEST" --token-file "$T/bad-token" > /dev/null 2> "$T/b.err"; then
  fail "a migration with a wrong token succeeded"
fi
grep -q "wrong token" "$T/b.err" || fail "the refusal does not say why: $(cat "$T/b.err")"
source_runs "$P" || fail "the process is gone after a refused migration"
ends_once "$T/b.log"
echo "ok: refused ('wrong token'); the process ran on to $REF"

step "c. the destination cannot restore"
dest_gcrd c SIMGPU_MEMORY=32M
start_job "$T/c.log"
if migrate > /dev/null 2> "$T/c.err"; then fail "a migration onto a GPU too small succeeded"; fi
grep -q "process $P runs on" "$T/c.err" || fail "the failure does not say the process runs on: $(cat "$T/c.err")"
source_runs "$P" || fail "the source is gone after a failed migration"
ends_once "$T/c.log"
echo "ok: $(tail -n 1 "$T/c.err" | cut -c1-120)..."

step "c2. a destination whose operator allowed no user (Note [Who a peer may run])"
DEST_ALLOW_UIDS=none dest_gcrd c2
start_job "$T/c2.log"
if migrate > /dev/null 2> "$T/c2.err"; then fail "a destination that allows no user restored a root process"; fi
grep -q "would run as uid 0" "$T/c2.err" || fail "the refusal does not say why: $(cat "$T/c2.err")"
grep -q "process $P runs on" "$T/c2.err" || fail "the refusal does not say the process runs on: $(cat "$T/c2.err")"
ends_once "$T/c2.log"
echo "ok: $(grep -o "would run as uid 0[^;]*" "$T/c2.err" | head -n 1 | cut -c1-120)"

step "c3. a key per peer, each with its users (Note [Per-peer keys] in gcrd-net/peer_keys.h)"
key() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
K_ALPHA=$(key)
K_BETA=$(key)
printf '# the hosts that migrate here\npeer alpha %s allow-uids=0\npeer beta %s allow-uids=65534\n' \
  "$K_ALPHA" "$K_BETA" > "$T/peers"
printf 'peer alpha %s\n' "$K_ALPHA" > "$T/alpha.key"
printf 'peer beta %s\n' "$K_BETA" > "$T/beta.key"
printf 'peer gamma %s\n' "$K_BETA" > "$T/gamma.key"  # beta's secret under a name the host lacks
chmod 600 "$T/peers" "$T/alpha.key" "$T/beta.key" "$T/gamma.key"
DEST_TOKEN_FILE=$T/peers DEST_ALLOW_UIDS=none dest_gcrd c3
start_job "$T/c3.log"
if "$GCR" migrate "$P" --to "$DEST" --token-file "$T/beta.key" > /dev/null 2> "$T/c3.err"; then
  fail "peer beta, whose key allows uid 65534 only, had a root process restored"
fi
grep -q "would run as uid 0" "$T/c3.err" || fail "the refusal does not say why: $(cat "$T/c3.err")"
grep -q "process $P runs on" "$T/c3.err" || fail "the refusal does not say the process runs on: $(cat "$T/c3.err")"
ends_once "$T/c3.log"
"$GCR" image pull "gcr://$DEST/no-such-checkpoint" --token-file "$T/gamma.key" > /dev/null 2> "$T/c3-gamma.err" &&
  fail "a key under a name the destination does not know was served"
grep -q "wrong token" "$T/c3-gamma.err" || fail "an unknown key's refusal does not say why: $(cat "$T/c3-gamma.err")"
"$GCR" image pull "gcr://$DEST/no-such-checkpoint" --token-file "$T/alpha.key" > /dev/null 2> "$T/c3-alpha.err" &&
  fail "a pull of a checkpoint that is not there succeeded"
grep -q "no checkpoint named" "$T/c3-alpha.err" || fail "peer alpha was not served: $(cat "$T/c3-alpha.err")"
grep -q "(key beta)" "$DEST_LOG" || fail "the destination's log does not name the peer's key: $(tail -n 5 "$DEST_LOG")"
# Each peer a store of its own: what beta pushed is beta's, alpha does not see it.
beta_id=$(ls "$T/c3/store/peers/beta/manifests" 2> /dev/null | head -n 1)
[[ -n $beta_id ]] || fail "beta's push is not in beta's own store: $(ls -R "$T/c3/store" | head -n 20)"
"$GCR" image pull "gcr://$DEST/${beta_id%%.*}" --token-file "$T/alpha.key" > /dev/null 2> "$T/c3-alpha2.err" &&
  fail "peer alpha pulled peer beta's checkpoint"
grep -q "no checkpoint\|No such file" "$T/c3-alpha2.err" || fail "alpha's pull of beta's checkpoint failed otherwise: $(cat "$T/c3-alpha2.err")"
grep -q "$T/c3" "$T/c3-alpha2.err" && fail "the destination's error names a path there: $(cat "$T/c3-alpha2.err")"
echo "ok: beta refused a root process, gamma's name refused as a wrong token, alpha served, beta's checkpoint not alpha's"

step "d. the destination gcrd killed after the commit"
migrate_to_commit d 20
ip netns exec "$NS" pkill -9 -f "gcrd --socket $T/dest-d" || true
if wait "$M"; then fail "gcr migrate succeeded with its destination killed"; fi
source_runs "$P" ||
  fail "the source is gone though the destination never restored it: $(tail -n 4 "$T/d.err"); its log: $(tail -n 2 "$T/d.log"); gcrd: $(grep -v "^gcrd: request" "$T/gcrd.log" | tail -n 8)"
ends_once "$T/d.log"
echo "ok: the source ran on to $REF"

step "e. the migrate command killed after the commit"
migrate_to_commit e 2
kill -9 "$M"
wait "$M" 2> /dev/null || true
wait_until 10 source_gone "$P" || fail "the source runs on though it was committed to the destination"
ends_once "$T/e.log"
echo "ok: the destination ran it to $REF; the source ended"

step "f. a process not under gcr is refused and runs on"
dest_gcrd f
: > "$T/slow"
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" < /dev/null >> "$T/f.log" 2>&1 &
P=$!
pids+=("$P")
wait_steps "$T/f.log" 20
if migrate > /dev/null 2> "$T/f.err"; then fail "a process not under gcr was migrated"; fi
grep -q "not running under gcr" "$T/f.err" || fail "the refusal does not say why: $(cat "$T/f.err")"
ends_once "$T/f.log"
echo "ok: refused; it ran on to $REF"

step "g. the source gcrd killed after the commit"
migrate_to_commit g 3
pkill -9 -f "gcrd --socket $GCR_GCRD_SOCKET" || fail "no source gcrd to kill"
wait "$M" 2> /dev/null || true
wait_until 10 source_gone "$P" || fail "the source runs on though the destination restored it"
ends_once "$T/g.log"
echo "ok: $(tail -n 1 "$T/g.err" | cut -c1-150)"

step "h. over a shaped link (10 Gbit/s, 1 ms round trip)"
shape_link 7072
dest_gcrd h
start_job "$T/h.log"
"$GCR" migrate "$P" --to 10.77.0.1:7072 --token-file "$T/token" --json > "$T/h.json" 2> "$T/h.err" ||
  fail "gcr migrate over the shaped link: $(cat "$T/h.err")"
wait_until 5 source_gone "$P" || fail "the source still runs after the migration"
ends_once "$T/h.log"
echo "ok: $(json_field rounds < "$T/h.json") round(s), downtime $(( $(json_field downtime_ns < "$T/h.json") / 1000000 )) ms over the shaped link; the destination ended with $REF"

# i, j: a network timeout of 2 s for gcr migrate and the destination (Note [A peer that stops
# answering] in gcrd-net/net_store.h).
export GCR_NET_TIMEOUT_MS=2000
if ! link_cuttable; then
  echo "SKIP: steps i and j (iptables cannot add a rule here: it cuts the link with one)"
else
step "i. the link cut during the pre-copy"
# The destination pauses at the first round's stage: the cut falls in the pre-copy, never after
# the commit (a cut at a random moment could miss a pre-copy of a quarter second).
dest_gcrd i GCR_NET_TIMEOUT_MS=2000 GCR_GCRD_PAUSE_AT=stage:10
start_job "$T/i.log"
migrate > /dev/null 2> "$T/i.err" &
M=$!
for _ in $(seq 1 1000); do grep -q "paused at stage" "$DEST_LOG" 2> /dev/null && break; sleep 0.02; done
grep -q "paused at stage" "$DEST_LOG" || fail "the destination never got a stage request: $(cat "$T/i.err")"
cut_link
t_cut=$SECONDS
if wait "$M"; then fail "gcr migrate succeeded over a link cut before the commit"; fi
(( SECONDS - t_cut <= 20 )) || fail "gcr migrate took $((SECONDS - t_cut)) s to notice the cut"
source_runs "$P" || fail "the source is gone after a cut before the commit: $(cat "$T/i.err")"
grep -q "runs on" "$T/i.err" || fail "the failure does not say the process runs on: $(cat "$T/i.err")"
mend_link
ends_once "$T/i.log"
echo "ok: $(tail -n 1 "$T/i.err" | cut -c1-150)"

step "j. the link cut after the destination got the restore"
migrate_to_commit j 3
cut_link
if wait "$M"; then fail "gcr migrate succeeded over a cut link"; fi
mend_link
wait_until 10 source_gone "$P" || fail "the source runs on though the destination may have restored it"
ends_once "$T/j.log"
echo "ok: $(tail -n 1 "$T/j.err" | cut -c1-150)"
fi

step "l. a file of the process made a link while the destination holds the restore"
# Note [Files reopened for the restored process]: the destination's gcrd opens the process's files
# itself, as the checkpoint's owner, following no link. Before, its CRIU reopened each by path as
# root, and a link made since (here by nobody, who owns the log's directory) gave the restored
# process any file of the same size and mode (here $T/l-victim, root's).
if id nobody > /dev/null 2>&1 && command -v setpriv > /dev/null; then
  L=$T/l-logs
  chmod o+x "$T"  # nobody may reach its directory in it
  mkdir -p "$L"
  chown nobody:nogroup "$L"
  dest_gcrd l GCR_GCRD_PAUSE_AT=request:6
  start_job "$L/l.log"
  migrate > /dev/null 2> "$T/l.err" &
  M=$!
  wait_until 30 grep -q "paused at request" "$DEST_LOG" || fail "the destination never got the restore"
  # The process is stopped, its log as the checkpoint saw it: a victim of the same size and mode.
  cp "$L/l.log" "$T/l-victim"
  chmod --reference="$L/l.log" "$T/l-victim"
  victim_sum=$(sha256sum < "$T/l-victim")
  setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
    sh -c "mv '$L/l.log' '$L/l.log.old' && ln -s '$T/l-victim' '$L/l.log'" ||
    fail "nobody could not replace the log by a link"
  if wait "$M"; then fail "the destination restored the process through nobody's link"; fi
  [[ $(sha256sum < "$T/l-victim") == "$victim_sum" ]] ||
    fail "the restored process wrote into $T/l-victim through nobody's link"
  grep -q "symbolic link" "$T/l.err" || fail "the refusal does not say why: $(cat "$T/l.err")"
  ends_once "$L/l.log.old"
  echo "ok: refused ($(grep -o 'is a symbolic link now' "$T/l.err" | head -n 1)); the source ran on to $REF"
else
  echo "(no user nobody or no setpriv: case l skipped)"
fi

step "k. gcr image push and pull over gcr://"
unset GCR_NET_TIMEOUT_MS
dest_gcrd k GCR_STAGE_HOLD_S=4
start_job "$T/k.log"
"$GCR" checkpoint "$P" --name k1 > /dev/null || fail "checkpoint for the push"
for _ in $(seq 1 100); do kill -0 "$P" 2> /dev/null || break; sleep 0.05; done
"$GCR" image push k1 "gcr://$DEST" --token-file "$T/token" --stage --json > "$T/k-push.json" 2> "$T/k-push.err" ||
  fail "push to gcr://$DEST: $(cat "$T/k-push.err")"
(( $(json_field copied_bytes < "$T/k-push.json") > 0 )) || fail "the push sent nothing: $(cat "$T/k-push.json")"
(( $(json_field staged_loaded_bytes < "$T/k-push.json") >= 64 << 20 )) ||
  fail "--stage did not load the checkpoint's device memory there: $(cat "$T/k-push.json")"
# What no restore takes is freed after GCR_STAGE_HOLD_S: a peer does not keep this GPU's memory.
# (Device memory the destination gcrd holds: its simgpu allocations, one memfd each.)
device_mib() {
  python3 - "$(pgrep -f "gcrd --socket $T/dest-k" | head -n 1)" <<'PY'
import os, sys
fds, held = "/proc/%s/fd" % sys.argv[1], 0
for f in os.listdir(fds):
    try:
        if os.readlink(os.path.join(fds, f)).startswith("/memfd:simgpu-dev"):
            held += os.stat(os.path.join(fds, f)).st_size
    except OSError:
        pass
print(held >> 20)
PY
}
staged_mib=$(device_mib)
((staged_mib >= 64)) || fail "the destination gcrd holds $staged_mib MiB of device memory after staging 64 MiB"
freed() { (($(device_mib) < staged_mib - 48)); }
wait_until 60 freed || fail "the staged memory was not freed: $(device_mib) MiB held, $staged_mib after the stage"
echo "staged: the destination gcrd held $staged_mib MiB of device memory, $(device_mib) MiB once the hold passed"
if "$GCR" image push k1 "$T/elsewhere" --stage > /dev/null 2> "$T/k-stage-dir.err"; then
  fail "--stage to a directory was accepted"
fi
"$GCR" image push k1 "gcr://$DEST" --token-file "$T/token" --json > "$T/k-again.json" ||
  fail "the second push failed"
[[ $(json_field already_there < "$T/k-again.json") == True ]] || fail "the second push moved data: $(cat "$T/k-again.json")"
if "$GCR" image push k1 "gcr://$DEST" --token-file "$T/bad-token" > /dev/null 2> "$T/k-bad.err"; then
  fail "a push with a wrong token succeeded"
fi
grep -q "wrong token" "$T/k-bad.err" || fail "the refused push does not say why: $(cat "$T/k-bad.err")"
GCR_STORE=$T/pulled "$GCR" image pull "gcr://$DEST/k1" --token-file "$T/token" > "$T/k-pull.out" 2>&1 ||
  fail "pull from gcr://$DEST: $(cat "$T/k-pull.out")"
GCR_STORE=$T/pulled "$GCR" image verify k1 > /dev/null 2>&1 || fail "the pulled checkpoint does not verify"
GCR_STORE=$T/pulled "$GCR" restore k1 --detach --log "$T/k-detached.log" > /dev/null 2> "$T/k-restore.err" ||
  fail "restore of the pulled checkpoint: $(cat "$T/k-restore.err")"
ends_once "$T/k.log"
echo "ok: pushed $(json_field copied_bytes < "$T/k-push.json") bytes and staged $(json_field staged_loaded_bytes < "$T/k-push.json"), pushed again ($(json_field already_there < "$T/k-again.json")), wrong token refused, pulled back and restored to $REF"
