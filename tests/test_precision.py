import pytest
import torch

from autograd_lab.labs.precision import cast_fate, smallest_subnormal


def test_smallest_subnormal_is_below_finfo_tiny():
    assert smallest_subnormal(torch.float16) == 2.0 ** -24
    assert smallest_subnormal(torch.bfloat16) == 2.0 ** -133
    assert smallest_subnormal(torch.float16) < torch.finfo(torch.float16).tiny


def test_cast_fate_counts_zeros_flushes_and_overflows():
    values = torch.tensor([0.0, 2.0 ** -25, 2.0 ** -24, 1.0, 65504.0, 65520.0])
    fate = cast_fate(values, torch.float16)
    assert (fate.total, fate.zeros, fate.flushed, fate.overflowed) == (6, 1, 1, 1)
    assert fate.flushed_fraction == pytest.approx(1 / 6)


def test_scaling_moves_values_between_the_limits():
    values = [torch.tensor([2.0 ** -27, 2.0 ** -26]), None, torch.tensor([1000.0])]
    assert cast_fate(values, torch.float16).flushed == 2
    scaled = cast_fate(values, torch.float16, scale=8.0)
    assert (scaled.flushed, scaled.overflowed) == (0, 0)
    assert cast_fate(values, torch.float16, scale=2.0 ** 7).overflowed == 1


def test_bfloat16_range_does_not_overflow_where_float16_does():
    values = torch.tensor([1e6])
    assert cast_fate(values, torch.float16).overflowed == 1
    assert cast_fate(values, torch.bfloat16).overflowed == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"dtype": torch.float32}, "low-precision"),
    ({"scale": 0.0}, "positive"),
])
def test_bad_arguments_say_what_to_do(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cast_fate(torch.ones(2), **kwargs)


def test_empty_input_is_refused():
    with pytest.raises(ValueError, match="at least one tensor"):
        cast_fate([None])
