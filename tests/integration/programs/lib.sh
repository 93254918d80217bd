# Shared by the program tests: sourced after `set -euo pipefail` with the build dir as $1 and
# TEST_NAME set. Brings in ../checkpoint/lib.sh (root or skip 77, a store, gcrd and work dir of
# the test's own, cleanup, fail/json_field/checksum_of/wait_steps), then adds:
#   launch LOG CMD...       start `gcr run -- CMD` the way a user does in a shell: in the
#                           background of this script's bash (same session and process group, not
#                           setsid), output to LOG (`>`); sets P to its pid
#   checkpoint_json OUT ARGS...   gcr checkpoint ARGS --json > OUT, or fail with its output
#   restore_and_check ID LOG REF  gcr restore ID --json; wait for the restored process to end and
#                           check that it appended exactly one `checksum` line to LOG, equal to REF
#
# PROGRAMS_START=setsid starts the programs as the older tests do instead (setsid, `>>`, stdin
# from /dev/null): to tell a failure of gcr's shell-job support from one of the workload.
source "$(dirname "${BASH_SOURCE[0]}")/../checkpoint/lib.sh"

launch() {
  local log=$1
  shift
  if [[ ${PROGRAMS_START:-} == setsid ]]; then
    setsid "$GCR" run -- "$@" >> "$log" 2>&1 < /dev/null &
  else
    "$GCR" run -- "$@" > "$log" 2>&1 &
  fi
  P=$!
  pids+=("$P")
}

# PID and its descendants, from /proc/*/task/*/children.
tree_of() {
  local p=$1 c
  echo "$p"
  for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree_of "$c"; done
}

checkpoint_json() {
  local out=$1
  shift
  "$GCR" checkpoint "$@" --json > "$out" 2> "$out.err" ||
    fail "gcr checkpoint $*: $(cat "$out.err" "$out" | head -n 20)"
}

restore_and_check() {
  local id=$1 log=$2 ref=$3 before
  before=$(checksums_in "$log")
  "$GCR" restore "$id" --json > "$T/restore-$id.json" 2> "$T/restore-$id.err" ||
    fail "gcr restore $id: $(cat "$T/restore-$id.err" "$T/restore-$id.json" | head -n 20)"
  local rp
  rp=$(json_field pid < "$T/restore-$id.json")
  [[ -n $rp ]] || fail "gcr restore $id --json gave no pid: $(cat "$T/restore-$id.json")"
  pids+=("$rp")
  wait_gone "$rp"
  local after
  after=$(checksums_in "$log")
  [[ $after == $((before + 1)) ]] ||
    fail "restored process $rp (checkpoint $id) added $((after - before)) checksum lines to $log, expected 1; its tail: $(tail -n 5 "$log")"
  local got
  got=$(checksum_of "$log")
  [[ $got == "$ref" ]] || fail "restored process $rp (checkpoint $id) ended with checksum $got, expected $ref"
  echo "ok: restore of $id (pid $rp) finished with $ref"
}

# The scenario of both workload tests. TAG names the checkpoints; CMD is the program (under gcr).
#   a: two --leave-running checkpoints at random moments, the second after 15 more steps (it
#      stores only what changed since the first); the original runs to completion with REF; then
#      each checkpoint is restored in turn (the original's pids are free again) and each restored
#      run must end with REF too;
#   b: a checkpoint without --leave-running (the process ends), then its restore ends with REF.
checkpoint_scenarios() {  # TAG REF CMD...
  local tag=$1 ref=$2
  shift 2
  echo "== $tag: two live checkpoints; the original finishes"
  launch "$T/$tag-a.log" "$@"
  local first=$((RANDOM % 15 + 5))
  wait_steps "$T/$tag-a.log" "$first"
  checkpoint_json "$T/$tag-a1.json" "$P" --name "$tag-a1" -R
  kill -0 "$P" 2>/dev/null || fail "$tag: the process is gone after a --leave-running checkpoint"
  wait_steps "$T/$tag-a.log" $((first + 15))
  checkpoint_json "$T/$tag-a2.json" "$P" --name "$tag-a2" -R
  local rc=0
  wait "$P" || rc=$?
  [[ $rc == 0 ]] || fail "$tag: the original exited with $rc after two live checkpoints: $(tail -n 5 "$T/$tag-a.log")"
  [[ $(checksums_in "$T/$tag-a.log") == 1 && $(checksum_of "$T/$tag-a.log") == "$ref" ]] ||
    fail "$tag: the original ended with '$(checksum_of "$T/$tag-a.log")', expected $ref"
  echo "ok: the original, checkpointed at steps ~$first and ~$((first + 15)), ended with $ref"
  local id1 id2
  id1=$(json_field id < "$T/$tag-a1.json")
  id2=$(json_field id < "$T/$tag-a2.json")
  echo "checkpoint 1: $(json_field stat.new_bytes < "$T/$tag-a1.json") new bytes;" \
       "checkpoint 2: $(json_field stat.new_bytes < "$T/$tag-a2.json") new bytes," \
       "$(json_field dirty_bytes < "$T/$tag-a2.json") of $(json_field region_bytes < "$T/$tag-a2.json") device bytes changed"
  restore_and_check "$id1" "$T/$tag-a.log" "$ref"
  restore_and_check "$id2" "$T/$tag-a.log" "$ref"

  echo "== $tag: a checkpoint that ends the process, then its restore"
  launch "$T/$tag-b.log" "$@"
  disown "$P"  # its checkpoint kills it: no "Killed" notice from bash (which still reaps it)
  wait_steps "$T/$tag-b.log" $((RANDOM % 20 + 5))
  local tree
  tree=$(tree_of "$P" | tr '\n' ' ')
  pids+=($tree)
  checkpoint_json "$T/$tag-b1.json" "$P" --name "$tag-b1"
  # The restore needs every pid of the tree: without --leave-running gcr must end all of it, as
  # `criu dump` does. (A worker that outlived its trainer is reaped by init; give it time.)
  wait_gone "$P"
  local p left
  for _ in $(seq 1 500); do
    left=""
    # (A process may go between kill -0 and awk: that awk failing must not end the test.)
    for p in $tree; do
      if kill -0 "$p" 2>/dev/null; then left+=" $p($(awk '{print $3}' /proc/"$p"/stat 2>/dev/null || true))"; fi
    done
    [[ -z $left ]] && break
    sleep 0.02
  done
  [[ -z $left ]] || fail "$tag: after a checkpoint without --leave-running, processes of the tree [$tree] remain: $left (pid(state))"
  [[ $(checksums_in "$T/$tag-b.log") == 0 ]] || fail "$tag: the process finished before its checkpoint ended it"
  restore_and_check "$(json_field id < "$T/$tag-b1.json")" "$T/$tag-b.log" "$ref"
}
