#!/usr/bin/env python3
"""py_train.py: a Python training loop that drives the GPU through ctypes and the CUDA driver API.

  py_train.py --kernels build/tests/workloads/libpy_kernels.so [--steps N] [--seed S] ...

It loads libcuda.so.1 by name (under `gcr run` that is gcr's interposer, otherwise whatever
LD_LIBRARY_PATH finds: simgpu or the NVIDIA driver) and its kernels from libpy_kernels.so, a
kernel library built from kernels/py_kernels.cu: the library holds the CPU twins (loaded
RTLD_GLOBAL, so that simgpu's dlsym finds them) and exports the fatbin (py_kernels_fatbin).

The model: a linear map W (8 x 64) trained with SGD to imitate a fixed random teacher T, plus a
device "state" buffer that an iterated integer map rewrites every step. A data thread produces
the batches (splitmix64, seeded by --seed and the step) into anonymous mmaps and hands them over
through a queue; a printer thread writes the output lines; the main thread does all CUDA calls.
Standard library only.

Output (stdout): a `config ...` line, `step K loss L` per step, then `final_loss L` and
`checksum <hex>`, FNV-1a 64 over the final W, state and per-step losses as read back from the
device. The checksum depends on --steps --batch --seed --state-bytes only (not on --context,
--step-delay-ms or timing). Exit codes: 0 ok, 2 CUDA error or bad command line.
"""
import argparse
import ctypes
import gc
import mmap
import os
import queue
import sys
import threading
import time
from array import array

N_IN = 64
N_OUT = 8
LEARNING_RATE = 0.05
MASK64 = (1 << 64) - 1

CUDA_SUCCESS = 0
CU_STREAM_NON_BLOCKING = 1

c_ptr = ctypes.c_void_p
c_devptr = ctypes.c_uint64  # CUdeviceptr
c_size = ctypes.c_size_t


# --- deterministic data -------------------------------------------------------------------------

class SplitMix64:
    """The workloads' generator (workload_util.h), bit for bit."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform_pm1(self):
        """Uniform in [-1, 1) from the top 24 bits: exact in a float32."""
        return (self.next() >> 40) * 2.0**-23 - 1.0


def stream_seed(seed, what, index):
    """The seed of one independent draw (what: 1 teacher, 2 initial weights, 3 batch)."""
    g = SplitMix64(seed * 0x100000001B3 ^ (what << 56) ^ index)
    return g.next()


def fnv1a64(data, h=0xCBF29CE484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


# --- the driver through ctypes ------------------------------------------------------------------

class Driver:
    """The driver calls py_train uses, with their C signatures; every call is checked."""

    SIGNATURES = {
        "cuInit": [ctypes.c_uint],
        "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(c_ptr), ctypes.c_int],
        "cuDevicePrimaryCtxRelease_v2": [ctypes.c_int],
        "cuCtxCreate_v4": [ctypes.POINTER(c_ptr), c_ptr, ctypes.c_uint, ctypes.c_int],
        "cuCtxDestroy_v2": [c_ptr],
        "cuCtxSetCurrent": [c_ptr],
        "cuCtxSynchronize": [],
        "cuModuleLoadData": [ctypes.POINTER(c_ptr), c_ptr],
        "cuModuleUnload": [c_ptr],
        "cuModuleGetFunction": [ctypes.POINTER(c_ptr), c_ptr, ctypes.c_char_p],
        "cuMemAlloc_v2": [ctypes.POINTER(c_devptr), c_size],
        "cuMemFree_v2": [c_devptr],
        "cuMemAllocHost_v2": [ctypes.POINTER(c_ptr), c_size],
        "cuMemFreeHost": [c_ptr],
        "cuMemsetD8_v2": [c_devptr, ctypes.c_ubyte, c_size],
        "cuMemcpyHtoD_v2": [c_devptr, c_ptr, c_size],
        "cuMemcpyDtoH_v2": [c_ptr, c_devptr, c_size],
        "cuMemcpyHtoDAsync_v2": [c_devptr, c_ptr, c_size, c_ptr],
        "cuMemcpyDtoHAsync_v2": [c_ptr, c_devptr, c_size, c_ptr],
        "cuStreamCreate": [ctypes.POINTER(c_ptr), ctypes.c_uint],
        "cuStreamDestroy_v2": [c_ptr],
        "cuStreamSynchronize": [c_ptr],
        "cuLaunchKernel": [c_ptr, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, c_ptr,
                           ctypes.POINTER(c_ptr), ctypes.POINTER(c_ptr)],
    }

    def __init__(self):
        try:
            # By name, as PyTorch and cuda-python do: LD_LIBRARY_PATH (and gcr run) decide which.
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            sys.stderr.write(f"py_train: cannot load libcuda.so.1 ({e}); point LD_LIBRARY_PATH "
                             "at simgpu or run on a machine with the NVIDIA driver\n")
            sys.exit(2)
        for name, argtypes in self.SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int

    def __call__(self, name, *args):
        r = getattr(self.lib, name)(*args)
        if r != CUDA_SUCCESS:
            self.fail(r, name)

    def fail(self, r, call):
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        if self.lib.cuGetErrorName(r, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            name.value = b"unknown CUresult"
        if self.lib.cuGetErrorString(r, ctypes.byref(text)) != CUDA_SUCCESS or not text.value:
            text.value = b"no description"
        sys.stdout.flush()
        sys.stderr.write(f"CUDA error: {call} failed: {name.value.decode()} ({r}): "
                         f"{text.value.decode()}\n")
        sys.stderr.flush()
        os._exit(2)  # the other threads hold no state worth flushing

    def alloc(self, nbytes):
        p = c_devptr()
        self("cuMemAlloc_v2", ctypes.byref(p), nbytes)
        return p.value

    def launch(self, fn, n_threads, stream, *args):
        """cuLaunchKernel over n_threads (blocks of 128) with a params array of pointers to the
        arguments, which must be ctypes values of the kernel's exact parameter types."""
        block = 128
        grid = max(1, (n_threads + block - 1) // block)
        params = (c_ptr * len(args))(*[ctypes.cast(ctypes.byref(a), c_ptr) for a in args])
        self("cuLaunchKernel", fn, grid, 1, 1, block, 1, 1, 0, stream, params, None)


def load_kernels(drv, path):
    """Loads the kernel library (twins visible to the driver's dlsym) and its fatbin as a module;
    returns the module and its functions by name."""
    try:
        kernels = ctypes.CDLL(path, mode=os.RTLD_NOW | ctypes.RTLD_GLOBAL)
    except OSError as e:
        sys.stderr.write(f"py_train: cannot load the kernel library {path}: {e}\n")
        sys.exit(2)
    kernels.py_kernels_fatbin.argtypes = [ctypes.POINTER(c_size)]
    kernels.py_kernels_fatbin.restype = c_ptr
    size = c_size()
    image = kernels.py_kernels_fatbin(ctypes.byref(size))
    module = c_ptr()
    drv("cuModuleLoadData", ctypes.byref(module), image)
    functions = {}
    for name in ("py_linear", "py_sgd_update", "py_mse", "py_mix"):
        f = c_ptr()
        drv("cuModuleGetFunction", ctypes.byref(f), module, name.encode())
        functions[name] = f
    return kernels, module, functions


# --- the threads around the GPU -----------------------------------------------------------------

def produce_batches(args, out):
    """Data thread: batch `step`'s inputs, [batch][N_IN] float32, in a fresh anonymous mmap each
    (as a DataLoader's pinned staging would churn mappings); None at the end."""
    nbytes = args.batch * N_IN * 4
    for step in range(args.steps):
        g = SplitMix64(stream_seed(args.seed, 3, step))
        values = array("f", [g.uniform_pm1() for _ in range(args.batch * N_IN)])
        buf = mmap.mmap(-1, nbytes)
        buf.write(values.tobytes())
        out.put((step, buf))
    out.put(None)


def print_lines(lines):
    """Printer thread: the only writer to stdout after the config line."""
    while True:
        line = lines.get()
        if line is None:
            return
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def random_floats(seed, what, n, scale):
    g = SplitMix64(stream_seed(seed, what, 0))
    return array("f", [g.uniform_pm1() * scale for _ in range(n)])


def upload(drv, dev, data):
    buf = (ctypes.c_char * len(data)).from_buffer_copy(data)
    drv("cuMemcpyHtoD_v2", dev, buf, len(data))


def download(drv, dev, nbytes):
    buf = (ctypes.c_char * nbytes)()
    drv("cuMemcpyDtoH_v2", buf, dev, nbytes)
    return bytes(buf)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", default=os.environ.get("PY_TRAIN_KERNELS"),
                    help="path of libpy_kernels.so (default: $PY_TRAIN_KERNELS)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--state-bytes", type=int, default=256 * 1024,
                    help="device state rewritten every step (a multiple of 4)")
    ap.add_argument("--context", choices=("primary", "create"), default="primary",
                    help="device 0's primary context, or one made with cuCtxCreate")
    ap.add_argument("--step-delay-ms", type=int, default=0)
    args = ap.parse_args()
    if not args.kernels:
        ap.error("--kernels (or PY_TRAIN_KERNELS) must name libpy_kernels.so "
                 "(built in <build>/tests/workloads/)")
    if args.steps < 1 or args.batch < 1 or args.state_bytes < 4 or args.state_bytes % 4:
        ap.error("--steps and --batch must be positive, --state-bytes a positive multiple of 4")

    drv = Driver()
    drv("cuInit", 0)
    dev = ctypes.c_int()
    drv("cuDeviceGet", ctypes.byref(dev), 0)
    ctx = c_ptr()
    if args.context == "primary":
        drv("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        drv("cuCtxSetCurrent", ctx)
    else:
        drv("cuCtxCreate_v4", ctypes.byref(ctx), None, 0, dev)
    kernels, module, k = load_kernels(drv, args.kernels)
    stream = c_ptr()
    drv("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)

    weights_bytes = N_OUT * N_IN * 4
    d_w = drv.alloc(weights_bytes)
    d_teacher = drv.alloc(weights_bytes)
    d_x = drv.alloc(args.batch * N_IN * 4)
    d_losses = drv.alloc(args.steps * 4)
    d_state = drv.alloc(args.state_bytes)
    upload(drv, d_teacher, random_floats(args.seed, 1, N_OUT * N_IN, 0.5).tobytes())
    upload(drv, d_w, random_floats(args.seed, 2, N_OUT * N_IN, 0.1).tobytes())
    drv("cuMemsetD8_v2", d_state, 0, args.state_bytes)

    staging = c_ptr()  # pinned: the batch's async copy and the loss read back
    x_bytes = args.batch * N_IN * 4
    drv("cuMemAllocHost_v2", ctypes.byref(staging), x_bytes + 4)
    loss_host = ctypes.c_float.from_address(staging.value + x_bytes)

    print(f"config steps {args.steps} batch {args.batch} seed {args.seed} "
          f"state_bytes {args.state_bytes} context {args.context} pid {os.getpid()}", flush=True)
    batches = queue.Queue(maxsize=4)
    lines = queue.Queue()
    producer = threading.Thread(target=produce_batches, args=(args, batches), name="data")
    printer = threading.Thread(target=print_lines, args=(lines,), name="printer")
    producer.start()
    printer.start()

    batch, n_in, n_out = ctypes.c_int(args.batch), ctypes.c_int(N_IN), ctypes.c_int(N_OUT)
    scale = ctypes.c_float(LEARNING_RATE / args.batch)
    state_words = ctypes.c_uint64(args.state_bytes // 4)
    history = []  # per-step bookkeeping a Python training loop keeps: small objects, gc work
    start = time.monotonic()
    loss = 0.0
    for step in range(args.steps):
        got, buf = batches.get()
        assert got == step
        view = (ctypes.c_char * x_bytes).from_buffer(buf)
        ctypes.memmove(staging, view, x_bytes)
        del view
        buf.close()
        drv("cuMemcpyHtoDAsync_v2", d_x, staging, x_bytes, stream)

        # Per-step activations: small allocations made and freed every step.
        d_pred = drv.alloc(args.batch * N_OUT * 4)
        d_y = drv.alloc(args.batch * N_OUT * 4)
        x, w, t = c_devptr(d_x), c_devptr(d_w), c_devptr(d_teacher)
        pred, y = c_devptr(d_pred), c_devptr(d_y)
        rows = args.batch * N_OUT
        drv.launch(k["py_linear"], rows, stream, y, x, t, batch, n_in, n_out)
        drv.launch(k["py_linear"], rows, stream, pred, x, w, batch, n_in, n_out)
        drv.launch(k["py_mse"], 1, stream, c_devptr(d_losses + 4 * step), pred, y,
                   ctypes.c_int(rows))
        drv.launch(k["py_sgd_update"], N_OUT * N_IN, stream, w, pred, y, x, batch, n_in, n_out,
                   scale)
        drv.launch(k["py_mix"], args.state_bytes // 4, stream, c_devptr(d_state), state_words,
                   ctypes.c_uint(step + 1))
        drv("cuMemcpyDtoHAsync_v2", ctypes.addressof(loss_host), d_losses + 4 * step, 4, stream)
        drv("cuStreamSynchronize", stream)
        drv("cuMemFree_v2", d_pred)
        drv("cuMemFree_v2", d_y)

        loss = loss_host.value
        history.append({"step": step, "loss": loss, "note": bytearray(64 + step % 200)})
        if len(history) > 50:
            del history[:25]
        if step % 10 == 9:
            gc.collect()
        lines.put(f"step {step} loss {loss:.9g} t_ms {(time.monotonic() - start) * 1e3:.1f}")
        if args.step_delay_ms > 0:
            time.sleep(args.step_delay_ms / 1000.0)

    producer.join()
    drv("cuCtxSynchronize")
    h = fnv1a64(download(drv, d_w, weights_bytes))
    h = fnv1a64(download(drv, d_state, args.state_bytes), h)
    h = fnv1a64(download(drv, d_losses, args.steps * 4), h)
    lines.put(f"final_loss {loss:.9g}")
    lines.put(f"checksum {h:016x}")
    lines.put(None)
    printer.join()

    for d in (d_w, d_teacher, d_x, d_losses, d_state):
        drv("cuMemFree_v2", d)
    drv("cuMemFreeHost", staging)
    drv("cuStreamDestroy_v2", stream)
    drv("cuModuleUnload", module)
    if args.context == "primary":
        drv("cuDevicePrimaryCtxRelease_v2", dev)
    else:
        drv("cuCtxDestroy_v2", ctx)
    del kernels  # held until here: the twins ran from it until cuModuleUnload
    return 0


if __name__ == "__main__":
    sys.exit(main())
