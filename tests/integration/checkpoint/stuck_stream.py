#!/usr/bin/env python3
"""stuck_stream.py FLAG: a CUDA process whose stream waits on a value no issued launch writes.

Enqueues cuStreamWaitValue32(word >= 1) on a stream of its own, prints `waiting`, and sleeps
(outside any CUDA call) until the file FLAG exists; only then writes the word from another stream
and synchronizes, printing `done`. A quiesce meanwhile cannot drain that stream. Driver API through
ctypes (libcuda.so.1: gcr's interposer under `gcr run`); standard library only.
"""
import ctypes
import os
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")


def check(what, r):
    if r != 0:
        print(f"stuck_stream: {what} failed: {r}", file=sys.stderr)
        sys.exit(2)


ctx, dev, word = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64()
waiting, writing = ctypes.c_void_p(), ctypes.c_void_p()
check("cuInit", cuda.cuInit(0))
check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(word), 4096))
check("cuMemsetD32", cuda.cuMemsetD32_v2(word, 0, 1024))
check("cuStreamCreate", cuda.cuStreamCreate(ctypes.byref(waiting), 1))
check("cuStreamCreate", cuda.cuStreamCreate(ctypes.byref(writing), 1))
check("cuStreamWaitValue32", cuda.cuStreamWaitValue32_v2(waiting, word, ctypes.c_uint32(1), 0))
print("waiting", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
check("cuMemsetD32Async", cuda.cuMemsetD32Async(word, 1, 1, writing))
check("cuStreamSynchronize", cuda.cuStreamSynchronize(waiting))
print("done", flush=True)
