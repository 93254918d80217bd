#!/usr/bin/env bash
# Description: root's restore never opens a path someone changed into a link (docs/security.md,
# "Files the restore opens"; issue 34, finding 1; Note [Files reopened for the restored process]
# in gcr/restore_streams.h), tested as the attack: a process reads a file and maps another, both
# in a directory user nobody can write, and is checkpointed; nobody then replaces each by a link
# to a file of root's of the same size and mode. Before, CRIU (root) reopened each by its path,
# checking only the size, and the restored process held root's files. Now the restore refuses,
# naming the link, and nothing runs; with the files put back it restores and runs on.
#
#   restore_paths_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"

VICTIM=$T/victim  # root's
mkdir -m 0700 "$VICTIM"
printf 'root-secret-0001' >"$VICTIM/read-me"
printf 'root-secret-0002' >"$VICTIM/map-me"
chmod 0644 "$VICTIM/read-me" "$VICTIM/map-me"
printf 'nobodys-data-001' >"$N/data"  # the same sizes and modes
printf 'nobodys-data-002' >"$N/mapped"
chmod 0644 "$N/data" "$N/mapped"
chown nobody:nogroup "$N/data" "$N/mapped"

step "a process that reads $N/data and maps $N/mapped, checkpointed"
cat >"$T/holder.py" <<'EOF'
import mmap, sys, time
data = open(sys.argv[1], "rb")
mapped = open(sys.argv[2], "rb")
view = mmap.mmap(mapped.fileno(), 0, prot=mmap.PROT_READ)
mapped.close()  # only the mapping holds it now
for i in range(100000):
    data.seek(0)
    print("step", i, data.read(16).decode(), view[:16].decode(), flush=True)
    time.sleep(0.05)
EOF
"$GCR" run -- /usr/bin/python3 "$T/holder.py" "$N/data" "$N/mapped" >>"$T/holder.log" 2>&1 </dev/null &
P=$!
pids+=("$P")
disown "$P"  # its checkpoint ends it: no notice from bash
wait_steps "$T/holder.log" 5
"$GCR" checkpoint "$P" --name held >"$T/ck.out" 2>&1 || fail "checkpoint: $(cat "$T/ck.out")"
wait_gone "$P" 20 || fail "the checkpointed process did not end"

step "nobody turns both into links to root's files of the same size"
as_nobody mv "$N/data" "$N/data.orig"
as_nobody mv "$N/mapped" "$N/mapped.orig"
as_nobody ln -s "$VICTIM/read-me" "$N/data"
as_nobody ln -s "$VICTIM/map-me" "$N/mapped"
if out=$("$GCR" restore held --json 2>&1); then
  rp=$(json_field pid <<<"$out")
  pids+=("$rp")
  held=$(ls -l /proc/"$rp"/fd /proc/"$rp"/map_files 2>/dev/null | grep -c "$VICTIM" || true)
  bad "root restored the process through nobody's links ($held of its files or mappings are root's): $out"
  kill -9 "$rp" 2>/dev/null || true
  wait_gone "$rp" 10 || true
elif [[ $out != *"symbolic link"* ]]; then
  bad "the refusal does not name the link: $out"
else
  echo "refused: $(head -c 300 <<<"$out")"
fi

step "the file it read put back, the one it mapped still a link"
as_nobody rm "$N/data"
as_nobody mv "$N/data.orig" "$N/data"
if out=$("$GCR" restore held --json 2>&1); then
  rp=$(json_field pid <<<"$out")
  pids+=("$rp")
  bad "root restored the process with a mapping through nobody's link: $out"
  kill -9 "$rp" 2>/dev/null || true
  wait_gone "$rp" 10 || true
elif [[ $out != *"$N/mapped is a symbolic link"* ]]; then
  bad "the refusal does not name the mapped file: $out"
fi

step "the files put back: the same checkpoint restores and runs on"
as_nobody rm "$N/mapped"
as_nobody mv "$N/mapped.orig" "$N/mapped"
before=$(steps_in "$T/holder.log")
out=$("$GCR" restore held --json 2>&1) || fail "the restore of the unchanged files failed: $out"
rp=$(json_field pid <<<"$out")
pids+=("$rp")
wait_steps "$T/holder.log" $((before + 5))
tail -n 1 "$T/holder.log" | grep_quiet "nobodys-data-001 nobodys-data-002" ||
  bad "the restored process reads something else: $(tail -n 1 "$T/holder.log")"
kill -9 "$rp" 2>/dev/null || true
finish
