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
from autograd_lab.labs.step_memory import predicted_peak, uniform
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


def checkpoint_segments(model, x, sizes):
    """``checkpoint_sequential``'s schedule with segments of any ``sizes``: every segment but the last checkpointed."""
    from torch.utils.checkpoint import checkpoint

    if sum(sizes) != len(model):
        raise ValueError(f"sizes {sizes} cover {sum(sizes)} blocks; the model has {len(model)}")
    start, h = 0, x
    for k, size in enumerate(sizes):
        segment = model[start:start + size]
        h = segment(h) if k == len(sizes) - 1 else checkpoint(segment, h, use_reentrant=False)
        start += size
    return h


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


def backward_ops(loss):
    """``loss.backward()``, watched: how many times each aten op ran during it (a ``Counter``).

    Ops of the forward pass (``addmm``, ``gelu``, ``tanh``) that show up here were run
    again by a checkpoint's recomputation; backward's own ops have other names
    (``mm``, ``gelu_backward``, ``tanh_backward``).
    """
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with _Count() as counting:
        loss.backward()
    return counting.ops


def cpu_time_by_op(step):
    """Run ``step()`` under the profiler (CPU); the self CPU time of each op, in microseconds, by name."""
    from torch.profiler import ProfilerActivity, profile

    from autograd_lab.labs.step_memory import quiet_profiler

    quiet_profiler()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return {event.key: event.self_cpu_time_total for event in prof.key_averages()}


def gpu_record_or_plan(name, plan):
    """Without a GPU: the newest committed record of ``name`` if there is one, else ``plan``.

    ``plan`` says what a GPU run would measure and why, in words: a GPU figure is only
    ever shown from a record measured on a GPU.
    """
    from autograd_lab.labs import gpu_records

    if gpu_records.latest(name) is None:
        print("This machine has no CUDA GPU, and no GPU measurement of this cell has been recorded for "
              f"the course yet. {plan}")
        return None
    return gpu_records.show(name)


@measurement("checkpoint_peak")
def checkpoint_peak(device, n_blocks=64, width=1024, batch=8192, repeat=5):
    """GPU peak memory and time of a training step: no checkpoint, sqrt(n) segments, save_on_cpu.

    Each peak is compared with ``step_memory.predicted_peak``, the model that
    tests/test_step_memory.py proves exact against the profiler on the CPU; on a GPU the
    checkpoints keep their RNG states in CPU memory, so that term is 0 here.
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
        # Warm-up: what a first step allocates once and then keeps (library workspaces, such as
        # cuBLAS's, which PyTorch may take from its caching allocator) is allocated before
        # `before` is read, so only the step itself is measured.
        step(segments)
        model.zero_grad(set_to_none=True)
        x.grad = None
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step(segments)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before

    def flops(segments):
        with FlopCounterMode(display=False) as counter:
            step(segments)
        return counter.get_total_flops()

    sqrt_s = math.isqrt(n_blocks)
    rows, facts, seconds = [], {}, {}
    for label, segments in (("no checkpoint", 1), (f"{sqrt_s} segments", sqrt_s)):
        measured = peak(segments)
        predicted = predicted_peak(uniform(n_blocks, segments), width, batch)
        seconds[segments] = time_it(lambda: step(segments), repeat=repeat, device=device)
        error = abs(measured / block - predicted.blocks) / predicted.blocks
        rows.append([label, measured / 2**20, measured / block, predicted.blocks, predicted.where, error,
                     seconds[segments] * 1e3])
        facts["peak_error_s1" if segments == 1 else "peak_error_sqrt"] = error
        facts["peak_blocks_s1" if segments == 1 else "peak_blocks_sqrt"] = measured / block
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        offload = peak(1)
        offload_seconds = time_it(lambda: step(1), repeat=repeat, device=device)
    rows.append(["save_on_cpu(pin_memory=True)", offload / 2**20, offload / block, "", "", "", offload_seconds * 1e3])
    facts["offload_blocks"] = offload / block
    facts["overhead_measured"] = seconds[sqrt_s] / seconds[1] - 1
    facts["overhead_predicted"] = flops(sqrt_s) / flops(1) - 1
    return Table(columns=["schedule", "peak MiB", "peak blocks", "predicted blocks", "predicted where", "error",
                          "step ms"],
                 rows=rows, facts=facts,
                 note=f"{n_blocks} Linear+Tanh blocks, width {width}, batch {batch}; one block = "
                      f"{block / 2**20:.0f} MiB; peak above the allocation before the step (after a warm-up "
                      f"step); step time: median of {repeat}.")
