#!/usr/bin/env python3
"""Writes gcr.1 (roff) from the help texts of gcr and each of its commands.

    gen-manpage.py GCR_BINARY VERSION OUT
"""
import os
import re
import subprocess
import sys

COMMANDS = ["run", "ps", "checkpoint", "restore", "image", "image ls", "image inspect",
            "image verify", "image rm", "image gc", "image du", "daemon", "preload-path"]


# A cross build's gcr runs under its emulator (CMAKE_CROSSCOMPILING_EMULATOR, from CMake).
EMULATOR = [w for w in os.environ.get("GCR_MANPAGE_EMULATOR", "").split(";") if w]


def help_of(gcr, words):
    out = subprocess.run([*EMULATOR, gcr, *words, "--help"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "GCR_QUIET": "1"})
    return out.stdout if out.returncode == 0 else None


def roff(text):
    lines = []
    for line in text.rstrip().splitlines():
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def main():
    gcr, version, out = sys.argv[1:4]
    parts = [f'.TH GCR 1 "" "gcr {version}" "User Commands"',
             ".SH NAME",
             "gcr \\- transparent checkpoint/restore for GPU processes",
             ".SH SYNOPSIS",
             ".B gcr",
             "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR ...",
             ".SH DESCRIPTION",
             ".nf",
             roff(help_of(gcr, []) or ""),
             ".fi"]
    for cmd in COMMANDS:
        text = help_of(gcr, cmd.split())
        if text is None:
            continue
        parts += [f".SH GCR {cmd.upper()}", ".nf", roff(text), ".fi"]
    parts += [".SH FILES",
              ".TP", "/var/lib/gcr/store", "root's image store (users: ~/.local/share/gcr/store)",
              ".TP", "/run/gcr/gcrd.sock", "gcrd's socket for root",
              ".TP", "/usr/lib/gcr/libcuda.so.1",
              "the interposer; LD_PRELOAD=$(gcr preload-path) puts a program under gcr",
              ".SH SEE ALSO", "criu(8); /usr/share/doc/gcr/README.md"]
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


main()
