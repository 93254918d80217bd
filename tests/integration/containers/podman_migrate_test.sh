#!/usr/bin/env bash
# gcr migrate --container for a podman container between two "hosts" on one machine (two_hosts.sh):
# `gcr run mlp_train` in a podman container moves in one command to the destination, whose gcrd
# (--containers DIR, --runtime: its own podman) imports podman's checkpoint of it where
# DIR/NAME/podman.conf allows (Note [podman archives restored for a network peer] in
# daemon/podman_import.h). Each host's podman keeps its own state (--root, --runroot; the
# destination's runc its own --root), as on another machine.
#   a. over a shaped link (tc tbf 10 Gbit/s, tests/link/delay_relay 0.5 ms each way), at a random
#      moment: pre-copy rounds, then podman's checkpoint; the destination's podman runs it
#      (bit-identical end), the source's has no such container any more
#   b. a destination that restores no containers (no --containers): refused; the container is
#      restored here from podman's kept checkpoint and ends the run
#   c. a destination whose podman.conf allows another image: refused, naming the image; the same
# In each case exactly one copy ends the run, with the checksum of an uninterrupted one.
#
#   podman_migrate_test.sh BUILD_DIR      (needs root, podman, runc and CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=podman-migrate-test
source "$(dirname "$0")/lib.sh"
command -v podman > /dev/null || skip "podman is missing (scripts/setup.sh installs it)"
command -v runc > /dev/null || skip "runc is missing (scripts/setup.sh installs it)"
NET=10.81.0  # neither migrate.container's nor migrate.two_hosts's
source "$(dirname "$0")/two_hosts.sh"

FOOTPRINT_MIB=64
# Each run steps slowly and holds before its last step while $SLOW exists (run_job makes it,
# ends_once removes it): no migration finds the run ended however slow the machine, and the rest
# goes at full speed (the reference, with no $SLOW, too). In $T/share: the container sees it.
SLOW=$T/share/slow
MLP=("$BUILD/tests/workloads/mlp_train" --steps 500 --step-delay-ms 20 --footprint ${FOOTPRINT_MIB}M
     --delay-while "$SLOW" --hold-while "$SLOW")
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
start_gcrd "$GCR_GCRD_SOCKET"
export GCR_CRIU=$CRIU
# gcr migrate hands podman's CRIU the plugin and its settings itself (Note [podman's CRIU]).
unset CRIU_LIBS_DIR GCR_REAL_LIBCUDA

# Each host's podman, with the options these machines need (docs/containers.md, "podman 4").
mkdir -p "$T/runc-b" "$T/share" "$T/base"/{proc,sys,dev,etc,tmp,usr} "$T/bundles-b/job"
cat > "$T/runc-b/runc" << SH
#!/bin/sh
exec runc --root "$T/runc-b/state" "\$@"
SH
# podman's run root must be a short path (at most 50 characters).
PODMAN_STATE=$(mktemp -d /tmp/gcr-pm.XXXXXX)
# Each host's runc, named runc (podman refuses to import an archive of another runtime's name).
podman_host() {  # HOST RUNC: a script that runs podman as that host's
  cat > "$T/containers-$1.conf" << CONF
[containers]
# Debian's /usr/share/containers/containers.conf (CONTAINERS_CONF replaces it)
default_capabilities = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE",
                        "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"]
[engine.runtimes]
runc = ["$2"]
CONF
  cat > "$T/podman-$1.sh" << SH
#!/bin/sh
export CONTAINERS_CONF="$T/containers-$1.conf"
exec podman --root "$PODMAN_STATE/$1/root" --runroot "$PODMAN_STATE/$1/run" --cgroup-manager=cgroupfs \
  --events-backend=file --runtime runc --storage-driver vfs "\$@"
SH
  chmod 755 "$T/podman-$1.sh"
}
chmod 755 "$T/runc-b/runc"
podman_host a "$(command -v runc)"
podman_host b "$T/runc-b/runc"
cleanup_extra() {
  "$T/podman-a.sh" rm -f -a > /dev/null 2>&1 || true
  "$T/podman-b.sh" rm -f -a > /dev/null 2>&1 || true
  "$T/podman-a.sh" system reset -f > /dev/null 2>&1 || true
  "$T/podman-b.sh" system reset -f > /dev/null 2>&1 || true
  rm -rf "$PODMAN_STATE"
  mend_link
  remove_link
}
ln -s usr/bin "$T/base/bin"
ln -s usr/lib "$T/base/lib"
ln -s usr/lib64 "$T/base/lib64"
tar -C "$T/base" -c . | "$T/podman-a.sh" import - localhost/gcr-test-base > /dev/null 2>&1 || fail "podman import of the base image"
"$T/podman-a.sh" save -o "$T/base.tar" localhost/gcr-test-base > /dev/null 2>&1 || fail "podman save"
"$T/podman-b.sh" load -i "$T/base.tar" > /dev/null 2>&1 || fail "podman load of the base image on the destination"
allow_image() {  # REF: the destination's operator allows container job with image REF
  cat > "$T/bundles-b/job/podman.conf" << CONF
image = $1
mount = /usr
mount = $ROOT
mount = $T/share
CONF
}
allow_image localhost/gcr-test-base:latest

# run_job LOG: container job on the source, running the workload under gcr, at step 20..59.
run_job() {
  : > "$SLOW"
  "$T/podman-a.sh" rm -f job > /dev/null 2>&1 || true
  "$T/podman-a.sh" run -d --name job --network none --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
    -e SIMGPU_DEVICES=1 -e SIMGPU_MEMORY=1G -e GCR_QUIET=1 \
    -v /usr:/usr:ro -v "$ROOT:$ROOT:ro" -v "$T/share:$T/share" localhost/gcr-test-base \
    /bin/sh -c "exec $GCR run -- ${MLP[*]} < /dev/null >> $1 2>&1" > /dev/null || fail "podman run"
  wait_steps "$1" $((RANDOM % 40 + 20))
}
status_on() { "$T/podman-$1.sh" container inspect --format '{{.State.Status}}' job 2> /dev/null || true; }
migrate_job() {  # TO [ARGS...]
  "$GCR" migrate --container job --runtime "$T/podman-a.sh" --to "$1" --token-file "$T/token" "${@:2}"
}
DEST_GCRD_ARGS=(--containers "$T/bundles-b" --runtime "$T/podman-b.sh")

step "a. over a shaped link (10 Gbit/s, 1 ms round trip) at a random moment"
shape_link 7072
dest_gcrd a
run_job "$T/share/a.log"
migrate_job "$NET.1:7072" --json > "$T/a.json" 2> "$T/a.err" || fail "gcr migrate --container (podman): $(cat "$T/a.err")"
[[ $(status_on b) == running ]] || fail "the destination's podman does not run job: $("$T/podman-b.sh" ps -a 2>&1)"
[[ -z $(status_on a) ]] || fail "the source's podman still has container job ($(status_on a))"
ends_once "$T/share/a.log"
grep -q "restore_container" "$DEST_LOG" || fail "the destination's gcrd never got the restore"
(( $(json_field rounds < "$T/a.json") >= 1 )) || fail "no pre-copy round: $(cat "$T/a.json")"
echo "ok: $(json_field rounds < "$T/a.json") round(s), $(( $(json_field images_bytes < "$T/a.json") >> 10 )) KiB archive, downtime $(( $(json_field downtime_ns < "$T/a.json") / 1000000 )) ms, total $(( $(json_field total_ns < "$T/a.json") / 1000000 )) ms over the shaped link; the destination's container ended with $REF"
"$T/podman-b.sh" rm -f job > /dev/null 2>&1 || true

# refused_and_back STEP WHY: the migration failed saying WHY and that the container runs here,
# and it ends the run here.
refused_and_back() {
  grep -q "$2" "$T/$1.err" || fail "the refusal does not say '$2': $(cat "$T/$1.err")"
  grep -q "restored here and runs on" "$T/$1.err" || fail "the failure does not say the container runs here: $(cat "$T/$1.err")"
  [[ $(status_on a) == running ]] || fail "container job does not run here after the failed migration"
  [[ -z $(status_on b) ]] || fail "container job exists on the destination too ($(status_on b))"
  ends_once "$T/share/$1.log"
}

step "b. a destination that restores no containers"
DEST_GCRD_ARGS=()
dest_gcrd b
run_job "$T/share/b.log"
if migrate_job "$DEST" > /dev/null 2> "$T/b.err"; then fail "a destination without --containers restored one"; fi
refused_and_back b "restores no containers"
echo "ok: refused; restored here from podman's kept checkpoint, ended with $REF"

step "c. a destination that allows another image for that name"
DEST_GCRD_ARGS=(--containers "$T/bundles-b" --runtime "$T/podman-b.sh")
allow_image localhost/something-else:latest
dest_gcrd c
run_job "$T/share/c.log"
if migrate_job "$DEST" > /dev/null 2> "$T/c.err"; then fail "an archive of an image the destination does not allow was imported"; fi
refused_and_back c "runs the image 'localhost/gcr-test-base:latest', which podman.conf does not list"
echo "ok: refused for the image; restored here, ended with $REF"
