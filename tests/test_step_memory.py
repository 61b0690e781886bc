"""The memory model of a checkpointed training step is exact against the profiler's memory events on the CPU."""

import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from autograd_lab.labs.recompute import checkpoint_segments
from autograd_lab.labs.step_memory import TERMS, predicted_peak, profile_peak, step_moments, uniform

RNG_STATE_BYTES = torch.get_rng_state().nbytes


def _model(n_blocks, width):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n_blocks)])


def _measure(sizes, width, batch, input_requires_grad=True, output_held=False):
    model = _model(sum(sizes), width)
    x = torch.randn(batch, width, requires_grad=input_requires_grad)

    def step():
        if output_held:
            out = checkpoint_segments(model, x, sizes)
            out.pow(2).mean().backward()
        else:
            checkpoint_segments(model, x, sizes).pow(2).mean().backward()
    return profile_peak(step)


# Weight gradients from 1/8 to 2 activation blocks per layer, one to sixteen segments, uneven schedules,
# and an input that needs no gradient: the peak lands in the loss's backward, in a recomputation,
# or at the end of backward, and the model must say which.
CONFIGURATIONS = [
    (uniform(16, 1), 64, 512, True),
    (uniform(16, 4), 64, 512, True),     # weight gradient 1/8 block
    (uniform(16, 4), 128, 512, True),    # 1/4
    (uniform(16, 4), 256, 512, True),    # 1/2: the peak moves into the recomputation
    (uniform(16, 2), 256, 512, True),
    (uniform(16, 8), 256, 512, True),
    (uniform(16, 16), 128, 512, True),
    (uniform(16, 4), 512, 256, True),    # 2 blocks: the peak is at the end of backward
    (uniform(16, 4), 512, 256, False),
    ([8, 6, 1, 4], 256, 512, True),
    ([11, 10, 9, 8, 7, 6, 5, 4, 3, 1], 64, 1024, True),
]


@pytest.mark.parametrize("sizes, width, batch, input_requires_grad", CONFIGURATIONS,
                         ids=[f"{s}-w{w}-b{b}-{'x' if g else 'frozen'}" for s, w, b, g in CONFIGURATIONS])
def test_the_model_predicts_the_measured_peak_and_where_it_happens(sizes, width, batch, input_requires_grad):
    measured = _measure(sizes, width, batch, input_requires_grad)
    predicted = predicted_peak(sizes, width, batch, input_requires_grad=input_requires_grad,
                               rng_state_bytes=RNG_STATE_BYTES)
    block = batch * width * 4
    assert measured.bytes / block == pytest.approx(predicted.blocks, rel=1e-3), predicted
    assert (measured.op, measured.node) == (predicted.op, predicted.node), predicted


@pytest.mark.parametrize("width", (64, 256))
def test_a_name_kept_for_the_output_keeps_one_more_block_alive(width):
    sizes, batch = uniform(16, 4), 512
    measured = _measure(sizes, width, batch, output_held=True)
    predicted = predicted_peak(sizes, width, batch, rng_state_bytes=RNG_STATE_BYTES, output_held=True)
    assert measured.bytes / (batch * width * 4) == pytest.approx(predicted.blocks, rel=1e-3)
    if width == 256:   # the peak is in the recomputation, after backward would have freed the output
        assert predicted.blocks == pytest.approx(
            predicted_peak(sizes, width, batch, rng_state_bytes=RNG_STATE_BYTES).blocks + 1)


def test_the_peak_moves_from_the_loss_into_the_recomputation_as_weight_gradients_grow():
    where = {width: predicted_peak(uniform(16, 4), width, 512).where for width in (64, 128, 256)}
    assert where == {64: "backward of the loss", 128: "backward of the loss", 256: "recomputing segment 1 of 4"}


def test_the_gpu_configuration_predicts_68_and_19_blocks():
    # notebook 06's GPU cell: 64 blocks, width 1024, batch 8192, RNG states in CPU memory
    assert predicted_peak(uniform(64, 1), 1024, 8192).blocks == pytest.approx(68)
    peak = predicted_peak(uniform(64, 8), 1024, 8192)
    assert peak.blocks == pytest.approx(19) and peak.where == "backward of the loss"


def test_the_loss_backward_holds_the_saved_activations_plus_four_blocks():
    # saved(s) - 1 (x existed before the step) + MeanBackward0's gradient + PowBackward0's three
    for segments in (2, 4, 8):
        moment = next(m for m in step_moments(uniform(16, segments), 64, 512) if m.node == "PowBackward0"
                      and m.terms["gradients flowing back"] == 2)
        saved = (segments - 1) + 16 // segments + 1
        assert moment.blocks == pytest.approx(saved - 1 + 4)
        assert set(moment.terms) <= set(TERMS)


def test_an_empty_or_zero_sized_schedule_is_refused():
    with pytest.raises(ValueError, match="at least one segment"):
        step_moments([], 8, 8)
    with pytest.raises(ValueError, match="at least one segment"):
        step_moments([4, 0], 8, 8)
    with pytest.raises(ValueError, match="must divide"):
        uniform(6, 4)


def test_profile_peak_sees_one_known_allocation():
    def step():
        torch.empty(1 << 20, dtype=torch.uint8)
    measured = profile_peak(step)
    assert measured.bytes == 1 << 20 and measured.op == "aten::empty" and measured.node is None


def test_profiling_leaves_stderr_clean():
    # kineto prints start/stop markers on stderr (torch 2.13 and later) unless its log level is raised
    code = ("from autograd_lab.labs.step_memory import profile_peak\n"
            "import torch\nprint(profile_peak(lambda: torch.ones(8)).bytes)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "32" and done.stderr == ""
