#!/usr/bin/env bash
# containerd (Debian 12's 1.6, its runc shim and runc) checkpoints and restores a container running
# `gcr run mlp_train` with ctr, through gcr's CRIU plugin and gcrd (docs/containerd.md): the device
# memory is parked and stored by gcrd, so CRIU's images (inside containerd's checkpoint image) hold
# a small fraction of the footprint, and every restored run ends with the checksum of an
# uninterrupted one. The test starts a containerd of its own (its own root, state, socket, runc
# root and namespace) with a clean environment: the shim's runc finds CRIU as the first `criu` in
# PATH (ctr sets no CriuPath), and CRIU's settings come from files, as on a node.
#   a. `ctr containers checkpoint --task` (ctr 1.6's restorable checkpoint: containerd pauses the
#      task, runc checkpoints it with --leave-running, containerd resumes it); the original is
#      stopped and removed; `ctr containers restore --live` makes a new container and task from the
#      checkpoint image
#   b. the same checkpoint, the original left to run: it ends right, and its image restores right
#   c. `ctr tasks checkpoint --exit --image-path DIR`: the task ends, CRIU's images land in DIR
#      (ctr 1.6 cannot restore these: docs/containerd.md)
#   d. restore with gcrd down fails before any process of the container exists, saying why
#   e. self-contained images (gcr.conf: criu_images = self-contained): the checkpoint image, device
#      memory inside, is exported, the "host" wiped (containerd, gcrd and store gone), and a second
#      one (another containerd, gcrd and store) imports and restores it
#   f. a CUDA process not under gcr: the baseline, device memory in CRIU's pages (the sizes to
#      compare), and it runs on
#
#   containerd_test.sh BUILD_DIR      (needs root, containerd, runc and CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=containerd-test
source "$(dirname "$0")/lib.sh"
for tool in containerd ctr containerd-shim-runc-v2 runc; do
  command -v $tool > /dev/null || skip "$tool is missing (scripts/setup.sh installs containerd and runc)"
done
FOOTPRINT_MIB=64
MLP=("$BUILD/tests/workloads/mlp_train" --steps 150 --step-delay-ms 10 --footprint ${FOOTPRINT_MIB}M)
LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")

# host_config N: what a node's /etc/gcr/gcr.conf and CRIU's plugin directory give CRIU on host N
# (containerd hands the shim its own environment, which on a node is systemd's: nothing of gcr's),
# and a gcrd of its own with its own store. MORE: further gcr.conf lines.
host_config() {
  export GCR_GCRD_SOCKET=$T/host$1/gcrd.sock GCR_STORE=$T/host$1/store
  mkdir -p "$T/host$1"
  cat > "$T/gcr.conf" << CONF
# gcr.conf of host $1
gcrd_socket = $GCR_GCRD_SOCKET
driver = $BUILD/simgpu/libcuda.so.1
${2:-}
CONF
  start_gcrd "$GCR_GCRD_SOCKET"
}
mkdir -p "$T/bin" "$T/share"
cat > "$T/bin/criu" << WRAP
#!/bin/sh
export CRIU_LIBS_DIR=$BUILD/criu-plugin GCR_CONFIG=$T/gcr.conf
exec $CRIU "\$@"
WRAP
chmod +x "$T/bin/criu"

# start_containerd DIR: a containerd of its own under DIR (root, state, socket; the runc root is
# the containers' --runc-root), started with a clean environment, and the base image imported. The
# CRI plugin is off (no kubelet here); TMPDIR keeps the checkpoint directories the daemon and the
# shim unpack out of /tmp. Every ctr call is bounded (CTR).
NS=gcr-test
names=()  # every container this test made (their shims' sockets)
start_containerd() {
  CTRD=$1
  SOCK=$CTRD/containerd.sock
  mkdir -p "$CTRD/tmp"
  cat > "$CTRD/config.toml" << TOML
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
TOML
  env -i "PATH=$T/bin:/usr/sbin:/usr/bin:/sbin:/bin" "TMPDIR=$CTRD/tmp" \
    containerd --config "$CTRD/config.toml" > "$CTRD/containerd.log" 2>&1 < /dev/null &
  CONTAINERD_PID=$!
  CTR=(timeout 60 ctr --address "$SOCK" --namespace "$NS")
  wait_until 30 ctrd_serves || fail "containerd did not start: $(tail -3 "$CTRD/containerd.log")"
  "${CTR[@]}" images import --snapshotter native "$T/base.tar" > "$CTRD/import.log" 2>&1 ||
    fail "ctr images import of the base image: $(tail -3 "$CTRD/import.log")"
}
stop_gcrd() {
  pkill -f "gcrd --socket $GCR_GCRD_SOCKET" || true
  wait_until 10 gcrd_gone || fail "gcrd did not stop"
}
gcrd_gone() { ! pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" > /dev/null; }
ctrd_serves() { "${CTR[@]}" version > /dev/null 2>&1; }
# stop_containerd: every task killed and removed while containerd runs, then containerd, then any
# shim of it still there (their address names this test's directory).
stop_containerd() {
  local c
  if kill -0 "$CONTAINERD_PID" 2> /dev/null; then
    for c in $("${CTR[@]}" containers ls -q 2> /dev/null); do
      ( remove "$c" ) > /dev/null 2>&1 || true
    done
    kill "$CONTAINERD_PID" 2> /dev/null || true
    wait_gone "$CONTAINERD_PID" 15 || kill -9 "$CONTAINERD_PID" 2> /dev/null || true
  fi
  pkill -9 -f "containerd-shim-runc-v2 .*-address $SOCK" 2> /dev/null || true
  # A shim killed leaves its socket, /run/containerd/s/SHA256(ADDRESS/NAMESPACE/ID) in 1.6.
  for c in "${names[@]}"; do
    rm -f "/run/containerd/s/$(printf '%s' "$SOCK/$NS/$c" | sha256sum | cut -d' ' -f1)"
  done
  # Containers whose shim is gone (runc's state is under the containers' --runc-root, per namespace).
  for c in "$CTRD/runc/$NS"/*/; do
    if [[ -d $c ]]; then runc --root "$CTRD/runc/$NS" delete -f "$(basename "$c")" > /dev/null 2>&1 || true; fi
  done
  # What the shims left mounted of their bundles (a shim killed above unmounts nothing).
  grep -o " $CTRD/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2> /dev/null || true
}
cleanup_extra() { [[ -z ${CONTAINERD_PID:-} ]] || stop_containerd; }
task_status() { "${CTR[@]}" tasks ls 2> /dev/null | awk -v c="$1" '$1 == c {print $3}'; }
is_stopped() { [[ $(task_status "$1") == STOPPED ]]; }
# remove NAME: the container and its task, killed if it runs. (Not `tasks rm -f`: for a task whose
# restore failed, CREATED with no process, containerd 1.6 waits for an exit that never comes.)
remove() {
  if [[ $(task_status "$1") == RUNNING ]]; then
    "${CTR[@]}" tasks kill -s KILL "$1" > /dev/null 2>&1 || true
    wait_until 15 is_stopped "$1" || fail "task $1 did not stop"
  fi
  "${CTR[@]}" tasks rm "$1" > /dev/null 2>&1 || true
  "${CTR[@]}" containers rm "$1" > /dev/null 2>&1 || fail "ctr containers rm $1"
}

python3 "$ROOT/tests/integration/containers/make_oci_image.py" "$T/base.tar" localhost/gcr-test-base:latest
host_config 1
start_containerd "$T/ctrd"

# run_container NAME LOG [WRAPPER...]: a container running the workload under WRAPPER (default:
# gcr run --), at step 20 or later. It sees /usr and /etc of the host, the repository (read-only)
# and $T/share; its own pid, network, ipc, uts and mount namespaces (containerd's defaults).
run_container() {
  local wrapper=("${@:3}")
  ((${#wrapper[@]})) || wrapper=("$GCR" run --)
  local mounts=(--mount "type=tmpfs,src=tmpfs,dst=/tmp,options=nosuid:nodev")
  for dir in /usr /etc "$ROOT"; do mounts+=(--mount "type=bind,src=$dir,dst=$dir,options=rbind:ro"); done
  mounts+=(--mount "type=bind,src=$T/share,dst=$T/share,options=rbind:rw")
  names+=("$1")
  "${CTR[@]}" run -d --null-io --snapshotter native --runc-root "$CTRD/runc" "${mounts[@]}" \
    --env SIMGPU_DEVICES="$SIMGPU_DEVICES" --env SIMGPU_MEMORY="$SIMGPU_MEMORY" --env GCR_QUIET=1 \
    localhost/gcr-test-base:latest "$1" /bin/sh -c "exec ${wrapper[*]} ${MLP[*]} < /dev/null >> $2 2>&1" \
    > "$T/$1.run.log" 2>&1 || fail "ctr run $1: $(tail -3 "$T/$1.run.log")"
  wait_steps "$2" 20
}
# check_checkpoint REF: checkpoint image REF holds CRIU's images (a tar) that name a gcr checkpoint
# and hold less than a quarter of the footprint in pages; sets criu_kib, pages (KiB) and `sizes`.
check_checkpoint() {
  local index digest size list=$T/${1//[\/:]/_}
  index=$("${CTR[@]}" images ls | awk -v r="$1" '$1 == r {print $3}')
  [[ -n $index ]] || fail "no checkpoint image $1"
  "${CTR[@]}" content get "$index" > "$list.index.json" || fail "ctr content get $index"
  read -r digest size < <(python3 -c '
import json, sys
for m in json.load(open(sys.argv[1]))["manifests"]:
    if m["mediaType"].endswith("criu.checkpoint.criu.tar"):
        print(m["digest"], m["size"])' "$list.index.json")
  [[ -n $digest ]] || fail "checkpoint image $1 has no CRIU images"
  "${CTR[@]}" content get "$digest" | tar -tv > "$list.list" || fail "the CRIU images of $1 are not a tar"
  grep -qE " (\./)?gcr-checkpoint$" "$list.list" || fail "the CRIU images of $1 have no gcr-checkpoint reference"
  pages=$(awk '$6 ~ /pages-/ {s += $3} END {print int(s / 1024)}' "$list.list")
  (( pages * 4 < FOOTPRINT_MIB * 1024 )) || fail "CRIU wrote $pages KiB of pages for a $FOOTPRINT_MIB MiB footprint: the device memory was not parked"
  criu_kib=$((size >> 10))
  sizes="CRIU's images $criu_kib KiB (pages $pages KiB), device footprint $FOOTPRINT_MIB MiB"
}
# restore NEW REF LOG: `ctr containers restore --live` of REF as container NEW (restore_ms: how
# long ctr took); LOG ends with $REF.
restore() {
  : > "$3"
  local t0
  t0=$(date +%s%N)
  names+=("$1")
  "${CTR[@]}" containers restore --live "$1" "$2" > "$T/$1.restore.log" 2>&1 < /dev/null ||
    fail "ctr containers restore $1: $(tail -3 "$T/$1.restore.log")"
  restore_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  wait_checksum "$3"
  [[ $(checksum_of "$3") == "$REF" ]] || fail "$1 ended with $(checksum_of "$3"), an uninterrupted run with $REF"
}

step "a. ctr containers checkpoint --task; the original removed; restored as a new container"
run_container a1 "$T/share/a.log"
steps_before=$(steps_in "$T/share/a.log")
t0=$(date +%s%N)
"${CTR[@]}" containers checkpoint --task a1 ckpt-a > "$T/a.ckpt.log" 2>&1 || fail "ctr containers checkpoint: $(tail -3 "$T/a.ckpt.log")"
checkpoint_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
# (The shim deletes CRIU's work directory, dump.log with it, when the client names none: ctr does not.)
grep -q "criu_dump" "$T/host1/gcrd.log" || fail "the plugin did not ask gcrd for the device memory"
check_checkpoint ckpt-a
remove a1
restore a2 ckpt-a "$T/share/a.log"
echo "ok: checkpointed after step $steps_before ($checkpoint_ms ms); $sizes; restored ($restore_ms ms): $REF"
remove a2

step "b. the original runs on to the end; its image restores too"
run_container b1 "$T/share/b.log"
"${CTR[@]}" containers checkpoint --task b1 ckpt-b > "$T/b.ckpt.log" 2>&1 || fail "ctr containers checkpoint: $(tail -3 "$T/b.ckpt.log")"
check_checkpoint ckpt-b
wait_checksum "$T/share/b.log"
[[ $(checksum_of "$T/share/b.log") == "$REF" ]] || fail "the original ran on to $(checksum_of "$T/share/b.log"), expected $REF"
remove b1
restore b2 ckpt-b "$T/share/b.log"
echo "ok: the original and its restored copy end with $REF"
remove b2

step "c. ctr tasks checkpoint --exit --image-path: the task ends"
run_container c1 "$T/share/c.log"
"${CTR[@]}" tasks checkpoint --exit --image-path "$T/c-img" --work-path "$T/c-work" c1 > "$T/c.ckpt.log" 2>&1 ||
  fail "ctr tasks checkpoint --exit: $(tail -3 "$T/c.ckpt.log")"
grep -q "gcrd parked and stored the device memory" "$T/c-work/dump.log" || fail "the plugin did not hand the device memory to gcrd"
[[ -f $T/c-img/gcr-checkpoint ]] || fail "the images directory has no gcr-checkpoint reference"
wait_until 15 is_stopped c1 || fail "c1 is $(task_status c1) after ctr tasks checkpoint --exit"
pages=$(du -ck "$T/c-img"/pages-*.img | tail -1 | cut -f1)
(( pages * 4 < FOOTPRINT_MIB * 1024 )) || fail "CRIU wrote $pages KiB of pages for a $FOOTPRINT_MIB MiB footprint"
echo "ok: the task ended; CRIU's images $(du -sk "$T/c-img" | cut -f1) KiB (pages $pages KiB), device footprint $FOOTPRINT_MIB MiB"
remove c1

step "d. restore with gcrd down fails before the process exists"
stop_gcrd
names+=(d1)
if "${CTR[@]}" containers restore --live d1 ckpt-a > "$T/d1.restore.log" 2>&1 < /dev/null; then
  fail "a restore with gcrd down succeeded"
fi
why=$(grep -m1 "gcrd does not answer" "$CTRD/state/io.containerd.runtime.v2.task/$NS/d1/work/restore.log") ||
  fail "the restore's log does not say gcrd is down: $(tail -3 "$T/d1.restore.log")"
[[ $(task_status d1) != RUNNING ]] || fail "task d1 runs after the failed restore"
[[ -z $("${CTR[@]}" tasks ps d1 2> /dev/null | awk 'NR > 1') ]] || fail "task d1 has processes after the failed restore"
echo "ok: task d1 is $(task_status d1) with no process; restore.log: ${why#*: }"
remove d1

step "e. self-contained: the checkpoint image moves to another containerd, gcrd and store"
host_config 1 "criu_images = self-contained"
run_container e1 "$T/share/e.log"
"${CTR[@]}" containers checkpoint --task e1 localhost/ckpt-e:1 > "$T/e.ckpt.log" 2>&1 ||
  fail "ctr containers checkpoint (self-contained): $(tail -3 "$T/e.ckpt.log")"
check_checkpoint localhost/ckpt-e:1
grep -qE " (\./)?gcr-store/" "$T/localhost_ckpt-e_1.list" || fail "the CRIU images do not carry the device memory (gcr-store)"
remove e1
"${CTR[@]}" images export --skip-manifest-json "$T/ckpt-e.tar" localhost/ckpt-e:1 > "$T/e.export.log" 2>&1 || fail "ctr images export: $(tail -3 "$T/e.export.log")"
stop_containerd
stop_gcrd
rm -rf "$GCR_STORE"
host_config 2 "criu_images = self-contained"
start_containerd "$T/ctrd2"
"${CTR[@]}" images import --no-unpack "$T/ckpt-e.tar" > "$T/e.import.log" 2>&1 || fail "ctr images import of the checkpoint: $(tail -3 "$T/e.import.log")"
restore e2 localhost/ckpt-e:1 "$T/share/e.log"
grep -q "criu_restore" "$T/host2/gcrd.log" || fail "host 2's gcrd never saw the restore"
echo "ok: CRIU's images with the device memory (gcr-store) $criu_kib KiB, pages $pages KiB; the exported checkpoint image $(( $(stat -c %s "$T/ckpt-e.tar") >> 20 )) MiB; restored on host 2 from it alone: $REF"
remove e2

step "f. a CUDA process not under gcr: the baseline (device memory in CRIU's pages)"
run_container f1 "$T/share/f.log" env "LD_LIBRARY_PATH=$BUILD/simgpu"
"${CTR[@]}" containers checkpoint --task f1 ckpt-f > "$T/f.ckpt.log" 2>&1 || fail "ctr containers checkpoint (baseline): $(tail -3 "$T/f.ckpt.log")"
index=$("${CTR[@]}" images ls | awk '$1 == "ckpt-f" {print $3}')
read -r digest size < <("${CTR[@]}" content get "$index" | python3 -c '
import json, sys
for m in json.load(sys.stdin)["manifests"]:
    if m["mediaType"].endswith("criu.checkpoint.criu.tar"):
        print(m["digest"], m["size"])')
"${CTR[@]}" content get "$digest" | tar -tv > "$T/ckpt-f.list"
! grep -q "gcr-checkpoint$" "$T/ckpt-f.list" || fail "gcrd took part in the checkpoint of a process not under gcr"
pages=$(awk '$6 ~ /pages-/ {s += $3} END {print int(s / 1048576)}' "$T/ckpt-f.list")
(( pages >= FOOTPRINT_MIB )) || fail "the baseline image holds $pages MiB of pages for a $FOOTPRINT_MIB MiB footprint"
wait_checksum "$T/share/f.log"
[[ $(checksum_of "$T/share/f.log") == "$REF" ]] || fail "the process not under gcr ran on to $(checksum_of "$T/share/f.log"), expected $REF"
echo "ok: the baseline: CRIU's images $((size >> 20)) MiB ($pages MiB of pages) for $FOOTPRINT_MIB MiB of device memory; it ran on to $REF"
remove f1
finish
