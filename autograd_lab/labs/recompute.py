"""Activation checkpointing, counted: what uniform segments save and what they cost.

``checkpoint_sequential(model, s, x)`` splits ``n`` blocks into ``s`` segments.
The first ``s - 1`` keep only their input; the last runs normally. For blocks
that each save one activation (plus the first block's input), the forward pass
leaves ``(s - 1) + n/s + 1`` tensors saved for backward, minimal near
``s = sqrt(n)``. ``measure_segments`` checks that count against real runs::

    rows = measure_segments(model, x, [1, 2, 4, 8])
    rows[2].saved, rows[2].predicted, rows[2].seconds
"""

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint_sequential

from autograd_lab.labs.gpu_records import Table, measurement
from autograd_lab.labs.memory import saved_tensors
from autograd_lab.labs.timing import time_it


def predicted_saved(n_blocks, segments):
    """Activations saved by ``checkpoint_sequential`` with ``segments`` uniform segments of ``n_blocks`` blocks.

    Segment inputs kept by the ``segments - 1`` checkpoints, plus the
    ``n_blocks / segments`` activations of the last segment and its input.
    """
    if not 1 <= segments <= n_blocks or n_blocks % segments:
        raise ValueError(
            f"segments must divide n_blocks (got n_blocks={n_blocks}, segments={segments}); "
            f"pick one of {[s for s in range(1, n_blocks + 1) if n_blocks % s == 0]}."
        )
    return (segments - 1) + n_blocks // segments + 1


@dataclass(frozen=True)
class SegmentRow:
    """One checkpoint schedule, measured."""

    segments: int
    saved: int        # unique non-parameter tensors with data saved for backward
    saved_bytes: int
    predicted: int    # predicted_saved(n, segments)
    seconds: float    # median forward + backward time (varies from run to run)


def forward_saved(model, x, segments):
    """The ``saved_tensors`` record of one forward through ``checkpoint_sequential`` (parameters excluded)."""
    with saved_tensors(exclude=model.parameters()) as saved:
        checkpoint_sequential(model, segments, x, use_reentrant=False)
    return saved


def _train_step(model, x, segments):
    model.zero_grad(set_to_none=True)
    checkpoint_sequential(model, segments, x, use_reentrant=False).sum().backward()


def measure_segments(model, x, segment_counts, *, repeat=3, device="cpu"):
    """Measure saved activations and forward + backward time for each segment count."""
    rows = []
    for segments in segment_counts:
        saved = forward_saved(model, x, segments)
        seconds = time_it(lambda: _train_step(model, x, segments), repeat=repeat, device=device)
        rows.append(SegmentRow(segments, activations_kept(saved), saved.nbytes,
                               predicted_saved(len(model), segments), seconds))
    return rows


def activations_kept(saved):
    """Saved tensors that hold data: stable across releases.

    Some releases also save an empty ``(0,)`` placeholder per non-reentrant
    checkpoint (``versions.behaviour("checkpoint_saved_tensors")``); it has no bytes.
    """
    return sum(1 for tensor in saved.tensors if tensor.nbytes > 0)


@measurement("checkpoint_peak")
def checkpoint_peak(device, n_blocks=64, width=1024, batch=8192, repeat=5):
    """GPU peak memory and time of a training step: no checkpoint, sqrt(n) segments, save_on_cpu.

    The prediction, in activation blocks of ``batch x width`` floats: the saved activations
    (``predicted_saved``) plus three temporaries of the loss's ``pow(2)`` backward.
    """
    import math

    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
                                  for _ in range(n_blocks)]).to(device)
    x = torch.randn(batch, width, device=device, requires_grad=True)
    block = batch * width * 4

    def step(segments):
        model.zero_grad(set_to_none=True)
        x.grad = None
        checkpoint_sequential(model, segments, x, use_reentrant=False).pow(2).mean().backward()

    def peak(segments):
        step(segments)                      # warm-up: the gradients' memory exists before measuring
        torch.cuda.synchronize(device)
        model.zero_grad(set_to_none=True)
        x.grad = None
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        checkpoint_sequential(model, segments, x, use_reentrant=False).pow(2).mean().backward()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before

    def flops(segments):
        with FlopCounterMode(display=False) as counter:
            step(segments)
        return counter.get_total_flops()

    sqrt_s = math.isqrt(n_blocks)
    rows, facts = [], {}
    seconds = {}
    for label, segments in (("no checkpoint", 1), (f"{sqrt_s} segments", sqrt_s)):
        measured = peak(segments)
        predicted = predicted_saved(n_blocks, segments) + 3
        seconds[segments] = time_it(lambda: step(segments), repeat=repeat, device=device)
        error = abs(measured / block - predicted) / predicted
        rows.append([label, measured / 2**20, measured / block, predicted, error, seconds[segments] * 1e3])
        facts["peak_error_s1" if segments == 1 else "peak_error_sqrt"] = error
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        offload = peak(1)
        offload_seconds = time_it(lambda: step(1), repeat=repeat, device=device)
    rows.append(["save_on_cpu", offload / 2**20, offload / block, "", "", offload_seconds * 1e3])
    facts["overhead_measured"] = seconds[sqrt_s] / seconds[1] - 1
    facts["overhead_predicted"] = flops(sqrt_s) / flops(1) - 1

    # empty_cache: returns cached, unused blocks to the driver; frees no tensor.
    scratch = torch.empty(block, dtype=torch.uint8, device=device)
    del scratch
    allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    torch.cuda.empty_cache()
    facts["empty_cache_keeps_allocated"] = torch.cuda.memory_allocated(device) == allocated
    facts["empty_cache_lowers_reserved"] = torch.cuda.memory_reserved(device) < reserved
    return Table(columns=["schedule", "peak MiB", "peak blocks", "predicted blocks", "error", "step ms"],
                 rows=rows, facts=facts,
                 note=f"{n_blocks} Linear+Tanh blocks, width {width}, batch {batch}; one block = "
                      f"{block / 2**20:.0f} MiB; step time: median of {repeat}.")
