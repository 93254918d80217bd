#!/usr/bin/env python3
"""bench/gpu/summarize.py OUT_DIR: the GPU kit's summary table (stdlib only).

Reads OUT_DIR/<phase>.status ("ok" | "fail RC" | "timeout", then seconds) and the "@kit key=value"
lines of OUT_DIR/<phase>.log that bench/gpu/run_kit.sh wrote, and writes OUT_DIR/summary.md: one
row per phase (result, seconds, key figures), then every figure per phase. Exit status 0 when the
summary was written, whatever the phases' results.
"""
import os
import sys

PHASES = [
    ("p0-preflight", "preflight: every piece starts",
     ["start_nvidia_smi", "start_gcr", "start_gcrd", "start_criu", "start_criu_check", "start_smoke",
      "start_mlp_train", "start_gcr_run_smoke", "start_torch", "start_nvcc"]),
    ("p1-platform", "platform",
     ["device", "driver_version", "cuinit_ms", "primary_ctx_ms", "h2d_pinned_gbps", "d2h_pinned_gbps",
      "h2d_pageable_gbps", "d2h_pageable_gbps", "d2d_gbps", "host_alloc_mapping",
      "host_alloc_uffd_wp", "host_register_ms", "host_unregister_ms", "host_reregister_ms",
      "registered_uffd_wp"]),
    ("p2-workloads", "workloads with and without the interposer",
     ["checksums_equal", "launch_empty_direct_ns", "launch_empty_gcr_ns", "launch_args_direct_ns",
      "launch_args_gcr_ns"]),
    ("p3-mlp", "mlp_train checkpoint/restore",
     ["footprint", "live_equal", "ckpt_live_stall_ms", "ckpt_live_total_ms", "ckpt_live_new_bytes",
      "restore_live_total_ms", "stopcopy_equal", "ckpt_stopcopy_stall_ms", "ckpt_stopcopy_new_bytes",
      "restore_stopcopy_total_ms"]),
    ("p4-torch", "PyTorch under gcr",
     ["torch_losses_equal", "torch_live_equal", "torch_live_restored_equal", "torch_stop_equal",
      "torch_ckpt_live_stall_ms", "torch_ckpt_stop_stall_ms", "torch_restore_stop_total_ms"]),
    ("p5-driver", "driver checkpoint (simgpu's assumptions)",
     ["resident_lock_ms", "resident_checkpoint_ms", "resident_restore_ms", "resident_unlock_ms",
      "parked_lock_ms", "parked_checkpoint_ms", "parked_restore_ms", "parked_unlock_ms",
      "resident_vmm_same_addr", "resident_data_ok", "resident_restore_thread_comm",
      "resident_cuda_thread_max_gap_ms", "resident_plain_thread_max_gap_ms"]),
]


def read_kit(path):
    """The "@kit key=value" figures of a log, in order; later values win."""
    figures = {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                parts = line.split()
                if not parts or parts[0] != "@kit":
                    continue
                for p in parts[1:]:
                    if "=" in p:
                        k, v = p.split("=", 1)
                        figures[k] = v
    except OSError:
        pass
    return figures


def read_status(path):
    try:
        with open(path) as f:
            words = f.read().split()
    except OSError:
        return "not run", ""
    if not words:
        return "unknown", ""
    secs = words[-1] if len(words) > 1 and words[-1].isdigit() else ""
    result = " ".join(words[:-1] if secs else words)
    return result, secs


def cell(s):
    return str(s).replace("|", "\\|")


def summarize(out):
    rows, details = [], []
    for phase, title, keys in PHASES:
        result, secs = read_status(os.path.join(out, phase + ".status"))
        figs = read_kit(os.path.join(out, phase + ".log"))
        key = ", ".join(f"{k}={figs[k]}" for k in keys if k in figs)
        if "error" in figs:
            key = f"error={figs['error']}" + (", " + key if key else "")
        rows.append(f"| {phase} | {cell(result)} | {secs} | {cell(key) or '-'} |")
        if figs:
            details.append(f"\n### {phase}: {title}\n")
            details += [f"- {k}: {cell(v)}" for k, v in figs.items()]
    text = ["# gcr GPU kit summary", "", f"Output folder: `{os.path.abspath(out)}`", "",
            "| phase | result | seconds | key figures |", "|---|---|---|---|"] + rows
    text += ["", "## All figures"] + details + [""]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(text))
    return 0


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: summarize.py OUT_DIR", file=sys.stderr)
        return 2
    return summarize(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
