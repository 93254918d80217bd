#!/usr/bin/env python3
"""serve_bench: how soon a new inference replica answers, a cold start against gcr restores.

For each weights size (default 1G and 4G; --quick: 64M and 256M), infer_server (tests/workloads)
serves under `gcr run` on simgpu, and the time from the command to the first correct answer
("infer 1" asked until it is answered) is measured for:

  cold start       `gcr run -- infer_server ...`: start, weights from the file (in the page cache,
                   and again after drop_caches), the warm-up (--warmup-passes, default 28)
  gcr clone        `gcr restore warm --clone --address ... --bridge ...` of the warm checkpoint
                   (taken with -R while the server serves), 1, 2 and 4 clones at once, with the
                   store in the page cache and after drop_caches; the time is the last clone's
  stop-copy        the same of a --stop-copy checkpoint (cuda-checkpoint + CRIU's way), 1 clone

Each answer is checked against the original's. An answer's own compute (one pass over every
weight, on the CPU under simgpu) is measured on the running original and printed beside: the
goal counts it as part of the weights' load. Goals (issue 39), printed as ratios: first answer
after a gcr restore <= 100 ms + the load's share (the weights at the load goal's rate, plus one
answer's compute); >= 10x sooner than the cold start; 4 clones at once within 2x of one.

Benchmarks print and record; nothing about time is asserted: the exit status is 1 only when a
run failed, 2 on bad usage.

  bench/serve_bench.py [--build DIR] [--sizes 1G,4G | --quick] [--clones 1,2,4] [--no-cold]
                       [--warmup-passes N] [--dir /var/tmp] [--no-results]

Needs root (CRIU, namespaces, a bridge, drop_caches). Results: bench/results/serve-<time>.json.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_bench as cb  # noqa: E402  (shared helpers: processes, gcrd, formatting)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "workloads", "infer_server"))
import infer_ask  # noqa: E402  (infer_server's client: connect() and ask())

LOAD_GOAL_SHARE = 0.6  # the warm load goal (issue 38): 60% of a single-thread memcpy, measured


def ask(host, port, n, deadline):
    """'infer n' at host:port, retried until answered or the deadline: (answer line, t answered)."""
    while True:
        left = deadline - time.monotonic()
        try:
            with infer_ask.connect(host, port, max(0.01, left), max(1.0, left)) as s:
                line = infer_ask.ask(s.makefile("rw"), n)
                if line:
                    return line, time.monotonic()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise cb.Failure(f"{host}:{port} did not answer 'infer {n}' in time")
        time.sleep(0.005)


class Bench:
    def __init__(self, args, size):
        self.args, self.size = args, size
        self.root = tempfile.mkdtemp(prefix=f"gcr-bench-serve-{cb.size_arg(size)}-", dir=args.dir)
        self.gcr = os.path.join(args.build, "bin", "gcr")
        self.server = os.path.join(args.build, "tests", "workloads", "infer_server")
        self.weights = os.path.join(self.root, "weights.bin")
        self.port = 7000 + os.getpid() % 1000
        self.net = f"10.{100 + os.getpid() % 100}.{os.getpid() % 250}"
        self.bridge = f"gsb{os.getpid() % 100000}"
        self.timeout = 120 + 60 * size / cb.GiB
        self.env = dict(os.environ)
        self.env.update(GCR_STORE=os.path.join(self.root, "store"), GCR_QUIET="1",
                        GCR_GCRD_SOCKET=os.path.join(self.root, "gcrd.sock"),
                        GCR_WORK_DIR=os.path.join(self.root, "work"), SIMGPU_DEVICES="1",
                        # the simulated GPU's size, which every process on it shares: the
                        # original's and each clone's weights and cache, and some to spare
                        SIMGPU_MEMORY=cb.size_arg((max(args.clones) + 1) * (size + 256 * cb.MiB)
                                                  + cb.GiB))

    def server_cmd(self, passes, make=False):
        return ([self.gcr, "run", "--", self.server, "--weights", self.weights, "--listen",
                 f"0.0.0.0:{self.port}", "--warmup-passes", str(passes), "--cache", "256M"]
                + (["--make-weights", cb.size_arg(self.size)] if make else []))

    def start_server(self, passes, make=False):
        log = open(os.path.join(self.root, "server.log"), "ab")
        p = subprocess.Popen(self.server_cmd(passes, make), env=self.env, stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        cb.REAPER.add(p.pid, "infer_server", p)
        return p

    def cold_start(self, cache):
        if cache == "cold":
            cb.drop_caches()
        t0 = time.monotonic()
        p = self.start_server(self.args.warmup_passes)
        line, t1 = ask("127.0.0.1", self.port, 1, t0 + self.timeout)
        return p, line, (t1 - t0) * 1e3

    def clones(self, name, k, cache):
        """k clones of checkpoint `name` restored at once: each one's (first answer ms, answer)."""
        if cache == "cold":
            cb.drop_caches()
        t0 = time.monotonic()
        procs = []
        for i in range(k):
            cmd = [self.gcr, "restore", name, "--clone", "--address", f"{self.net}.{10 + i}/24",
                   "--bridge", self.bridge, "--detach", "--log", os.path.join(self.root, f"c{i}.log"),
                   "--json"]
            procs.append(subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        # Clients ask from the start, as a front holding the first request does: a clone answers
        # once it runs and the weights its answer reads are in, before its command returns (which
        # waits for all of its device memory).
        answers = [None] * k

        def client(i):
            try:
                answers[i] = ask(f"{self.net}.{10 + i}", self.port, 1, t0 + self.timeout)
            except cb.Failure as e:
                answers[i] = e
        clients = [threading.Thread(target=client, args=(i,)) for i in range(k)]
        for c in clients:
            c.start()
        out, pids = [], []
        for i, p in enumerate(procs):
            so, se = p.communicate(timeout=self.timeout)
            if p.returncode != 0:
                raise cb.Failure(f"clone {i} of {name}: " + se.decode(errors="replace").strip())
            pids.append(int(json.loads(so)["pid"]))
            cb.REAPER.add(pids[-1], "infer_server")
        for i, c in enumerate(clients):
            c.join()
            if isinstance(answers[i], cb.Failure):
                raise answers[i]
            line, t1 = answers[i]
            out.append(((t1 - t0) * 1e3, line))
        for pid in pids:
            cb.REAPER.kill(pid)
        time.sleep(0.2)  # their namespaces and veths go with them
        return out

    def run(self):
        r = {"size_bytes": self.size, "cold": {}, "restores": []}
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        try:
            subprocess.run(["ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge], check=True)
            subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)
            cb.start_gcrd(self.gcr, self.env, os.path.join(self.root, "gcrd.log"))
            prep = self.start_server(0, make=True)  # writes the weights, not timed
            ask("127.0.0.1", self.port, 1, time.monotonic() + self.timeout)
            cb.REAPER.kill(prep.pid)
            self.measure(r)
        finally:
            cb.REAPER.kill_all()
            subprocess.run(["ip", "link", "del", self.bridge], check=False)
            if not self.args.keep:
                shutil.rmtree(self.root, ignore_errors=True)
        return r

    def measure(self, r):
        caches = ["warm"] if self.args.no_cold else ["warm", "cold"]
        # A process gcr has checkpointed holds memory shared with gcrd, which the driver's own
        # checkpoint refuses (as drivers before 610 do): the --stop-copy image is of a server of
        # its own, the first cold start; the warm checkpoint of the last (or of one more).
        for i, cache in enumerate(caches):
            server, line, ms = self.cold_start(cache)
            r["cold"][cache] = ms
            if "answer" in r and line != r["answer"]:
                raise cb.Failure(f"the cold starts answered {r['answer']} and {line}")
            r["answer"] = line
            t = time.monotonic()
            ask("127.0.0.1", self.port, 2, t + self.timeout)
            r["answer_ms"] = (time.monotonic() - t) * 1e3
            if i == 0:
                cb.run_gcr([self.gcr, "checkpoint", str(server.pid), "--stop-copy", "--name",
                            "stopcopy", "--json"], self.env, self.timeout)
                server.wait(timeout=60)
                if len(caches) == 1:  # the warm image needs a server of its own too
                    server = self.cold_start("warm")[0]
            if i == len(caches) - 1:
                cb.run_gcr([self.gcr, "checkpoint", str(server.pid), "-R", "--name", "warm",
                            "--json"], self.env, self.timeout)
                if ask("127.0.0.1", self.port, 1, time.monotonic() + self.timeout)[0] != line:
                    raise cb.Failure("the server answers otherwise after its checkpoint")
                cb.REAPER.kill(server.pid)
        for name, counts in (("warm", self.args.clones), ("stopcopy", [1])):
            for k in counts:
                # each clone holds the weights and its cache in (simulated) device memory
                need = k * (self.size + 256 * cb.MiB)
                if need > 0.8 * cb.meminfo()["MemAvailable"]:
                    r["skipped"] = r.get("skipped", []) + [
                        f"{k} clones of {name}: {cb.fmt_bytes(need)} of device memory is more than "
                        f"80% of this machine's available memory"]
                    continue
                for cache in caches:
                    got = self.clones(name, k, cache)
                    if any(line != r["answer"] for _, line in got):
                        raise cb.Failure(f"a clone of {name} answered {got}, not {r['answer']}")
                    r["restores"].append({"image": name, "clones": k, "cache": cache,
                                          "first_answer_ms": [ms for ms, _ in got]})


def report(results, memcpy_bps):
    rows = []
    load_bps = LOAD_GOAL_SHARE * memcpy_bps
    print(f"memcpy here: {cb.fmt_rate(memcpy_bps)}; the load goal's rate: {cb.fmt_rate(load_bps)}")
    for r in results:
        load_ms = r["size_bytes"] / load_bps * 1e3 + r["answer_ms"]
        one = {}
        for x in r["restores"]:
            worst = max(x["first_answer_ms"])
            if x["image"] == "warm" and x["clones"] == 1:
                one[x["cache"]] = worst
            goal = ""
            if x["image"] == "warm":
                goal = (f"{worst / (100 + load_ms):.2f}x of 100 ms + load; "
                        f"{r['cold'].get(x['cache'], r['cold']['warm']) / worst:.1f}x sooner than cold")
                if x["clones"] > 1 and x["cache"] in one:
                    goal += f"; {worst / one[x['cache']]:.2f}x of one clone"
            rows.append([cb.fmt_bytes(r["size_bytes"]), x["image"], str(x["clones"]), x["cache"],
                         cb.fmt_ms(worst), goal])
        for cache, ms in r["cold"].items():
            rows.append([cb.fmt_bytes(r["size_bytes"]), "cold start", "1", cache, cb.fmt_ms(ms),
                         f"one answer's compute {cb.fmt_ms(r['answer_ms'])}"])
    print(cb.table(["weights", "start", "replicas", "cache", "first answer", "against goals"], rows))
    for r in results:
        for why in r.get("skipped", []):
            print(f"skipped at {cb.fmt_bytes(r['size_bytes'])}: {why}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--sizes", default="1G,4G")
    ap.add_argument("--quick", action="store_true", help="64M and 256M")
    ap.add_argument("--clones", default="1,2,4")
    ap.add_argument("--warmup-passes", type=int, default=28)
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--keep", action="store_true", help="keep the run's directories")
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("serve_bench: needs root (CRIU, namespaces, a bridge)", file=sys.stderr)
        return 2
    args.build = os.path.abspath(args.build)
    sizes = [cb.parse_size(s) for s in ("64M,256M" if args.quick else args.sizes).split(",")]
    args.clones = [int(c) for c in args.clones.split(",")]
    copy = cb.plain_copy(cb.GiB)  # in this run, before anything else holds memory
    memcpy_bps = copy["bytes"] / copy["warm_s"] if copy else 10e9
    results, failed = [], False
    for size in sizes:
        try:
            results.append(Bench(args, size).run())
        except cb.Failure as e:
            print(f"serve_bench: {cb.fmt_bytes(size)}: {e}", file=sys.stderr)
            failed = True
    report(results, memcpy_bps)
    if not args.no_results:
        stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"serve-{stamp}.json")
        with open(path, "w") as f:
            json.dump({"machine": platform.node(), "cpus": os.cpu_count(), "args": vars(args),
                       "memcpy_Bps": memcpy_bps, "load_goal_Bps": LOAD_GOAL_SHARE * memcpy_bps,
                       "results": results}, f, indent=1)
        print(f"results: {os.path.relpath(path)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
