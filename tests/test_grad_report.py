"""grad_report, track_update, optimizer_coverage and audit_step on small, known-broken loops."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograd_lab.labs.grad_report import audit_step, format_report, grad_report, optimizer_coverage, track_update


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))


def _data():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(8, 3, generator=generator), torch.randn(8, 1, generator=generator)


def test_report_rows_follow_named_parameters_and_flag_missing_and_nonfinite_grads():
    model = _model()
    x, y = _data()
    F.mse_loss(model(x), y).backward()
    model[2].bias.grad = None
    model[0].bias.grad[0] = float("nan")
    rows = grad_report(model)
    assert [r.name for r in rows] == [name for name, _ in model.named_parameters()]
    by_name = {r.name: r for r in rows}
    assert by_name["2.bias"].has_grad is False and by_name["2.bias"].norm is None
    assert by_name["0.bias"].finite is False
    assert by_name["0.weight"].finite is True
    assert math.isclose(by_name["0.weight"].norm, float(model[0].weight.grad.norm()), rel_tol=1e-6)
    table = format_report(rows)
    assert "2.bias" in table and "None" in table and "0x" not in table


def test_track_update_measures_the_relative_change_of_one_sgd_step():
    model = _model()
    x, y = _data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    F.mse_loss(model(x), y).backward()
    expected = float((0.1 * model[0].weight.grad).norm() / model[0].weight.detach().norm())
    with track_update(model) as update:
        optimizer.step()
    assert math.isclose(update.ratios["0.weight"], expected, rel_tol=1e-5)


def test_coverage_names_missing_and_frozen_parameters_by_identity():
    model = _model()
    model[0].weight.requires_grad_(False)
    optimizer = torch.optim.SGD([model[0].weight, model[0].bias], lr=0.1)
    assert optimizer_coverage(model, optimizer) == {"missing": ["2.weight", "2.bias"], "frozen": ["0.weight"]}
    full = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    assert optimizer_coverage(model, full) == {"missing": [], "frozen": []}


def test_bad_arguments_get_errors_that_say_what_to_pass():
    with pytest.raises(TypeError, match="nn.Module"):
        grad_report([torch.zeros(2)])
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        optimizer_coverage(_model(), [torch.zeros(2)])
    with pytest.raises(TypeError, match="zero-argument function"):
        audit_step(_model(), torch.optim.SGD(_model().parameters(), lr=0.1), None)


def _loop(order, *, eval_mode=False, clip=False):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()
    if eval_mode:
        model.eval()

    def train_step():
        for action in order:
            if action == "zero_grad":
                optimizer.zero_grad()
            elif action == "backward":
                F.mse_loss(model(x), y).backward()
                if clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            else:
                optimizer.step()
    return model, optimizer, train_step


def _problems(*args, **kwargs):
    return [p for p in audit_step(*_loop(*args, **kwargs)) if not p.startswith("note:")]


def test_a_correct_loop_has_no_problems_and_clipping_is_seen():
    assert audit_step(*_loop(["zero_grad", "backward", "step"], clip=True)) == []
    assert _problems(["zero_grad", "backward", "step"]) == []


def test_the_audit_finds_each_broken_loop():
    assert any("accumulated across iterations" in p for p in _problems(["backward", "step"]))
    assert any("between backward() and step()" in p for p in _problems(["backward", "zero_grad", "step"]))
    assert any("never called" in p for p in _problems(["zero_grad", "backward"]))
    assert any("before backward()" in p for p in _problems(["zero_grad", "step", "backward"]))
    assert any("eval mode" in p for p in _problems(["zero_grad", "backward", "step"], eval_mode=True))


def test_the_audit_reports_optimizer_coverage():
    model, _, _ = _loop([])
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.1)
    x, y = _data()

    def train_step():
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    problems = audit_step(model, optimizer, train_step)
    assert any("missing from the optimizer: ['2.weight', '2.bias']" in p for p in problems)
