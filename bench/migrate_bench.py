#!/usr/bin/env python3
"""migrate_bench: downtime and total time of `gcr migrate` against stop-and-copy, in one run.

Two "hosts" on this machine: the destination gcrd runs in a network namespace of its own, reached
over a veth pair (10.78.0.1 <-> 10.78.0.2), with its own store. The link is shaped to 10 Gbit/s
and a 1 ms round trip: `tc tbf` on both ends limits the rate, and tests/link/delay_relay (in the
path: the source talks to 10.78.0.1:7072, the relay to the destination) holds each byte 0.5 ms in
each direction, since these kernels have no sch_netem. The link's round trip and bulk rate are
measured first, in the same run, and written with the results; `--link unshaped` leaves the veth
bare. For each footprint an mlp_train runs under `gcr run`, its log watched with this host's clock,
and is moved:

  gcr migrate     `gcr migrate PID --to DEST`: pre-copy rounds while it runs, then a short stop
  stop-and-copy   `gcr migrate PID --to DEST --rounds 0`: the process stops, its checkpoint goes
                  over whole, the destination restores it (checkpoint, copy the image, restore)

With --container the program runs in a runc container (under `gcr run` inside it) and moves with
`gcr migrate --container NAME` (the destination gcrd restores it with runc from its own copy of
the bundle: --containers); stop-and-copy is the same command with --rounds 0 (runc checkpoint,
the whole checkpoint over, runc restore there).

Each mode runs twice by default (--encryption both): over gcrd-net/3's TLS, as always, and with
GCR_NET_PLAINTEXT=1 on both ends (a benchmark hook that skips TLS after the proofs; gcrd accepts
it only when started with it), so that what encryption costs a migration is measured in the same
run (Note [An encrypted channel] in gcrd-net/net_tls.h).

Downtime: the last step line the source wrote -> the first step line the destination wrote,
less one step period (the program's step delay plus its compute); total: the command's wall time.
Goal printed beside the figures: downtime that does not grow with the footprint, and at the
largest footprint at least 20x below stop-and-copy's. Nothing is asserted; exit 1 only when a
migration failed.

  bench/migrate_bench.py [--build DIR] [--footprints 256M,1G,4G | --quick] [--link shaped|unshaped]
                         [--container] [--encryption both|on|off] [--json FILE]

Root, CRIU, iproute2 (and runc for --container). Results: bench/results/migrate-<time>.json.
"""

import argparse
import datetime
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NS = "gcr-migbench"
VA, VB = "gmba", "gmbb"
DEST = "10.78.0.2:7071"
RELAYED = "10.78.0.1:7072"  # the shaped link's near end (delay_relay -> DEST)
RATE = "10gbit"
DELAY_US = 500  # each way: a 1 ms round trip
RELAY_BIN = None  # set in main: BUILD/tests/link/delay_relay
STEP_DELAY_MS = 10


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, **kw)


def setup_link(shaped, relay):
    """The veth pair, and when shaped its rate (tbf, both ends) and its delay (the relay). Returns
    the relay's process or None."""
    teardown_link()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VA, "type", "veth", "peer", "name", VB)
    sh("ip", "link", "set", VB, "netns", NS)
    sh("ip", "addr", "add", "10.78.0.1/24", "dev", VA)
    sh("ip", "link", "set", VA, "up")
    sh("ip", "netns", "exec", NS, "ip", "addr", "add", "10.78.0.2/24", "dev", VB)
    sh("ip", "netns", "exec", NS, "ip", "link", "set", VB, "up")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
    if not shaped:
        return None
    tbf = ["tc", "qdisc", "add", "dev", "DEV", "root", "tbf", "rate", RATE, "burst", "4mb", "latency", "20ms"]
    sh(*[VA if w == "DEV" else w for w in tbf])
    sh("ip", "netns", "exec", NS, *[VB if w == "DEV" else w for w in tbf])
    proc = subprocess.Popen([relay, RELAYED, DEST, str(DELAY_US)], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "listening":
        raise SystemExit("migrate_bench: delay_relay did not start")
    return proc


PROBE_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); print("ready", flush=True)
for _ in range(2):
    c, _ = s.accept()
    if c.recv(1) == b"p":
        while (d := c.recv(1)):
            c.sendall(d)
    else:
        n = 0
        while (d := c.recv(1 << 20)):
            n += len(d)
        c.sendall(str(n).encode())
    c.close()
"""


def measure_link(target):
    """The link as the migration sees it: round trip of one byte, and a 1 GiB bulk send."""
    host, port = DEST.split(":")
    srv = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", PROBE_SERVER, host, str(int(port) + 100)],
                           stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()
    thost, tport = target.split(":")
    relay = None
    if target != DEST:  # through a second relay to the probe's port, shaped the same way
        relay = subprocess.Popen([RELAY_BIN, f"{thost}:{int(tport) + 100}", f"{host}:{int(port) + 100}", str(DELAY_US)],
                                 stdout=subprocess.PIPE, text=True)
        relay.stdout.readline()
    addr = (thost, int(tport) + 100) if relay else (host, int(port) + 100)
    try:
        c = socket.create_connection(addr)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(b"p")
        t = time.monotonic()
        for _ in range(200):
            c.sendall(b"x")
            c.recv(1)
        rtt = (time.monotonic() - t) / 200
        c.close()
        c = socket.create_connection(addr)
        c.sendall(b"b")
        buf, t = b"\0" * (1 << 20), time.monotonic()
        for _ in range(1024):
            c.sendall(buf)
        c.shutdown(socket.SHUT_WR)
        n = int(c.recv(100))
        rate = n * 8 / (time.monotonic() - t) / 1e9
        c.close()
    finally:
        srv.kill()
        if relay:
            relay.kill()
    return {"rtt_ms": round(rtt * 1000, 3), "bulk_gbit_s": round(rate, 2)}


def teardown_link():
    sh("ip", "netns", "del", NS, check=False, capture_output=True)
    sh("ip", "link", "del", VA, check=False, capture_output=True)


class LogWatch:
    """Timestamps each step line of a log as it appears (this host's monotonic clock)."""

    def __init__(self, path):
        self.path, self.times, self.stop = path, [], False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        pos, partial = 0, b""
        while not self.stop:
            try:
                with open(self.path, "rb") as f:
                    f.seek(pos)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            if data:
                pos += len(data)
                now = time.monotonic()
                lines = (partial + data).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    if line.startswith(b"step "):
                        self.times.append(now)
            time.sleep(0.001)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--footprints", default="256M,1G,4G")
    ap.add_argument("--quick", action="store_true", help="64M and 256M")
    ap.add_argument("--link", choices=("shaped", "unshaped"), default="shaped",
                    help=f"shaped: tbf {RATE} and {DELAY_US} us each way (default); unshaped: the bare veth")
    ap.add_argument("--container", action="store_true",
                    help="the program in a runc container, moved with gcr migrate --container")
    ap.add_argument("--encryption", choices=("both", "on", "off"), default="both",
                    help="both: each mode over TLS and in clear (GCR_NET_PLAINTEXT=1), in one run")
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("migrate_bench: needs root (CRIU, network namespaces)", file=sys.stderr)
        return 2
    build = os.path.abspath(a.build)
    fps = ["64M", "256M"] if a.quick else a.footprints.split(",")
    gcr, gcrd = os.path.join(build, "bin", "gcr"), os.path.join(build, "bin", "gcrd")
    mlp = os.path.join(build, "tests", "workloads", "mlp_train")
    global RELAY_BIN
    RELAY_BIN = os.path.join(build, "tests", "link", "delay_relay")
    if a.link == "shaped" and not os.access(RELAY_BIN, os.X_OK):
        print(f"migrate_bench: {RELAY_BIN} is not built (cmake --build build --target delay_relay)", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="gcr-migbench.", dir="/var/tmp")
    os.chmod(work, 0o755)
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(token, 0o600)
    env = dict(os.environ, GCR_STORE=os.path.join(work, "src-store"),
               GCR_GCRD_SOCKET=os.path.join(work, "src", "gcrd.sock"),
               GCR_WORK_DIR=os.path.join(work, "src-work"), GCR_QUIET="1",
               SIMGPU_DEVICES="1", SIMGPU_MEMORY="12G")
    if a.container and not shutil.which("runc"):
        print("migrate_bench: --container needs runc (scripts/setup.sh installs it)", file=sys.stderr)
        return 2
    repo = os.path.abspath(os.path.join(build, ".."))
    runc_b = os.path.join(work, "runc-b.sh")  # the destination's runc keeps its state apart
    with open(runc_b, "w") as f:
        f.write(f"#!/bin/sh\nexec runc --root {shlex.quote(os.path.join(work, 'runc-b'))} \"$@\"\n")
    os.chmod(runc_b, 0o755)
    bundles_b = os.path.join(work, "bundles-b")
    os.makedirs(bundles_b)
    relay = setup_link(a.link == "shaped", RELAY_BIN)
    to = RELAYED if relay else DEST
    rows, failed = [], False
    try:
        link = measure_link(to)
        print(f"link: {a.link}, round trip {link['rtt_ms']} ms, bulk {link['bulk_gbit_s']} Gbit/s (measured)", flush=True)
        for fp in fps:
            clear = {"both": (False, True), "on": (False,), "off": (True,)}[a.encryption]
            for mode, plaintext in [(m, c) for m in ("gcr", "stop-and-copy") for c in clear]:
                label = mode + (" plaintext" if plaintext else "")
                slug = f"{fp}-{label.replace(' ', '-')}"
                hook = ["GCR_NET_PLAINTEXT=1"] if plaintext else []
                dest_dir = os.path.join(work, f"dest-{slug}")
                os.makedirs(dest_dir)
                sh("ip", "netns", "exec", NS, "pkill", "-9", "-f", "gcrd --socket " + work + "/dest", check=False)
                time.sleep(0.2)
                # nsenter --net, not ip netns exec (which remounts /sys: runc would find no cgroups)
                sh("nsenter", "--net=/run/netns/" + NS, "env", "LD_LIBRARY_PATH=" + os.path.join(build, "simgpu"),
                   "GCR_WORK_DIR=" + os.path.join(dest_dir, "work"), "SIMGPU_DEVICES=1", "SIMGPU_MEMORY=12G", *hook,
                   gcrd, "--socket", os.path.join(work, "dest", "gcrd.sock"), "--detach", "--listen", DEST,
                   "--token-file", token, "--store", os.path.join(dest_dir, "store"),
                   "--allow-uids", "0",  # the benchmark's processes are root's
                   *(["--containers", bundles_b, "--runtime", runc_b] if a.container else []),
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                log = os.path.join(work, f"run-{slug}.log")
                watch = LogWatch(log)
                program = [mlp, "--steps", "1000000", "--step-delay-ms", str(STEP_DELAY_MS), "--footprint", fp]
                name = f"mb-{slug}".lower()
                if a.container:
                    bundle = os.path.join(work, name)
                    # tests/integration/containers/make_bundle.py: the tests' bundle, with this
                    # run's SIMGPU_* and GCR_QUIET
                    sh(sys.executable, os.path.join(repo, "tests", "integration", "containers", "make_bundle.py"),
                       bundle, log, work, repo, gcr, "run", "--", *program, env=env)
                    shutil.copytree(bundle, os.path.join(bundles_b, name), symlinks=True)
                    sh("runc", "run", "-d", "--bundle", bundle, name, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    proc = None
                else:
                    with open(log, "ab") as out:
                        proc = subprocess.Popen([gcr, "run", "--"] + program,
                                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
                while len(watch.times) < 30:
                    time.sleep(0.01)
                period = (watch.times[-1] - watch.times[10]) / (len(watch.times) - 11)
                args = [gcr, "migrate"] + (["--container", name] if a.container else [str(proc.pid)])
                args += ["--to", to, "--token-file", token, "--json"]
                if mode == "stop-and-copy":
                    args += ["--rounds", "0"]
                t0 = time.monotonic()
                r = subprocess.run(args, env=dict(env, GCR_NET_PLAINTEXT="1") if plaintext else env,
                                   capture_output=True, text=True)
                total = time.monotonic() - t0
                if proc:
                    proc.wait()
                if r.returncode != 0:
                    print(f"{label} {fp}: gcr migrate failed: {r.stderr.strip()}", file=sys.stderr)
                    failed = True
                    watch.stop = True
                    continue
                report = json.loads(r.stdout)
                before = len(watch.times)
                deadline = time.monotonic() + 120
                while len(watch.times) == before and time.monotonic() < deadline:
                    time.sleep(0.005)
                # The stop is the longest gap between two step lines (pre-copy rounds stall less).
                gaps = [b - a for a, b in zip(watch.times, watch.times[1:])]
                gap = max(gaps) if gaps else 0
                downtime = max(gap - period, 0.0)
                watch.stop = True
                sh("ip", "netns", "exec", NS, "pkill", "-9", "-f", "mlp_train --steps 1000000", check=False)
                if a.container:
                    for rt in (["runc"], [runc_b]):
                        sh(*rt, "delete", "-f", name, check=False, capture_output=True)
                row = {"mode": mode + (" container" if a.container else ""), "encrypted": not plaintext,
                       "footprint": fp, "downtime_ms": round(downtime * 1000, 1),
                       "total_ms": round(total * 1000, 1), "step_period_ms": round(period * 1000, 1),
                       "rounds": report.get("rounds"), "sent_while_stopped": report.get("last_sent_bytes"),
                       "reported_downtime_ms": round(report.get("downtime_ns", 0) / 1e6, 1),
                       # where the stop went, as gcr migrate --json splits it (ns)
                       "stop": {k: v for k, v in report.items()
                                if k.endswith("_ns") and k not in ("downtime_ns", "total_ns")},
                       "destination_restore": report.get("destination_restore", {})}
                rows.append(row)
                print(f"{label + (' container' if a.container else ''):34s} {fp:5s} downtime {row['downtime_ms']:8.1f} ms  total {row['total_ms']:8.1f} ms  "
                      f"rounds {row['rounds']}  sent while stopped {row['sent_while_stopped'] or 0:>11} B", flush=True)
    finally:
        if a.container:
            for rt in (["runc"], [runc_b]):
                listed = sh(*rt, "list", "-q", check=False, capture_output=True, text=True).stdout.split()
                for c in listed:
                    if c.startswith("mb-"):
                        sh(*rt, "delete", "-f", c, check=False, capture_output=True)
        sh("ip", "netns", "exec", NS, "pkill", "-9", "-f", "gcrd --socket " + work, check=False, capture_output=True)
        sh("pkill", "-f", "gcrd --socket " + work, check=False)
        if relay:
            relay.kill()
        teardown_link()
    print("\nstop-and-copy / gcr migrate downtime (goal: >= 20x at the largest footprint, flat in the footprint)")
    for fp in fps:
        g = next((r for r in rows if r["footprint"] == fp and r["mode"].startswith("gcr")), None)
        s = next((r for r in rows if r["footprint"] == fp and r["mode"].startswith("stop-and-copy")
                  and r["encrypted"] == g["encrypted"]), None) if g else None
        if g and s and g["downtime_ms"] > 0:
            print(f"  {fp:5s} {s['downtime_ms'] / g['downtime_ms']:.1f}x  ({s['downtime_ms']:.0f} vs {g['downtime_ms']:.0f} ms)")
    if a.encryption == "both":
        print("\nencrypted / plaintext (gcrd-net/3's TLS against GCR_NET_PLAINTEXT=1, same run)")
        for fp in fps:
            for mode in ("gcr", "stop-and-copy"):
                on = next((r for r in rows if r["footprint"] == fp and r["mode"].startswith(mode) and r["encrypted"]), None)
                off = next((r for r in rows if r["footprint"] == fp and r["mode"].startswith(mode) and not r["encrypted"]), None)
                if on and off and off["downtime_ms"] > 0 and off["total_ms"] > 0:
                    print(f"  {mode:14s} {fp:5s} downtime {on['downtime_ms'] / off['downtime_ms']:.2f}x "
                          f"({on['downtime_ms']:.0f} vs {off['downtime_ms']:.0f} ms), total "
                          f"{on['total_ms'] / off['total_ms']:.2f}x ({on['total_ms']:.0f} vs {off['total_ms']:.0f} ms)")
    result = {"bench": "migrate", "when": datetime.datetime.utcnow().isoformat() + "Z", "cpus": os.cpu_count(),
              "link": dict(link, kind=(f"veth, tc tbf {RATE} both ends, delay_relay {DELAY_US} us each way"
                                       if relay else "veth, unshaped")),
              "step_delay_ms": STEP_DELAY_MS, "container": a.container, "rows": rows}
    kind = "migrate-container-" if a.container else "migrate-"
    path = a.json or os.path.join(HERE, "results", kind + datetime.datetime.utcnow().strftime("%Y-%m-%dT%H%M%S") + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("results:", path)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
