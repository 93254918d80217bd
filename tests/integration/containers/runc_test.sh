#!/usr/bin/env bash
# runc checkpoints and restores a container running `gcr run mlp_train`, through gcr's CRIU plugin
# and gcrd (docs/containers.md): the device memory is parked and stored by gcrd, so CRIU's images
# hold a small fraction of the footprint, and every restored run ends with the checksum of an
# uninterrupted one. The container has its own pid, network and mount namespaces.
#   a. checkpoint (the container ends), restore into a new container
#   b. --leave-running: the original runs on to the right checksum; its image restores too
#   c. self-contained images (gcr.conf: criu_images = self-contained): the images directory is
#      copied to a "second host" (another gcrd, another store, the first store gone) and restored
#   d. restore with gcrd down fails before any process exists; with the plugin missing, loudly
#   f. a CUDA process not under gcr: the baseline (device memory in CRIU's pages), and with
#      --leave-running it runs on (runc's CRIU runs over RPC: the plugin cannot see -R)
#   e. a job: mp_train --ranks 2 (ranks sharing device memory), cut, checkpointed and restored as
#      one, every rank ending with the single-process reference
#
#   runc_test.sh BUILD_DIR      (needs root, runc and CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=runc-test
source "$(dirname "$0")/lib.sh"
command -v runc > /dev/null || skip "runc is missing (scripts/setup.sh installs it)"
FOOTPRINT_MIB=64
# A run steps slowly and holds before its last step while $T/slow exists (made before it starts,
# removed once its checkpoint is taken; the container sees $T): no checkpoint finds the run ended
# however slow the machine, and the rest, the restores and the references (no $T/slow) go at
# full speed.
SLOW=(--delay-while "$T/slow" --hold-while "$T/slow")
MLP=("$BUILD/tests/workloads/mlp_train" --steps 150 --step-delay-ms 10 --footprint ${FOOTPRINT_MIB}M "${SLOW[@]}")
RUNC=(runc --criu "$CRIU")

LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(checksum_of "$T/ref.log")
start_gcrd "$GCR_GCRD_SOCKET"

# run_container NAME LOG: a container running the workload under gcr, at step 20 or later.
run_container() {
  : > "$T/slow"
  make_bundle "$T/$1" "$2" "$GCR" run -- "${MLP[@]}"
  runc run -d --bundle "$T/$1" "$1" > "$T/$1.log" 2>&1 < /dev/null || fail "runc run $1: $(cat "$T/$1.log")"
  containers+=("$1")
  wait_steps "$2" 20
}
# images_pages_mib DIR: what CRIU wrote of the processes' memory.
images_pages_mib() { du -cm "$1"/pages-*.img | tail -1 | cut -f1; }
# check_restored NAME BUNDLE IMAGES LOG: restores IMAGES as container NAME; LOG ends with $REF.
check_restored() {
  local name=$1 bundle=$2 images=$3 log=$4
  : > "$log"
  "${RUNC[@]}" restore -d --image-path "$images" --work-path "$T/$name-work" --bundle "$bundle" "$name" \
    > "$T/$name-restore.log" 2>&1 < /dev/null || fail "runc restore $name: $(tail -3 "$T/$name-restore.log")"
  containers+=("$name")
  wait_checksum "$log"
  [[ $(checksum_of "$log") == "$REF" ]] || fail "$name ended with $(checksum_of "$log"), an uninterrupted run with $REF"
}

step "a. checkpoint, then restore into a new container"
run_container a1 "$T/a.log"
"${RUNC[@]}" checkpoint --image-path "$T/a-img" --work-path "$T/a-work" a1 || fail "runc checkpoint a1"
rm -f "$T/slow"
grep -q "gcrd parked and stored the device memory" "$T/a-work/dump.log" || fail "the plugin did not hand the device memory to gcrd"
[[ -f $T/a-img/gcr-checkpoint ]] || fail "the images directory has no gcr-checkpoint reference"
pages=$(images_pages_mib "$T/a-img")
(( pages * 4 < FOOTPRINT_MIB )) || fail "CRIU wrote $pages MiB of pages for a $FOOTPRINT_MIB MiB footprint: the device memory was not parked"
[[ $(runc list -q) != *a1* ]] || fail "a1 still exists after its checkpoint"
steps_before=$(steps_in "$T/a.log")
check_restored a2 "$T/a1" "$T/a-img" "$T/a.log"
echo "ok: checkpointed at step $steps_before with $pages MiB of CRIU pages for $FOOTPRINT_MIB MiB of device memory; restored: $REF"
runc delete -f a2 > /dev/null 2>&1 || true

step "b. --leave-running"
run_container b1 "$T/b.log"
"${RUNC[@]}" checkpoint --leave-running --image-path "$T/b-img" --work-path "$T/b-work" b1 || fail "runc checkpoint --leave-running"
rm -f "$T/slow"
wait_checksum "$T/b.log"
[[ $(checksum_of "$T/b.log") == "$REF" ]] || fail "the original ran on to $(checksum_of "$T/b.log"), expected $REF"
runc delete -f b1 > /dev/null 2>&1 || true
check_restored b2 "$T/b1" "$T/b-img" "$T/b.log"
echo "ok: the original and its restored copy end with $REF"
runc delete -f b2 > /dev/null 2>&1 || true

step "c. self-contained images, restored by another gcrd with another store"
cat > "$T/gcr.conf" << CONF
# what podman's CRIU cannot get from its environment
criu_images = self-contained
CONF
run_container c1 "$T/c.log"
GCR_CONFIG=$T/gcr.conf "${RUNC[@]}" checkpoint --image-path "$T/c-img" --work-path "$T/c-work" c1 || fail "runc checkpoint (self-contained)"
rm -f "$T/slow"
grep -q "^store=images$" "$T/c-img/gcr-checkpoint" || fail "the reference does not say self-contained: $(cat "$T/c-img/gcr-checkpoint")"
[[ -d $T/c-img/gcr-store ]] || fail "no gcr-store in the images directory"
cp -a "$T/c-img" "$T/c-img-moved"
rm -rf "$T/c-img" "$GCR_STORE"
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" || true
export GCR_GCRD_SOCKET=$T/host2/gcrd.sock GCR_STORE=$T/host2/store
mkdir -p "$T/host2"
start_gcrd "$GCR_GCRD_SOCKET"
check_restored c2 "$T/c1" "$T/c-img-moved" "$T/c.log"
echo "ok: $(du -sm "$T/c-img-moved/gcr-store" | cut -f1) MiB of device memory travelled in the images directory; restored: $REF"
runc delete -f c2 > /dev/null 2>&1 || true

step "d. restores that must fail before the process exists"
pkill -f "gcrd --socket $GCR_GCRD_SOCKET" || true
for _ in $(seq 1 100); do pgrep -f "gcrd --socket $GCR_GCRD_SOCKET" > /dev/null || break; sleep 0.05; done
if "${RUNC[@]}" restore -d --image-path "$T/c-img-moved" --work-path "$T/d1-work" --bundle "$T/c1" d1 \
    > "$T/d1.log" 2>&1 < /dev/null; then
  containers+=(d1)
  fail "a restore with gcrd down succeeded"
fi
grep -q "gcrd does not answer" "$T/d1-work/restore.log" || fail "the restore's log does not say gcrd is down"
[[ $(runc list -q) != *d1* ]] || { runc delete -f d1 > /dev/null 2>&1 || true; fail "a container d1 exists after the failed restore"; }
pgrep -f "mlp_train --steps 150 --step-delay-ms 10 --footprint ${FOOTPRINT_MIB}M" > /dev/null && fail "a workload process exists after the failed restore"
mkdir -p "$T/no-plugins"
if CRIU_LIBS_DIR=$T/no-plugins "${RUNC[@]}" restore -d --image-path "$T/c-img-moved" --work-path "$T/d2-work" \
    --bundle "$T/c1" d2 > "$T/d2.log" 2>&1 < /dev/null; then
  containers+=(d2)
  fail "a restore without gcr's plugin succeeded"
fi
grep -q "Missing required plugin" "$T/d2-work/restore.log" || fail "the restore without the plugin does not say so"
echo "ok: gcrd down and the plugin missing both fail the restore with nothing left running"

step "e. a two-rank job in a container"
export GCR_GCRD_SOCKET=$T/host3/gcrd.sock GCR_STORE=$T/host3/store
mkdir -p "$T/host3"
start_gcrd "$GCR_GCRD_SOCKET"
MP=("$BUILD/tests/workloads/mp_train" --steps 200 --step-delay-ms 10 "${SLOW[@]}")
LD_LIBRARY_PATH=$BUILD/simgpu "${MP[@]}" --ranks 1 --quiet > "$T/mp-ref.log" 2>&1
MP_REF=$(checksum_of "$T/mp-ref.log")
: > "$T/slow"
make_bundle "$T/e1" "$T/e.log" "$GCR" run -- "${MP[@]}" --ranks 2
runc run -d --bundle "$T/e1" e1 > "$T/e1.log" 2>&1 < /dev/null || fail "runc run e1: $(cat "$T/e1.log")"
containers+=(e1)
wait_steps "$T/e.log" $((RANDOM % 40 + 10))
"${RUNC[@]}" checkpoint --image-path "$T/e-img" --work-path "$T/e-work" e1 || fail "runc checkpoint of the job"
rm -f "$T/slow"
grep -q "gcrd: quiescing 2 processes of job" "$T/e-work/dump.log" || fail "gcrd did not checkpoint the ranks as one job"
: > "$T/e.log"
"${RUNC[@]}" restore -d --image-path "$T/e-img" --work-path "$T/e2-work" --bundle "$T/e1" e2 \
  > "$T/e2-restore.log" 2>&1 < /dev/null || fail "runc restore of the job: $(tail -3 "$T/e2-restore.log")"
containers+=(e2)
for _ in $(seq 1 1500); do [[ $(grep -c "checksum " "$T/e.log") -ge 2 ]] && break; sleep 0.02; done
[[ $(grep -cE "checksum $MP_REF\$" "$T/e.log") == 2 ]] || fail "the restored job's ranks: $(grep checksum "$T/e.log" | tr '\n' ' '), expected $MP_REF twice"
echo "ok: both ranks of the restored job end with $MP_REF"

step "f. a CUDA process not under gcr: the baseline"
: > "$T/slow"
make_bundle "$T/f1" "$T/f.log" env "LD_LIBRARY_PATH=$BUILD/simgpu" "${MLP[@]}"
runc run -d --bundle "$T/f1" f1 > "$T/f1.log" 2>&1 < /dev/null || fail "runc run f1: $(cat "$T/f1.log")"
containers+=(f1)
wait_steps "$T/f.log" 20
"${RUNC[@]}" checkpoint --leave-running --image-path "$T/f-img" --work-path "$T/f-work" f1 || fail "runc checkpoint -R of a process not under gcr"
rm -f "$T/slow"
[[ ! -e $T/f-img/gcr-checkpoint ]] || fail "gcrd took part in the checkpoint of a process not under gcr"
pages=$(images_pages_mib "$T/f-img")
(( pages >= FOOTPRINT_MIB )) || fail "the baseline image holds $pages MiB of pages for a $FOOTPRINT_MIB MiB footprint"
wait_checksum "$T/f.log"
[[ $(checksum_of "$T/f.log") == "$REF" ]] || fail "the process not under gcr ran on to $(checksum_of "$T/f.log"), expected $REF"
echo "ok: the baseline: $pages MiB of CRIU pages, and the original ran on to $REF"
