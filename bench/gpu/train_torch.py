#!/usr/bin/env python3
"""bench/gpu/train_torch.py: a small, deterministic PyTorch training run for gcr's GPU kit.

An MLP on synthetic data, fixed seeds, deterministic kernels. Prints "step I loss X" after every
step and "final_loss X" at the end, so that a run under `gcr run`, and one checkpointed and
restored, can be compared with a plain run: the losses must be equal.

    python3 bench/gpu/train_torch.py [--steps 300] [--step-delay-ms 0] [--hidden 1024] [--seed 0]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before torch: deterministic cuBLAS


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-delay-ms", type=float, default=0.0)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)

    import torch  # here, so that --help and py_compile need no torch

    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(args.device)

    layers, width = [], 64
    for _ in range(args.layers - 1):
        layers += [torch.nn.Linear(width, args.hidden), torch.nn.GELU()]
        width = args.hidden
    layers.append(torch.nn.Linear(width, 16))
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed + 1)
    target_map = torch.randn(64, 16, device=dev, generator=gen)

    loss = None
    for step in range(args.steps):
        x = torch.randn(args.batch, 64, device=dev, generator=gen)
        y = torch.tanh(x @ target_map)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.9g}", flush=True)
        if args.step_delay_ms > 0:
            time.sleep(args.step_delay_ms / 1000.0)
    print(f"final_loss {loss.item() if loss is not None else float('nan'):.9g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
