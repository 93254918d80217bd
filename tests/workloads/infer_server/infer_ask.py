#!/usr/bin/env python3
"""infer_ask.py HOST:PORT N [N ...]: asks infer_server for each N on one connection and prints
its answer lines ("answer N HEX"); --time adds the milliseconds from connecting to each answer.
Connection refused is retried until --wait seconds have passed (default 0: fail at once).
Exit codes: 0 every answer came, 1 a wrong reply, 2 no connection."""
import argparse
import socket
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address")
    p.add_argument("n", nargs="+", type=int)
    p.add_argument("--time", action="store_true")
    p.add_argument("--wait", type=float, default=0.0)
    a = p.parse_args()
    host, _, port = a.address.rpartition(":")
    t0 = time.monotonic()
    while True:
        try:
            s = socket.create_connection((host, int(port)), timeout=60)
            break
        except OSError as e:
            if time.monotonic() - t0 >= a.wait:
                print(f"infer_ask: cannot connect to {a.address}: {e}", file=sys.stderr)
                return 2
            time.sleep(0.01)
    f = s.makefile("rw")
    for n in a.n:
        f.write(f"infer {n}\n")
        f.flush()
        line = f.readline().strip()
        if not line.startswith(f"answer {n} "):
            print(f"infer_ask: {a.address} said {line!r} to 'infer {n}'", file=sys.stderr)
            return 1
        print(line + (f" {(time.monotonic() - t0) * 1000:.1f}" if a.time else ""))
    f.write("quit\n")
    f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
