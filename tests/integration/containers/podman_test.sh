#!/usr/bin/env bash
# podman checkpoints a container running `gcr run mlp_train` with --export, the "host" is wiped
# (podman system reset, its gcrd stopped, its store deleted), and a second host (the same podman
# paths, as on another machine; another gcrd) restores it with --import: the run ends with the
# checksum of an uninterrupted one. podman passes CRIU no environment of its own, so the plugin's
# settings come from gcr.conf (criu_images = self-contained: the device memory travels inside the
# export) and CRIU from the first `criu` in PATH (research-containers.md); this test points both at
# its own files instead of /etc and /usr.
#
#   podman_test.sh BUILD_DIR      (needs root, podman, runc and CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=podman-test
source "$(dirname "$0")/lib.sh"
command -v podman > /dev/null || skip "podman is missing (scripts/setup.sh installs it)"
command -v runc > /dev/null || skip "runc is missing (scripts/setup.sh installs it)"
FOOTPRINT_MIB=64
MLP=("$BUILD/tests/workloads/mlp_train" --steps 150 --step-delay-ms 10 --footprint ${FOOTPRINT_MIB}M)
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")

# The container sees /usr, the build and $T/share; its image is an empty root with the usrmerge links.
mkdir -p "$T/share" "$T/bin" "$T/base"/{proc,sys,dev,etc,tmp,usr}
ln -s usr/bin "$T/base/bin"
ln -s usr/lib "$T/base/lib"
ln -s usr/lib64 "$T/base/lib64"
LOG=$T/share/run.log
# host_config N: gcr.conf and the `criu` podman finds for host N.
host_config() {
  cat > "$T/gcr.conf" << CONF
# gcr.conf of host $1
criu_images = self-contained
gcrd_socket = $T/host$1/gcrd.sock
driver = $BUILD/simgpu/libcuda.so.1
CONF
  cat > "$T/bin/criu" << WRAP
#!/bin/sh
export CRIU_LIBS_DIR=$BUILD/criu-plugin GCR_CONFIG=$T/gcr.conf
exec $CRIU "\$@"
WRAP
  chmod +x "$T/bin/criu"
  mkdir -p "$T/host$1"
  start_gcrd "$T/host$1/gcrd.sock"
}
PODMAN=(env "PATH=$T/bin:$PATH" podman --root "$T/podman/root" --runroot "$T/podman/run"
        --cgroup-manager=cgroupfs --events-backend=file --runtime runc --storage-driver vfs)
cleanup_podman() { "${PODMAN[@]}" system reset -f > /dev/null 2>&1 || true; }
cleanup_extra() { cleanup_podman; }

step "host 1: run, checkpoint --export"
host_config 1
tar -C "$T/base" -c . | "${PODMAN[@]}" import - localhost/gcr-test-base > /dev/null 2>&1 || fail "podman import of the base image"
"${PODMAN[@]}" save -o "$T/base.tar" localhost/gcr-test-base > /dev/null 2>&1 || fail "podman save"
"${PODMAN[@]}" run -d --name job --network none --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
  -e SIMGPU_DEVICES=1 -e SIMGPU_MEMORY=1G -e GCR_QUIET=1 \
  -v /usr:/usr:ro -v "$ROOT:$ROOT:ro" -v "$T/share:$T/share" localhost/gcr-test-base \
  /bin/sh -c "exec $GCR run -- ${MLP[*]} < /dev/null >> $LOG 2>&1" > /dev/null || fail "podman run"
wait_steps "$LOG" 20
"${PODMAN[@]}" container checkpoint job --export "$T/job.tar" > /dev/null || fail "podman container checkpoint --export"
tar -tvf "$T/job.tar" > "$T/job.list" || fail "the export is not a tar archive"
grep -q " checkpoint/gcr-checkpoint$" "$T/job.list" || fail "the export has no gcr-checkpoint"
grep -q " checkpoint/gcr-store/" "$T/job.list" || fail "the export does not carry the device memory (gcr-store)"
pages=$(awk '$6 ~ /^checkpoint\/pages-/ {s += $3} END {print int(s / 1048576)}' "$T/job.list")
(( pages * 4 < FOOTPRINT_MIB )) || fail "CRIU wrote $pages MiB of pages for $FOOTPRINT_MIB MiB of device memory"
steps=$(steps_in "$LOG")
echo "ok: exported at step $steps: $(( $(stat -c %s "$T/job.tar") >> 20 )) MiB, of which CRIU's pages $pages MiB"

step "host 1 wiped; host 2 imports"
cleanup_podman
rm -rf "$T/podman"
pkill -f "gcrd --socket $T/host1/" || true
host_config 2
"${PODMAN[@]}" load -i "$T/base.tar" > /dev/null 2>&1 || fail "podman load of the base image"
: > "$LOG"
"${PODMAN[@]}" container restore --import "$T/job.tar" > "$T/restore.out" 2>&1 || fail "podman container restore --import: $(tail -3 "$T/restore.out")"
wait_checksum "$LOG"
[[ $(checksum_of "$LOG") == "$REF" ]] || fail "the imported run ended with $(checksum_of "$LOG"), an uninterrupted one with $REF"
grep -q "criu_restore" "$T/host2/gcrd.log" || fail "host 2's gcrd never saw the restore"
echo "ok: restored on host 2 from the export alone: $REF"
