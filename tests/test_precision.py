import json
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


# --- TF32: the switches torch reports depend on the environment (NGC sets the override) ----------

import os
import subprocess
import sys

from autograd_lab.labs.precision import TF32_OVERRIDE, tf32_defaults, tf32_forced, tf32_settings


def _settings_in_a_fresh_process(value):
    env = {k: v for k, v in os.environ.items() if k != TF32_OVERRIDE}
    if value is not None:
        env[TF32_OVERRIDE] = value
    script = ("import json; from autograd_lab.labs.precision import tf32_settings, tf32_defaults; "
              "print(json.dumps([tf32_settings(), tf32_defaults()]))")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("value", [None, "1", "0", "true"])
def test_tf32_defaults_predict_what_torch_reports_with_and_without_the_override(value):
    settings, defaults = _settings_in_a_fresh_process(value)
    assert settings == defaults
    assert settings["matmul_allow_tf32"] == (value == "1")                # only "1" turns TF32 on
    assert settings["float32_matmul_precision"] == ("high" if value == "1" else "highest")
    assert settings["cudnn_allow_tf32"] is True                            # convolutions: on either way
    if "matmul_fp32_precision" in settings:                                # torch 2.9 and later
        assert settings["matmul_fp32_precision"] == ("tf32" if value == "1" else "none")


def test_tf32_forced_reads_only_the_value_1():
    assert tf32_forced({TF32_OVERRIDE: "1"}) and not tf32_forced({TF32_OVERRIDE: "true"}) and not tf32_forced({})
    assert tf32_defaults({}) == tf32_settings() or tf32_forced()


def test_autocast_registered_reads_each_devices_rules_without_a_gpu():
    from autograd_lab.labs.precision import autocast_registered
    assert autocast_registered("cat", "cpu") and not autocast_registered("cat", "cuda")      # CPU's promote list
    assert autocast_registered("softmax.int", "cuda") and not autocast_registered("softmax.int", "cpu")
    assert autocast_registered("mm", "cpu") and autocast_registered("mm", "cuda")
    assert not autocast_registered("add.Tensor", "cpu")                                     # no rule: no casting
