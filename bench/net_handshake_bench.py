#!/usr/bin/env python3
"""net_handshake_bench: what proving the token costs a gcrd-net connection, in one run.

Two gcrd --listen on loopback with the same token: a build that speaks gcrd-net/2 (each
side proves it holds the token with an HMAC over both sides' nonces: one more round trip, Note
[Proving the token] in gcrd-net/net_handshake.h), and a baseline build's, which speaks gcrd-net/1
(the token itself on the first line). For each, N connections one after another, each
connect + handshake + `gcrd/1 ping` + its answer, timed on this host's clock; printed: the median
and 90th percentile per connection and the ratio to the baseline. Nothing is asserted.

On a link with a round trip of R, gcrd-net/2 adds one R to every connection: a migration opens
one after the stop (its restore request), so its downtime grows by one R.

  bench/net_handshake_bench.py --baseline-build DIR --build DIR [-n N] [--json FILE]

--build must be a build of a commit whose gcrd speaks gcrd-net/2 (f9d0607 and before, back to
gcrd-net/2's introduction): gcr speaks gcrd-net/3 since, whose TLS this Python client cannot speak
(3.11's ssl module has no external pre-shared keys). What gcrd-net/3 adds, the TLS handshake and
the relay's throughput, is measured by build/bench/bench_net_tls.

Root (gcrd's token file must be its user's). Results: bench/results/net-handshake-<time>.json.
"""
import argparse
import hashlib
import hmac
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration", "security"))
from net_peer import read_line  # noqa: E402


# The client side of gcrd-net/2.
def proof(token, role, verb, client_nonce, server_nonce):
    message = "gcrd-net/2 %s %s %s %s" % (role, verb, client_nonce, server_nonce)
    return hmac.new(token.encode(), message.encode(), hashlib.sha256).hexdigest()


def ping_v1(port, token):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(("gcrd-net/1 request token=%s\ngcrd/1 ping\n" % token).encode())
        return read_line(s)


def ping_v2(port, token):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mine = os.urandom(32).hex()
        s.sendall(("gcrd-net/2 request nonce=%s\n" % mine).encode())
        fields = dict(f.split("=", 1) for f in read_line(s).split()[1:])
        if fields.get("proof") != proof(token, "server", "request", mine, fields["nonce"]):
            raise RuntimeError("the server's proof is wrong")
        s.sendall(("proof=%s\ngcrd/1 ping\n" % proof(token, "client", "request", mine,
                                                      fields["nonce"])).encode())
        return read_line(s)


def start_gcrd(build, work, name, port, token_file):
    os.makedirs(os.path.join(work, name), exist_ok=True)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "simgpu"),
               GCR_WORK_DIR=os.path.join(work, name, "work"))
    p = subprocess.Popen([os.path.join(build, "bin", "gcrd"), "--socket",
                          os.path.join(work, name, "gcrd.sock"), "--listen", "127.0.0.1:%d" % port,
                          "--token-file", token_file, "--store", os.path.join(work, name, "store")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit("gcrd of %s did not listen on %d" % (build, port))


def measure(fn, port, token, n):
    fn(port, token)  # warm up (gcrd's first request)
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        answer = fn(port, token)
        times.append(time.perf_counter_ns() - t0)
        if not answer.startswith("ok"):
            sys.exit("ping answered '%s'" % answer)
    times.sort()
    return {"median_us": statistics.median(times) / 1000,
            "p90_us": times[int(0.9 * (len(times) - 1))] / 1000, "n": n}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="a build whose gcrd speaks gcrd-net/2")
    ap.add_argument("--baseline-build", required=True,
                    help="a build of a commit whose gcrd speaks gcrd-net/1")
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gcr-net-handshake-")
    token_file = os.path.join(work, "token")
    token = os.urandom(32).hex()
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(token + "\n")
    port = 20000 + os.getpid() % 20000
    head = start_gcrd(os.path.abspath(a.build), work, "head", port, token_file)
    base = start_gcrd(os.path.abspath(a.baseline_build), work, "base", port + 1, token_file)
    try:
        # Alternating rounds, so that the machine's drift falls on both alike.
        rounds = {"gcrd-net/2": [], "gcrd-net/1": []}
        for _ in range(3):
            rounds["gcrd-net/1"].append(measure(ping_v1, port + 1, token, a.n // 3))
            rounds["gcrd-net/2"].append(measure(ping_v2, port, token, a.n // 3))
    finally:
        head.kill()
        base.kill()
    result = {}
    for proto, rs in rounds.items():
        result[proto] = {"median_us": statistics.median(r["median_us"] for r in rs),
                         "p90_us": statistics.median(r["p90_us"] for r in rs),
                         "connections": sum(r["n"] for r in rs)}
    ratio = result["gcrd-net/2"]["median_us"] / result["gcrd-net/1"]["median_us"]
    print("connect + handshake + ping, one after another on loopback (median / p90 per connection):")
    for proto in ("gcrd-net/1", "gcrd-net/2"):
        r = result[proto]
        print("  %-11s %8.1f us  %8.1f us   (%d connections)" % (proto, r["median_us"], r["p90_us"],
                                                              r["connections"]))
    print("  gcrd-net/2 / gcrd-net/1: %.2fx (one more round trip, two HMAC-SHA256)" % ratio)
    out = {"bench": "net_handshake", "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "build": os.path.abspath(a.build), "baseline_build": os.path.abspath(a.baseline_build),
           "results": result, "ratio_v2_to_v1": ratio}
    path = a.json or os.path.join(HERE, "results",
                                  "net-handshake-%s.json" % time.strftime("%Y-%m-%dT%H%M%S"))
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print("written to", path)


if __name__ == "__main__":
    main()
