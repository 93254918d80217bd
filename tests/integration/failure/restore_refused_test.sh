#!/usr/bin/env bash
# Description: a restore that cannot succeed fails with a clear message and a meaningful exit
# code before any process exists: an incomplete image (a pack, a pack index or the manifest gone),
# a corrupt one (a byte of device memory, of a CRIU image file, of the manifest), a GPU with too
# little memory (gcrd restarted with a smaller SIMGPU_MEMORY). (A restore whose pid is in use goes
# into a new PID namespace instead: tests/integration/checkpoint/pid_namespace_test.sh.)
# Each time no process with the checkpoint's command line runs afterwards and its pid is free.
# A restored process that cannot be given its device memory is killed, not left hanging; so is one
# whose host memory's lazy-pages daemon dies before all of it is in. The intact image then
# restores to the checksum of an uninterrupted run.
#
#   restore_refused_test.sh BUILD_DIR CRIU     (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"

# damage STORE NAME WHAT: flips a byte in the middle of the stored payload of the first chunk
# (not a zero chunk) of checkpoint NAME's first object WHAT ("region", or a CRIU file's name), or
# of the last chunk of its last region (WHAT "last-region": the last a restore would load), or of
# the middle chunk of a CRIU file (WHAT "NAME@middle").
damage() {
  "$GCR" --store "$1" image inspect "$2" --json --chunks | python3 -c '
import glob, json, os, struct, sys
store, what = sys.argv[1], sys.argv[2]
m = json.load(sys.stdin)
last = what == "last-region"
middle = what.endswith("@middle")
what = what.removesuffix("@middle")
objs = [o for o in m["objects"] if o["kind"] == ("region" if last else what) or o.get("name") == what]
obj = objs[-1] if last else objs[0]
chunks = [c for c in m["chunks"][obj["first_chunk"]:obj["first_chunk"] + obj["chunk_count"]]
          if not c["zero"]]
chunk = chunks[-1] if last else chunks[len(chunks) // 2] if middle else chunks[0]
want = bytes.fromhex(chunk["id"])
for idx in glob.glob(store + "/packs/*.idx"):
    data = open(idx, "rb").read()
    count = struct.unpack_from("<I", data, 12)[0]
    for i in range(count):
        e = 64 + 40 * i
        if data[e:e + 16] == want:
            offset, raw, stored = struct.unpack_from("<QII", data, e + 16)
            with open(idx[:-4] + ".pack", "r+b") as f:
                f.seek(offset + 32 + stored // 2)
                b = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([b[0] ^ 0x55]))
            sys.exit(0)
sys.exit("chunk " + chunk["id"] + " is in no pack index")
' "$1" "$3"
}

# The mlp_train processes of this test (their environment names $T; a restored process keeps its
# original's): other tests run beside this one.
ours() {
  local p
  for p in $(pgrep -f "^$MLP_BIN " || true); do
    grep -qaF "$T/" "/proc/$p/environ" 2>/dev/null && echo "$p"
  done
  return 0
}

# refused WANT_RC WHAT DAMAGE [ENV...]: restores "r1" (with "${RESTORE_ARGS[@]}") from a damaged
# copy of the store (DAMAGE, a command run with $S set to the copy) and expects exit WANT_RC, and
# no process.
N=0
RESTORE_ARGS=()
refused() {
  local want=$1 what=$2 damage=$3 rc=0 out lines
  shift 3
  S=$T/store-$((++N))
  cp -a "$GCR_STORE" "$S"
  eval "$damage"
  lines=$(wc -l <"$T/r.log")
  out=$(env "$@" "$GCR" --store "$S" restore r1 "${RESTORE_ARGS[@]}" 2>&1) || rc=$?
  echo "   $what: exit $rc: $out"
  [[ $rc == "$want" ]] || bad "$what: exit $rc, expected $want ($out)"
  [[ -n $out ]] || bad "$what: no message"
  # Not even for a moment: a restored process would have gone on writing its log.
  [[ $(wc -l <"$T/r.log") == "$lines" ]] ||
    bad "$what: the restored process ran before the restore failed: $(tail -n +$((lines + 1)) "$T/r.log" | head -n 3 | tr '\n' ' ')"
  if alive "$P"; then
    bad "$what: pid $P exists after the refused restore: $(tr '\0' ' ' </proc/"$P"/cmdline)"
    kill -9 "$P"
    wait_gone "$P" || true
  fi
  local left
  left=$(ours)
  if [[ -n $left ]]; then
    bad "$what: a process runs $MLP_BIN after the refused restore: $left"
    kill -9 $left || true
  fi
}

step "checkpoint a run (r1) with --leave-running; the run goes on to its end"
start "$T/r.log"
wait_steps "$T/r.log" 15
"$GCR" checkpoint "$P" --name r1 -R >/dev/null || fail "checkpoint r1"
check_run "the original run, after its checkpoint" "$P" "$T/r.log" 0 || true

step "incomplete images"
refused 7 "a pack file gone" 'rm "$S"/packs/*.pack'
refused 7 "a pack index gone" 'rm "$S"/packs/*.idx'
refused 3 "the manifest gone" 'rm "$S"/manifests/*.manifest'

step "corrupt images"
refused 7 "a byte of device memory" 'damage "$S" r1 region'
refused 7 "a byte of the last device memory to load" 'damage "$S" r1 last-region'
refused 7 "a byte of a CRIU image file" 'damage "$S" r1 "core-$P.img"'
refused 7 "a byte of the manifest" \
  'printf "\xff" | dd of="$(ls "$S"/manifests/*.manifest)" bs=1 seek=100 conv=notrunc status=none'

step "a GPU with too little memory (gcrd with SIMGPU_MEMORY=16M)"
stop_gcrd
refused 13 "16 MiB per GPU" : SIMGPU_MEMORY=16M
RESTORE_ARGS=(--device 1)
refused 13 "16 MiB per GPU, onto GPU 1" : SIMGPU_MEMORY=16M
RESTORE_ARGS=()
stop_gcrd
[[ $(grep -c "needs .* MiB on GPU" "$GCRD_LOG") == 2 ]] || bad "gcrd.log does not say how much memory was needed"

step "a restored process that cannot take its device memory is killed"
stop_gcrd
rc=0
GCR_GCRD_PAUSE_AT=restored:1 "$GCR" restore r1 >"$T/stopped.out" 2>&1 &
c=$!
for _ in $(seq 1 500); do
  grep -q "paused at restored" "$GCRD_LOG" && break
  sleep 0.02
done
if grep -q "paused at restored" "$GCRD_LOG"; then
  kill -STOP "$P"  # restored by CRIU: its agent thread will not answer
  wait "$c" || rc=$?
  echo "   exit $rc: $(cat "$T/stopped.out")"
  [[ $rc != 0 && $(cat "$T/stopped.out") == *"killed"* ]] ||
    bad "a restore whose process could not be unparked: exit $rc, '$(cat "$T/stopped.out")'"
  wait_gone "$P" 5 || bad "the restored process $P that could not be unparked is still there"
else
  bad "gcrd never paused at 'restored': $(cat "$T/stopped.out")"
  wait "$c" || true
fi
stop_gcrd

step "a restored process whose host memory cannot all come in does not run on"
# Note [Host memory restored lazily] (gcr/criu.h): CRIU's lazy-pages daemon holds the pages the
# process has not got yet; killed, the kernel would fill them with zeros. The daemon is stopped
# before CRIU restores (pause point lazy-pages) and killed a little later. CRIU's restore itself
# needs pages from it here (gcr's plugin restores the driver inside the process, which touches its
# memory), so it is CRIU that fails and kills the tasks; a daemon dying after CRIU is done is
# gcrd's to notice (LazyPages::wait), and it kills the process. Either way: an error, no process.
if "$REAL_CRIU" check --feature uffd-noncoop >/dev/null 2>&1; then
  stop_gcrd
  rc=0
  GCR_GCRD_PAUSE_AT=lazy-pages:2 "$GCR" restore r1 >"$T/lazy.out" 2>&1 &
  c=$!
  for _ in $(seq 1 500); do
    grep -q "paused at lazy-pages" "$GCRD_LOG" && break
    sleep 0.02
  done
  daemon=$(pgrep -f "criu lazy-pages -D $GCR_WORK_DIR" | head -n 1 || true)
  if [[ -n $daemon ]]; then
    kill -STOP "$daemon"
    for _ in $(seq 1 250); do  # CRIU has made the process, or is done
      alive "$P" && break
      sleep 0.02
    done
    sleep 3
    kill -KILL "$daemon"
    wait "$c" || rc=$?
    echo "   exit $rc: $(cat "$T/lazy.out")"
    [[ $rc != 0 && ( $(cat "$T/lazy.out") == *"killed it"* ||
      $(cat "$T/lazy.out") == *"criu restore failed"* ) ]] ||
      bad "a restore whose lazy-pages daemon died: exit $rc, '$(cat "$T/lazy.out")'"
    wait_gone "$P" 5 || bad "the restored process $P whose host memory did not come in is still there"
  else
    bad "no criu lazy-pages daemon while gcrd paused at 'lazy-pages': $(cat "$T/lazy.out")"
    wait "$c" || true
  fi
  stop_gcrd
else
  echo "   skipped: this kernel or CRIU has no uffd-noncoop (lazy pages unused)"
fi

step "a byte of host memory: an error, and no process runs on"
# Note [Host memory from the store] (daemon/host_pages.h): the pages CRIU may restore
# lazily are read from the store only when gcrd serves them, after the process runs; a damaged
# one makes gcrd kill the process before the daemon hears of it. (A damaged page CRIU restores
# itself is found while materializing, before any process exists.) A run with 32 MiB of host
# memory (most of its pages image: the damaged middle chunk is one gcrd serves).
MLP_HOST=("${MLP[@]}" --host-footprint 32M)
MLP_SAVED=("${MLP[@]}")
MLP=("${MLP_HOST[@]}")
start "$T/h.log"
MLP=("${MLP_SAVED[@]}")
wait_steps "$T/h.log" 15
"$GCR" checkpoint "$P" --name h1 >/dev/null || fail "checkpoint h1"
wait_gone "$P" 10 || fail "the checkpointed process h1 did not end"
S=$T/store-host
cp -a "$GCR_STORE" "$S"
# The task's pages image: the largest (others hold shared memory's few pages).
pages=$("$GCR" --store "$S" image inspect h1 --json | python3 -c '
import json, sys
files = [o for o in json.load(sys.stdin)["objects"] if o.get("name", "").startswith("pages-")]
print(max(files, key=lambda o: o["size"])["name"])')
damage "$S" h1 "$pages@middle"
lines=$(wc -l <"$T/h.log")
rc=0
out=$("$GCR" --store "$S" restore h1 2>&1) || rc=$?
echo "   exit $rc: $out"
[[ $rc != 0 ]] || bad "a restore from a damaged pages image succeeded: $out"
[[ $out == *"chunk"* ]] || bad "the error does not name the damaged chunk: $out"
if "$REAL_CRIU" check --feature uffd-noncoop >/dev/null 2>&1; then
  # Found while CRIU restores (the restore is ended) or after (the process is killed).
  [[ $out == *"killed it"* || $out == *"the restore was ended"* ]] ||
    bad "the damaged page was not found while gcrd served host memory (or did not end the process): $out"
fi
wait_gone "$P" 5 || bad "the restored process $P is still there after its host memory failed"
left=$(ours)
[[ -z $left ]] || { bad "a process runs $MLP_BIN after the failed restore: $left"; kill -9 $left || true; }
tail -n +$((lines + 1)) "$T/h.log" | grep_quiet "^checksum" &&
  bad "the restored process ran to its end on a damaged page"

step "the intact image restores"
"$GCR" image verify >/dev/null || bad "gcr image verify of the intact store"
restore_check r1 "$T/r.log" "the intact image" || true
finish
