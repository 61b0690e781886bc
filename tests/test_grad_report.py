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


def _loop(order, *, eval_mode=False, clip_at=None, set_to_none=True, micro_batches=1):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()
    if eval_mode:
        model.eval()

    def train_step():
        for action in order:
            if action == "zero_grad":
                optimizer.zero_grad(set_to_none=set_to_none)
            elif action == "backward":
                for rows in x.chunk(micro_batches):
                    F.mse_loss(model(rows), y[:len(rows)]).div(micro_batches).backward()
            elif action == "clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            else:
                optimizer.step()
    return model, optimizer, train_step


def _problems(*args, **kwargs):
    return audit_step(*_loop(*args, **kwargs))


def test_a_correct_loop_has_no_problems_with_or_without_clipping():
    assert _problems(["zero_grad", "backward", "clip", "step"]) == []
    assert _problems(["zero_grad", "backward", "step"]) == []
    assert _problems(["backward", "step", "zero_grad"]) == []        # zero_grad at the end: the same loop


def test_gradient_accumulation_over_micro_batches_is_not_a_bug():
    assert _problems(["zero_grad", "backward", "clip", "step"], micro_batches=4) == []
    assert any("accumulated across iterations" in p for p in _problems(["backward", "step"], micro_batches=4))


def test_the_audit_finds_each_broken_loop():
    assert any("accumulated across iterations" in p for p in _problems(["backward", "step"]))
    assert any("between backward() and step()" in p for p in _problems(["backward", "zero_grad", "step"]))
    assert any("between backward() and step()" in p
               for p in _problems(["backward", "zero_grad", "step"], set_to_none=False))
    assert any("never called" in p for p in _problems(["zero_grad", "backward"]))
    assert _problems(["zero_grad", "step", "backward"]) == [     # one bug, one problem (audit 07-r2, item 10)
        "optimizer.step() ran before backward(): each step used the previous iteration's gradient"]
    assert any("eval mode" in p for p in _problems(["zero_grad", "backward", "step"], eval_mode=True))


def test_clipping_in_the_wrong_place_is_a_problem_not_a_note():
    before = _problems(["zero_grad", "clip", "backward", "step"])
    after = _problems(["zero_grad", "backward", "step", "clip"])
    assert before == ["gradient clipping ran before backward(): it changed the previous gradients (or none), "
                      "not the ones the step uses"]
    assert after == ["gradient clipping ran after optimizer.step(): that step used the gradients as they were"]


def test_clipping_before_the_scaler_unscales_is_found():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = _data()

    def amp_step(unscale_first):
        optimizer.zero_grad()
        scaler.scale(F.mse_loss(model(x), y)).backward()
        if unscale_first:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    assert audit_step(model, optimizer, lambda: amp_step(True)) == []
    assert audit_step(model, optimizer, lambda: amp_step(False)) == [
        "clipping ran before scaler.unscale_(): it clipped the scaled gradients"]


def test_a_submodule_in_eval_mode_is_named():
    model, optimizer, step = _loop(["zero_grad", "backward", "step"])
    model[1].eval()
    assert _problems_of(model, optimizer, step) == ["modules in eval mode during training: ['1']: call model.train() "
                                                   "before the loop"]


def _problems_of(model, optimizer, step):
    return audit_step(model, optimizer, step)


def test_the_audit_puts_back_the_model_the_optimizer_and_the_gradients():
    model, optimizer, step = _loop(["zero_grad", "backward", "step"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = _data()
    F.mse_loss(model(x), y).backward()
    model[2].eval()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}

    def train_step():
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        model.train()
    audit_step(model, optimizer, train_step)
    assert all(torch.equal(p, before[name]) and torch.equal(p.grad, grads[name]) for name, p in model.named_parameters())
    assert optimizer.state_dict()["state"] == {} and not model[2].training and model[0].training
    assert torch.nn.utils.clip_grad_norm_.__name__ == "clip_grad_norm_"     # the watch is removed


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
