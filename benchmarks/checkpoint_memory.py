"""Activation checkpointing: the U-curve of saved activations and time over segment counts.

A deep MLP of ``n`` ``Linear -> Tanh`` blocks is run with
``checkpoint_sequential(model, s, x, use_reentrant=False)`` for every ``s`` that
divides ``n``. For each ``s`` the table gives the tensors saved for backward
(counted with saved-tensor hooks, ``autograd_lab.labs.recompute``), the prediction
``(s - 1) + n/s + 1``, their size, and the median forward + backward time. The
peer is the no-checkpointing baseline (``s = 1``, plain autograd) and, on CUDA,
PyTorch's own allocator statistics (``torch.cuda.max_memory_allocated``), which
the CPU-side count must predict. Run::

    .venv/bin/python benchmarks/checkpoint_memory.py [--blocks 64] [--width 256] [--batch 256] [--threads 1]

It prints Markdown tables for ``docs/benchmarks.md``: CPU always, CUDA when present.
"""

import platform

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint_sequential

from _common import measured_on, parse, timing_parser
from autograd_lab.labs.recompute import measure_segments


def tanh_mlp(n_blocks, width):
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n_blocks)])


def divisors(n):
    return [s for s in range(1, n + 1) if n % s == 0]


def cuda_peak_bytes(model, x, segments):
    """Peak bytes allocated during one training step, above what was allocated before it."""
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    checkpoint_sequential(model, segments, x, use_reentrant=False).pow(2).mean().backward()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def table(model, x, device, repeat):
    rows = measure_segments(model, x, divisors(len(model)), repeat=repeat, device=device)
    baseline = rows[0].seconds
    header = "| s | saved tensors | formula | saved MiB | fwd+bwd ms | time vs s=1 |"
    if device == "cuda":
        # With activations much larger than the parameters, the saved bytes predict the peak above
        # the starting allocation (notebook 06 asserts 10% for s = 1).
        header += " CUDA peak MiB | peak / saved |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for row in rows:
        line = (f"| {row.segments} | {row.saved} | {row.predicted} | {row.saved_bytes / 2**20:.1f} | "
                f"{row.seconds * 1e3:.1f} | {row.seconds / baseline:.2f}x |")
        if device == "cuda":
            peak = cuda_peak_bytes(model, x, row.segments)
            line += f" {peak / 2**20:.0f} | {peak / row.saved_bytes:.2f} |"
        lines.append(line)
        assert row.saved == row.predicted, f"s={row.segments}: measured {row.saved}, formula {row.predicted}"
    return "\n".join(lines)


def main(argv=None):
    parser = timing_parser(__doc__.splitlines()[0], width=256, batch=256, gpu_width=1024, gpu_batch=8192)
    parser.add_argument("--blocks", type=int, default=64)
    args = parse(parser, argv)
    torch.manual_seed(0)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        width, batch = (args.gpu_width, args.gpu_batch) if device == "cuda" else (args.width, args.batch)
        model = tanh_mlp(args.blocks, width).to(device)
        x = torch.randn(batch, width, device=device, requires_grad=True)
        name = torch.cuda.get_device_name() if device == "cuda" else f"{platform.machine()} CPU, {torch.get_num_threads()} threads"
        print(f"\n{device.upper()} ({name}): {args.blocks} blocks of Linear({width}, {width}) + Tanh, "
              f"batch {batch}, median of {args.repeat}.\n")
        print(table(model, x, device, args.repeat))
    if "cuda" not in devices:
        print("\nCUDA: not measured (no GPU on this machine).")
    print(f"\n{measured_on()}")


if __name__ == "__main__":
    main()
