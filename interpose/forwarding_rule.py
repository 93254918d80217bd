"""Which driver calls may pass the API gate unwrapped: the rule, as code the generator applies.

Note [What may pass the gate unwrapped]
The interposer exports every name of the driver. A name with a C++ wrapper (a strong definition)
is seen by gcr; every other name is a trampoline that checks only that the gate is open and
tail-calls the driver (gen_trampolines.py). A call may be a trampoline only if gcr has nothing to
learn from it, that is, only if it does none of these:

  memory    allocates, frees, maps, unmaps, imports or exports memory a kernel can reach (device,
            pinned host, VMM, IPC, pools, multicast, external): gcr owns that memory in its
            regions, parks it and restores it, and must know every piece;
  writes    writes device memory other than through a kernel launch gcr sees (copies, sets,
            stream memory operations, decompression): an incremental checkpoint copies only the
            regions marked written;
  reads     reads device memory outside a kernel (copies out of device memory): after an
            on-demand restore a read waits until its region is loaded;
  launches  launches work (kernels, graphs): each launch marks what it may write;
  contexts  creates or destroys a context: the arena of regions is reserved per context.

Everything else is the driver's control state (streams, events, modules, graphs being built,
arrays, attributes, queries), which the driver's own checkpoint carries (DESIGN.md section 4).

The generator enforces the rule: a name that MUST_WRAP matches, and that is neither an exception
nor refused, gets no trampoline at all, so the library links only if C++ defines it (exports_table
takes the address of every driver name; the link fails with "undefined reference to `cuX'").
A name REFUSED gets a stub that says so once on stderr and returns CUDA_ERROR_NOT_SUPPORTED.
test: interpose.forwarding_rule checks the built library against this file (forwarding_rule.py
--check LIB SYMBOLS).

Known gaps, forwarded on purpose and written here so that nobody mistakes them for safe:
cuDevicePrimaryCtxReset destroys every allocation of the primary context while gcr still lists
its regions (a program resets only as it ends); memory a graph allocates (cuGraphAddMemAllocNode,
stream-captured cuMemAllocAsync) lives outside gcr's regions and is carried by the driver's
checkpoint as any other driver allocation.
"""
import re
import subprocess
import sys

MUST_WRAP = re.compile(
    r"^cu("
    r"Mem(Alloc|Free|Create|Release|Map|Unmap|AddressReserve|AddressFree|HostAlloc|"
    r"HostRegister|HostUnregister|RetainAllocationHandle|ExportToShareableHandle|"
    r"ImportFromShareableHandle|Pool(Create|Destroy|ExportToShareableHandle|"
    r"ImportFromShareableHandle|ExportPointer|ImportPointer))"  # memory
    r"|Ipc|Multicast|ImportExternalMemory|DestroyExternalMemory|ExternalMemoryGetMapped"  # memory
    r"|Memcpy|Memset|MemBatchDecompress|Stream(Write|Wait)Value|StreamBatchMemOp"  # writes, reads
    r"|Launch|GraphLaunch"  # launches
    r"|Ctx(Create|Destroy)|DevicePrimaryCtxRetain"  # contexts
    r")")

# Names MUST_WRAP matches that may still be forwarded, and why.
_ARRAY_ONLY = "copies between host memory and CUDA arrays, which the driver's checkpoint carries"
_MULTICAST = "acts on a multicast object, which gcr refuses to create (cuMulticastCreate)"
_POOL = "acts on a pool that was exported or imported, which is a blocker already"
_EXTERNAL = "acts on imported external memory, which is a blocker already"
EXCEPTIONS = {
    "cuLaunchHostFunc": "runs a host function on a stream: no device memory",
    "cuLaunchHostFunc_ptsz": "runs a host function on a stream: no device memory",
    "cuMemcpyHtoA": _ARRAY_ONLY,
    "cuMemcpyHtoA_v2": _ARRAY_ONLY,
    "cuMemcpyHtoA_v2_ptds": _ARRAY_ONLY,
    "cuMemcpyHtoAAsync": _ARRAY_ONLY,
    "cuMemcpyHtoAAsync_v2": _ARRAY_ONLY,
    "cuMemcpyHtoAAsync_v2_ptsz": _ARRAY_ONLY,
    "cuMemcpyAtoA": _ARRAY_ONLY,
    "cuMemcpyAtoA_v2": _ARRAY_ONLY,
    "cuMemcpyAtoA_v2_ptds": _ARRAY_ONLY,
    "cuMulticastAddDevice": _MULTICAST,
    "cuMulticastBindAddr": _MULTICAST,
    "cuMulticastBindMem": _MULTICAST,
    "cuMulticastGetGranularity": _MULTICAST,
    "cuMulticastUnbind": _MULTICAST,
    "cuMemPoolExportPointer": _POOL,
    "cuMemPoolImportPointer": _POOL,
    "cuExternalMemoryGetMappedBuffer": _EXTERNAL,
    "cuExternalMemoryGetMappedMipmappedArray": _EXTERNAL,
}

# The entry points of the driver's first ABI (32-bit device pointers and sizes, before CUDA 3.2),
# still exported under their first names; cuda.h maps every name to its _v2 since then, so only a
# binary built against CUDA 3.1 or older calls them. gcr refuses them rather than carry a second ABI.
LEGACY_ABI = {
    "cuCtxCreate", "cuCtxDestroy", "cuMemAlloc", "cuMemAllocHost", "cuMemAllocPitch", "cuMemFree",
    "cuMemHostRegister", "cuMemcpy2D", "cuMemcpy2DAsync", "cuMemcpy2DUnaligned", "cuMemcpy3D",
    "cuMemcpy3DAsync", "cuMemcpyAtoD", "cuMemcpyAtoH", "cuMemcpyAtoHAsync", "cuMemcpyDtoA",
    "cuMemcpyDtoD", "cuMemcpyDtoDAsync", "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cuMemcpyHtoD",
    "cuMemcpyHtoDAsync", "cuMemsetD16", "cuMemsetD2D16", "cuMemsetD2D32", "cuMemsetD2D8",
    "cuMemsetD32", "cuMemsetD8",
}
REFUSED = LEGACY_ABI  # refused.cpp's message speaks of the first ABI: another kind needs its own


def classify(name: str) -> str:
    """'refuse', 'wrap' (C++ must define it) or 'forward' (a trampoline)."""
    if name in REFUSED:
        return "refuse"
    if MUST_WRAP.match(name) and name not in EXCEPTIONS:
        return "wrap"
    return "forward"


def check(library: str, symbols_inc: str) -> int:
    """The built library against the rule: wrapped names strong, forwarded ones weak."""
    names = re.findall(r"GCR_DRIVER_SYMBOL\((\w+)\)", open(symbols_inc, encoding="utf-8").read())
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True,
                         capture_output=True, text=True).stdout
    kind = {f[2]: f[1] for f in (line.split() for line in out.splitlines()) if len(f) == 3}
    errors = []
    for name in names:
        want = classify(name)
        got = kind.get(name)
        if got is None:
            errors.append(f"{name}: not exported")
        elif want in ("wrap", "refuse") and got != "T":
            errors.append(f"{name}: the rule says '{want}', but it is a trampoline")
        elif want == "forward" and got not in ("T", "W"):
            errors.append(f"{name}: exported as '{got}', not as a function")
    unused = sorted(set(EXCEPTIONS) - set(names)) + sorted(REFUSED - set(names))
    errors += [f"{n}: named by the rule, not a driver symbol" for n in unused]
    for e in errors:
        print(f"forwarding_rule: {e}", file=sys.stderr)
    counts = {k: sum(1 for n in names if classify(n) == k) for k in ("wrap", "forward", "refuse")}
    print(f"forwarding_rule: {len(names)} names: {counts['wrap']} must be wrapped, "
          f"{counts['forward']} forwarded, {counts['refuse']} refused; {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 3 and sys.argv[1] == "--classify":
        print(classify(sys.argv[2]))
        sys.exit(0)
    sys.exit("usage: forwarding_rule.py --check LIBRARY driver_symbols.gen.inc | --classify NAME")
