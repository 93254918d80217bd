#!/usr/bin/env python3
"""bench/gpu/ddp_gloo.py: two ranks of a data-parallel MLP on one GPU, talking over TCP (issue 35).

Each rank (this script, started twice: --rank 0 and --rank 1) trains a copy of one MLP on its
half of a synthetic batch; torch.distributed's gloo backend (a TCPStore on rank 0, TCP between
the ranks) sums the gradients every step, on host copies. Fixed seeds, deterministic kernels:
rank 0 prints "step I loss X" after every step, every rank "rank R final_loss X" at the end, so a
run checkpointed as one job (`gcr checkpoint --job P0 P1`) and restored can be compared with a
plain run.

    python3 bench/gpu/ddp_gloo.py --rank R [--port 29511] [--steps 200] [--step-delay-ms 0]
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before torch: deterministic cuBLAS


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--step-delay-ms", type=float, default=0.0)
    ap.add_argument("--hidden", type=int, default=512)
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=2)
    dev = torch.device("cuda:0")
    model = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x_all = torch.randn(args.steps, 256, 64, generator=g)
    y_all = x_all.sum(dim=2, keepdim=True).tanh()
    half = slice(args.rank * 128, (args.rank + 1) * 128)
    loss = torch.zeros(())
    for step in range(args.steps):
        x, y = x_all[step, half].to(dev), y_all[step, half].to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():  # gloo sums host copies: bytes cross the TCP connections
            host = p.grad.detach().cpu()
            dist.all_reduce(host)
            p.grad.copy_(host / 2)
        opt.step()
        total = loss.detach().cpu()
        dist.all_reduce(total)
        if args.rank == 0:
            print(f"step {step} loss {total.item() / 2:.9f}", flush=True)
        if args.step_delay_ms:
            time.sleep(args.step_delay_ms / 1000)
    print(f"rank {args.rank} final_loss {loss.item():.9f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
