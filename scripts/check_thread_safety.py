#!/usr/bin/env python3
"""Compiles the interposer with clang's thread-safety analysis (Note [Lock order], interpose/locks.h).

Usage: check_thread_safety.py BUILD_DIR [SOURCE_DIR...]
Reads BUILD_DIR/compile_commands.json, takes every translation unit under the given source folders
(default: interpose), and runs it through clang++ -fsyntax-only -Wthread-safety, warnings as
errors. Exit 0: clean; 1: a finding (printed as clang prints it); 77: no clang++ here (skipped).
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# Flags of gcc's that clang does not take.
GCC_ONLY = ("-fno-semantic-interposition",)


def clang_command(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or a in GCC_ONLY:
            continue
        out.append(a)
    return out + ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    folders = sys.argv[2:] or ["interpose"]
    clang = shutil.which("clang++") or shutil.which("clang++-14")
    if not clang:
        print("check_thread_safety: no clang++ here: skipped")
        return 77
    entries = json.load(open(os.path.join(build, "compile_commands.json"), encoding="utf-8"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wanted = [e for e in entries if e["file"].endswith(".cpp") and any(
        os.path.abspath(e["file"]).startswith(os.path.join(root, f) + os.sep) for f in folders)]
    if not wanted:
        print("check_thread_safety: no translation units found", file=sys.stderr)
        return 1

    def run(entry):
        r = subprocess.run(clang_command(entry, clang), cwd=entry["directory"],
                           capture_output=True, text=True)
        return entry["file"], r.returncode, r.stderr

    failed = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for file, rc, err in pool.map(run, wanted):
            if rc != 0:
                failed += 1
                sys.stderr.write(err)
    print(f"check_thread_safety: {len(wanted)} files, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
