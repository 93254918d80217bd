#!/usr/bin/env python3
"""serve_on_demand.py: scale to zero and back with gcr clones (docs/serving.md).

Listens on --listen HOST:PORT in place of a server. The first connection restores a clone of the
warm checkpoint NAME (`gcr restore NAME --clone --address A/N --bridge BR --detach`) and is held
until the clone answers on A:PORT (--port, the port the server listened on when checkpointed);
from then on every connection is relayed to it. After --idle seconds without a connection the
clone is ended (scale to zero); the next connection restores a new one. The checkpoint stays.

  serve_on_demand.py NAME --listen 0.0.0.0:8000 --address 10.88.0.10/24 --bridge gcr0 --port 7811
                     [--idle 30] [--gcr PATH]

Prints one line per event ("clone answering N ms after its restore began", "restored clone PID
in N ms (all its memory in)", "ended idle clone PID"); a restore that
fails is said on stderr and its connection closed. Runs as root (clones are root's). Ends on
SIGINT/SIGTERM, ending its clone. Exit codes: 0 ended by a signal, 2 bad usage.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time


class Replica:
    """The clone, restored on first use and ended when idle."""

    def __init__(self, a):
        self.a = a
        self.host = a.address.split("/")[0]
        self.pid = 0  # once its restore returned
        self.restore = None  # the `gcr restore` of the clone
        self.done = threading.Event()  # set once that restore returned
        self.active = 0
        self.last_used = time.monotonic()
        self.lock = threading.Lock()

    def ensure(self):
        """The clone's address, restored first if none runs. A connection goes through as soon as
        the clone listens, before `gcr restore` returns (it waits for all device memory)."""
        with self.lock:
            self.active += 1
            if self.restore and (self.restore.poll() is None or self.alive()):
                return (self.host, self.a.port)
            t0 = time.monotonic()
            self.pid = 0
            self.done = threading.Event()
            self.restore = subprocess.Popen(
                [self.a.gcr, "restore", self.a.name, "--clone", "--address", self.a.address,
                 "--bridge", self.a.bridge, "--detach", "--log", os.devnull, "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            threading.Thread(target=self.restored, args=(self.restore, t0), daemon=True).start()
            try:
                wait_listening(self.host, self.a.port, 60, lambda: self.restore.poll() in (None, 0))
            except RuntimeError:
                self.active -= 1
                raise
            print(f"clone answering {(time.monotonic() - t0) * 1e3:.0f} ms after its restore began",
                  flush=True)
            return (self.host, self.a.port)

    def restored(self, p, t0):
        out, err = p.communicate()
        if p.returncode != 0:
            print(f"serve_on_demand: the restore failed: {err.strip() or out.strip()}",
                  file=sys.stderr, flush=True)
        else:
            self.pid = int(json.loads(out)["pid"])
            print(f"restored clone {self.pid} in {(time.monotonic() - t0) * 1e3:.0f} ms (all its "
                  "memory in)", flush=True)
        self.done.set()

    def alive(self):
        return self.pid and os.path.exists(f"/proc/{self.pid}")

    def release(self):
        with self.lock:
            self.active -= 1
            self.last_used = time.monotonic()

    def end_if_idle(self):
        with self.lock:
            if (self.restore and self.restore.poll() is not None and self.active == 0
                    and time.monotonic() - self.last_used >= self.a.idle):
                pid = self.end()
                print(f"ended idle clone {pid}", flush=True)

    def end(self):
        """Ends the clone (its restore first, if it still runs); returns its pid."""
        if self.restore:
            self.done.wait()  # restored() has the pid
        pid, self.pid, self.restore = self.pid, 0, None
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pid


def wait_listening(host, port, timeout_s, still_coming):
    """Until host:port takes a connection (each try gives up after 50 ms: an address not up yet
    is not waited on for ARP's seconds), while still_coming()."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=0.05).close()
            return
        except OSError:
            if not still_coming():
                raise RuntimeError(f"the clone's restore failed before it listened on {host}:{port}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the clone did not listen on {host}:{port} in {timeout_s} s")
            time.sleep(0.002)


def pump(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def relay(client, replica):
    try:
        server = socket.create_connection(replica.ensure())
    except (OSError, RuntimeError) as e:
        print(f"serve_on_demand: {e}", file=sys.stderr, flush=True)
        client.close()
        return
    try:
        back = threading.Thread(target=pump, args=(server, client), daemon=True)
        back.start()
        pump(client, server)
        back.join()
    finally:
        client.close()
        server.close()
        replica.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the warm checkpoint (a tag or id)")
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept clients on")
    ap.add_argument("--address", required=True, help="the clone's address, A.B.C.D/N")
    ap.add_argument("--bridge", required=True, help="the bridge the clone joins (made and up)")
    ap.add_argument("--port", type=int, required=True, help="the port the server listens on")
    ap.add_argument("--idle", type=float, default=30, help="seconds without a connection before "
                    "the clone is ended (default 30)")
    ap.add_argument("--gcr", default="gcr")
    a = ap.parse_args()
    host, _, port = a.listen.rpartition(":")
    replica = Replica(a)
    front = socket.socket()
    front.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    front.bind((host, int(port)))
    front.listen(64)
    front.settimeout(0.5)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on {a.listen} for {a.name}", flush=True)
    try:
        while True:
            try:
                client, _ = front.accept()
            except socket.timeout:
                replica.end_if_idle()
                continue
            threading.Thread(target=relay, args=(client, replica), daemon=True).start()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        replica.end()
    return 0


if __name__ == "__main__":
    sys.exit(main())
