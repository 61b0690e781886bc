"""Step time, throughput and memory of one training step per precision.

The modes are the four ways to run a matmul-heavy model:

* ``fp32``: plain float32 (TF32 off, so CUDA matmuls are true float32);
* ``tf32``: float32 tensors, TF32 tensor-core matmuls (CUDA only);
* ``bf16``: autocast to bfloat16, no loss scaling;
* ``fp16``: autocast to float16 with a ``GradScaler``.

``measure_precision`` returns one ``PrecisionRow``. ``saved_bytes`` (what
autograd keeps for backward) is exact and the same on every run; the time
varies, and ``peak_bytes`` exists only on CUDA.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from autograd_lab.labs.gpu_records import Table, measurement
from autograd_lab.labs.memory import saved_tensors
from autograd_lab.labs.timing import time_it

MODES = ("fp32", "tf32", "bf16", "fp16")
_AUTOCAST_DTYPE = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class PrecisionRow:
    mode: str
    seconds: float          # median step time (varies between runs)
    samples_per_s: float
    saved_bytes: int        # activations saved for backward in one forward
    peak_bytes: int | None  # torch.cuda.max_memory_allocated during the steps; None on CPU


def _check_mode(mode, device):
    if mode not in MODES:
        raise ValueError(f"unknown precision mode {mode!r}; use one of {MODES}.")
    if mode == "tf32" and torch.device(device).type != "cuda":
        raise ValueError("tf32 is a CUDA tensor-core mode; on CPU measure fp32, bf16 and fp16 only.")


def _loss(model, x, y, mode, device):
    dtype = _AUTOCAST_DTYPE[mode]
    # autocast covers the forward pass and the loss only; backward runs outside it
    with torch.autocast(torch.device(device).type, dtype=dtype or torch.float32, enabled=dtype is not None):
        return F.cross_entropy(model(x), y)


def _step(model, optimizer, scaler, x, y, mode, device):
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_loss(model, x, y, mode, device)).backward()
    scaler.step(optimizer)
    scaler.update()


def measure_precision(model, x, y, mode, *, repeat=5, device="cpu"):
    """Time one SGD training step of ``model`` on ``(x, y)`` in ``mode``; parameters stay float32."""
    _check_mode(mode, device)
    is_cuda = torch.device(device).type == "cuda"
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(torch.device(device).type, enabled=mode == "fp16")
    with saved_tensors(exclude=model.parameters()) as saved:
        _loss(model, x, y, mode, device)
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    try:
        if is_cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        seconds = time_it(lambda: _step(model, optimizer, scaler, x, y, mode, device),
                          repeat=repeat, device=device)
        peak = torch.cuda.max_memory_allocated(device) if is_cuda else None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    return PrecisionRow(mode, seconds, x.shape[0] / seconds, saved.nbytes, peak)


# --- on a GPU: the table notebook 05 shows, and benchmarks/gpu_record.py records ----------------

GPU_CASES = {   # (width, depth, batch): where AMP's memory saving depends on what dominates
    "weights dominate": (4096, 6, 256),
    "activations dominate": (1024, 6, 32768),
}


def _gpu_mlp(width, depth, device):
    layers = [m for _ in range(depth) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)


@measurement("amp_precisions")
def gpu_precision_table(device, runs=5, repeat=5):
    """Strict fp32, TF32, bf16 and fp16 on a matmul-heavy MLP, in both memory cases.

    Each mode is measured ``runs`` times (each the median of ``repeat`` steps), so
    the table gives the median step time and its spread over runs: one run cannot
    rank bf16 against fp16.  ``facts`` holds the ratios notebook 05 asserts.
    """
    rows, medians = [], {}
    for case, (width, depth, batch) in GPU_CASES.items():
        torch.manual_seed(0)
        model = _gpu_mlp(width, depth, device)
        x = torch.randn(batch, width, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        for mode in MODES:
            measured = [measure_precision(model, x, y, mode, repeat=repeat, device=device) for _ in range(runs)]
            times = sorted(row.seconds for row in measured)
            median = times[len(times) // 2]
            peak = max(row.peak_bytes for row in measured)
            medians[case, mode] = (median, peak)
            rows.append([case, mode, median * 1e3, (times[-1] - times[0]) / median * 100, peak / 2**20])
        del model, x, y
        torch.cuda.empty_cache()
    return Table(
        columns=["case", "mode", "median step ms", "spread %", "peak MiB"], rows=rows,
        facts={
            "bf16_speedup_over_strict_fp32": _ratio(medians, "weights dominate", "fp32", "bf16", 0),
            "bf16_speedup_over_tf32": _ratio(medians, "weights dominate", "tf32", "bf16", 0),
            "bf16_peak_over_fp32_weights": _ratio(medians, "weights dominate", "bf16", "fp32", 1),
            "bf16_peak_over_fp32_activations": _ratio(medians, "activations dominate", "bf16", "fp32", 1),
        },
        note=f"{runs} runs of {repeat} timed steps per mode; spread = (slowest - fastest) / median.")


def _ratio(medians, case, top, bottom, index):
    return medians[case, top][index] / medians[case, bottom][index]
