# Functions of the install tests (lib.sh sources them; so does the part of install_test.sh that
# runs in a mount namespace of its own). Expect T, MLP, REF and an array pids. The waits and
# checks (fail, wait_steps, wait_gone, json_field...) are ../harness.sh's.
source "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"

# round_trip GCR: mlp_train under that gcr, checkpointed live, killed, restored: bit-identical.
round_trip() {
  local gcr=$1 log=$T/rt-$RANDOM.log
  # Its CRIU's capabilities probed now, not in the checkpoint's time (a new CRIU path: Note
  # [CRIU's capabilities probed] in gcr/criu_capabilities.h).
  "$gcr" doctor --capability cow-dump > /dev/null 2>&1 || true
  "$gcr" run -- "${MLP[@]}" > "$log" 2>&1 &
  local p=$!
  pids+=("$p")
  wait_steps "$log" $((RANDOM % 30 + 5))
  "$gcr" checkpoint "$p" -R --json > "$T/ck.json" || fail "$gcr checkpoint"
  [[ $(json_field kind < "$T/ck.json") == gcr ]] || fail "checkpoint kind $(json_field kind < "$T/ck.json"), not gcr"
  kill -9 "$p"
  wait "$p" 2>/dev/null || true
  "$gcr" restore "$(json_field id < "$T/ck.json")" --json > "$T/rs.json" || fail "$gcr restore"
  wait_gone "$(json_field pid < "$T/rs.json")"
  [[ $(checksum_of "$log") == "$REF" ]] || fail "restored run ended with $(checksum_of "$log"), expected $REF"
  echo "ok: $gcr run/checkpoint/restore is bit-identical"
}
