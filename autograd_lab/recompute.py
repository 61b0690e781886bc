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

from autograd_lab.memory import saved_tensors
from autograd_lab.timing import time_it


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
    saved: int        # unique non-parameter tensors saved for backward
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
        rows.append(SegmentRow(segments, saved.count, saved.nbytes,
                               predicted_saved(len(model), segments), seconds))
    return rows
