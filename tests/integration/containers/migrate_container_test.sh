#!/usr/bin/env bash
# gcr migrate --container between two "hosts" on one machine (two_hosts.sh): a runc container
# running `gcr run mlp_train` moves to the destination, whose gcrd (--containers DIR) restores it
# with runc from its own bundle of that name. The destination's runc keeps its state apart
# (--runtime: a runc with its own --root), as another host's would.
#   a. at a random moment: pre-copy rounds while the container runs, then runc's checkpoint; the
#      destination's runc runs it (bit-identical end), the source's has no such container, and
#      CRIU's images that travelled are a small fraction of the footprint
#   b. a destination that restores no containers (no --containers): refused; the container is
#      restored here and ends the run
#   c. a destination with no bundle of that name: the same
#   d. the destination gcrd killed while it holds the restore request: gone, so the container is
#      restored here
#   e. the link cut during the pre-copy: the container never stopped and runs on here
#   g. the source gcrd killed after the stop, and the destination refuses (no bundle): the
#      container is restored here, with a gcrd started again
#   h. over a shaped link (tc tbf 10 Gbit/s, tests/link/delay_relay 0.5 ms each way): as a
#   f. a container whose CUDA process is not under gcr: refused before anything stops (with and
#      without pre-copy rounds)
# In each case exactly one copy ends the run, with the checksum of an uninterrupted one.
#
#   migrate_container_test.sh BUILD_DIR      (needs root, runc and CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=migrate-container-test
source "$(dirname "$0")/lib.sh"
command -v runc > /dev/null || skip "runc is missing (scripts/setup.sh installs it)"
NET=10.79.0  # neither migrate.two_hosts's nor bench/migrate_bench.py's
source "$(dirname "$0")/two_hosts.sh"

FOOTPRINT_MIB=64
# Each run steps slowly and holds before its last step while $T/slow exists (run_container makes
# it, ends_once removes it): no migration finds the run ended however slow the machine, and the
# rest goes at full speed (the reference, with no $T/slow, too).
MLP=("$BUILD/tests/workloads/mlp_train" --steps 600 --step-delay-ms 10 --footprint ${FOOTPRINT_MIB}M
     --delay-while "$T/slow" --hold-while "$T/slow")
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
start_gcrd "$GCR_GCRD_SOCKET"
export GCR_CRIU=$CRIU  # the source's runc gets gcr's CRIU, as the destination gcrd's does
# What lib.sh hands runc for the runc tests, gcr migrate --container must hand it itself: the
# plugin's directory and the driver gcrd uses.
unset CRIU_LIBS_DIR GCR_REAL_LIBCUDA

# The destination's runc: its own state directory, as on another host.
B_ROOT=$T/runc-b
cat > "$T/runc-b.sh" << SH
#!/bin/sh
exec runc --root "$B_ROOT" "\$@"
SH
chmod 755 "$T/runc-b.sh"
mkdir -p "$T/bundles-b"
cleanup_extra() {
  for c in $(runc --root "$B_ROOT" list -q 2> /dev/null); do runc --root "$B_ROOT" delete -f "$c" > /dev/null 2>&1 || true; done
  mend_link
  remove_link
}

# run_container NAME LOG [ARGS...]: container NAME (bundle $T/NAME, and the destination's
# $T/bundles-b/NAME alike) running ARGS (default: the workload under gcr), at step 20..59.
run_container() {
  local name=$1 log=$2
  shift 2
  (( $# )) || set -- "$GCR" run -- "${MLP[@]}"
  : > "$T/slow"
  make_bundle "$T/$name" "$log" "$@"
  rm -rf "$T/bundles-b/$name"
  cp -a "$T/$name" "$T/bundles-b/$name"
  runc run -d --bundle "$T/$name" "$name" > "$T/$name.out" 2>&1 < /dev/null || fail "runc run $name: $(cat "$T/$name.out")"
  containers+=("$name")
  wait_steps "$log" $((RANDOM % 40 + 20))
}
migrate_container() {  # NAME [ARGS...]
  local name=$1
  shift
  "$GCR" migrate --container "$name" --to "$DEST" --token-file "$T/token" "$@"
}
runs_here() { [[ $(runc state "$1" 2> /dev/null | json_field status) == running ]]; }
runs_there() { [[ $(runc --root "$B_ROOT" state "$1" 2> /dev/null | json_field status) == running ]]; }
DEST_GCRD_ARGS=(--containers "$T/bundles-b" --runtime "$T/runc-b.sh")

step "a. migrate a container at a random moment"
dest_gcrd a
run_container ca "$T/a.log"
migrate_container ca --json > "$T/a.json" 2> "$T/a.err" || fail "gcr migrate --container: $(cat "$T/a.err")"
runs_there ca || fail "the destination's runc does not run ca: $(runc --root "$B_ROOT" list 2>&1)"
runc state ca > /dev/null 2>&1 && fail "the source still has container ca"
ends_once "$T/a.log"
images_kib=$(( $(json_field images_bytes < "$T/a.json") >> 10 ))
(( images_kib * 4 < FOOTPRINT_MIB * 1024 )) || fail "$images_kib KiB of CRIU images travelled for a $FOOTPRINT_MIB MiB footprint"
(( $(json_field rounds < "$T/a.json") >= 1 )) || fail "no pre-copy round: $(cat "$T/a.json")"
grep -q "restore_container" "$DEST_LOG" || fail "the destination's gcrd never got the restore"
echo "ok: $(json_field rounds < "$T/a.json") round(s), $images_kib KiB of CRIU images, downtime $(( $(json_field downtime_ns < "$T/a.json") / 1000000 )) ms; the destination's container ended with $REF"
runc --root "$B_ROOT" delete -f ca > /dev/null 2>&1 || true

# refused_and_back NAME STEP: the migration failed, said the container runs here, and it ends the run here.
refused_and_back() {
  grep -q "restored here and runs on" "$T/$2.err" || fail "the failure does not say the container runs here: $(cat "$T/$2.err")"
  runs_here "$1" || fail "container $1 does not run here after the failed migration"
  runs_there "$1" && fail "container $1 runs on the destination too"
  ends_once "$T/$2.log"
}

step "b. a destination that restores no containers"
DEST_GCRD_ARGS=()
dest_gcrd b
run_container cb "$T/b.log"
if migrate_container cb > /dev/null 2> "$T/b.err"; then fail "a destination without --containers restored one"; fi
grep -q "restores no containers" "$T/b.err" || fail "the refusal does not say why: $(cat "$T/b.err")"
refused_and_back cb b
echo "ok: refused ($(grep -o "restores no containers[^;]*" "$T/b.err" | head -c 60)...); restored here, ended with $REF"
DEST_GCRD_ARGS=(--containers "$T/bundles-b" --runtime "$T/runc-b.sh")

step "c. no bundle of that name on the destination"
dest_gcrd c
run_container cc "$T/c.log"
rm -rf "$T/bundles-b/cc"
if migrate_container cc > /dev/null 2> "$T/c.err"; then fail "a container without a bundle there was restored"; fi
grep -q "no bundle for container 'cc'" "$T/c.err" || fail "the refusal does not name the missing bundle: $(cat "$T/c.err")"
refused_and_back cc c
echo "ok: refused for the missing bundle; restored here, ended with $REF"

step "d. the destination gcrd killed while it holds the restore"
dest_gcrd d GCR_GCRD_PAUSE_AT=request:20
run_container cd "$T/d.log"
migrate_container cd > /dev/null 2> "$T/d.err" &
M=$!
for _ in $(seq 1 1500); do grep -q "paused at request" "$DEST_LOG" 2> /dev/null && break; sleep 0.02; done
grep -q "paused at request" "$DEST_LOG" || fail "the destination never got the restore: $(cat "$T/d.err")"
ip netns exec "$NS" pkill -9 -f "gcrd --socket $T/dest-d" || fail "no destination gcrd to kill"
if wait "$M"; then fail "gcr migrate succeeded with its destination killed"; fi
refused_and_back cd d
echo "ok: $(tail -n 1 "$T/d.err" | cut -c1-150)"

export GCR_NET_TIMEOUT_MS=2000
if ! link_cuttable; then
  echo "SKIP: step e (iptables cannot add a rule here: it cuts the link with one)"
else
step "e. the link cut during the pre-copy"
dest_gcrd e GCR_NET_TIMEOUT_MS=2000 GCR_GCRD_PAUSE_AT=stage:10
run_container ce "$T/e.log"
migrate_container ce > /dev/null 2> "$T/e.err" &
M=$!
for _ in $(seq 1 1000); do grep -q "paused at stage" "$DEST_LOG" 2> /dev/null && break; sleep 0.02; done
grep -q "paused at stage" "$DEST_LOG" || fail "the destination never got a stage request: $(cat "$T/e.err")"
cut_link
if wait "$M"; then fail "gcr migrate --container succeeded over a cut link"; fi
mend_link
grep -q "container ce runs on" "$T/e.err" || fail "the failure does not say the container runs on: $(cat "$T/e.err")"
runs_here ce || fail "container ce does not run here after a cut in the pre-copy"
ends_once "$T/e.log"
echo "ok: $(tail -n 1 "$T/e.err" | cut -c1-150)"
fi
unset GCR_NET_TIMEOUT_MS

step "g. the source gcrd killed after the stop, then the destination refuses"
dest_gcrd g GCR_GCRD_PAUSE_AT=request:3
run_container cg "$T/g.log"
rm -rf "$T/bundles-b/cg"
migrate_container cg > /dev/null 2> "$T/g.err" &
M=$!
for _ in $(seq 1 1500); do grep -q "paused at request" "$DEST_LOG" 2> /dev/null && break; sleep 0.02; done
grep -q "paused at request" "$DEST_LOG" || fail "the destination never got the restore: $(cat "$T/g.err")"
pkill -9 -f "gcrd --socket $GCR_GCRD_SOCKET" || fail "no source gcrd to kill"
if wait "$M"; then fail "a container without a bundle there was restored"; fi
refused_and_back cg g
echo "ok: with a new gcrd here: $(tail -n 1 "$T/g.err" | cut -c1-120)..."

step "h. over a shaped link (10 Gbit/s, 1 ms round trip) at a random moment"
shape_link 7072
dest_gcrd h
run_container ch "$T/h.log"
"$GCR" migrate --container ch --to "$NET.1:7072" --token-file "$T/token" --json > "$T/h.json" 2> "$T/h.err" ||
  fail "gcr migrate --container over the shaped link: $(cat "$T/h.err")"
runs_there ch || fail "the destination's runc does not run ch"
ends_once "$T/h.log"
echo "ok: $(json_field rounds < "$T/h.json") round(s), downtime $(( $(json_field downtime_ns < "$T/h.json") / 1000000 )) ms over the shaped link; the destination's container ended with $REF"
runc --root "$B_ROOT" delete -f ch > /dev/null 2>&1 || true

step "f. a CUDA process not under gcr"
dest_gcrd f
run_container cf "$T/f.log" env "LD_LIBRARY_PATH=$BUILD/simgpu" "${MLP[@]}"
if migrate_container cf > /dev/null 2> "$T/f.err"; then fail "a container not under gcr was migrated"; fi
grep -q "not running under gcr" "$T/f.err" || fail "the refusal does not say why: $(cat "$T/f.err")"
# Without pre-copy rounds too (--rounds 0: the stop at once), before anything stops.
if migrate_container cf --rounds 0 > /dev/null 2> "$T/f0.err"; then fail "a container not under gcr was migrated with --rounds 0"; fi
grep -q "not running under gcr" "$T/f0.err" || fail "the --rounds 0 refusal does not say why: $(cat "$T/f0.err")"
runs_here cf || fail "container cf stopped though it was refused"
ends_once "$T/f.log"
echo "ok: refused; it ran on to $REF"
