#!/usr/bin/env python3
"""infer_ask.py HOST:PORT N [N ...]: asks infer_server for each N on one connection and prints
its answer lines ("answer N HEX"); --time adds the milliseconds from connecting to each answer.
Connecting is retried until --wait seconds have passed (default 0: one try). Exit codes: 0 every
answer came, 1 a wrong reply, 2 no connection. Also a module: connect() and ask() (serve_bench)."""
import argparse
import socket
import sys
import time


def connect(host, port, wait_s, reply_timeout_s=60):
    """A connection to host:port, tried until wait_s has passed. While it retries, each try gives
    up after 50 ms: an address not up yet (a clone being restored) is not waited on for ARP's
    seconds. With wait_s 0, one try of up to 10 s (a busy machine)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            s = socket.create_connection((host, port), timeout=0.05 if wait_s > 0 else 10)
            s.settimeout(reply_timeout_s)
            return s
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def ask(f, n):
    """'infer n' on the connection's file f: its answer line, or None for any other reply."""
    f.write(f"infer {n}\n")
    f.flush()
    line = f.readline().strip()
    return line if line.startswith(f"answer {n} ") else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address")
    p.add_argument("n", nargs="+", type=int)
    p.add_argument("--time", action="store_true")
    p.add_argument("--wait", type=float, default=0.0)
    a = p.parse_args()
    host, _, port = a.address.rpartition(":")
    t0 = time.monotonic()
    try:
        s = connect(host, int(port), a.wait)
    except OSError as e:
        print(f"infer_ask: cannot connect to {a.address}: {e}", file=sys.stderr)
        return 2
    f = s.makefile("rw")
    for n in a.n:
        line = ask(f, n)
        if line is None:
            print(f"infer_ask: {a.address} gave no answer to 'infer {n}'", file=sys.stderr)
            return 1
        print(line + (f" {(time.monotonic() - t0) * 1e3:.1f}" if a.time else ""))
    f.write("quit\n")
    f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
