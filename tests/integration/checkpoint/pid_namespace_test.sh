#!/usr/bin/env bash
# Restores that cannot have the original pid: a --leave-running checkpoint of mlp_train restored
# while the original still runs, then the same image restored twice at once (scale-out). Each
# copy gets a PID namespace of its own (criu as its init) and finishes with the checksum of an
# uninterrupted run, as does the original. The two concurrent restores read the image's device
# memory from the store about once between them (gcrd's piece cache), not once each.
#
#   pid_namespace_test.sh BUILD_DIR      (needs root for CRIU; exits 77 to skip)
set -euo pipefail
TEST_NAME=pidns-test
source "$(dirname "$0")/lib.sh"
command -v unshare > /dev/null || { echo "SKIP: unshare(1) is missing"; exit 77; }
export GCR_LOAD_MIB_PER_S=12  # loads of ~4 s, so that the two concurrent restores overlap
# A run steps slowly and holds before its last step while $T/slow exists (made before it starts,
# removed once its copy is restored): none finds the run ended however slow the machine, and
# the rest, the restores and the reference (no $T/slow) go at full speed.
MLP=("$BUILD/tests/workloads/mlp_train" --steps 150 --step-delay-ms 10 --footprint 48M
     --delay-while "$T/slow" --hold-while "$T/slow")
checksums() { grep -c '^checksum' "$1" 2>/dev/null || true; }
wait_checksums() {  # LOG N
  for _ in $(seq 1 3000); do [[ $(checksums "$1") -ge $2 ]] && return 0; sleep 0.02; done
  fail "$1 has $(checksums "$1") checksum lines, expected $2"
}

LD_LIBRARY_PATH=$BUILD/simgpu "${MLP[@]}" > "$T/ref.log" 2>&1
REF=$(awk '/^checksum/ {print $2}' "$T/ref.log")

echo "== restore while the original runs"
: > "$T/slow"
setsid "$GCR" run -- "${MLP[@]}" >> "$T/a.log" 2>&1 < /dev/null &
P=$!
pids+=("$P")
for _ in $(seq 1 500); do [[ $(grep -c '^step' "$T/a.log") -ge 30 ]] && break; sleep 0.02; done
"$GCR" checkpoint "$P" --name live -R > /dev/null || fail "checkpoint -R"
kill -0 "$P" || fail "the original is gone after a --leave-running checkpoint"
"$GCR" restore live --json > "$T/r1.json" || fail "restore while the original runs"
rm -f "$T/slow"
[[ $(json_field new_pid_namespace < "$T/r1.json") == 1 ]] || fail "the restore did not use a new PID namespace"
[[ $(json_field original_pid < "$T/r1.json") == "$P" ]] || fail "the restored process's pid inside is not $P"
R1=$(json_field pid < "$T/r1.json")
[[ $R1 != "$P" ]] || fail "the restored copy has the original's host pid"
grep -q "NSpid:.*[[:space:]]$P\$" "/proc/$R1/status" 2>/dev/null || [[ ! -e /proc/$R1 ]] || fail "copy $R1 does not see itself as $P"
wait_checksums "$T/a.log" 2
[[ $(awk '/^checksum/ {print $2}' "$T/a.log" | sort -u) == "$REF" ]] || fail "original and copy: $(grep '^checksum' "$T/a.log" | tr '\n' ' '), expected $REF"
echo "ok: the original and its copy both end with $REF"

echo "== two restores of one image at once"
: > "$T/a.log"
"$GCR" restore live --json > "$T/r2.json" &
A=$!
"$GCR" restore live --json > "$T/r3.json" &
B=$!
wait "$A" || fail "the first of two concurrent restores"
wait "$B" || fail "the second of two concurrent restores"
[[ $(json_field pid < "$T/r2.json") != $(json_field pid < "$T/r3.json") ]] || fail "two restores report one pid"
wait_checksums "$T/a.log" 2
[[ $(awk '/^checksum/ {print $2}' "$T/a.log" | sort -u) == "$REF" ]] || fail "two copies: $(grep '^checksum' "$T/a.log" | tr '\n' ' '), expected $REF"
echo "ok: both copies end with $REF"
read2=$(json_field store_read_bytes < "$T/r2.json"); read3=$(json_field store_read_bytes < "$T/r3.json")
shared=$(( $(json_field shared_bytes < "$T/r2.json") + $(json_field shared_bytes < "$T/r3.json") ))
total=$(json_field region_bytes < "$T/r2.json")
echo "device memory $total bytes; read from the store: $read2 + $read3; shared: $shared"
(( read2 + read3 < 2 * total )) || fail "the two restores each read all of the image ($read2 + $read3 of $total each)"
(( read2 + read3 + shared == 2 * total )) || fail "reads and shares do not add up to both restores' memory"
for _ in $(seq 1 250); do pgrep -f "criu restore -D $GCR_WORK_DIR" > /dev/null || break; sleep 0.02; done
pgrep -f "criu restore -D $GCR_WORK_DIR" > /dev/null && fail "a criu restore outlived its process"
echo "PASS"
