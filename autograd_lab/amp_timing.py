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

from autograd_lab.memory import saved_tensors
from autograd_lab.timing import time_it

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
