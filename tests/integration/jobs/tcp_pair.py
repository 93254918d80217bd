#!/usr/bin/env python3
"""tcp_pair.py serve PORT | connect HOST:PORT  [--rounds N] [--block BYTES] [--delay-ms MS]

Two processes started on their own that talk over one TCP connection in both directions at once:
each round, a thread sends this side's block (BYTES, derived from its role and the round) while
the main thread receives the peer's and checks it byte for byte, so bytes are in flight each way
at most moments. Each process holds a CUDA context and a device allocation (driver API through
ctypes: libcuda.so.1, gcr's interposer under `gcr run`), so that it is a member of gcr's job.
Prints `step I` per round and, at the end, `checksum HEX` (a digest of every block received: the
same for every run of the same role). A block that differs from what the peer must have sent
fails with exit 3, naming the round.
"""
import argparse
import ctypes
import hashlib
import socket
import sys
import threading
import time

cuda = ctypes.CDLL("libcuda.so.1")


def check(what, r):
    if r != 0:
        print(f"tcp_pair: {what} failed: {r}", file=sys.stderr)
        sys.exit(2)


def block(role, i, size):
    seed = hashlib.sha256(f"{role}/{i}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def recv_exactly(sock, n):
    parts, got = [], 0
    while got < n:
        b = sock.recv(min(n - got, 1 << 20))
        if not b:
            print("tcp_pair: the peer closed the connection", file=sys.stderr)
            sys.exit(4)
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["serve", "connect"])
    p.add_argument("where")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--block", type=int, default=256 << 10)
    p.add_argument("--delay-ms", type=int, default=20)
    a = p.parse_args()

    ctx, dev, mem = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64()
    check("cuInit", cuda.cuInit(0))
    check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
    check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
    check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(mem), 1 << 20))

    if a.role == "serve":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", int(a.where)))
        ls.listen(1)
        print("listening", flush=True)
        sock, _ = ls.accept()
        ls.close()
    else:
        host, port = a.where.rsplit(":", 1)
        deadline = time.monotonic() + 30
        while True:
            try:
                sock = socket.create_connection((host, int(port)), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    print(f"tcp_pair: cannot reach {a.where}", file=sys.stderr)
                    sys.exit(5)
                time.sleep(0.05)
        sock.settimeout(None)
    mine, theirs = a.role, ("connect" if a.role == "serve" else "serve")
    digest = hashlib.sha256()
    for i in range(a.rounds):
        sender = threading.Thread(target=sock.sendall, args=(block(mine, i, a.block),))
        sender.start()
        got = recv_exactly(sock, a.block)
        sender.join()
        if got != block(theirs, i, a.block):
            print(f"tcp_pair: round {i}: the block received is not the one the peer sent",
                  file=sys.stderr)
            sys.exit(3)
        digest.update(got)
        print(f"step {i}", flush=True)
        time.sleep(a.delay_ms / 1000)
    print(f"checksum {digest.hexdigest()[:16]}", flush=True)


main()
