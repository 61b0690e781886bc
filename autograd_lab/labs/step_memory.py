"""The memory of one training step, predicted allocation by allocation and measured with the profiler.

The step is the one notebook 06 checkpoints: ``n`` blocks of ``Linear -> Tanh``, cut into
segments of ``sizes`` blocks (every segment but the last checkpointed without reentrance,
as ``checkpoint_sequential`` does), then ``out.pow(2).mean().backward()``.  Memory is
counted in *blocks*, one activation of ``batch x width`` float32 numbers, above what was
allocated when the step began (the parameters and the input ``x`` exist before it)::

    model = step_moments([4, 4, 4, 4], width=128, batch=512, rng_state_bytes=5056)
    peak = max(model, key=lambda moment: moment.blocks)
    peak.blocks, peak.where, peak.op, peak.node, peak.terms

    measured = profile_peak(lambda: run_the_step())      # CPU, profiler memory events
    measured.bytes / block_bytes, measured.op, measured.node

``step_moments`` walks the step and lists every allocation that can be the peak, with
what is alive then, term by term: the inputs the checkpoints keep, the activations the
last segment saves, a segment recomputed during backward, temporaries, the gradients
flowing back (the one arriving at a node and the one it makes), the parameters'
gradients and the checkpoints' copies of the random-number state.  The walk is what
autograd does (measured on torch 2.5.1, 2.13.0 and 2.15.0 by tests/test_step_memory.py):

* forward: a checkpointed segment keeps only its input; inside it each ``Linear`` output
  lives until ``tanh`` has used it and each ``tanh`` output until the next block has;
  the last segment keeps its input and every ``tanh`` output (``Tanh`` saves its result);
* ``MeanBackward0`` makes a one-block gradient; ``PowBackward0`` computes
  ``grad * (2 * out.pow(1))``: two temporaries and its result, all alive at once;
* each block's backward: ``tanh_backward`` makes the pre-activation's gradient, then the
  incoming gradient and the saved ``tanh`` output are released; ``AddmmBackward0`` makes
  the input's gradient (one block, skipped for an input that needs none), the weight's
  (``width / batch`` blocks) and the bias's (``1 / batch``), which ``.grad`` keeps;
* a checkpointed segment is recomputed when backward first needs one of its tensors,
  inside its last block's ``TanhBackward0``: the whole segment's forward again, keeping
  every ``tanh`` output, and (with ``preserve_rng_state``) one more copy of the RNG state.
"""

import os
from collections import Counter
from dataclasses import dataclass, field

import torch

from autograd_lab import versions

TERMS = (
    "kept by checkpoints",       # inputs of checkpointed segments, but the first (x existed before)
    "saved by the last segment",  # its input and its tanh outputs
    "recomputed segment",
    "temporaries",               # a Linear output before tanh, the pow-backward intermediates
    "gradients flowing back",
    "parameter gradients",
    "RNG state copies",
)


@dataclass(frozen=True)
class Moment:
    """One allocation of the step and what is alive right after it, in blocks per term."""

    where: str                 # "backward of the loss", "recomputing segment 2 of 4", ...
    op: str                    # the aten op that allocates ("aten::mul")
    node: str | None           # the autograd node running it, None in the forward pass
    terms: dict = field(default_factory=dict)

    @property
    def blocks(self):
        return sum(self.terms.values())


class _Walk:
    """Live blocks per term; each allocation is a moment."""

    def __init__(self):
        self.live = Counter({term: 0.0 for term in TERMS})
        self.moments = []
        self.where, self.node = "forward", None

    def alloc(self, term, blocks, op):
        if blocks:
            self.live[term] += blocks
            self.moments.append(Moment(self.where, op, self.node, {t: self.live[t] for t in TERMS if self.live[t]}))

    def free(self, term, blocks):
        self.live[term] -= blocks


def step_moments(sizes, width, batch, *, input_requires_grad=True, rng_state_bytes=0, output_held=False):
    """Every allocation of one training step that can be its peak, in order (see the module doc).

    ``sizes``: blocks per segment, all but the last checkpointed. ``rng_state_bytes``: the
    size of one copy of the random-number state (``torch.get_rng_state().nbytes`` for a
    CPU step; 0 on a GPU, whose checkpoints keep their RNG states in CPU memory).
    ``output_held``: the code keeps a Python name for the model's output during backward
    (``out = model(x); out.pow(2).mean().backward()``), so backward cannot free it.
    """
    if not sizes or any(size < 1 for size in sizes):
        raise ValueError(f"sizes must list at least one segment of at least one block, got {sizes!r}")
    block = batch * width * 4
    weight, bias, rng = width / batch, 1 / batch, rng_state_bytes / block
    walk = _Walk()
    last = len(sizes) - 1

    # Forward.
    for k, size in enumerate(sizes):
        checkpointed = k < last
        walk.where = f"forward, segment {k + 1} of {len(sizes)}"
        if checkpointed:
            walk.alloc("RNG state copies", rng, "aten::empty")          # torch.get_rng_state()
        for i in range(size):
            walk.alloc("temporaries", 1, "aten::addmm")                 # the Linear's output
            if not checkpointed:
                walk.alloc("saved by the last segment", 1, "aten::tanh")
            elif i == size - 1:
                walk.alloc("kept by checkpoints" if k + 1 < last else "saved by the last segment", 1, "aten::tanh")
            else:
                walk.alloc("temporaries", 1, "aten::tanh")
            walk.free("temporaries", 1)                                 # the Linear's output
            if checkpointed and i > 0:
                walk.free("temporaries", 1)                             # the previous tanh output
    walk.where = "the loss"
    walk.alloc("temporaries", 1, "aten::pow")
    walk.free("temporaries", 1)

    # Backward of the loss.
    walk.where, walk.node = "backward of the loss", "MeanBackward0"
    walk.alloc("gradients flowing back", 1, "aten::div")
    walk.node = "PowBackward0"
    walk.alloc("temporaries", 1, "aten::pow")                           # out.pow(1)
    walk.alloc("temporaries", 1, "aten::mul")                           # 2 * out.pow(1)
    walk.alloc("gradients flowing back", 1, "aten::mul")                # grad * ...
    walk.free("temporaries", 2)
    walk.free("gradients flowing back", 1)

    # Backward of the blocks, last segment first.
    for k in range(last, -1, -1):
        size, checkpointed = sizes[k], k < last
        activations = "recomputed segment" if checkpointed else "saved by the last segment"
        for j in range(size, 0, -1):
            walk.node = "TanhBackward0"
            if checkpointed and j == size:
                walk.where = f"recomputing segment {k + 1} of {len(sizes)}"
                walk.alloc("RNG state copies", rng, "aten::empty")      # fork_rng's copy
                for _ in range(size):
                    walk.alloc("temporaries", 1, "aten::addmm")
                    walk.alloc("recomputed segment", 1, "aten::tanh")
                    walk.free("temporaries", 1)
                walk.free("RNG state copies", rng)
            walk.where = f"backward of segment {k + 1} of {len(sizes)}, block {j}"
            walk.alloc("gradients flowing back", 1, "aten::tanh_backward")
            walk.free("gradients flowing back", 1)                      # the incoming gradient
            if not (output_held and k == last and j == size):
                walk.free(activations, 1)                               # the tanh output it saved
            walk.node = "AddmmBackward0"
            if j > 1 or k > 0 or input_requires_grad:
                walk.alloc("gradients flowing back", 1, "aten::mm")     # the input's gradient
            walk.alloc("parameter gradients", weight, "aten::mm")
            walk.alloc("parameter gradients", bias, "aten::sum")
            walk.free("gradients flowing back", 1)                      # the pre-activation's
        if k > 0:                                                       # the segment's input
            walk.free("kept by checkpoints" if checkpointed else "saved by the last segment", 1)
        if checkpointed:
            walk.free("RNG state copies", rng)
    return walk.moments


def predicted_peak(sizes, width, batch, **options):
    """The moment of ``step_moments`` with the most live blocks (the first, if several tie)."""
    return max(step_moments(sizes, width, batch, **options), key=lambda moment: moment.blocks)


def uniform(n_blocks, segments):
    """The segment sizes ``checkpoint_sequential(model, segments, x)`` uses for ``n_blocks`` blocks."""
    if not 1 <= segments <= n_blocks or n_blocks % segments:
        raise ValueError(f"segments must divide n_blocks (got n_blocks={n_blocks}, segments={segments})")
    return [n_blocks // segments] * segments


# --- measuring: the profiler's memory events -------------------------------------------

@dataclass(frozen=True)
class MeasuredPeak:
    """The most bytes alive during a step, above what was alive when it began, and where."""

    bytes: int
    op: str | None         # the innermost aten op running at the peak
    node: str | None       # the autograd node running it (None in the forward pass)
    end_bytes: int = 0     # what is still alive when the step returns, above its start


def quiet_profiler():
    """Keep kineto (the profiler's backend) off stderr: from torch 2.13 it prints its start and stop
    markers there at every log level below 6, and the course's cells keep stderr for warnings.
    Must run before the first profile of the process; a level the user set is left alone.
    Also hides torch 2.10-2.12's spurious warning on every first profile (``versions``)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    versions.hide_profiler_cycle_warning()


_NODE_PREFIX = "autograd::engine::evaluate_function: "


def profile_peak(step):
    """Run ``step()`` under ``torch.profiler`` with memory events on the CPU; its ``MeasuredPeak``.

    Every CPU allocation and free is an event with its size (negative for a free); their
    running sum is the memory the step holds above its start, and the op and autograd node
    whose time span contains the highest point are where the peak happens.
    """
    from torch.profiler import ProfilerActivity, profile

    quiet_profiler()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = list(prof.profiler.kineto_results.events())
    memory = [(e.start_ns(), order, e.nbytes()) for order, e in enumerate(events)
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    spans = [(e.start_ns(), e.start_ns() + e.duration_ns(), e.name()) for e in events if e.name() != "[memory]"]
    live, peak, peak_time = 0, 0, None
    for time, _, nbytes in sorted(memory):
        live += nbytes
        if live > peak:
            peak, peak_time = live, time
    if peak_time is None:
        return MeasuredPeak(0, None, None, live)
    running = sorted((span for span in spans if span[0] <= peak_time <= span[1]), key=lambda s: s[1] - s[0])
    op = next((name for _, _, name in running if name.startswith("aten::")), None)
    node = next((name[len(_NODE_PREFIX):] for _, _, name in running if name.startswith(_NODE_PREFIX)), None)
    return MeasuredPeak(peak, op, node, live)
