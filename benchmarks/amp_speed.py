"""AMP step time and memory: one SGD step of a matmul-heavy MLP per precision.

Modes (``autograd_lab.labs.amp_timing``): ``fp32``; ``tf32`` (CUDA only); ``bf16``
autocast; ``fp16`` autocast with ``GradScaler``. The baseline (peer) is plain
float32 training, and every row gives its speed-up over it. Saved-activation
bytes are exact; peak memory comes from ``torch.cuda.max_memory_allocated`` and
exists only on CUDA. Run::

    .venv/bin/python benchmarks/amp_speed.py [--width 512] [--depth 4] [--batch 128] [--threads 1]

It prints Markdown tables for ``docs/benchmarks.md``: CPU always (small default
sizes, because CPU float16 is slow), CUDA when present (``--gpu-width``, ``--gpu-batch``).
"""

import platform

import torch
import torch.nn as nn

from _common import measured_on, parse, timing_parser
from autograd_lab.labs.amp_timing import measure_precision


def matmul_mlp(width, depth, classes=10):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


def table(width, depth, batch, device, modes, repeat):
    torch.manual_seed(0)
    model = matmul_mlp(width, depth).to(device)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    rows = [measure_precision(model, x, y, mode, repeat=repeat, device=device) for mode in modes]
    fp32 = rows[0].seconds
    lines = ["| mode | step ms | speed-up vs fp32 | samples/s | saved MiB | peak MiB |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        peak = "n/a (CPU)" if row.peak_bytes is None else f"{row.peak_bytes / 2**20:.0f}"
        lines.append(f"| {row.mode} | {row.seconds * 1e3:.1f} | {fp32 / row.seconds:.2f}x | "
                     f"{row.samples_per_s:.0f} | {row.saved_bytes / 2**20:.1f} | {peak} |")
    return "\n".join(lines)


def main(argv=None):
    parser = timing_parser(__doc__.splitlines()[0], width=512, batch=128, gpu_width=4096, gpu_batch=2048)
    parser.add_argument("--depth", type=int, default=4)
    args = parse(parser, argv)
    print(f"\nCPU ({platform.machine()}, {torch.get_num_threads()} threads): MLP of {args.depth} x "
          f"Linear({args.width}, {args.width}) + ReLU, batch {args.batch}, median of {args.repeat}.\n")
    print(table(args.width, args.depth, args.batch, "cpu", ("fp32", "bf16", "fp16"), args.repeat))
    if torch.cuda.is_available():
        print(f"\nCUDA ({torch.cuda.get_device_name()}): MLP of {args.depth} x Linear({args.gpu_width}, "
              f"{args.gpu_width}) + ReLU, batch {args.gpu_batch}, median of {max(args.repeat, 10)}.\n")
        print(table(args.gpu_width, args.depth, args.gpu_batch, "cuda", ("fp32", "tf32", "bf16", "fp16"),
                    max(args.repeat, 10)))
    else:
        print("\nCUDA: not measured (no GPU on this machine).")
    print(f"\n{measured_on()}")


if __name__ == "__main__":
    main()
