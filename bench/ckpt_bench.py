#!/usr/bin/env python3
"""bench_ckpt: what a checkpoint costs the application, gcr against the --stop-copy baseline.

For each device footprint (default 256M, 1G and 4G; --quick: 64M and 256M) and each mode (gcr,
then --stop-copy), one mlp_train runs under `gcr run` on simgpu with `--footprint F
--step-delay-ms 10`, printing a step line (`step N loss L t_ms T`) every step, and gets:

  1. a live checkpoint (`gcr checkpoint PID -R --json`, the run goes on). The stall the
     application sees is the longest gap between consecutive step lines (by the program's own
     t_ms) from the step before the command started to --post-steps steps after it returned,
     minus the normal step period: the median gap of the steps before the checkpoint. Both the raw
     gap and the period are recorded, with the longest gap before the checkpoint (the noise) and
     the time lost over the window (the sum of each gap's excess over the period);
  2. a second live checkpoint, --post-steps + 10 steps later (--no-second skips it): the
     incremental one, which stores only what changed (gcr: the regions written since; the
     store's dedup does the rest for both modes), measured the same way;
  3. a checkpoint that stops the process (no -R), then `gcr restore NAME --json`: restore time is
     from the command's start to the restored process's next step line in the log, and the
     command's own time.total_ns.

Checkpoint time is the command's --json time.total_ns and its wall time; image sizes are the
store's stats (logical, new, stored bytes) and, from `gcr image inspect`, the CRIU image (the
checkpoint's files) and the device regions (gcr stores device memory as regions; --stop-copy has
none: device memory is inside CRIU's page images).

Goals, printed next to the figures, for each of the two live checkpoints: gcr's stall does not
grow with the footprint (judged as: at the largest footprint at most 1.5x the smallest's, plus one
step period of noise), and at 4 GiB it is at least 10x shorter than --stop-copy's.

Every run has its own store, gcrd (`gcr daemon`, started and stopped here) and work dir under
--dir; all are removed at the end, and every process started here is killed (on failure the
logs stay, without the store). Footprints that do not fit in free memory or disk are skipped with
a message. Benchmarks print and record; they assert nothing about time: the exit status is 1 only
when a checkpoint or restore failed, 2 on bad usage.

  bench/ckpt_bench.py [--build DIR] [--footprints 256M,1G,4G | --quick] [--json FILE]
                      [--no-results] [--keep-work] [--dir /var/tmp]
                      [--host-footprint SIZE] [--pinned-footprint SIZE] [--images memory|disk]

With --host-footprint the workload also holds that much pageable host memory, which CRIU copies
while the process is frozen; --images says where it writes it (Note [Dumping into memory]): run
once with each to see what the memory-backed image directory saves. With --pinned-footprint it
holds pinned memory that a device writes (on a GPU by DMA); --modes gcr,gcr-pinned-frozen sets
gcr's handling of it (tracked, written after the resume) against copying it in the freeze.

Python 3 standard library only. Needs root (CRIU). Results: bench/results/ckpt-<time>.json.
"""

import argparse
import atexit
import datetime
import json
import mmap
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
STEP_RE = re.compile(rb"^step (\d+) loss \S+ t_ms ([0-9.]+)\s*$")
# gcr-late: gcr with CRIU started after the park (GCR_CRIU_EARLY=0), as before Note [CRIU started
# before the cut]; opt-in (--modes gcr,gcr-late).
# gcr-untracked: gcr without host memory tracked between checkpoints (GCR_CRIU_COW_TRACK=0, Note
# [Host memory tracked between checkpoints]): every live checkpoint splices all host memory in the
# freeze; opt-in (--modes gcr,gcr-untracked).
# gcr-pinned-frozen: gcr with pinned host memory given the care of protocol 1.4 (GCR_PINNED_FROZEN=1,
# Note [Device writes to pinned host memory]): copied in the freeze and taken from the process at
# every checkpoint; the baseline for --pinned-footprint (--modes gcr,gcr-pinned-frozen).
MODES = ("gcr", "stop-copy", "gcr-late", "gcr-untracked", "gcr-pinned-frozen")
LIVE = {"live": "1st", "live2": "2nd"}  # the live (-R) checkpoints, as the tables name them


def parse_size(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)i?B?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 256M, 4G)")
    mult = {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def size_arg(n):  # for mlp_train's --footprint and SIMGPU_MEMORY
    for unit, mult in (("G", GiB), ("M", MiB), ("K", KiB)):
        if n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def fmt_bytes(n):
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    v, units = float(n), ["B", "KiB", "MiB", "GiB", "TiB"]
    u = 0
    while v >= 1023.95 and u + 1 < len(units):
        v /= 1024
        u += 1
    return f"{v:.1f} {units[u]}" if v < 99.95 else f"{v:.0f} {units[u]}"


def fmt_ms(ms):
    if ms is None:
        return "-"
    if abs(ms) < 100:
        return f"{ms:.1f} ms"
    if abs(ms) < 1000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.2f} s"


def fmt_ratio(r):
    return "-" if r is None else f"{r:.1f}x"


def ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


def table(header, rows, right=None):
    """Renders rows as text columns; columns listed in `right` align right."""
    right = set(range(1, len(header))) if right is None else set(right)
    cells = [header] + [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for k, r in enumerate(cells):
        line = "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))
        out.append("  " + line.rstrip())
        if k == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(out)


def drop_caches():
    """The page cache emptied (root): what a cold read is measured after."""
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def meminfo():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            info[k] = int(v.split()[0]) * KiB
    return info


SHMEM_THP = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
HUGE_PAGES = {"within_size": "2 MiB", "always": "2 MiB", "force": "2 MiB"}


def shmem_thp():
    """The host's transparent-huge-page setting for shared memory (the bracketed word), or None."""
    try:
        with open(SHMEM_THP) as f:
            m = re.search(r"\[([\w-]+)\]", f.read())
        return m.group(1) if m else None
    except OSError:
        return None


def set_device_pages(choice):
    """--device-pages: 'host' leaves the host as it is; 'huge' lets simgpu map its device memory
    in 2 MiB pages, as a GPU does (Note [Device pages] in tools/simgpu/memory.cpp), by setting the
    host's shmem THP to 'within_size' for this run (root: every page of a memfd within its size,
    written through a mapping or by pwrite, is huge) and putting the old value back at exit.
    Returns the setting the run has."""
    before = shmem_thp()
    if choice != "huge" or before in (None, "always", "within_size", "force"):
        return before

    def put_back():
        with open(SHMEM_THP, "w") as f:
            f.write(before)
    with open(SHMEM_THP, "w") as f:
        f.write("within_size")
    atexit.register(put_back)
    return shmem_thp()


def device_pages_argument(ap):
    ap.add_argument("--device-pages", choices=("host", "huge"), default="host",
                    help="huge: simgpu's device memory in 2 MiB pages as on a GPU (sets the host's "
                         "transparent_hugepage/shmem_enabled to within_size for the run, then "
                         "back); "
                         "host (default): as the host has it")


def machine_limits(directory, size=1 << 30):
    """This machine's limits, measured now: single-thread memory copy, durable write (write +
    fdatasync) to `directory`'s disk, cold read (after drop_caches) and warm read of that file.
    Bytes per second each; the benches print every data-path rate as a fraction of the limit that
    bounds it."""
    chunk = 8 << 20
    block = bytearray(os.urandom(chunk))  # incompressible, and not zero pages
    src = block * (size // chunk)
    dst = bytearray(size)
    best = None
    for _ in range(3):
        t0 = time.monotonic()
        dst[:] = src  # one memcpy of `size` bytes
        dt = time.monotonic() - t0
        best = dt if best is None else min(best, dt)
    limits = {"memcpy_Bps": size / best}
    path = os.path.join(directory, f"gcr-bench-limits-{os.getpid()}")
    try:
        view = memoryview(src)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            t0 = time.monotonic()
            for off in range(0, size, chunk):
                os.write(fd, view[off:off + chunk])
            os.fdatasync(fd)
            limits["durable_write_Bps"] = size / (time.monotonic() - t0)
        finally:
            os.close(fd)
        # Into all of `dst`, as a restore fills device memory: not one small, cache-hot buffer.
        out = memoryview(dst)
        for which in ("cold_read_Bps", "warm_read_Bps"):
            if which == "cold_read_Bps":
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3\n")
            fd = os.open(path, os.O_RDONLY)
            try:
                t0 = time.monotonic()
                for off in range(0, size, chunk):
                    if os.readv(fd, [out[off:off + chunk]]) <= 0:
                        break
                limits[which] = size / (time.monotonic() - t0)
            finally:
                os.close(fd)
        out.release()
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return limits


_DEVICE_WRITE = r"""
import ctypes, os, sys, time
cu = ctypes.CDLL(sys.argv[1])
size, piece = int(sys.argv[2]), 16 << 20
def ok(r, what):
    if r != 0:
        sys.exit(f"{what} failed ({r})")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ok(cu.cuInit(0), "cuInit")
ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
# As gcrd allocates what it loads: cuMemCreate, mapped (CUmemAllocationProp: pinned, POSIX fd,
# device 0; CUmemAccessDesc: device 0, read-write).
handle, n = ctypes.c_uint64(), ctypes.c_size_t(size)
prop = (ctypes.c_int * 8)(1, 1, 1, 0, 0, 0, 0, 0)
ok(cu.cuMemCreate(ctypes.byref(handle), n, prop, ctypes.c_ulonglong(0)), "cuMemCreate")
ok(cu.cuMemAddressReserve(ctypes.byref(ptr), n, ctypes.c_size_t(0), ctypes.c_uint64(0),
                          ctypes.c_ulonglong(0)), "cuMemAddressReserve")
ok(cu.cuMemMap(ptr, n, ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0)), "cuMemMap")
ok(cu.cuMemSetAccess(ptr, n, (ctypes.c_int * 3)(1, 0, 3), ctypes.c_size_t(1)), "cuMemSetAccess")
buf = ctypes.create_string_buffer(os.urandom(piece), piece)
rates = []
for _ in range(2):  # device memory never written, then the same again
    t0 = time.monotonic()
    for off in range(0, size, piece):
        ok(cu.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr.value + off), buf, ctypes.c_size_t(piece)),
           "cuMemcpyHtoD")
    rates.append(size / (time.monotonic() - t0))
print(rates[0], rates[1])
"""


def device_write_rate(build, size=1 << 30):
    """The driver's host-to-device copy in the loader's pieces (16 MiB), measured now in a process
    of its own: into device memory never written before (what a restore's load writes), then into
    the same again. On simgpu device memory is host shared memory, and a page written for the
    first time is allocated and faulted in by the host kernel: that, not memcpy, bounds a load
    there. Bytes per second, fresh and written; None when it cannot be measured."""
    lib = os.path.join(build, "simgpu", "libcuda.so.1")
    env = dict(os.environ, SIMGPU_DEVICES="1", SIMGPU_MEMORY=str(2 * size))
    try:
        out = subprocess.run([sys.executable, "-c", _DEVICE_WRITE, lib, str(size)], env=env,
                             capture_output=True, text=True, timeout=120)
        fresh, written = (float(x) for x in out.stdout.split())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return {"device_write_fresh_Bps": fresh, "device_write_Bps": written}


def plain_copy(size):
    """A plain copy of `size` bytes, measured now: into fresh memory (what a snapshot of host
    memory must do: the pages are new), then again into the same, now faulted-in memory (the best
    a copy can do). Seconds each; None when the memory is not there for source and copy."""
    if meminfo()["MemAvailable"] < 2 * size + 2 * GiB:
        return None
    chunk = 8 << 20
    block = bytearray(os.urandom(chunk))
    src = block * (size // chunk)
    dst = mmap.mmap(-1, len(src))  # untouched anonymous memory: the copy faults each page in
    view = memoryview(dst)
    t0 = time.monotonic()
    view[:] = src
    fresh = time.monotonic() - t0
    t0 = time.monotonic()
    view[:] = src
    warm = time.monotonic() - t0
    view.release()
    dst.close()
    return {"bytes": len(src), "fresh_s": fresh, "warm_s": warm}


def fmt_rate(bps):
    return "-" if bps is None else f"{bps / 1e6:.0f} MB/s" if bps < 1e9 else f"{bps / 1e9:.2f} GB/s"


def describe_limits(limits):
    text = (f"machine: memcpy {fmt_rate(limits['memcpy_Bps'])}, durable write "
            f"{fmt_rate(limits.get('durable_write_Bps'))}, cold read "
            f"{fmt_rate(limits.get('cold_read_Bps'))}, warm read "
            f"{fmt_rate(limits.get('warm_read_Bps'))}")
    if "device_write_fresh_Bps" in limits:
        text += (f", device write {fmt_rate(limits['device_write_fresh_Bps'])} into fresh memory "
                 f"({fmt_rate(limits['device_write_Bps'])} into written)")
    return text


def tail(path, n=15):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join("    " + l for l in lines[-n:])
    except OSError:
        return "    (no " + path + ")"


class Failure(Exception):
    pass


# --- processes ------------------------------------------------------------------------------------

class Reaper:
    """Every process started here, by pid, with the program name it must still have when killed (a
    pid may be reused, and a restored process takes its original pid without being our child)."""

    def __init__(self):
        self.entries = {}  # pid -> (Popen or None, name)

    def add(self, pid, name, popen=None):
        self.entries[pid] = (popen, name)

    def kill(self, pid, sig=signal.SIGKILL, wait_s=5.0):
        popen, name = self.entries.pop(pid, (None, None))
        if popen is not None and popen.poll() is not None:
            return
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if name and name.encode() not in f.read():
                    return  # not ours any more
            os.kill(pid, sig)
        except (OSError, ProcessLookupError):
            return
        if popen is not None:
            try:
                popen.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                popen.wait(timeout=wait_s)
        else:  # reaped by its parent
            deadline = time.monotonic() + wait_s
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            break
                except OSError:
                    break
                time.sleep(0.01)

    def kill_all(self):
        for pid in list(self.entries):
            self.kill(pid)


REAPER = Reaper()


class StepLog:
    """Tails an mlp_train log in a thread: (step, t_ms, monotonic time the line was seen)."""

    def __init__(self, path):
        self.path = path
        self.entries = []
        self.lock = threading.Lock()
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        buf = b""
        with open(self.path, "rb") as f:
            while not self.stopped:
                data = f.read()
                if data:
                    now = time.monotonic()
                    buf += data
                    *lines, buf = buf.split(b"\n")
                    new = []
                    for line in lines:
                        m = STEP_RE.match(line)
                        if m:
                            new.append((int(m.group(1)), float(m.group(2)), now))
                    if new:
                        with self.lock:
                            self.entries.extend(new)
                else:
                    time.sleep(0.002)

    def stop(self):
        self.stopped = True
        self.thread.join(timeout=2)

    def count(self):
        with self.lock:
            return len(self.entries)

    def last(self):
        with self.lock:
            return self.entries[-1] if self.entries else None

    def snapshot(self):
        with self.lock:
            return list(self.entries)

    def wait(self, pred, timeout_s, what, alive=None):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                for i, e in enumerate(self.entries):
                    if pred(i, e):
                        return e
            if alive is not None and not alive():
                raise Failure(f"the process exited while waiting for {what}")
            time.sleep(0.002)
        last = self.last()
        since = "" if last is None else (f" (the last step line, step {last[0]}, came "
                                         f"{time.monotonic() - last[2]:.0f} s before)")
        raise Failure(f"timed out after {timeout_s:.0f} s waiting for {what}{since}")

    def wait_step(self, n, timeout_s, alive=None):
        return self.wait(lambda i, e: e[0] >= n, timeout_s, f"step {n}", alive)


def start_gcrd(gcr, env, log_path):
    """gcrd in the foreground (`gcr daemon`, so that it is ours to stop), logging to log_path;
    returns its Popen once it listens on env's GCR_GCRD_SOCKET. Shared by the benches."""
    sock = env["GCR_GCRD_SOCKET"]
    with open(log_path, "ab") as lf:
        gcrd = subprocess.Popen([gcr, "daemon"], env=env, stdin=subprocess.DEVNULL, stdout=lf,
                                stderr=subprocess.STDOUT, start_new_session=True)
    REAPER.add(gcrd.pid, "gcrd", gcrd)
    deadline = time.monotonic() + 15
    while True:
        if gcrd.poll() is not None:
            raise Failure(f"gcrd exited {gcrd.returncode} at start")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(sock)
            return gcrd
        except OSError:
            if time.monotonic() > deadline:
                raise Failure("gcrd did not listen within 15 s")
            time.sleep(0.02)


def run_gcr(cmd, env, timeout_s):
    """Runs a gcr command with --json; returns (wall_ms, parsed json, t_start, t_end)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise Failure(f"`{' '.join(cmd[1:])}` timed out after {timeout_s:.0f} s")
    t1 = time.monotonic()
    if p.returncode != 0:
        raise Failure(f"`{' '.join(cmd[1:])}` exited {p.returncode}: "
                      + (p.stderr.decode(errors="replace").strip() or p.stdout.decode(errors="replace").strip()))
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise Failure(f"`{' '.join(cmd[1:])}` printed no JSON: {p.stdout[:200]!r}")
    if isinstance(doc, list):
        doc = doc[0]
    return (t1 - t0) * 1e3, doc, t0, t1


# --- one run: a footprint in one mode ----------------------------------------------------------------

def gaps_of(entries, first_step, last_step):
    """Gaps (ms, by the program's t_ms) ending at steps first_step..last_step: [(step, gap)]."""
    t = {s: tms for s, tms, _ in entries}
    return [(s, t[s] - t[s - 1]) for s in range(first_step, last_step + 1)
            if s in t and s - 1 in t]


def measure(footprint, mode, args, build, timeouts):
    r = {"footprint_bytes": footprint, "mode": mode, "ok": False}
    root = tempfile.mkdtemp(prefix=f"gcr-bench-ckpt-{size_arg(footprint)}-{mode}-", dir=args.dir)
    r["dir"] = root
    sock = os.path.join(root, "gcrd.sock")
    env = dict(os.environ)
    env.update(GCR_STORE=os.path.join(root, "store"), GCR_GCRD_SOCKET=sock,
               GCR_WORK_DIR=os.path.join(root, "work"), GCR_QUIET="1", SIMGPU_DEVICES="1",
               SIMGPU_MEMORY=size_arg(max(args.simgpu_memory, 2 * footprint + GiB)))
    env.pop("GCR_KEEP_WORK", None)
    # Note [Dumping into memory] (daemon/work_dir.h): CRIU's images in the work dir on disk
    # (--images disk, gcrd's default), or in a private directory under /dev/shm (--images memory).
    env["GCR_MEMORY_WORK_DIR"] = (os.path.join("/dev/shm", f"gcr-bench-{os.getpid()}")
                                  if args.images == "memory" else "off")
    r["images"] = args.images
    r["host_footprint_bytes"] = args.host_footprint
    if args.keep_work:
        env["GCR_KEEP_WORK"] = "1"
    gcr = os.path.join(build, "bin", "gcr")
    mlp = os.path.join(build, "tests", "workloads", "mlp_train")
    extra = ["--stop-copy"] if mode == "stop-copy" else []
    if mode == "gcr-late":
        env["GCR_CRIU_EARLY"] = "0"
    if mode == "gcr-untracked":
        env["GCR_CRIU_COW_TRACK"] = "0"
    if mode == "gcr-pinned-frozen":
        env["GCR_PINNED_FROZEN"] = "1"
    r["pinned_footprint_bytes"] = args.pinned_footprint
    r["host_writes"] = args.host_writes
    log_path = os.path.join(root, "app.log")
    gcrd_log = os.path.join(root, "gcrd.log")
    gcrd = app = slog = None
    restored_pid = None
    t_run = time.monotonic()
    try:
        gcrd = start_gcrd(gcr, env, gcrd_log)

        # The application. Appending: CRIU accepts a log file that grew between a checkpoint and
        # its restore only when it is opened for appending.
        open(log_path, "ab").close()
        slog = StepLog(log_path)
        with open(log_path, "ab") as lf:
            app = subprocess.Popen(
                [gcr, "run", "--", mlp, "--footprint", size_arg(footprint), "--step-delay-ms",
                 str(args.step_delay_ms), "--steps", "1000000"] +
                (["--host-footprint", size_arg(args.host_footprint)] if args.host_footprint else []) +
                (["--host-writes", str(args.host_writes)] if args.host_footprint else []) +
                (["--pinned-footprint", size_arg(args.pinned_footprint)]
                 if args.pinned_footprint else []),
                env=env, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                start_new_session=True)
        pid = app.pid
        REAPER.add(pid, "mlp_train", app)
        alive = lambda: app.poll() is None
        t_start = time.monotonic()
        slog.wait_step(0, timeouts["start"], alive)
        r["start_to_step0_ms"] = (time.monotonic() - t_start) * 1e3
        slog.wait_step(args.warm_steps, timeouts["start"], alive)

        # 1. Live checkpoints: the stall. The first stores everything; the second only what
        # changed since (with gcr: regions written since the first; the ballast is only read).
        normal = None
        for name in ["live", "live2"][:1 + (not args.no_second)]:
            k0 = slog.last()[0]
            traced = ["--trace", os.path.join(root, name + ".trace.json")] if args.trace else []
            wall, doc, c0, c1 = run_gcr([gcr, "checkpoint", str(pid), "--name", name, "-R",
                                         "--json"] + extra + traced, env, timeouts["cmd"])
            k1 = slog.last()[0]
            if not alive():
                raise Failure(f"the process exited after a --leave-running checkpoint ({name})")
            slog.wait_step(k1 + args.post_steps, timeouts["steps"], alive)
            entries = slog.snapshot()
            if normal is None:  # the normal period: before the first checkpoint
                normal = gaps_of(entries, 6, k0 - 1)  # steps 0-5 include warming up
                period = statistics.median(gp for _, gp in normal)
            window = gaps_of(entries, k0, k1 + args.post_steps)
            worst_step, worst = max(window, key=lambda x: x[1])
            r[name] = {
                "cmd_wall_ms": wall, "json": doc,
                "steps_before": k0, "steps_at_return": k1,
                "normal_gap_median_ms": period,
                "normal_gap_max_ms": max(gp for _, gp in normal),
                "normal_gap_count": len(normal),
                "normal_gaps_ms": [round(gp, 1) for _, gp in normal],  # ending at steps 6...
                "max_gap_ms": worst, "max_gap_at_step": worst_step,
                "stall_ms": worst - period,
                # Note [Kernel timeline]: the longest a thread was held by gcr's gate or CRIU
                "kernel_stall_ms": ns_ms(doc.get("trace.stall_ns")),
                "kernel_frozen_ms": ns_ms(doc.get("trace.frozen_ns")),
                "lost_ms": sum(max(0.0, gp - period) for _, gp in window),
                "window_gap_median_ms": statistics.median(gp for _, gp in window),
                # gap i ends at step window_first_step + i
                "window_first_step": window[0][0],
                "window_gaps_ms": [round(gp, 1) for _, gp in window],
            }
            k1 = slog.last()[0]

        # 2. Checkpoint that stops the process, then restore.
        slog.wait_step(k1 + 10, timeouts["steps"], alive)
        wall, doc, c0, c1 = run_gcr([gcr, "checkpoint", str(pid), "--name", "stop", "--json"]
                                    + extra, env, timeouts["cmd"])
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise Failure(f"process {pid} still runs 30 s after a checkpoint without -R")
        REAPER.entries.pop(pid, None)
        r["stop"] = {"cmd_wall_ms": wall, "json": doc, "last_step": slog.last()[0]}
        time.sleep(0.2)  # lines still in flight would be taken for the restored process's
        n_before, last_step = slog.count(), slog.last()[0]

        t0 = time.monotonic()
        wall, doc, c0, c1 = run_gcr([gcr, "restore", "stop", "--json"], env, timeouts["cmd"])
        restored_pid = int(doc.get("pid", pid))
        REAPER.add(restored_pid, "mlp_train")
        restored_alive = lambda: os.path.exists(f"/proc/{restored_pid}")
        first = slog.wait(lambda i, e: i >= n_before, timeouts["steps"],
                          "the restored process's first step line", restored_alive)
        slog.wait(lambda i, e: i >= n_before + 3, timeouts["steps"],
                  "three more steps of the restored process", restored_alive)
        r["restore"] = {
            "cmd_wall_ms": wall, "json": doc,
            "to_first_step_ms": (first[2] - t0) * 1e3,
            "return_to_first_step_ms": (first[2] - c1) * 1e3,
            "first_step": first[0], "expected_step": last_step + 1,
        }
        if first[0] != last_step + 1:
            r["restore"]["warning"] = (f"the restored process printed step {first[0]}, "
                                       f"expected {last_step + 1}")

        # Image sizes.
        for name in [n for n in ("live", "live2", "stop") if n in r]:
            p = subprocess.run([gcr, "image", "inspect", name, "--json"], env=env,
                               capture_output=True, timeout=60)
            if p.returncode != 0:
                raise Failure(f"gcr image inspect {name}: {p.stderr.decode(errors='replace')}")
            ins = json.loads(p.stdout)
            objs = ins.get("objects", [])
            r[name]["image"] = {
                "stats": ins.get("stats", {}),
                "parent": ins.get("parent"),
                "criu_image_bytes": sum(o.get("size", 0) for o in objs if o.get("kind") == "file"),
                "region_bytes": sum(o.get("size", 0) for o in objs if o.get("kind") == "region"),
                "criu_pages_bytes": sum(o.get("size", 0) for o in objs if o.get("kind") == "file"
                                        and o.get("name", "").startswith("pages-")),
            }
        p = subprocess.run([gcr, "image", "du", "--json"], env=env, capture_output=True, timeout=60)
        if p.returncode == 0:
            r["store_du"] = json.loads(p.stdout)
        r["ok"] = True
    except Failure as e:
        r["error"] = str(e)
    except KeyboardInterrupt:
        r["interrupted"] = True
        raise
    finally:
        if restored_pid is not None:
            REAPER.kill(restored_pid)
        if app is not None:
            REAPER.kill(app.pid)
        if gcrd is not None:
            REAPER.kill(gcrd.pid, signal.SIGTERM)
        if slog is not None:
            slog.stop()
        r["run_s"] = time.monotonic() - t_run
        if (r["ok"] and not args.keep_work) or r.get("interrupted"):
            shutil.rmtree(root, ignore_errors=True)
        else:
            # Keep the logs for diagnosis, not the store (gigabytes).
            shutil.rmtree(os.path.join(root, "store"), ignore_errors=True)
            if not r["ok"]:
                r["gcrd_log_tail"] = tail(gcrd_log, 25)
                r["app_log_tail"] = tail(log_path, 8)
    return r


# --- report ----------------------------------------------------------------------------------------

def g(r, *path):
    for k in path:
        if r is None or k not in r:
            return None
        r = r[k]
    return r


def ns_ms(v):
    return None if v is None else v / 1e6


def host_copy_report(results, copy, goals):
    """Issue 16's goal: the freeze for host memory within 2x of a plain copy of it, measured in
    the same run. The freeze is the live stall the program saw (its step gaps)."""
    out = [f"\nhost memory ({fmt_bytes(copy['bytes'])}): the live stall against a plain copy of it "
           f"({fmt_ms(copy['fresh_s'] * 1e3)} into fresh memory, {fmt_ms(copy['warm_s'] * 1e3)} "
           f"into faulted-in memory); goal: within 2x of the copy"]
    rows, met = [], {}
    for r in results:
        if not r.get("ok"):
            continue
        for which, name in LIVE.items():
            st = g(r, which, "stall_ms")
            if st is None:
                continue
            fresh, warm = st / (copy["fresh_s"] * 1e3), st / (copy["warm_s"] * 1e3)
            # Note [Host memory tracked between checkpoints]: pages spliced in the freeze, and
            # pages unchanged since the last checkpoint, copied from its images after the resume
            doc = g(r, which, "json") or {}
            pages = (f"{int(doc['host_pages_from_process']) * 4096 >> 20} / "
                     f"{int(doc['host_pages_from_parent']) * 4096 >> 20} MiB"
                     if "host_pages_from_process" in doc else "-")
            frozen = (f"{int(doc.get('host_pages_dma_frozen', 0)) * 4096 >> 20} MiB"
                      if "host_pages_dma_frozen" in doc else "-")
            rows.append([fmt_bytes(r["footprint_bytes"]), r["mode"], name, fmt_ms(st),
                         f"{fresh:.2f}x", f"{warm:.2f}x", pages, frozen,
                         f"{fmt_ms(g(r, which, 'normal_gap_median_ms'))} / "
                         f"{fmt_ms(g(r, which, 'window_gap_median_ms'))}"])
            if r["mode"] == "gcr":
                met[name] = {"stall_ms": st, "vs_fresh_copy": fresh, "vs_warm_copy": warm,
                             "met": warm <= 2.0}
    goals["host_freeze_within_2x_copy"] = met
    out.append("  'process / parent': host memory taken from the frozen process and, unchanged "
               "since the last checkpoint, from its images; 'pinned frozen': pinned memory CRIU "
               "copied in the freeze; 'step before / after': the median step before the 1st "
               "checkpoint and in the checkpoint's window")
    out.append(table(["footprint", "mode", "ckpt", "stall", "/ fresh copy", "/ warm copy",
                      "process / parent", "pinned frozen", "step before / after"], rows,
                     right={3, 4, 5, 6, 7, 8}))
    # The incremental goal: the 2nd checkpoint's freeze well below the 1st's, tracked or not.
    for r in results:
        if r.get("ok") and r["mode"] in ("gcr", "gcr-untracked"):
            first, second = g(r, "live", "stall_ms"), g(r, "live2", "stall_ms")
            if first and second is not None:
                goals.setdefault("host_second_vs_first", {})[r["mode"]] = {
                    "first_ms": first, "second_ms": second, "ratio": second / first}
    for mode, v in goals.get("host_second_vs_first", {}).items():
        out.append(f"  {mode}: 2nd checkpoint's stall {fmt_ms(v['second_ms'])} against the 1st's "
                   f"{fmt_ms(v['first_ms'])} ({v['ratio']:.2f}x)")
    return "\n".join(out)


def report(results, footprints, load_before, load_after, cpus, args_keep_work=False, limits=None):
    by = {(r["footprint_bytes"], r["mode"]): r for r in results}
    fps = [f for f in footprints if any((f, m) in by for m in MODES)]
    out = []
    w = out.append

    def stall(f, m, which="live"):
        return g(by.get((f, m)), which, "stall_ms")

    # Goal 1: gcr's stall does not grow with the footprint; goal 2: at 4 GiB it is >= 10x shorter
    # than --stop-copy's. Judged on each live checkpoint: the first (it stores everything) and the
    # second (it stores what changed since).
    goals = {}
    for which in LIVE:
        ok_fps = [f for f in fps if stall(f, "gcr", which) is not None]
        flat = None
        if len(ok_fps) >= 2:
            s0, s1 = stall(ok_fps[0], "gcr", which), stall(ok_fps[-1], "gcr", which)
            period = g(by[(ok_fps[-1], "gcr")], which, "normal_gap_median_ms")
            flat = {"smallest": ok_fps[0], "largest": ok_fps[-1], "stall_smallest_ms": s0,
                    "stall_largest_ms": s1, "growth": ratio(s1, s0),
                    "met": s1 <= 1.5 * max(s0, 0.0) + period}
        r4 = ratio(stall(4 * GiB, "stop-copy", which), stall(4 * GiB, "gcr", which))
        goals[which] = {"stall_flat": flat, "stall_4g_stop_copy_vs_gcr": r4,
                        "stall_4g_min_ratio": 10, "stall_4g_met": None if r4 is None else r4 >= 10}

    w("\nstall the application sees (live checkpoints, -R): the longest gap between step lines "
      "around each, minus the normal step period\n  (1st: stores everything; 2nd: what changed "
      "since the 1st; 'says': gcr's own time.stall_ns)")
    rows = []
    for f in fps:
        gc, sc = by.get((f, "gcr")), by.get((f, "stop-copy"))
        for which in LIVE:
            if g(gc, which) is None and g(sc, which) is None:
                continue
            r_ = ratio(stall(f, "stop-copy", which), stall(f, "gcr", which))
            if f == 4 * GiB:
                goal = ">= 10x: " + ("-" if r_ is None else ("met" if r_ >= 10 else "MISSED"))
            else:
                goal = "(>= 10x at 4 GiB)"
            rows.append([fmt_bytes(f), LIVE[which],
                         f"{fmt_ms(g(gc, which, 'normal_gap_median_ms'))} / "
                         f"{fmt_ms(g(sc, which, 'normal_gap_median_ms'))}",
                         fmt_ms(g(gc, which, "max_gap_ms")), fmt_ms(stall(f, "gcr", which)),
                         fmt_ms(ns_ms(g(gc, which, "json", "time.stall_ns"))),
                         fmt_ms(g(gc, which, "kernel_stall_ms")),
                         fmt_ms(g(sc, which, "max_gap_ms")), fmt_ms(stall(f, "stop-copy", which)),
                         fmt_ms(ns_ms(g(sc, which, "json", "time.stall_ns"))),
                         fmt_ms(g(sc, which, "kernel_stall_ms")),
                         fmt_ratio(r_), goal])
    w("  'kernel': the longest time a thread was held at gcr's gate or frozen by CRIU, as eBPF saw "
      "it (--trace: gcr checkpoint --trace; '-' without it or without the rights to load BPF)")
    w(table(["footprint", "ckpt", "period gcr / s-c", "gcr gap", "gcr stall", "gcr says",
             "gcr kernel", "s-c gap", "s-c stall", "s-c says", "s-c kernel", "s-c/gcr", "goal"],
            rows, right=range(2, 12)))
    for which in LIVE:
        flat = goals[which]["stall_flat"]
        if flat:
            w(f"  gcr's {LIVE[which]} stall at {fmt_bytes(flat['largest'])} vs "
              f"{fmt_bytes(flat['smallest'])}: {fmt_ms(flat['stall_largest_ms'])} vs "
              f"{fmt_ms(flat['stall_smallest_ms'])} ({fmt_ratio(flat['growth'])}); goal: does not "
              "grow (<= 1.5x + one step period): " + ("met" if flat["met"] else "MISSED"))
    rows = []
    for f in fps:
        gc, gl = by.get((f, "gcr")), by.get((f, "gcr-late"))
        for which in LIVE:
            if g(gc, which) is None or g(gl, which) is None:
                continue
            rows.append([fmt_bytes(f), LIVE[which],
                         fmt_ms(stall(f, "gcr", which)), fmt_ms(stall(f, "gcr-late", which)),
                         fmt_ms(g(gc, which, "kernel_stall_ms")),
                         fmt_ms(g(gl, which, "kernel_stall_ms")),
                         fmt_ms(ns_ms(g(gc, which, "json", "time.criu_start_ns"))),
                         fmt_ratio(ratio(g(gl, which, "kernel_stall_ms"),
                                         g(gc, which, "kernel_stall_ms")))])
    if rows:
        w("  CRIU started before the cut (gcr) vs after the park (gcr-late, GCR_CRIU_EARLY=0)")
        w(table(["footprint", "ckpt", "gcr stall", "late stall", "gcr kernel", "late kernel",
                 "CRIU start", "late/gcr (kernel)"], rows, right=range(2, 8)))
    rows = []
    for f in fps:
        for m in MODES:
            r = by.get((f, m))
            for which in LIVE:
                if g(r, which) is None:
                    continue
                rows.append([fmt_bytes(f), m, LIVE[which],
                             fmt_ms(g(r, which, "normal_gap_max_ms")),
                             fmt_ms(g(r, which, "lost_ms")), g(r, which, "max_gap_at_step"),
                             f"{g(r, which, 'steps_before')}-{g(r, which, 'steps_at_return')}"])
    w("  noise and spread: the longest gap before the 1st checkpoint; the time lost over each "
      "window (sum of gaps' excess over the period)")
    w(table(["footprint", "mode", "ckpt", "max gap before", "lost in window", "worst gap at step",
             "steps during cmd"], rows, right={3, 4, 5, 6}))

    w("\ncheckpoint time: --json time.total_ns (the command's wall time)")
    rows = []
    for f in fps:
        gc, sc = by.get((f, "gcr")), by.get((f, "stop-copy"))
        for which, label in list(LIVE.items()) + [("stop", "stop")]:
            if g(gc, which) is None and g(sc, which) is None:
                continue
            gt = ns_ms(g(gc, which, "json", "time.total_ns"))
            st = ns_ms(g(sc, which, "json", "time.total_ns"))
            rows.append([fmt_bytes(f), label,
                         f"{fmt_ms(gt)} ({fmt_ms(g(gc, which, 'cmd_wall_ms'))})",
                         f"{fmt_ms(st)} ({fmt_ms(g(sc, which, 'cmd_wall_ms'))})",
                         fmt_ratio(ratio(st, gt))])
    w(table(["footprint", "ckpt", "gcr", "stop-copy", "s-c/gcr"], rows, right={2, 3, 4}))

    w("\nrestore (of the stopping checkpoint): command start to the restored process's next step "
      "line; --json time.total_ns")
    rows = []
    for f in fps:
        gc, sc = by.get((f, "gcr")), by.get((f, "stop-copy"))
        gs, ss = g(gc, "restore", "to_first_step_ms"), g(sc, "restore", "to_first_step_ms")
        rows.append([fmt_bytes(f), fmt_ms(gs), fmt_ms(ns_ms(g(gc, "restore", "json", "time.total_ns"))),
                     fmt_ms(g(gc, "restore", "cmd_wall_ms")), fmt_ms(ss),
                     fmt_ms(ns_ms(g(sc, "restore", "json", "time.total_ns"))),
                     fmt_ms(g(sc, "restore", "cmd_wall_ms")), fmt_ratio(ratio(ss, gs))])
    w(table(["footprint", "gcr to step", "gcr total", "gcr wall", "s-c to step", "s-c total",
             "s-c wall", "s-c/gcr"], rows))

    if limits:
        # The first live checkpoint stores everything: its drain against the disk's durable write.
        w("\nthroughput against the machine (" + describe_limits(limits) + ")")
        rows = []
        for f in fps:
            for m in MODES:
                doc = g(by.get((f, m)), "live", "json")
                if not doc or not doc.get("time.store_ns"):
                    continue
                rate = doc.get("stat.stored_bytes", 0) / (doc["time.store_ns"] / 1e9)
                rows.append([fmt_bytes(f), m, fmt_bytes(doc.get("stat.stored_bytes", 0)),
                             fmt_ms(ns_ms(doc["time.store_ns"])), fmt_rate(rate),
                             f"{100 * rate / limits['durable_write_Bps']:.0f}%"])
        w("  the 1st live checkpoint's store (drain): bytes written to packs / time.store_ns; "
          "goal >= 80% of durable write")
        w(table(["footprint", "mode", "stored", "store time", "rate", "of durable write"], rows,
                right={2, 3, 4, 5}))

    w("\nimage sizes (store stats; CRIU image = the checkpoint's files; device = gcr's regions)")
    rows = []
    for f in fps:
        for m in MODES:
            r = by.get((f, m))
            for which in ("live", "live2", "stop"):
                st = g(r, which, "image", "stats")
                if st is None:
                    continue
                rows.append([fmt_bytes(f), m, which + (" (child)" if g(r, which, "image", "parent") else ""),
                             fmt_bytes(st.get("logical_bytes")), fmt_bytes(st.get("new_bytes")),
                             fmt_bytes(st.get("stored_bytes")),
                             fmt_bytes(g(r, which, "image", "criu_image_bytes")),
                             fmt_bytes(g(r, which, "image", "region_bytes"))])
    w(table(["footprint", "mode", "checkpoint", "logical", "new", "stored", "CRIU image",
             "device"], rows, right={3, 4, 5, 6, 7}))

    for r in results:
        if not r["ok"]:
            w(f"\nFAILED: {fmt_bytes(r['footprint_bytes'])} {r['mode']}: {r.get('error')}")
            w(f"  logs kept in {r['dir']}" + ("" if args_keep_work else
              " (the work dir with CRIU's logs too with --keep-work)"))
            w("  gcrd.log:\n" + r.get("gcrd_log_tail", ""))
            w("  app.log:\n" + r.get("app_log_tail", ""))
        elif g(r, "restore", "warning"):
            w(f"\nWARNING: {fmt_bytes(r['footprint_bytes'])} {r['mode']}: {r['restore']['warning']}")
    w(f"\nload average {load_before:.2f} before, {load_after:.2f} after, on {cpus} CPUs"
      + (": other work shared the machine; timings are pessimistic and noisy"
         if max(load_before, load_after) > cpus else ""))
    return "\n".join(out), goals


# --- main -------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("GCR_BUILD_DIR", os.path.join(REPO, "build")),
                    help="build dir with bin/gcr, bin/gcrd, tests/workloads/mlp_train (default: "
                         "$GCR_BUILD_DIR, else build)")
    ap.add_argument("--footprints", default=None,
                    help="comma-separated device footprints (default 256M,1G,4G)")
    ap.add_argument("--quick", action="store_true", help="footprints 64M,256M")
    ap.add_argument("--modes", default="gcr,stop-copy",
                    help="gcr, stop-copy (both by default), gcr-late (CRIU started after the park)")
    ap.add_argument("--step-delay-ms", type=int, default=10)
    ap.add_argument("--warm-steps", type=int, default=60,
                    help="steps before the live checkpoint (the normal period's sample)")
    ap.add_argument("--post-steps", type=int, default=30,
                    help="steps after the live checkpoint returned that still count as its window")
    ap.add_argument("--no-second", action="store_true",
                    help="skip the second live checkpoint (the incremental one)")
    ap.add_argument("--simgpu-memory", type=parse_size, default=8 * GiB,
                    help="SIMGPU_MEMORY (at least 2 x footprint + 1G is used: gcr's -R snapshot "
                         "doubles the device memory for a moment)")
    ap.add_argument("--dir", default="/var/tmp", help="where the temporary stores go")
    ap.add_argument("--host-writes", type=int, default=1,
                    help="pages of the host memory each step rewrites (mlp_train --host-writes; "
                         "default 1): what a checkpoint after the first finds changed, and what "
                         "tracking it costs the program (a fault per page first written)")
    ap.add_argument("--pinned-footprint", type=parse_size, default=0,
                    help="pinned host memory the workload holds (mlp_train --pinned-footprint), "
                         "written each step by a device copy, the CPU and a kernel; compare "
                         "--modes gcr,gcr-pinned-frozen")
    ap.add_argument("--host-footprint", type=parse_size, default=0,
                    help="pageable host memory the workload holds (mlp_train --host-footprint), "
                         "dumped by CRIU inside the freeze (default 0)")
    ap.add_argument("--images", choices=("memory", "disk"), default="disk",
                    help="where CRIU writes during the freeze: the work dir on disk (gcrd's "
                         "default) or a private directory under /dev/shm (GCR_MEMORY_WORK_DIR)")
    ap.add_argument("--trace", action="store_true",
                    help="trace the live checkpoints with eBPF (gcr checkpoint --trace): the "
                         "kernel-measured stall columns; tracing slows --stop-copy's dump, so "
                         "compare modes without it")
    ap.add_argument("--no-limits", action="store_true",
                    help="skip measuring this machine's memcpy, durable write and read rates")
    device_pages_argument(ap)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--no-results", action="store_true", help="do not write bench/results/")
    ap.add_argument("--keep-work", action="store_true",
                    help="keep work dirs and logs (GCR_KEEP_WORK=1); stores are removed anyway")
    args = ap.parse_args()

    if args.footprints and args.quick:
        ap.error("--footprints and --quick exclude each other")
    spec = "64M,256M" if args.quick else (args.footprints or "256M,1G,4G")
    footprints = [parse_size(s) for s in spec.split(",") if s.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in MODES for m in modes):
        ap.error(f"--modes: {args.modes!r}; choose from {', '.join(MODES)}")
    build = os.path.abspath(args.build)
    for exe in ("bin/gcr", "bin/gcrd", "tests/workloads/mlp_train"):
        if not os.access(os.path.join(build, exe), os.X_OK):
            print(f"bench_ckpt: {exe} is not built in {build} (--build DIR)", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("bench_ckpt: needs root (CRIU)", file=sys.stderr)
        return 2
    os.makedirs(args.dir, exist_ok=True)

    def on_signal(sig, _):
        raise KeyboardInterrupt(f"signal {sig}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    cpus = os.cpu_count() or 1
    thp = set_device_pages(args.device_pages)
    print(f"bench_ckpt: shared memory transparent huge pages: {thp} "
          f"(simgpu's device pages: {HUGE_PAGES.get(thp, '4 KiB')})")
    limits = None
    if not args.no_limits:
        print("bench_ckpt: measuring this machine's limits (memcpy, durable write, reads)...",
              flush=True)
        limits = machine_limits(args.dir)
        print("  " + describe_limits(limits), flush=True)
    host_copy = None
    if args.host_footprint or args.pinned_footprint:
        host_copy = plain_copy(args.host_footprint + args.pinned_footprint)
        if host_copy:
            print(f"  a plain copy of {fmt_bytes(host_copy['bytes'])}: "
                  f"{fmt_ms(host_copy['fresh_s'] * 1e3)} into fresh memory, "
                  f"{fmt_ms(host_copy['warm_s'] * 1e3)} into faulted-in memory", flush=True)
    load_before = os.getloadavg()[0]
    mem, disk = meminfo(), shutil.disk_usage(args.dir)
    print(f"bench_ckpt: mlp_train --step-delay-ms {args.step_delay_ms} under gcr on simgpu; "
          f"footprints {', '.join(fmt_bytes(f) for f in footprints)}; modes {', '.join(modes)}")
    print(f"  build {build}; stores in {args.dir} ({fmt_bytes(disk.free)} free); "
          f"{fmt_bytes(mem['MemAvailable'])} of {fmt_bytes(mem['MemTotal'])} memory available; "
          f"{cpus} CPUs, load average {load_before:.2f}")
    sys.stdout.flush()

    results, skipped = [], []
    started = time.monotonic()
    try:
        for f in footprints:
            # Memory: gcr's -R checkpoint holds the device memory three times (the process's, the
            # snapshot gcrd copies it to, and the host buffer it stores a region from); --stop-copy
            # twice (device + the driver's host copy; CRIU's restore before the driver's). Disk:
            # the stores hold each full image once, the CRIU work dir one more for --stop-copy.
            need_mem, need_disk = 3 * f + GiB, 3 * f + 2 * GiB
            mem, disk = meminfo(), shutil.disk_usage(args.dir)
            if mem["MemAvailable"] < need_mem or disk.free < need_disk:
                msg = (f"skipping {fmt_bytes(f)}: needs {fmt_bytes(need_mem)} memory and "
                       f"{fmt_bytes(need_disk)} disk; {fmt_bytes(mem['MemAvailable'])} and "
                       f"{fmt_bytes(disk.free)} are free")
                print("  " + msg)
                skipped.append({"footprint_bytes": f, "reason": msg})
                continue
            gib = f / GiB
            timeouts = {"start": 60 + 20 * gib, "cmd": 120 + 60 * gib, "steps": 60 + 30 * gib}
            for m in modes:
                print(f"  {fmt_bytes(f)} {m} ...", end="", flush=True)
                r = measure(f, m, args, build, timeouts)
                results.append(r)
                if r["ok"]:
                    print(f" stall {fmt_ms(r['live']['stall_ms'])}, checkpoint "
                          f"{fmt_ms(ns_ms(r['live']['json'].get('time.total_ns')))}, restore "
                          f"{fmt_ms(r['restore']['to_first_step_ms'])} ({r['run_s']:.0f} s)",
                          flush=True)
                else:
                    print(f" FAILED: {r['error']} ({r['run_s']:.0f} s)", flush=True)
    except KeyboardInterrupt as e:
        print(f"\nbench_ckpt: interrupted ({e}); cleaning up", file=sys.stderr)
        REAPER.kill_all()
        return 1
    finally:
        REAPER.kill_all()
        shutil.rmtree(os.path.join("/dev/shm", f"gcr-bench-{os.getpid()}"), ignore_errors=True)

    load_after = os.getloadavg()[0]
    if not results:
        print("bench_ckpt: nothing measured")
        return 0
    text, goals = report(results, footprints, load_before, load_after, cpus, args.keep_work, limits)
    print(text)
    if host_copy:
        print(host_copy_report(results, host_copy, goals))
    print(f"total {time.monotonic() - started:.0f} s")

    doc = {
        "benchmark": "ckpt",
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "kernel": f"{platform.system()} {platform.release()}",
        "cpus": cpus,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "build": build,
        "dir": args.dir,
        "step_delay_ms": args.step_delay_ms,
        "machine": limits,
        "shmem_thp": thp,
        "host_footprint_bytes": args.host_footprint,
        "pinned_footprint_bytes": args.pinned_footprint,
        "images": args.images,
        "host_plain_copy": host_copy,
        "warm_steps": args.warm_steps,
        "post_steps": args.post_steps,
        "simgpu_memory_bytes": args.simgpu_memory,
        "footprints_bytes": footprints,
        "modes": modes,
        "skipped": skipped,
        "total_s": time.monotonic() - started,
        "runs": results,
        "goals": goals,
    }
    paths = []
    if args.json:
        paths.append(args.json)
    if not args.no_results:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        paths.append(os.path.join(HERE, "results", "ckpt-" + datetime.datetime.now().strftime(
            "%Y-%m-%dT%H%M%S") + ".json"))
    # Arrays of numbers (the gaps) on one line each, not one number a line.
    text_doc = re.sub(r"\[\s*([-0-9.eE]+(?:,\s*[-0-9.eE]+)*)\s*\]",
                      lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                      json.dumps(doc, indent=2))
    for p in paths:
        with open(p, "w") as f:
            f.write(text_doc + "\n")
        print(f"wrote {p}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
