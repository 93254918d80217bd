#!/usr/bin/env python3
"""bench_restore: how long a restore keeps the application waiting, gcr against --stop-copy.

For each device footprint (default 256M, 1G and 4G; --quick: 64M and 256M) an mlp_train runs under
`gcr run` on simgpu with `--footprint F`, is checkpointed (the process stops) once the gcr way and,
in a second run, once with --stop-copy, and each image is restored several times, with the store
in the page cache ("warm") and after `echo 3 > /proc/sys/vm/drop_caches` ("cold"):

  gcr on-demand  `gcr restore NAME`          the process runs before its device memory has arrived
  gcr eager      `gcr restore NAME --eager`  device memory loaded before CRIU runs
  stop-copy      `gcr restore NAME`          of the --stop-copy image: CRIU brings the device memory
                                             back in the process's pages, the driver copies it

With --host-footprint SIZE the workload also holds that much pageable host memory (mlp_train
--host-footprint), which gcr's restore brings back lazily (Note [Host memory restored lazily] in
libgcr/include/gcr/criu.h: CRIU's lazy-pages daemon fills it after the process runs), and a third
image, gcr with GCR_CRIU_LAZY_PAGES=0 (variant "eager-host"), is restored the way CRIU does by
default, every page before the process runs: the baseline for the host memory's share. A fourth,
gcr with GCR_HOST_PAGES_FROM_STORE=0 (variant "lazy-images"), is lazy the way CRIU alone is: its
daemon reads pages from images materialized first, where gcr's own restore has gcrd serve them
from the store (Note [Host memory from the store] in daemon/host_pages.h).

Per restore: time to resume (gcrd's time.resume_ns: restore start -> the process runs; for
--stop-copy, when CRIU and the driver's restore are done), time to full (time.full_ns: all device
memory on the GPU), end to end (the command's wall time; it returns after the full load), the CRIU
restore alone (time.criu_ns), and the restored process's first step line (restore start -> first
step: mlp_train reads its whole ballast every step, so its first step needs all of it).

Goals, printed next to the figures: gcr on-demand's time to resume does not grow with the
footprint (at most 1.5x the smallest's plus 50 ms), and at 4 GiB it is >= 5x shorter than
--stop-copy's. Benchmarks print and record; nothing about time is asserted: the exit status is 1
only when a checkpoint or restore failed, 2 on bad usage.

  bench/restore_bench.py [--build DIR] [--footprints 256M,1G,4G | --quick] [--no-cold]
                         [--host-footprint SIZE] [--json FILE] [--no-results] [--dir /var/tmp]

Python 3 standard library only. Needs root (CRIU, drop_caches). Results:
bench/results/restore-<time>.json.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_bench as cb  # noqa: E402  (shared helpers: processes, step logs, formatting)

GiB = cb.GiB
VARIANTS = {"gcr": ["on-demand", "eager"], "stop-copy": ["stop-copy"],
            "gcr-eager-host": ["eager-host"], "gcr-lazy-images": ["lazy-images"]}


def wait_gone(pid, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.01)


def measure(footprint, mode, args, build):
    """One image (mode gcr or stop-copy) of one footprint, restored in each variant and cache state."""
    r = {"footprint_bytes": footprint, "mode": mode, "ok": False, "restores": []}
    gib = (footprint + args.host_footprint) / GiB
    t_cmd, t_steps = 120 + 60 * gib, 60 + 30 * gib
    root = tempfile.mkdtemp(prefix=f"gcr-bench-restore-{cb.size_arg(footprint)}-{mode}-",
                            dir=args.dir)
    env = dict(os.environ)
    env.update(GCR_STORE=os.path.join(root, "store"), GCR_GCRD_SOCKET=os.path.join(root, "gcrd.sock"),
               GCR_WORK_DIR=os.path.join(root, "work"), GCR_QUIET="1", SIMGPU_DEVICES="1",
               SIMGPU_MEMORY=cb.size_arg(2 * footprint + GiB))
    for k in ("GCR_KEEP_WORK", "GCR_LOAD_MIB_PER_S", "GCR_DRAIN_MIB_PER_S", "GCR_CRIU_LAZY_PAGES",
              "GCR_HOST_PAGES_FROM_STORE"):
        env.pop(k, None)
    if mode == "gcr-eager-host":
        env["GCR_CRIU_LAZY_PAGES"] = "0"
    if mode == "gcr-lazy-images":
        env["GCR_HOST_PAGES_FROM_STORE"] = "0"
    host = ["--host-footprint", cb.size_arg(args.host_footprint)] if args.host_footprint else []
    gcr = os.path.join(build, "bin", "gcr")
    mlp = os.path.join(build, "tests", "workloads", "mlp_train")
    log_path = os.path.join(root, "app.log")
    gcrd = slog = None
    restored = None
    t_run = time.monotonic()
    try:
        gcrd = cb.start_gcrd(gcr, env, os.path.join(root, "gcrd.log"))
        open(log_path, "ab").close()
        slog = cb.StepLog(log_path)
        with open(log_path, "ab") as lf:
            app = subprocess.Popen(
                [gcr, "run", "--", mlp, "--footprint", cb.size_arg(footprint), "--step-delay-ms",
                 "10", "--steps", "1000000"] + host,
                env=env, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                start_new_session=True)
        cb.REAPER.add(app.pid, "mlp_train", app)
        slog.wait_step(args.warm_steps, 60 + 20 * gib, lambda: app.poll() is None)
        extra = ["--stop-copy"] if mode == "stop-copy" else []
        _, doc, _, _ = cb.run_gcr([gcr, "checkpoint", str(app.pid), "--name", "img", "--json"]
                                  + extra, env, t_cmd)
        r["checkpoint"] = doc
        app.wait(timeout=60)
        cb.REAPER.entries.pop(app.pid, None)
        time.sleep(0.2)

        for cache in (["warm", "cold"] if not args.no_cold else ["warm"]):
            for variant in VARIANTS[mode]:
                if cache == "cold":
                    cb.drop_caches()
                n_before = slog.count()
                cmd = [gcr, "restore", "img", "--json"] + (["--eager"] if variant == "eager" else [])
                if args.trace:  # Note [Kernel timeline]: gcrd, CRIU and the restored tasks
                    cmd += ["--trace", os.path.join(root, f"{variant}-{cache}.trace.json")]
                t0 = time.monotonic()
                wall, doc, _, c1 = cb.run_gcr(cmd, env, t_cmd)
                restored = int(doc.get("pid", 0))
                cb.REAPER.add(restored, "mlp_train")
                first = slog.wait(lambda i, e: i >= n_before, t_steps,
                                  "the restored process's first step line",
                                  lambda: os.path.exists(f"/proc/{restored}"))
                ms = lambda k: int(doc.get(k, 0)) / 1e6
                one = {"variant": variant, "cache": cache, "json": doc, "wall_ms": wall,
                       "resume_ms": ms("time.resume_ns"), "full_ms": ms("time.full_ns"),
                       "criu_ms": ms("time.criu_ns"), "first_step_ms": (first[2] - t0) * 1e3,
                       "host_ms": ms("time.host_ns") if "time.host_ns" in doc else None,
                       # when CRIU and gcr's gate last held it, as eBPF saw (None: not traced)
                       "kernel_resume_ms": (int(doc["trace.resumed_ns"]) / 1e6
                                            if "trace.resumed_ns" in doc else None)}
                r["restores"].append(one)
                print(f"    {variant:9} {cache}: resume {cb.fmt_ms(one['resume_ms'])} (kernel "
                      f"{cb.fmt_ms(one['kernel_resume_ms'])}), full "
                      f"{cb.fmt_ms(one['full_ms'])}, first step {cb.fmt_ms(one['first_step_ms'])}, "
                      f"CRIU {cb.fmt_ms(one['criu_ms'])}, host memory "
                      f"{doc.get('host_memory', '-')} {cb.fmt_ms(one['host_ms'])}", flush=True)
                cb.REAPER.kill(restored)
                wait_gone(restored)
                restored = None
                time.sleep(0.2)
        r["ok"] = True
    except cb.Failure as e:
        r["error"] = str(e)
        r["log_tail"] = cb.tail(log_path)
    finally:
        if restored:
            cb.REAPER.kill(restored)
        if slog:
            slog.stop()
        cb.REAPER.kill_all()
        r["run_s"] = time.monotonic() - t_run
        if r["ok"]:
            shutil.rmtree(root, ignore_errors=True)
        else:
            shutil.rmtree(os.path.join(root, "store"), ignore_errors=True)
            r["dir"] = root
    return r


def report(results, limits=None):
    rows = []
    by = {}
    for r in results:
        for x in r.get("restores", []):
            by[(r["footprint_bytes"], x["variant"], x["cache"])] = x
            rows.append([cb.fmt_bytes(r["footprint_bytes"]), x["variant"], x["cache"],
                         cb.fmt_ms(x["resume_ms"]), cb.fmt_ms(x.get("kernel_resume_ms")),
                         cb.fmt_ms(x["full_ms"]),
                         cb.fmt_ms(x["wall_ms"]), cb.fmt_ms(x["criu_ms"]),
                         cb.fmt_ms(x.get("host_ms")), cb.fmt_ms(x["first_step_ms"])])
    print()
    print("restore: resume = restore start -> process running; full = all device (and host) memory")
    print("in; host = CRIU's start -> all host memory in, when it came lazily;")
    print("e2e = the command's wall time; CRIU = CPU-side restore alone; first step = the restored")
    print("mlp_train's first step line (it reads its whole ballast every step); kernel = when CRIU")
    print("and gcr's gate last held the restored process, as eBPF saw it (gcr restore --trace)")
    print(cb.table(["footprint", "variant", "cache", "resume", "kernel", "full", "e2e", "CRIU",
                    "host", "first step"], rows, right={3, 4, 5, 6, 7, 8, 9}))
    goals = []
    fps = sorted({r["footprint_bytes"] for r in results})
    for cache in ("warm", "cold"):
        od = [(f, by.get((f, "on-demand", cache))) for f in fps]
        od = [(f, x) for f, x in od if x]
        if len(od) >= 2:
            small, large = od[0][1]["resume_ms"], od[-1][1]["resume_ms"]
            met = large <= 1.5 * small + 50
            goals.append(f"on-demand resume ({cache}) at {cb.fmt_bytes(od[-1][0])} vs "
                         f"{cb.fmt_bytes(od[0][0])}: {cb.fmt_ms(large)} vs {cb.fmt_ms(small)}; "
                         f"goal: does not grow (<= 1.5x + 50 ms): {'met' if met else 'MISSED'}")
        big = fps[-1] if fps else None
        a, b = by.get((big, "on-demand", cache)), by.get((big, "stop-copy", cache))
        if a and b:
            ratio = b["resume_ms"] / max(a["resume_ms"], 1e-3)
            goals.append(f"resume ({cache}) at {cb.fmt_bytes(big)}: stop-copy "
                         f"{cb.fmt_ms(b['resume_ms'])} / on-demand {cb.fmt_ms(a['resume_ms'])} = "
                         f"{ratio:.1f}x; goal >= 5x at 4 GiB: "
                         f"{'met' if ratio >= 5 else 'MISSED'}"
                         + ("" if big >= 4 * GiB else " (largest footprint here is smaller)"))
        big = fps[-1] if fps else None
        a, b = by.get((big, "on-demand", cache)), by.get((big, "lazy-images", cache))
        if a and b:
            goals.append(f"host memory served from the store ({cache}) at {cb.fmt_bytes(big)} "
                         f"device: resume {cb.fmt_ms(a['resume_ms'])} vs "
                         f"{cb.fmt_ms(b['resume_ms'])} with CRIU's daemon reading images "
                         f"({b['resume_ms'] / max(a['resume_ms'], 1e-3):.2f}x); all host memory in "
                         f"{cb.fmt_ms(a.get('host_ms') or 0)} vs {cb.fmt_ms(b.get('host_ms') or 0)}")
        a, b = by.get((big, "on-demand", cache)), by.get((big, "eager-host", cache))
        if a and b:
            goals.append(f"host memory restored lazily ({cache}) at {cb.fmt_bytes(big)} device: "
                         f"resume {cb.fmt_ms(a['resume_ms'])} vs {cb.fmt_ms(b['resume_ms'])} eager "
                         f"({b['resume_ms'] / max(a['resume_ms'], 1e-3):.2f}x), CRIU "
                         f"{cb.fmt_ms(a['criu_ms'])} vs {cb.fmt_ms(b['criu_ms'])}")
    for g in goals:
        print("  " + g)
    if limits:
        # Loading device memory against what bounds it: the disk (cold), the page cache and a
        # memory copy (warm). Goals: >= 60% of cold read; >= 50% of memcpy with the cache warm.
        print("\nthroughput against the machine (" + cb.describe_limits(limits) + ")")
        rows = []
        for r in results:
            for x in r.get("restores", []):
                doc = x["json"]
                load_ns = int(doc.get("time.load_ns", 0))
                size = int(doc.get("region_bytes", 0))
                if not load_ns or not size:
                    continue
                rate = size / (load_ns / 1e9)
                if x["cache"] == "cold":
                    vs = f"{100 * rate / limits['cold_read_Bps']:.0f}% of cold read (goal 60%)"
                else:
                    vs = (f"{100 * rate / limits['warm_read_Bps']:.0f}% of warm read, "
                          f"{100 * rate / limits['memcpy_Bps']:.0f}% of memcpy (goal 50%)")
                if limits.get("device_write_fresh_Bps"):  # the device's side of every load
                    vs += (f", {100 * rate / limits['device_write_fresh_Bps']:.0f}% of device "
                           f"write")
                rows.append([cb.fmt_bytes(r["footprint_bytes"]), x["variant"], x["cache"],
                             cb.fmt_ms(load_ns / 1e6), cb.fmt_rate(rate), vs])
        print("  full load: device memory / time.load_ns; device write: the driver's copy into "
              "device memory never written before, which every load does")
        print(cb.table(["footprint", "variant", "cache", "load", "rate", "against"], rows,
                       right={3, 4}))
    return goals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("GCR_BUILD_DIR", os.path.join(cb.REPO, "build")))
    ap.add_argument("--footprints", default=None, help="comma-separated (default 256M,1G,4G)")
    ap.add_argument("--quick", action="store_true", help="footprints 64M,256M")
    ap.add_argument("--warm-steps", type=int, default=30)
    ap.add_argument("--host-footprint", type=cb.parse_size, default=0,
                    help="pageable host memory the workload holds (mlp_train --host-footprint); "
                         "adds the eager-host image (GCR_CRIU_LAZY_PAGES=0)")
    ap.add_argument("--no-cold", action="store_true", help="skip the dropped-cache restores")
    ap.add_argument("--trace", action="store_true",
                    help="trace the restores with eBPF (gcr restore --trace): the kernel column; "
                         "tracing gcrd slows the restores (5-10%% for gcr's, up to 1.4x for "
                         "--stop-copy's here), so time them without it")
    ap.add_argument("--dir", default="/var/tmp")
    cb.device_pages_argument(ap)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-results", action="store_true")
    ap.add_argument("--no-limits", action="store_true",
                    help="skip measuring this machine's memcpy, durable write and read rates")
    args = ap.parse_args()
    spec = "64M,256M" if args.quick else (args.footprints or "256M,1G,4G")
    footprints = [cb.parse_size(s) for s in spec.split(",") if s.strip()]
    build = os.path.abspath(args.build)
    for exe in ("bin/gcr", "bin/gcrd", "tests/workloads/mlp_train"):
        if not os.access(os.path.join(build, exe), os.X_OK):
            print(f"bench_restore: {exe} is not built in {build} (--build DIR)", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("bench_restore: needs root (CRIU, drop_caches)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda s, _: (_ for _ in ()).throw(KeyboardInterrupt()))
    load_before = os.getloadavg()[0]
    print(f"bench_restore: mlp_train on simgpu; footprints "
          f"{', '.join(cb.fmt_bytes(f) for f in footprints)}; {os.cpu_count()} CPUs, "
          f"load average {load_before:.2f}", flush=True)
    thp = cb.set_device_pages(args.device_pages)
    print(f"  shared memory transparent huge pages: {thp} "
          f"(simgpu's device pages: {cb.HUGE_PAGES.get(thp, '4 KiB')})")
    limits = None
    if not args.no_limits:
        print("  measuring this machine's limits (memcpy, durable write, reads, device write)...",
              flush=True)
        limits = cb.machine_limits(args.dir)
        limits.update(cb.device_write_rate(args.build) or {})
        print("  " + cb.describe_limits(limits), flush=True)
    results, started = [], time.monotonic()
    try:
        for f in footprints:
            mem, disk = cb.meminfo(), shutil.disk_usage(args.dir)
            need = 3 * (f + args.host_footprint)
            if mem["MemAvailable"] < need + GiB or disk.free < need + 2 * GiB:
                print(f"  skipping {cb.fmt_bytes(f)}: not enough memory or disk")
                continue
            host_modes = ("gcr-lazy-images", "gcr-eager-host") if args.host_footprint else ()
            for mode in ("gcr",) + host_modes + ("stop-copy",):
                print(f"  {cb.fmt_bytes(f)} {mode}:", flush=True)
                r = measure(f, mode, args, build)
                results.append(r)
                if not r["ok"]:
                    print(f"    FAILED: {r['error']}", flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    finally:
        cb.REAPER.kill_all()
    goals = report(results, limits)
    load_after = os.getloadavg()[0]
    doc = {"benchmark": "restore",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S%z"),
           "host": platform.node(), "kernel": f"{platform.system()} {platform.release()}",
           "cpus": os.cpu_count(), "load_average_before": load_before,
           "load_average_after": load_after, "build": build,
           "footprints_bytes": footprints, "host_footprint_bytes": args.host_footprint,
           "goals": goals,
           "total_s": time.monotonic() - started, "machine": limits, "shmem_thp": thp,
           "runs": results}
    print(f"\nload average {load_before:.2f} before, {load_after:.2f} after; "
          f"total {doc['total_s']:.0f} s")
    paths = [args.json] if args.json else []
    if not args.no_results:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%S")
        paths.append(os.path.join(cb.HERE, "results", f"restore-{stamp}.json"))
    for p in paths:
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
        with open(p, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {p}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
