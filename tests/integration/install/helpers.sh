# Functions of the install tests (lib.sh sources them; so does the part of install_test.sh that
# runs in a mount namespace of its own). Expect T, MLP, REF and an array pids.
fail() { echo "FAIL: $*"; exit 1; }
checksum_of() { awk '/^checksum/ {c=$2} END {print c}' "$1"; }
json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d.get('$1',''))"; }
steps_in() { grep -c '^step' "$1" 2>/dev/null || true; }
wait_steps() {
  for _ in $(seq 1 1000); do [[ $(steps_in "$1") -ge $2 ]] && return 0; sleep 0.02; done
  fail "$1 did not reach step $2"
}
wait_gone() { for _ in $(seq 1 3000); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.02; done; fail "pid $1 did not end"; }

# round_trip GCR: mlp_train under that gcr, checkpointed live, killed, restored: bit-identical.
round_trip() {
  local gcr=$1 log=$T/rt-$RANDOM.log
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
