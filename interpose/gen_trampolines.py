#!/usr/bin/env python3
"""Writes the interposer's trampolines: one exported function per driver symbol.

Each trampoline is a weak definition, so that a wrapper written in C++ (a strong definition of
the same name) takes its place at link time; every other name forwards to the real driver:

    cuFoo:  cmpb $0, gcr_gate_closed(%rip)      # the API gate (quiesce) is closed: slow path
            jne  1f
            movq gcr_slots+8*i(%rip), %r11      # the real function, once resolved
            testq %r11, %r11
            jz   1f
            jmp  *%r11                          # a tail call: arguments untouched
        1:  movl $i, %r11d
            jmp  gcr_trampoline_slow            # saves the argument registers, resolves/waits

On aarch64 (--arch aarch64) the same shape, in the registers the procedure-call standard leaves
to a veneer (x16, x17: the PLT that reached the trampoline clobbers them too):

    cuFoo:  adrp x16, gcr_gate_closed
            ldrb w16, [x16, :lo12:gcr_gate_closed]
            cbnz w16, 1f
            adrp x16, gcr_slots+8*i
            ldr  x16, [x16, :lo12:gcr_slots+8*i]
            cbz  x16, 1f
            br   x16                                # a tail call: x0-x7, v0-v7, x8 and lr untouched
        1:  mov  x17, #i
            b    gcr_trampoline_slow

A name the rule says must be wrapped (forwarding_rule.py, Note [What may pass the gate
unwrapped]) gets no trampoline, so that the library links only if C++ defines it; a refused name
gets a stub that returns CUDA_ERROR_NOT_SUPPORTED through gcr_refused_call (refused.cpp).

Usage: gen_trampolines.py [--arch x86_64|aarch64] driver_symbols.gen.inc out.S (x86_64 by default).
Input: driver_symbols.gen.inc (GCR_DRIVER_SYMBOL(name) lines). Output: an assembly file.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forwarding_rule import classify  # noqa: E402


def function(name: str, binding: str, type_mark: str, body: list, hidden: bool = False) -> list:
    """One function's frame around its body: binding, type, alignment, label and CFI."""
    return ([f"  .{binding} {name}"] + ([f"  .hidden {name}"] if hidden else []) +
            [f"  .type {name},{type_mark}", "  .balign 16", f"{name}:", "  .cfi_startproc"] +
            body + ["  .cfi_endproc", f"  .size {name}, .-{name}"])


def refusal_stub(i: int, name: str) -> list:
    return function(name, "globl", "@function", [f"  movl ${i}, %edi", "  jmp gcr_refused_call"])


def trampoline(i: int, name: str) -> list:
    return function(name, "weak", "@function", [
        "  cmpb $0, gcr_gate_closed(%rip)",
        f"  jne .Lslow_{i}",
        f"  movq gcr_slots+{8 * i}(%rip), %r11",
        "  testq %r11, %r11",
        f"  jz .Lslow_{i}",
        "  jmp *%r11",
        f".Lslow_{i}:",
        f"  movl ${i}, %r11d",
        "  jmp gcr_trampoline_slow",
    ])


# The slow path: keep every argument register (integer, vector, %rax for varargs), ask C++
# for the target (it waits while the gate is closed and resolves lazily), then tail-call it.
def slow_path() -> list:
    integer = ["%rdi", "%rsi", "%rdx", "%rcx", "%r8", "%r9", "%rax"]
    saves = [f"  movq {r}, {8 * k}(%rsp)" for k, r in enumerate(integer)]
    saves += [f"  movdqu %xmm{k}, {64 + 16 * k}(%rsp)" for k in range(8)]
    restores = [f"  movq {8 * k}(%rsp), {r}" for k, r in enumerate(integer)]
    restores += [f"  movdqu {64 + 16 * k}(%rsp), %xmm{k}" for k in range(8)]
    return function("gcr_trampoline_slow", "globl", "@function", [
        "  pushq %rbp",
        "  .cfi_def_cfa_offset 16",
        "  .cfi_offset %rbp, -16",
        "  movq %rsp, %rbp",
        "  .cfi_def_cfa_register %rbp",
        "  subq $192, %rsp",
    ] + saves + [
        "  movl %r11d, %edi",
        "  call gcr_trampoline_target",
        "  movq %rax, %r11",
    ] + restores + [
        "  leave",
        "  .cfi_def_cfa %rsp, 8",
        "  jmp *%r11",
    ], hidden=True)


def refusal_stub_aarch64(i: int, name: str) -> list:
    return function(name, "globl", "%function", [f"  mov w0, #{i}", "  b gcr_refused_call"])


def trampoline_aarch64(i: int, name: str) -> list:
    slot = f"gcr_slots+{8 * i}"
    return function(name, "weak", "%function", [
        "  adrp x16, gcr_gate_closed",
        "  ldrb w16, [x16, :lo12:gcr_gate_closed]",
        f"  cbnz w16, .Lslow_{i}",
        f"  adrp x16, {slot}",
        f"  ldr x16, [x16, :lo12:{slot}]",
        f"  cbz x16, .Lslow_{i}",
        "  br x16",
        f".Lslow_{i}:",
        f"  mov x17, #{i}",
        "  b gcr_trampoline_slow",
    ])


# The slow path on aarch64: keep x0-x7 and v0-v7 (the argument registers) and x8 (the address of
# an indirect result), ask C++ for the target, restore them and lr, then tail-call it.
def slow_path_aarch64() -> list:
    saves = [("stp x0, x1", 16), ("stp x2, x3", 32), ("stp x4, x5", 48), ("stp x6, x7", 64),
             ("str x8", 80), ("stp q0, q1", 96), ("stp q2, q3", 128), ("stp q4, q5", 160),
             ("stp q6, q7", 192)]
    body = [
        "  stp x29, x30, [sp, #-224]!",
        "  .cfi_def_cfa_offset 224",
        "  .cfi_offset x29, -224",
        "  .cfi_offset x30, -216",
        "  mov x29, sp",
    ]
    body += [f"  {op}, [sp, #{off}]" for op, off in saves]
    body += ["  mov w0, w17", "  bl gcr_trampoline_target", "  mov x16, x0"]
    body += [f"  {op.replace('st', 'ld', 1)}, [sp, #{off}]" for op, off in saves]
    body += [
        "  ldp x29, x30, [sp], #224",
        "  .cfi_restore x29",
        "  .cfi_restore x30",
        "  .cfi_def_cfa_offset 0",
        "  br x16",
    ]
    return function("gcr_trampoline_slow", "globl", "%function", body, hidden=True)


ARCHES = {
    "x86_64": (trampoline, refusal_stub, slow_path, "@progbits"),
    "aarch64": (trampoline_aarch64, refusal_stub_aarch64, slow_path_aarch64, "%progbits"),
}


def main() -> None:
    args = sys.argv[1:]
    arch = "x86_64"
    if len(args) == 4 and args[0] == "--arch":
        arch, args = args[1], args[2:]
    if len(args) != 2 or arch not in ARCHES:
        sys.exit("usage: gen_trampolines.py [--arch x86_64|aarch64] driver_symbols.gen.inc out.S")
    inc, out = args
    make_trampoline, make_refusal, make_slow_path, progbits = ARCHES[arch]
    names = re.findall(r"GCR_DRIVER_SYMBOL\((\w+)\)", open(inc, encoding="utf-8").read())
    if len(names) < 500:
        sys.exit(f"gen_trampolines: only {len(names)} symbols in {inc}")
    lines = [
        "/* Generated by interpose/gen_trampolines.py. Do not edit. */",
        f"  .section .note.GNU-stack,\"\",{progbits}",
        "  .bss",
        "  .balign 64",
        "  .globl gcr_slots",
        "  .hidden gcr_slots",
        "gcr_slots:",
        f"  .zero {8 * len(names)}",
        "  .text",
    ]
    for i, name in enumerate(names):
        kind = classify(name)
        if kind == "wrap":
            continue
        lines += make_refusal(i, name) if kind == "refuse" else make_trampoline(i, name)
    lines += make_slow_path()
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
