#!/usr/bin/env python3
"""job_bench: what a checkpoint of a multi-process job costs it, by its own step times.

mp_train (tests/workloads/mp_train) runs data-parallel on --ranks N processes that all-reduce every
step through device memory they share (Note [Job checkpoint] in daemon/job.h), under
`gcr run`, with --step-delay-ms 10. For each N (default 1, 2 and 4; 1 is the same program without
sharing) and each mode (gcr, then --stop-copy of the same job), the launcher gets two live
checkpoints (`gcr checkpoint LAUNCHER -R --json`), the second --post-steps + 10 steps after the
first. Mode `apart` starts the N ranks as separate process trees (`gcr run -- mp_train --rank R
--job ID` each, no launcher) and checkpoints them with `gcr checkpoint --job PID... -R` (Note [A job
of several trees] in daemon/job.h: one CRIU dump per tree). The stall is measured as bench/ckpt_bench.py measures it: the longest gap between rank 0's
consecutive step lines (by the program's t_ms) around the checkpoint, minus the median gap before
it. Also recorded: the cut's time (gcr), the command's time.stall_ns and total_ns, the bytes
stored. --stop-copy is the baseline of cuda-checkpoint + CRIU: the driver copies device memory into
the process and CRIU dumps it; drivers before 610 (and simgpu, which follows them) refuse a
process whose device memory another process maps, so for N > 1 the baseline's row says it failed
and why.

  bench/job_bench.py [--build DIR] [--ranks 1,2,4] [--hidden 512] [--modes gcr,apart,stop-copy]
                     [--json FILE] [--no-results] [--dir /var/tmp]

Prints and records; asserts nothing about time (exit 1 only when a gcr checkpoint failed, 2 on bad
usage). Needs root (CRIU). Results: bench/results/job-<time>.json. Python standard library only;
shares its helpers with ckpt_bench.py.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ckpt_bench as cb  # noqa: E402  (StepLog, run_gcr, gaps_of, Failure, REAPER, formatting)


def kill_group(p):
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def measure(ranks, mode, args):
    r = {"ranks": ranks, "mode": mode, "hidden": args.hidden, "ok": False}
    root = tempfile.mkdtemp(prefix=f"gcr-bench-job-{ranks}-{mode}-", dir=args.dir)
    sock = os.path.join(root, "gcrd.sock")
    env = dict(os.environ)
    env.update(GCR_STORE=os.path.join(root, "store"), GCR_GCRD_SOCKET=sock,
               GCR_WORK_DIR=os.path.join(root, "work"), GCR_QUIET="1", SIMGPU_DEVICES="1")
    gcr = os.path.join(args.build, "bin", "gcr")
    mp = os.path.join(args.build, "tests", "workloads", "mp_train")
    extra = ["--stop-copy"] if mode == "stop-copy" else []
    log_path = os.path.join(root, "app.log")
    gcrd = app = slog = None
    others = []  # mode apart: ranks 1.. (app is rank 0)
    try:
        gcrd = cb.start_gcrd(gcr, env, os.path.join(root, "gcrd.log"))
        open(log_path, "ab").close()
        slog = cb.StepLog(log_path)
        command = [gcr, "run", "--", mp, "--ranks", str(ranks), "--hidden", str(args.hidden),
                   "--steps", "1000000", "--step-delay-ms", str(args.step_delay_ms)]
        apart = mode == "apart" and ranks > 1
        for rank in range(ranks if apart else 1):
            path = log_path if rank == 0 else os.path.join(root, f"app.{rank}.log")
            with open(path, "ab") as lf:
                rank_args = ["--rank", str(rank), "--job", f"bench-{os.getpid()}"] if apart else []
                p = subprocess.Popen(command + rank_args, env=env, stdin=subprocess.DEVNULL,
                                     stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
            if rank == 0:
                app = p
            else:
                others.append(p)
        alive = lambda: app.poll() is None and all(o.poll() is None for o in others)
        targets = [str(app.pid)] + [str(o.pid) for o in others]
        if others:
            targets = ["--job"] + targets
        slog.wait_step(args.warm_steps, 120, alive)
        normal = None
        for name in ("live", "live2"):
            k0 = slog.last()[0]
            try:
                wall, doc, _, _ = cb.run_gcr([gcr, "checkpoint"] + targets + ["--name", name,
                                              "-R", "--json"] + extra, env, 300)
            except cb.Failure as e:
                r[name] = {"error": str(e)}
                if not alive():
                    raise cb.Failure(f"the job ended after a failed checkpoint: {e}")
                break
            k1 = slog.last()[0]
            slog.wait_step(k1 + args.post_steps, 120, alive)
            entries = slog.snapshot()
            if normal is None:
                normal = cb.gaps_of(entries, 6, k0 - 1)
                period = statistics.median(gp for _, gp in normal)
            window = cb.gaps_of(entries, k0, k1 + args.post_steps)
            worst_step, worst = max(window, key=lambda x: x[1])
            r[name] = {
                "cmd_wall_ms": wall, "json": doc, "normal_gap_median_ms": period,
                "normal_gap_max_ms": max(gp for _, gp in normal),
                "max_gap_ms": worst, "max_gap_at_step": worst_step, "stall_ms": worst - period,
                "cut_ms": cb.ns_ms(doc.get("time.cut_ns")),
                "cmd_stall_ms": cb.ns_ms(doc.get("time.stall_ns")),
                "total_ms": cb.ns_ms(doc.get("time.total_ns")),
                "new_bytes": doc.get("stat.new_bytes"),
                "region_bytes": doc.get("region_bytes"),
                "processes": doc.get("processes"), "shared_regions": doc.get("shared_regions"),
            }
            slog.wait_step(slog.last()[0] + 10, 120, alive)
        r["ok"] = "error" not in r.get("live", {"error": 1})
    except cb.Failure as e:
        r["error"] = str(e)
    finally:
        kill_group(app)
        for o in others:
            kill_group(o)
        if gcrd is not None:
            gcrd.send_signal(signal.SIGTERM)
            try:
                gcrd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_group(gcrd)
        if slog is not None:
            slog.stop()
        if r["ok"]:
            shutil.rmtree(root, ignore_errors=True)
        else:
            shutil.rmtree(os.path.join(root, "store"), ignore_errors=True)
            r["dir"] = root
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("GCR_BUILD_DIR", os.path.join(cb.REPO, "build")))
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--hidden", type=int, default=512, help="mp_train --hidden (the model's width)")
    ap.add_argument("--modes", default="gcr,apart,stop-copy")
    ap.add_argument("--step-delay-ms", type=int, default=10)
    ap.add_argument("--warm-steps", type=int, default=40)
    ap.add_argument("--post-steps", type=int, default=20)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    try:
        ranks = [int(x) for x in args.ranks.split(",")]
        modes = args.modes.split(",")
        assert all(1 <= n <= 4 for n in ranks)
        assert all(m in ("gcr", "apart", "stop-copy") for m in modes)
    except (ValueError, AssertionError):
        print("job_bench: --ranks takes 1..4, --modes gcr, apart and/or stop-copy",
              file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("job_bench: needs root (CRIU)", file=sys.stderr)
        return 2
    load = os.getloadavg()[0]
    results = []
    for n in ranks:
        for m in modes:
            if m == "apart" and n == 1:
                continue  # one rank is one tree: the gcr row
            print(f"[job_bench] {n} rank(s), {m} ...", flush=True)
            results.append(measure(n, m, args))

    gcr_stall = {(x["ranks"], k): x[k]["stall_ms"] for x in results if x["mode"] == "gcr"
                 for k in ("live", "live2") if "stall_ms" in x.get(k, {})}
    rows, notes = [], []
    for x in results:
        for k, label in (("live", "1st"), ("live2", "2nd")):
            c = x.get(k)
            if c is None:
                continue
            if "error" in c:
                m = re.search(r"(cuCheckpoint\w+)\([^)]*\): (\S+ \(\d+\))", c["error"])
                why = (f"{m.group(1)}: {m.group(2)}" if m
                       else c["error"].strip().splitlines()[0][-60:])
                rows.append([str(x["ranks"]), x["mode"], label, "failed", "-", "-", "-", "-", "-"])
                notes.append(f"{x['ranks']} ranks, {x['mode']}: the checkpoint failed: {why}")
                continue
            base = gcr_stall.get((x["ranks"], k)) if x["mode"] != "gcr" else None
            rows.append([str(x["ranks"]), x["mode"], label, cb.fmt_ms(c["stall_ms"]),
                         cb.fmt_ms(c["cut_ms"]) if c["cut_ms"] is not None else "-",
                         cb.fmt_ms(c["cmd_stall_ms"]), cb.fmt_ms(c["total_ms"]),
                         cb.fmt_bytes(c["new_bytes"]),
                         cb.fmt_ratio(cb.ratio(c["stall_ms"], base)) if base else "-"])
    print()
    print(cb.table(["ranks", "mode", "ckpt", "stall (steps)", "cut", "gcr's stall", "total",
                    "stored new", "baseline / gcr"], rows, right={3, 4, 5, 6, 7, 8}))
    for n in notes:
        print(n)
    one = gcr_stall.get((1, "live"))
    for n in ranks:
        if n > 1 and one and (n, "live") in gcr_stall:
            print(f"gcr, {n} ranks: stall {cb.fmt_ms(gcr_stall[(n, 'live')])}, "
                  f"{cb.fmt_ratio(cb.ratio(gcr_stall[(n, 'live')], one))} the single process's")
    doc = {"bench": "job", "when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "host": platform.node(), "cpus": os.cpu_count(), "load_before": load,
           "load_after": os.getloadavg()[0], "args": vars(args), "results": results}
    out = [args.json] if args.json else []
    if not args.no_results:
        stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
        out.append(os.path.join(HERE, "results", f"job-{stamp}.json"))
    for path in out:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"results: {path}")
    return 0 if all(x["ok"] for x in results if x["mode"] == "gcr") else 1


if __name__ == "__main__":
    sys.exit(main())
