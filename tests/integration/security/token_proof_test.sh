#!/usr/bin/env bash
# Description: the network token is proven, never sent (docs/security.md, "Network"; issue 34,
# finding 4; Note [Proving the token] in gcrd-net/net_handshake.h), tested as the attacks:
#   a. user nobody squats a port and root's `gcr image pull gcr://` connects to it (as it would
#      to a gcrd's port while that gcrd is down): nobody must not receive the token, nor anything
#      that lets it in; gcr must refuse the squatter, saying why;
#   b. what nobody did receive, sent to the real gcrd: refused;
#   c. a recording of an honest client's whole session (an eavesdropper's capture), replayed to
#      gcrd: refused, nothing served.
# Before, the client's first line was the token in clear: (a) handed it over and (b), (c) got in.
#
#   token_proof_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
ip -4 addr show lo | grep_quiet "127.0.0.1" || { echo "SKIP: no loopback"; exit 77; }
PEER=$(dirname "$0")/net_peer.py

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/token"
chmod 600 "$T/token"
TOKEN=$(cat "$T/token")
PORT=$(free_port)
SQUAT=$(free_port)
RELAY=$(free_port)
LD_LIBRARY_PATH=$BUILD/simgpu "$BUILD/bin/gcrd" --socket "$T/net/gcrd.sock" --listen "127.0.0.1:$PORT" \
  --token-file "$T/token" --store "$T/served" >"$T/gcrd-net.log" 2>&1 &
pids+=($!)
listening() { ss -ltn "sport = :$1" | grep_quiet LISTEN; }
wait_until 30 listening "$PORT" || fail "gcrd --listen did not listen: $(tail -n 3 "$T/gcrd-net.log")"

step "a. root's gcr connects to nobody's squatter"
as_nobody /usr/bin/python3 "$PEER" squat "$SQUAT" "$N/capture" &
pids+=($!)
SQUATTER=$!
wait_until 30 test -e "$N/capture.listening" || fail "the squatter did not listen"
if GCR_NET_TIMEOUT_MS=3000 "$GCR" image pull "gcr://127.0.0.1:$SQUAT/x" --token-file "$T/token" >"$T/a.out" 2>&1; then
  bad "gcr took the squatter for gcrd"
fi
wait_gone "$SQUATTER" 30 || fail "the squatter did not end"
[[ -s $N/capture ]] || fail "the squatter received nothing at all"
if grep -qF "$TOKEN" "$N/capture"; then bad "the squatter received the token: $(head -c 200 "$N/capture")"; fi
grep -q "wrong token" "$T/a.out" || bad "gcr's refusal does not say why: $(cat "$T/a.out")"
grep -q "proof=" "$N/capture" && bad "gcr sent its proof to a peer that proved nothing: $(cat "$N/capture")"
echo "ok: the squatter got $(wc -c <"$N/capture") bytes, no token; gcr said: $(tail -n 1 "$T/a.out" | cut -c1-160)"

step "b. what the squatter received, sent to gcrd"
answer=$(/usr/bin/python3 "$PEER" replay "$PORT" "$N/capture")
echo "$answer" | grep_quiet "^ok" && bad "gcrd served what the squatter received: '$answer'"
echo "ok: gcrd answered '$(echo "$answer" | tr '\n' ' ' | cut -c1-160)'"

step "c. an honest session recorded on the way, then replayed"
/usr/bin/python3 "$PEER" record "$RELAY" "$PORT" "$T/recorded" &
RECORDER=$!
pids+=("$RECORDER")
wait_until 30 test -e "$T/recorded.listening" || fail "the recording relay did not listen"
if "$GCR" image pull "gcr://127.0.0.1:$RELAY/no-such-checkpoint" --token-file "$T/token" >"$T/c.out" 2>&1; then
  fail "a pull of a checkpoint that is not there succeeded"
fi
grep -q "wrong token\|refused" "$T/c.out" && fail "the honest client was refused through the relay: $(cat "$T/c.out")"
wait_gone "$RECORDER" 30 || fail "the recording relay did not end"
[[ -s $T/recorded ]] || fail "nothing was recorded"
answer=$(/usr/bin/python3 "$PEER" replay "$PORT" "$T/recorded")
echo "$answer" | grep_quiet "^ok" && bad "gcrd served a replayed session: '$answer'"
echo "$answer" | grep_quiet "wrong token\|wrong%20token" || bad "gcrd's refusal of the replay does not say why: '$answer'"
echo "ok: replayed, gcrd answered '$(echo "$answer" | tr '\n' ' ' | cut -c1-160)'"
finish
