#!/usr/bin/env python3
"""Derives the CUDA driver's exported names and its cuGetProcAddress table from toolkit headers.

This file owns the build-time generation of two include files, both from the CUDA toolkit headers
and nothing else (the real driver and the stub libcuda.so are never read):

  driver_symbols.gen.inc  GCR_DRIVER_SYMBOL(cuMemAlloc_v2)
      Every `cu*` function the real libcuda.so.1 exports: the union of the prototypes that cuda.h
      and the other driver headers reached through --typedefs (cudaProfiler.h, and cudaGL.h,
      cudaEGL.h, cudaVDPAU.h, whose interop functions the real driver exports and resolves
      although the toolkit's stub libcuda.so leaves them out) declare under three preprocessor
      configurations:
        legacy_stream   plain: cuMemAlloc_v2, cuMemcpyHtoD_v2, cuMemcpy, ...
        per_thread      -DCUDA_API_PER_THREAD_DEFAULT_STREAM: cuMemcpy_ptds, ..._v2_ptsz, ...
        internal        -D__CUDA_API_VERSION_INTERNAL: per-thread names plus the legacy section
                        (cuMemAlloc, cuCtxCreate_v2, cuStreamGetCaptureInfo_v2_ptsz, ...).

  proc_table.gen.inc      GCR_PROC_ENTRY("cuMemAlloc", 3020, GCR_PROC_LEGACY, cuMemAlloc_v2)
      One row per `PFN_<base>_v<version>[_ptsz|_ptds]` typedef of cudaTypedefs.h (and the other
      --typedefs headers): the base name cuGetProcAddress takes, the CUDA version that introduced
      the ABI, the stream flavour, and the exported symbol that implements it.

How a row finds its symbol (no guessing; any failure stops the build with the names involved):
  1. Candidates are the exported names spelled <base>[_vN] (legacy rows) or
     <base>[_vN]<same _ptsz/_ptds suffix as the typedef> (per-thread rows).
  2. A candidate survives only if the compiler says its type is exactly the PFN typedef
     (std::is_same on the function-pointer types, checked in a configuration that declares it).
  3. Rows of one (base, flavour), in ascending version, must take candidates in ascending suffix
     order (base < base_v2 < base_v3 ...), one symbol per row; exactly one such assignment must
     exist. Example: PFN_cuCtxCreate_v2000 and _v3020 have the same type, and ordering gives
     cuCtxCreate and cuCtxCreate_v2.
  4. Cross-check: when cuda.h's `#define base base_vN[_ptsz]` macro (in the matching
     configuration) selects a versioned name, the newest row of that base must be that name.
     Without such a macro the newest row may still be a _vN: cuda.h keeps cuCtxGetDevice,
     cuCtxSynchronize and cuStreamGetCtx on the old ABI at source level, while
     PFN_cuCtxGetDevice_v13000 etc. are the _v2 functions.
     (`#define cuGraphInstantiate cuGraphInstantiateWithFlags` is a source-level alias, not an ABI
     row; cudaTypedefs.h has no PFN_cuGraphInstantiate_v12000, so it is only reported.)
Rows that cannot be derived go in EXCEPTIONS below, with the reason, or the build fails.

Standard library only. Needs a C preprocessor (--cc) and a C++ compiler (--cxx) that can build and
run a small host program.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

CONFIGS = (
    ("legacy_stream", []),
    ("per_thread", ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"]),
    ("internal", ["-D__CUDA_API_VERSION_INTERNAL"]),
)
MACRO_CONFIG_BY_FLAVOR = {"legacy": "legacy_stream", "per_thread": "per_thread"}

# The interop headers (cudaGL.h, cudaEGL.h, cudaVDPAU.h) include third-party headers that a build
# machine may lack. They only need these types to parse, and the signature check compares the
# driver's prototypes with its own PFN typedefs, so stand-ins are used always (deterministic
# output): they are placed first on the include path.
SYSTEM_HEADER_SHIMS = {
    "GL/gl.h": "typedef unsigned int GLenum;\ntypedef unsigned int GLuint;\n",
    "EGL/egl.h": "#include <stdint.h>\ntypedef int32_t EGLint;\n",
    "EGL/eglext.h": "typedef void* EGLImageKHR;\ntypedef void* EGLStreamKHR;\n"
                    "typedef void* EGLSyncKHR;\n",
    "vdpau/vdpau.h": "#include <stdint.h>\ntypedef uint32_t VdpDevice;\n"
                     "typedef uint32_t VdpVideoSurface;\ntypedef uint32_t VdpOutputSurface;\n"
                     "typedef uint32_t VdpFuncId;\ntypedef int VdpStatus;\n"
                     "typedef VdpStatus VdpGetProcAddress(VdpDevice, VdpFuncId, void**);\n",
}

# Rows the header analysis cannot resolve: PFN typedef name -> (exported symbol, reason).
# Empty: for the CUDA 13.0 headers every row is derived by the rules above.
EXCEPTIONS = {}

PFN_NAME = re.compile(r"^PFN_(cu[A-Za-z0-9]+)_v(\d+)(_ptsz|_ptds)?$")
PFN_TYPEDEF = re.compile(r"^typedef\s+CUresult\s*\(\s*\*\s*(PFN_\w+)\s*\)\s*\(.*\)$", re.S)
FUNCTION_DECL = re.compile(r"^(?:extern\s+)?CUresult\s+(cu\w+)\s*\((.*)\)$", re.S)
ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\)")
VERSIONED = re.compile(r"^(cu[A-Za-z0-9]+?)(?:_v(\d+))?(_ptsz|_ptds)?$")


class GenerationError(Exception):
    pass


def run(cmd, stdin=None):
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise GenerationError(
            "command failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stderr[-4000:])
        )
    return proc.stdout


class Toolchain:
    """The compilers, headers and include path shared by every preprocessing and compile step."""

    def __init__(self, cc, cxx, headers, workdir, run_with=()):
        self.cc, self.cxx, self.workdir = cc, cxx, workdir
        self.run_with = list(run_with)  # an emulator for the compiled checks (a cross build)
        self.include_lines = "".join('#include "%s"\n' % os.path.abspath(h) for h in headers)
        dirs = [self._write_shims()]
        for h in headers:
            d = os.path.dirname(os.path.abspath(h))
            if d not in dirs:
                dirs.append(d)
        self.include_flags = ["-I" + d for d in dirs]

    def _write_shims(self):
        root = os.path.join(self.workdir, "shims")
        for name, text in SYSTEM_HEADER_SHIMS.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("#pragma once\n/* gen_driver_api.py stand-in for <%s> */\n" % name)
                f.write(text)
        return root

    def preprocess(self, defines, extra_source=""):
        cmd = [self.cc, "-x", "c", "-E", "-P", *defines, *self.include_flags, "-"]
        return run(cmd, self.include_lines + extra_source)

    def probe_macros(self, defines, names):
        """Returns name -> what the name expands to after including the headers."""
        probe = "".join('"%s" %s\n' % (n, n) for n in names)
        expanded = {}
        for line in self.preprocess(defines, probe).splitlines():
            m = re.match(r'^"(\w+)"\s+(\w+)\s*$', line.strip())
            if m:
                expanded[m.group(1)] = m.group(2)
        return expanded

    def same_type_pairs(self, defines, pairs, tag):
        """Asks the C++ compiler which (PFN typedef, function) pairs have exactly the same type."""
        if not pairs:
            return set()
        pairs = sorted(pairs)
        undefs = "".join("#undef %s\n" % s for s in sorted({s for _, s in pairs}))
        checks = ",\n".join("  gcr_same<%s, decltype(&%s)>" % (p, s) for p, s in pairs)
        source = (
            "#include <cstdio>\n#include <type_traits>\n"
            + self.include_lines
            + undefs
            + "template <class A, class B> constexpr int gcr_same = std::is_same_v<A, B> ? 1 : 0;\n"
            + "static const int gcr_results[] = {\n" + checks + "\n};\n"
            + "int main() {\n  for (int r : gcr_results) std::printf(\"%d\\n\", r);\n}\n"
        )
        src = os.path.join(self.workdir, "signature_check_%s.cpp" % tag)
        exe = os.path.join(self.workdir, "signature_check_%s" % tag)
        with open(src, "w") as f:
            f.write(source)
        run([self.cxx, "-std=c++17", "-w", *defines, *self.include_flags, src, "-o", exe])
        results = run([*self.run_with, exe]).split()
        if len(results) != len(pairs):
            raise GenerationError("signature check %s printed %d results for %d pairs"
                                  % (tag, len(results), len(pairs)))
        return {pair for pair, r in zip(pairs, results) if r == "1"}


def top_level_statements(text):
    """Splits preprocessed C into top-level declarations; drops function definitions."""
    statements, current, depth = [], [], 0
    for ch in text:
        current.append(ch)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                chunk = "".join(current)
                if chunk[: chunk.index("{")].strip().endswith(")"):
                    current = []  # a function definition (static inline helper): not exported
        elif ch == ";" and depth == 0:
            statements.append(" ".join(ATTRIBUTE.sub(" ", "".join(current)).split())[:-1].strip())
            current = []
    return statements


class HeaderView:
    """What one preprocessor configuration declares: driver functions and PFN typedefs."""

    def __init__(self, name, text):
        self.name = name
        self.functions = set()
        self.pfns = set()
        for statement in top_level_statements(text):
            if statement.startswith("typedef"):
                m = PFN_TYPEDEF.match(statement)
                if m:
                    self.pfns.add(m.group(1))
                continue
            m = FUNCTION_DECL.match(statement)
            if m:
                self.functions.add(m.group(1))
            elif re.search(r"\bcu[A-Z]\w*\s*\(", statement) and "static" not in statement:
                raise GenerationError("unrecognised driver declaration (%s): %s"
                                      % (name, statement))


def split_symbol(symbol):
    """cuMemcpyHtoDAsync_v2_ptsz -> ("cuMemcpyHtoDAsync", 2, "_ptsz"); unversioned ranks 1."""
    m = VERSIONED.match(symbol)
    return m.group(1), int(m.group(2) or 1), m.group(3) or ""


def candidate_symbols(base, suffix, exported):
    """Exported names spelled <base>[_vN]<suffix>, in ascending N."""
    pattern = re.compile(re.escape(base) + r"(?:_v(\d+))?" + re.escape(suffix) + "$")
    found = []
    for s in exported:
        m = pattern.match(s)
        if m:
            found.append((int(m.group(1) or 1), s))
    return [s for _, s in sorted(found)]


def ordered_assignments(rows, allowed, names):
    """All ways to give each row (ascending version) a distinct allowed name, names ascending."""
    results = []

    def walk(i, start, chosen):
        if i == len(rows):
            results.append(list(chosen))
            return
        for j in range(start, len(names)):
            if names[j] in allowed[rows[i]]:
                chosen.append(names[j])
                walk(i + 1, j + 1, chosen)
                chosen.pop()

    walk(0, 0, [])
    return results


def derive(cc, cxx, cuda_h, typedef_headers, workdir, run_with=()):
    # Each typedefs header includes the header declaring its functions (cuda.h, cudaGL.h, ...).
    if not any(os.path.basename(h) == "cudaTypedefs.h" for h in typedef_headers):
        raise GenerationError("cudaTypedefs.h must be one of the --typedefs headers")
    tools = Toolchain(cc, cxx, [cuda_h] + typedef_headers, workdir, run_with)

    views = {name: HeaderView(name, tools.preprocess(defines)) for name, defines in CONFIGS}
    exported = set().union(*(v.functions for v in views.values()))
    all_pfns = set().union(*(v.pfns for v in views.values()))

    # PFN typedefs -> (base, version, flavor, suffix)
    rows = {}
    for pfn in sorted(all_pfns):
        m = PFN_NAME.match(pfn)
        if not m:
            raise GenerationError("PFN typedef with an unexpected name: " + pfn)
        base, version, suffix = m.group(1), int(m.group(2)), m.group(3) or ""
        rows[pfn] = (base, version, "per_thread" if suffix else "legacy", suffix)

    # Candidate (PFN, symbol) pairs and the configuration in which each can be type-checked.
    candidates = {pfn: candidate_symbols(base, suffix, exported)
                  for pfn, (base, _, _, suffix) in rows.items()}
    pairs_by_config = {name: set() for name, _ in CONFIGS}
    for pfn, symbols in candidates.items():
        for s in symbols:
            config = next((c for c, _ in CONFIGS
                           if pfn in views[c].pfns and s in views[c].functions), None)
            if config is None:
                raise GenerationError("no configuration declares both %s and %s" % (pfn, s))
            pairs_by_config[config].add((pfn, s))
    same = set()
    for name, defines in CONFIGS:
        same |= tools.same_type_pairs(defines, pairs_by_config[name], name)

    # Group rows by (base, flavour) and assign symbols in order.
    groups = {}
    for pfn, (base, version, flavor, suffix) in rows.items():
        groups.setdefault((base, flavor), []).append(pfn)
    macro_names = sorted({base for base, _ in groups})
    expansions = {
        flavor: tools.probe_macros(dict(CONFIGS)[config], macro_names)
        for flavor, config in MACRO_CONFIG_BY_FLAVOR.items()
    }

    table, notes, errors = [], [], []
    for (base, flavor), pfns in sorted(groups.items()):
        pfns.sort(key=lambda p: rows[p][1])
        pending = [p for p in pfns if p not in EXCEPTIONS]
        names = sorted({s for p in pending for s in candidates[p]},
                       key=lambda s: split_symbol(s)[1])
        allowed = {p: {s for s in candidates[p] if (p, s) in same} for p in pending}
        found = ordered_assignments(pending, allowed, names)
        if len(found) != 1:
            errors.append("%s (%s): %d consistent assignments; candidates %s"
                          % (base, flavor, len(found),
                             {p: sorted(allowed[p]) for p in pending}))
            continue
        assigned = dict(zip(pending, found[0]))
        for p in pfns:
            if p in EXCEPTIONS:
                assigned[p] = EXCEPTIONS[p][0]
                if assigned[p] not in exported:
                    errors.append("exception %s names %s, which no header declares"
                                  % (p, assigned[p]))
        newest = assigned[pfns[-1]]
        macro = expansions[flavor].get(base, base)
        macro_base, macro_rank, macro_suffix = split_symbol(macro)
        if macro_base != base:
            notes.append("cuda.h aliases %s to %s at source level; not a cuGetProcAddress row"
                         % (base, macro))
        elif macro_rank > 1 and macro_suffix == rows[pfns[-1]][3] and macro != newest:
            errors.append("%s (%s): newest row maps to %s but cuda.h's macro names %s"
                          % (base, flavor, newest, macro))
        for p in pfns:
            table.append((base, rows[p][1], flavor, assigned[p], p))

    rows_per_symbol = {}
    for row in table:
        rows_per_symbol.setdefault(row[3], []).append(row[4])
    for symbol, pfns in sorted(rows_per_symbol.items()):
        if len(pfns) > 1:
            errors.append("%s is the symbol of several rows: %s" % (symbol, ", ".join(pfns)))
    if errors:
        raise GenerationError("unresolved cuGetProcAddress rows:\n  " + "\n  ".join(errors))

    claimed = set(rows_per_symbol)
    unclaimed = sorted(exported - claimed)
    for s in unclaimed:
        notes.append("exported but in no PFN row (not reachable through cuGetProcAddress): " + s)
    return sorted(exported), table, notes


def cuda_version(cuda_h):
    with open(cuda_h) as f:
        m = re.search(r"^#define\s+CUDA_VERSION\s+(\d+)", f.read(), re.M)
    return m.group(1) if m else "unknown"


def write_if_changed(path, text):
    try:
        with open(path) as f:
            if f.read() == text:
                os.utime(path)
                return
    except FileNotFoundError:
        pass
    with open(path, "w") as f:
        f.write(text)


def render(symbols, table, notes, sources, version):
    banner = (
        "// Generated by tools/driver-api/gen_driver_api.py from CUDA_VERSION %s headers:\n"
        "//   %s\n// Do not edit.\n" % (version, "\n//   ".join(sources))
    )
    symbols_inc = banner + "// %d exported cu* functions.\n" % len(symbols)
    symbols_inc += "".join("GCR_DRIVER_SYMBOL(%s)\n" % s for s in symbols)
    flavor_macro = {"legacy": "GCR_PROC_LEGACY", "per_thread": "GCR_PROC_PTSZ"}
    table_inc = banner + ("// %d rows: (base, introduced in cudaVersion, flavour, symbol).\n"
                          % len(table))
    table_inc += "".join("// note: %s\n" % n for n in notes)
    table_inc += "".join(
        'GCR_PROC_ENTRY("%s", %d, %s, %s)\n' % (base, version_, flavor_macro[flavor], symbol)
        for base, version_, flavor, symbol, _ in sorted(
            table, key=lambda r: (r[0], r[2] != "legacy", r[1])))
    return symbols_inc, table_inc


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cuda-h", required=True, help="path to cuda.h")
    parser.add_argument("--typedefs", action="append", required=True,
                        help="PFN typedef header (cudaTypedefs.h; repeatable, e.g. "
                             "cudaProfilerTypedefs.h)")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"))
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    parser.add_argument("--run-with", action="append", default=[],
                        help="run the compiled signature checks through this program (repeatable: "
                             "an emulator and its arguments, for a cross build)")
    parser.add_argument("--verbose", action="store_true", help="print notes and the row mapping")
    args = parser.parse_args(argv)

    os.makedirs(args.out_dir, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=args.out_dir) as workdir:
            symbols, table, notes = derive(args.cc, args.cxx, args.cuda_h, args.typedefs, workdir,
                                           args.run_with)
    except GenerationError as e:
        print("gen_driver_api.py: error: %s" % e, file=sys.stderr)
        return 1
    sources = [os.path.abspath(p) for p in [args.cuda_h] + args.typedefs]
    symbols_inc, table_inc = render(symbols, table, notes, sources, cuda_version(args.cuda_h))
    write_if_changed(os.path.join(args.out_dir, "driver_symbols.gen.inc"), symbols_inc)
    write_if_changed(os.path.join(args.out_dir, "proc_table.gen.inc"), table_inc)
    for n in notes:
        print("gen_driver_api.py: note: " + n)
    if args.verbose:
        for base, version, flavor, symbol, pfn in sorted(table):
            print("%-55s -> %s" % (pfn, symbol))
    print("gen_driver_api.py: %d symbols, %d proc table rows" % (len(symbols), len(table)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
