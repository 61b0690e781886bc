"""The references of notebook 05's exercises agree with PyTorch itself, not just with themselves."""

import math

import torch
import torch.nn as nn

from autograd_lab_solutions import nb05_amp


def _real_scaler_scales(init_scale, found_inf, growth_interval):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    scales = []
    for overflow in found_inf:
        optimizer.zero_grad()
        scaler.scale(model(torch.randn(4, 3)).sum()).backward()
        if overflow:
            model.weight.grad[0, 0] = math.inf
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


def test_next_scales_matches_a_real_grad_scaler():
    for seed in (0, 1, 2, 101):
        args = nb05_amp._flag_sequence(seed, hidden=seed > 100)
        assert nb05_amp.next_scales(*args) == _real_scaler_scales(*args)


def test_pick_scale_is_the_largest_power_of_two_without_overflow():
    for seed in (0, 1, 2, 101):
        (grads,) = nb05_amp._gradient_sample(seed, hidden=seed > 100)
        scale = nb05_amp.pick_scale(grads)
        assert math.log2(scale).is_integer()
        assert (grads * scale).to(torch.float16).isfinite().all()
        assert not (grads * 2 * scale).to(torch.float16).isfinite().all()


def test_the_amp_step_order_is_the_one_notebook_05_runs():
    assert nb05_amp.amp_step_order().index("unscale") < nb05_amp.amp_step_order().index("clip")
    assert len(set(nb05_amp.amp_step_order())) == 6


def test_the_overflow_diagnosis_needs_a_real_float16_inf():
    # 65504 < x < 65520 rounds down to 65504: no inf, so no "becomes inf" diagnosis
    grads = (torch.tensor([1.0, -0.5]),)
    assert not nb05_amp._overflows(65510.0, grads)
    assert nb05_amp._overflows(65520.0, grads)
