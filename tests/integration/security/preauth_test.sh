#!/usr/bin/env bash
# Description: nothing held before a network peer is authenticated (docs/security.md, "Network";
# issue 34, finding 5; Note [Before a peer is authenticated] in daemon/daemon.h), tested as the
# attack: a peer without the token opens 80 connections to gcrd --listen and drips one byte of
# its first line every 2 s on each. Meanwhile a peer that has the token, from another address,
# must be served at once (before: the dripping peer held all 64 network slots for as long as it
# liked, the 10 s limit applying to each byte); and each dripping connection must be closed by
# gcrd once its first line has taken 10 s in all.
#
#   preauth_test.sh BUILD_DIR CRIU   (needs root; exits 77 to skip)
source "$(dirname "$0")/lib.sh"
ip -4 addr show lo | grep_quiet "127.0.0.1" || { echo "SKIP: no loopback"; exit 77; }

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/token"
chmod 600 "$T/token"
PORT=$(free_port)
LD_LIBRARY_PATH=$BUILD/simgpu "$BUILD/bin/gcrd" --socket "$T/net/gcrd.sock" --listen "127.0.0.1:$PORT" --token-file "$T/token" \
  --store "$T/served" >"$T/gcrd-net.log" 2>&1 &
pids+=($!)
listening() { ss -ltn "sport = :$PORT" | grep_quiet LISTEN; }
wait_until 30 listening || fail "gcrd --listen did not listen: $(tail -n 3 "$T/gcrd-net.log")"

step "80 connections dripping their first line, from 127.0.0.2"
python3 - "$PORT" "$T/drip" <<'EOF' &
import socket, sys, time
port, report = int(sys.argv[1]), sys.argv[2]
conns, started = [], time.monotonic()
for _ in range(80):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    try:
        s.connect(("127.0.0.1", port))
        conns.append(s)
    except OSError:
        pass
# One byte every 2 s on each: a first line that never ends. Note when gcrd closes each.
closed_after = {}
open(report + ".started", "w").close()
while time.monotonic() - started < 24 and len(closed_after) < len(conns):
    for i, s in enumerate(conns):
        if i in closed_after:
            continue
        try:
            s.send(b"g")
            s.setblocking(False)
            if s.recv(1) == b"":
                closed_after[i] = time.monotonic() - started
        except BlockingIOError:
            pass
        except OSError:
            closed_after[i] = time.monotonic() - started
        finally:
            s.setblocking(True)
    time.sleep(2)
with open(report, "w") as f:
    f.write("%d %d %.1f\n" % (len(conns), len(closed_after), max(closed_after.values(), default=0)))
EOF
DRIP=$!
pids+=("$DRIP")
wait_until 30 test -e "$T/drip.started" || fail "the dripping peer did not start"

step "the peer with the token, from 127.0.0.1, while they drip"
t0=$(date +%s%N)
# Served: the store answers that it holds no such checkpoint (a refusal would say why it refused).
answer=$("$GCR" image pull "gcr://127.0.0.1:$PORT/no-such-checkpoint" --token-file "$T/token" 2>&1) || true
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $answer == *"no checkpoint named"* ]] || bad "the peer with the token was not served while another dripped: '$answer' after $ms ms"
echo "served in $ms ms: $answer"

wait "$DRIP" || true
read -r opened closed last <"$T/drip" || fail "the dripping peer wrote no report"
echo "dripping peer: $opened connections accepted, $closed closed by gcrd, the last after $last s"
((closed == opened)) || bad "gcrd left $((opened - closed)) of $opened dripping connections open past 24 s"
finish
