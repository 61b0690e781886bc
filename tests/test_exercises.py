"""The exercise engine: check, results, misconceptions, hermetic runs, timeouts, hints, solutions."""

import dataclasses
import functools
import json
import os
import subprocess
import sys
import time

import pytest
import torch

from autograd_lab import checking
from autograd_lab.checking import catalog, notebook, registry
from autograd_lab.checking.compare import grad_fn_family
from autograd_lab.checking import (
    Exercise,
    Misconception,
    WrongAnswer,
    check,
    get,
    hint,
    judge,
    observe,
    register,
    solution,
)


def cube_grad(x):
    x = x.detach().requires_grad_()
    (x ** 3).sum().backward()
    return x.grad


def stub(x):
    raise NotImplementedError


@pytest.fixture(autouse=True)
def fresh_session(monkeypatch):
    """No strict or graded mode unless a test asks; test exercises removed afterwards."""
    for name in ("CI", "AUTOGRAD_LAB_STRICT", "AUTOGRAD_LAB_GRADING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(notebook, "_attempted", set())
    monkeypatch.setattr(notebook, "_hints_shown", {})
    catalog.load_all()
    before = dict(registry.REGISTRY)
    # These tests exercise the checking engine with formula answers on 00.cube_grad; its
    # real method (uses_autograd) is proved by tests/test_exercise_bank.py and the tests below.
    registry.REGISTRY["00.cube_grad"] = dataclasses.replace(before["00.cube_grad"], method=())
    yield
    registry.REGISTRY.clear()
    registry.REGISTRY.update(before)
    notebook._reference_cache.clear()


def _vector_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(7 if hidden else 4, generator=generator, dtype=torch.float64),)


def make(exercise_id="99.sample", **fields):
    defaults = dict(title="A <b>sample</b> & co", answer_name="answer", reference=cube_grad,
                    inputs=_vector_inputs, hints=("first", "second"))
    return register(Exercise(id=exercise_id, **{**defaults, **fields}))


# --- statuses, strict mode, reprs ------------------------------------------------

def test_a_stub_is_not_attempted_and_never_raises_even_in_strict_mode(monkeypatch):
    monkeypatch.setenv("AUTOGRAD_LAB_STRICT", "1")
    result = check("00.cube_grad", stub)
    assert result.status == "not attempted" and result.score == 0
    assert result.misconception == "not_attempted"
    assert "raise NotImplementedError" in result.messages[0]
    assert check("00.needs_grad", ...).status == "not attempted"


def test_the_reference_passes_with_honest_wording():
    result = check("00.cube_grad", cube_grad)
    assert result.status == "passed" and result.score == 1 and result.misconception is None
    assert result.messages == ["3 public checks passed; hidden checks run when graded, on other inputs, and count in the grade."]
    value = check("00.needs_grad", {"w": True, "x": False, "b": True, "h": False})
    assert value.messages == ["1 public check passed."]  # a value has no hidden variants to promise


@pytest.mark.parametrize("variable,value", [("AUTOGRAD_LAB_STRICT", "1"), ("CI", "true")])
def test_strict_mode_raises_on_failure_only(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    check("00.cube_grad", cube_grad)
    with pytest.raises(AssertionError, match="doubled|twice"):
        check("00.cube_grad", lambda x: 6 * x ** 2)


def test_strict_mode_off_for_false_values(monkeypatch):
    monkeypatch.setenv("CI", "false")
    assert check("00.cube_grad", lambda x: None).status == "failed"


def test_reprs_are_identical_on_every_run_and_free_of_addresses():
    answers = [cube_grad, stub, lambda x: None, lambda x: 3 * x ** 2 + 1, lambda x: 1 / 0]
    for answer in answers:
        first, second = check("00.cube_grad", answer), check("00.cube_grad", answer)
        assert repr(first) == repr(second) and first._repr_html_() == second._repr_html_()
        assert first.to_dict() == second.to_dict()
        assert "0x" not in repr(first) + first._repr_html_()
        json.dumps(first.to_dict())


def test_the_html_repr_is_escaped():
    make()
    html = check("99.sample", lambda x: "<script>")._repr_html_()
    assert "<b>sample</b>" not in html and "&lt;b&gt;sample&lt;/b&gt; &amp; co" in html
    assert "<script>" not in html


def test_errors_are_reported_not_raised():
    result = check("00.cube_grad", lambda x: 1 / 0)
    assert result.status == "error" and result.misconception == "error"
    assert "ZeroDivisionError: division by zero" in result.messages[0]
    assert check("00.cube_grad", lambda x: sys.exit(3)).status == "error"
    assert check("00.cube_grad", 42).status == "error"


def test_a_not_implemented_error_from_torch_is_an_error_not_a_stub():
    def uses_a_missing_kernel(x):
        return torch.ops.aten._nested_tensor_size(x)  # raises inside torch on dense tensors

    record = observe(get("00.cube_grad"), uses_a_missing_kernel, 0)
    assert record["status"] in ("error",)


# --- comparison and misconceptions ------------------------------------------------

@pytest.mark.parametrize("answer,tag,phrase", [
    (lambda x: 6 * x ** 2, "doubled", "twice the expected one, element by element"),
    (lambda x: -3 * x ** 2, "sign_flipped", "opposite sign"),
    (lambda x: None, "none", "is None"),
    (lambda x: torch.zeros_like(x), "all_zeros", "all zeros"),
    (lambda x: 0.75 * x ** 2, "scaled", "0.25 times"),
    (lambda x: 3 * x ** 2 + 1, "wrong_value", "elements differ from the expected values; the largest difference"),
    (lambda x: (3 * x ** 2)[:2], "shape", "expected shape (4,), got (2,)"),
    (lambda x: (3 * x ** 2).float(), "dtype", "expected dtype torch.float64, got torch.float32"),
    (lambda x: (3 * x ** 2).tolist(), "structure", "expected a tensor"),
])
def test_misconceptions_are_named(answer, tag, phrase):
    result = check("00.cube_grad", answer)
    assert result.status == "failed" and result.misconception == tag
    assert phrase in result.messages[0], result.messages


def test_a_wrong_value_never_shows_the_expected_value():
    """Adversarial round 7: "expected 11, got 10" handed over what the exercise asks to work out."""
    from autograd_lab.checking.compare import Tolerance, compare_values
    finding = compare_values(10, 11, "the returned value[1]", Tolerance())
    assert finding.tag == "wrong_value" and "11" not in finding.message and "got 10" in finding.message
    expected = torch.tensor([1.0, -1.123, 2.0])
    from autograd_lab.checking.records import encode_tensor
    finding = compare_values(encode_tensor(torch.tensor([1.0, 0.4272, 2.0])), encode_tensor(expected),
                             "the gradient", Tolerance())
    assert "1.123" not in finding.message and "index (1,)" in finding.message and "0.4272" in finding.message


def test_round_7_slips_get_their_own_cause():
    """Adversarial round 7 (00.cube_grad): a hook is named as a hook; the caller's x as the leaf is a changed
    argument, not "the derivative typed by hand", also where x already requires grad."""
    from autograd_lab_solutions import nb00_start_here as nb00
    from autograd_lab.checking import autograd_derivative, uses_autograd
    # fresh_session removes 00.cube_grad's method; these slips are about it, so it is put back here
    registry.REGISTRY["00.cube_grad"] = dataclasses.replace(registry.REGISTRY["00.cube_grad"],
                                                            method=(uses_autograd(), autograd_derivative()))

    def hook_returns_formula(x):      # written here, as a student's cell would be (the course's own code is not
        t = x.detach().clone().requires_grad_()     # watched for hooks, so the bank entry's copy is not used)
        t.register_hook(lambda grad: 3 * t.detach() ** 2)
        t.sum().backward()
        return t.grad
    hook = check("00.cube_grad", hook_returns_formula)
    assert hook.misconception == "laundered_formula" and "registered a gradient hook" in hook.messages[0]
    for answer in (nb00._graph_on_callers_x, nb00._clone_of_callers_x):
        result = check("00.cube_grad", answer)
        assert result.misconception == "modified_input", repr(result)
        assert not any("typed by hand" in message for message in result.messages), repr(result)



def test_round_7_tiny_engine_slips_get_their_own_cause():
    """01.tiny_tanh: a node without parents is named as such (was "numerical"); a closure called instead of
    attached gets the exercise's cause and not the generic `.grad` advice; a list's expected length is not said."""
    from autograd_lab_solutions import nb01_dynamic_graph as nb01
    orphan = check("01.tiny_tanh", nb01._tanh_parent_not_listed)
    assert orphan.misconception == "typed_formula" and "lists no parent" in orphan.messages[0], repr(orphan)
    called = check("01.tiny_tanh", nb01._tanh_closure_called)
    assert called.status == "error" and "without calling it" in called.messages[0], repr(called)
    assert "Usual cause" not in called.messages[0], repr(called)
    order = check("05.amp_step_order", lambda micro_batches, clip, schedule: ["forward_in_autocast"])
    assert "of another length (yours has 1 entry)" in " ".join(order.messages), repr(order)


def test_shape_is_reported_before_values():
    result = check("00.cube_grad", lambda x: torch.zeros(3, dtype=torch.float64))
    assert result.misconception == "shape"


def test_a_tolerance_error_passes_within_float64_tolerance():
    assert check("00.cube_grad", lambda x: 3 * x ** 2 * (1 + 1e-12)).status == "passed"


def test_custom_misconceptions_come_before_built_in_ones():
    result = check("00.needs_grad", {"w": True, "x": True, "b": True, "h": True})
    assert result.misconception == "no_requires_grad"
    assert "only for tensors that require grad" in result.messages[0]


def test_a_crashing_detector_counts_as_not_detected():
    make(misconceptions=(Misconception("broken", "never shown", lambda s, r, a: 1 / 0),))
    assert check("99.sample", lambda x: 6 * x ** 2).misconception == "doubled"


def test_dict_answers_name_missing_and_extra_keys():
    result = check("00.needs_grad", {"w": True, "b": True, "h": False, "y": True})
    assert result.misconception == "structure"
    assert "missing 'x'" in result.messages[0] and "unexpected 'y'" in result.messages[0]


def test_grad_fn_names_are_compared_without_their_numeric_suffix():
    assert grad_fn_family("MmBackward0") == grad_fn_family("MmBackward") == "MmBackward"
    assert grad_fn_family(None) is None


def _square(x):
    return x ** 2


def _leaf_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(3, generator=generator, dtype=torch.float64).requires_grad_(),)


def test_state_comparison_catches_a_detached_output():
    make(reference=_square, inputs=_leaf_inputs, compare=("value", "state"))
    result = check("99.sample", lambda x: (x ** 2).detach())
    assert result.misconception == "state"
    assert "expected requires_grad True, got False" in result.messages[0]
    assert check("99.sample", lambda x: x * x).status == "failed"  # MulBackward is not PowBackward
    assert check("99.sample", lambda x: x.pow(2)).status == "passed"


def test_state_comparison_tolerates_a_renumbered_grad_fn():
    exercise = make(reference=_square, inputs=_leaf_inputs, compare=("value", "state"))
    student = {0: observe(exercise, _square, 0)}
    reference = {0: observe(exercise, _square, 0)}
    reference[0]["output"]["grad_fn"] = "PowBackward"   # as an older PyTorch would name it
    assert judge(exercise, student, reference).status == "passed"
    reference[0]["output"]["grad_fn"] = "MulBackward0"
    assert judge(exercise, student, reference).misconception == "state"


def test_state_comparison_catches_grad_mode_left_off():
    make(reference=_square, inputs=_leaf_inputs, compare=("value", "state"))

    def leaves_grad_off(x):
        y = x ** 2
        torch.set_grad_enabled(False)
        return y

    result = check("99.sample", leaves_grad_off)
    assert result.misconception == "state" and "grad mode" in result.messages[0]
    assert torch.is_grad_enabled()


def _step(parameter):
    (parameter ** 2).sum().backward()


def test_argument_comparison_catches_accumulated_gradients():
    make(reference=_step, inputs=_leaf_inputs, compare=("args",), modifies=("parameter",))

    def backward_twice(parameter):
        _step(parameter)
        _step(parameter)

    result = check("99.sample", backward_twice)
    assert result.misconception == "doubled"
    assert "The .grad of argument 1 is twice the expected one" in result.messages[0]


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x ** 2


class _CubeWrongBackward(_Cube):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * 3 * x ** 2


def test_gradient_comparison_backpropagates_through_the_answer():
    make(reference=lambda x: x ** 3, inputs=_leaf_inputs, compare=("value", "grad"))
    assert check("99.sample", _Cube).status == "passed"
    wrong = check("99.sample", _CubeWrongBackward)
    assert wrong.misconception == "sign_flipped" and "The gradient of input 1" in wrong.messages[0]
    detached = check("99.sample", lambda x: x.detach() ** 3)
    assert detached.misconception == "none" and "not connected" in detached.messages[0]


def test_gradcheck_runs_in_float64_on_autograd_functions():
    def float32_inputs(seed, hidden):  # gradcheck must still run in float64
        return (torch.randn(3, generator=torch.Generator().manual_seed(seed)).requires_grad_(),)

    make(reference=lambda x: x ** 3, inputs=float32_inputs, gradcheck=True)
    assert check("99.sample", _Cube).status == "passed"
    result = check("99.sample", _CubeWrongBackward)
    assert result.misconception == "gradcheck" and "Jacobian mismatch" in result.messages[0]


# --- detectors that see side effects and gradients ---------------------------------

def _descend(parameter):
    with torch.no_grad():
        parameter.sub_(0.1 * parameter.grad)


def _parameter_with_grad(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    parameter = torch.randn(3, generator=generator, dtype=torch.float64).requires_grad_()
    parameter.grad = torch.randn(3, generator=generator, dtype=torch.float64)
    return (parameter,)


def _left_unchanged(student, reference, args, *, student_run):
    return torch.equal(student_run.args_after[0], args[0])


def _uphill(student, reference, args, *, student_run, reference_run):
    before, ours, theirs = args[0], student_run.args_after[0], reference_run.args_after[0]
    return torch.allclose(ours - before, before - theirs)


def _rebinds(parameter):
    parameter = parameter - 0.1 * parameter.grad   # a new local tensor: the argument is untouched


def _ascends(parameter):
    with torch.no_grad():
        parameter.add_(0.1 * parameter.grad)


def _make_sgd(*misconceptions):
    return make(reference=_descend, inputs=_parameter_with_grad, compare=("args",), modifies=("parameter",),
                misconceptions=misconceptions)


def test_a_detector_that_asks_for_the_runs_sees_the_arguments_after_the_call():
    _make_sgd(Misconception("rebinding", "Rebinding updates nothing.", _left_unchanged),
              Misconception("ascent", "A step up the gradient.", _uphill))
    rebound = check("99.sample", _rebinds)
    assert rebound.misconception == "rebinding" and rebound.messages[0].startswith(
        "Check 1 of 3 (on a float64 tensor of shape (3,)): Rebinding updates nothing. (argument 1:")
    assert check("99.sample", _ascends).misconception == "ascent"
    assert check("99.sample", _descend).status == "passed"


def test_the_runs_come_from_the_records_so_the_grader_path_names_them_too(tmp_path):
    exercise = _make_sgd(Misconception("ascent", "A step up the gradient.", _uphill))
    seeds = exercise.public_seeds + exercise.hidden_seeds
    torch.save({"student": {s: observe(exercise, _ascends, s) for s in seeds},
                "reference": {s: observe(exercise, _descend, s) for s in seeds}}, tmp_path / "records.pt")
    # In grading, the student's objects stay in the kernel: only the records reach judge().
    loaded = torch.load(tmp_path / "records.pt", weights_only=True)
    result = judge(exercise, loaded["student"], loaded["reference"])
    assert result.misconception == "ascent" and result.hidden_total == 3 and result.hidden_passed == 0


def _descends_twice(parameter):
    _descend(parameter)
    _descend(parameter)


def test_arguments_after_the_call_carry_their_grad_without_touching_the_record():
    seen = []

    def overwrites_grads(student, reference, args, **runs):
        seen.append({name: (run, run.args_after[0].grad.clone()) for name, run in runs.items()})
        for run in runs.values():   # must not reach the records, which are cached
            run.args_after[0].grad = torch.zeros_like(run.args_after[0])
        return True

    exercise = _make_sgd(Misconception("any", "Seen.", overwrites_grads))
    assert check("99.sample", _descends_twice).misconception == "any"
    assert set(seen[0]) == {"student_run", "reference_run"}   # **kwargs gets both runs
    (student, student_grad), (reference, reference_grad) = seen[0]["student_run"], seen[0]["reference_run"]
    original_grad = _parameter_with_grad(0, False)[0].grad
    assert torch.equal(student_grad, original_grad) and torch.equal(reference_grad, original_grad)
    assert student.output is None and student.input_grads is None   # "grad" is not compared here
    cached = checking.reference_records(exercise, (0,))[0]
    assert torch.equal(cached["args_after"][0]["grad"], original_grad)
    assert cached["args_after"][0]["value"].grad is None   # the record's tensor got no .grad attached
    assert check("99.sample", _descends_twice).misconception == "any"   # the second check sees .grad too
    assert len(seen) == 6 and torch.equal(seen[3]["reference_run"][1], original_grad)   # seed 0 again


def test_a_detector_sees_the_input_gradients_of_both_sides():
    seen = []

    def sees_grads(student, reference, args, *, student_run, reference_run):
        seen.append((student_run.input_grads, reference_run.input_grads))
        return torch.allclose(student_run.input_grads[0], -reference_run.input_grads[0])

    make(reference=lambda x: x ** 3, inputs=_leaf_inputs, compare=("value", "grad"),
         misconceptions=(Misconception("backward_sign", "Your backward flips the sign.", sees_grads),))
    assert check("99.sample", _CubeWrongBackward).misconception == "backward_sign"
    student_grads, reference_grads = seen[0]
    assert len(student_grads) == len(reference_grads) == 1
    assert student_grads[0].shape == (3,) and not student_grads[0].requires_grad
    assert check("99.sample", lambda x: x.detach() ** 3).misconception == "none"   # grads None: not detected


def test_three_argument_detectors_are_called_as_before():
    calls = []

    def old_style(student, reference, args):
        calls.append((student, reference, args))
        return True

    _make_sgd(Misconception("old", "An old-style detector.", old_style))
    assert check("99.sample", _rebinds).misconception == "old"
    student, reference, args = calls[0]
    assert student is None and reference is None
    assert isinstance(args, tuple) and args[0].shape == (3,)
    assert check("99.sample", lambda p: None).misconception == "old"   # lambdas too


def test_a_detector_that_could_never_be_called_is_refused_at_definition():
    def misspelt(student, reference, args, *, student_runs):
        return True

    with pytest.raises(TypeError, match="may only ask for the keyword parameters student_run and reference_run"):
        Misconception("typo", "never shown", misspelt)
    with pytest.raises(TypeError, match=r"cannot be called as detect\(student, reference, args\)"):
        Misconception("two", "never shown", lambda student, reference: True)


# --- hidden checks ---------------------------------------------------------------

def test_hidden_checks_count_but_never_leak_their_inputs():
    exercise = get("00.cube_grad")

    def only_right_on_four(x):  # passes the public shape (4,), fails the hidden (7,)
        return 3 * x ** 2 if x.numel() == 4 else 6 * x ** 2

    seeds = exercise.public_seeds + exercise.hidden_seeds
    result = judge(exercise, {s: observe(exercise, only_right_on_four, s) for s in seeds},
                   {s: observe(exercise, cube_grad, s) for s in seeds})
    text = repr(result) + result._repr_html_()
    assert result.status == "failed" and result.misconception == "doubled"
    assert (result.public_passed, result.hidden_passed, result.hidden_total) == (3, 0, 3)
    assert result.score == 0.5
    assert "3 of 3 hidden checks failed (doubled)" in text
    assert "(7,)" not in text and "shape" not in text.replace("shapes;", "")


def test_an_error_on_a_hidden_case_is_the_status_and_the_tag():
    exercise = get("00.cube_grad")

    def breaks_on_seven(x):
        if x.numel() == 7:
            raise RuntimeError("size 7 is not supported")
        return 6 * x ** 2

    seeds = exercise.public_seeds + exercise.hidden_seeds
    result = judge(exercise, {s: observe(exercise, breaks_on_seven, s) for s in seeds},
                   {s: observe(exercise, cube_grad, s) for s in seeds})
    assert (result.status, result.misconception) == ("error", "error")
    assert "size 7" not in repr(result) and "3 of 3 hidden checks failed (error)" in repr(result)


def test_records_survive_a_weights_only_round_trip(tmp_path):
    exercise = make(reference=_square, inputs=_leaf_inputs, compare=("value", "state", "args", "grad"), modifies="all")
    record = observe(exercise, lambda x: {"y": x ** 2, "pair": (x, None, 1.5, "s")}, 0)
    torch.save(record, tmp_path / "record.pt")
    loaded = torch.load(tmp_path / "record.pt", weights_only=True)
    assert loaded["output"]["__kind__"] == "dict"
    assert torch.equal(loaded["output"]["items"]["y"]["value"], record["output"]["items"]["y"]["value"])
    assert loaded["output"]["items"]["y"]["grad_fn"] == "PowBackward0"


# --- hermetic checks -------------------------------------------------------------

def test_the_session_is_restored_after_the_answer_changes_it():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)

    def vandal(x):
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        torch.set_anomaly_enabled(True)
        torch.manual_seed(0)
        torch.rand(100)
        return cube_grad(x)

    check("00.cube_grad", vandal)
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
    assert not torch.is_anomaly_enabled()
    assert torch.equal(torch.rand(3), expected_next)


def test_inputs_are_fresh_and_mutation_does_not_reach_the_reference():
    def mutates(x):
        x.mul_(100)
        return None

    exercise = get("00.cube_grad")
    record = observe(exercise, mutates, 0)
    assert torch.equal(record["inputs"][0]["value"], exercise.inputs(0, False)[0])
    assert check("00.cube_grad", cube_grad).status == "passed"


def test_a_shadowed_torch_function_changes_nothing(monkeypatch):
    import torch.testing
    check("00.cube_grad", cube_grad)  # the checker's imports are already bound
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(torch, "isclose", lambda a, b, **k: torch.ones_like(a, dtype=torch.bool))
    monkeypatch.setattr(torch.testing, "assert_close", lambda *a, **k: None)
    assert check("00.cube_grad", lambda x: 3 * x ** 2 + 1).status == "failed"


def test_warnings_and_stderr_go_into_the_result(capfd):
    def noisy(x):
        y = x.detach().requires_grad_() * 1.0
        y.sum().backward()
        y.grad  # a non-leaf's .grad: PyTorch warns
        print("to stderr", file=sys.stderr)
        return cube_grad(x)

    result = check("00.cube_grad", noisy)
    captured = capfd.readouterr()
    assert captured.err == ""
    assert result.status == "passed"
    assert any("UserWarning: The .grad attribute of a Tensor that is not a leaf" in m for m in result.messages)
    assert any("stderr: to stderr" in m for m in result.messages)


# --- timeouts --------------------------------------------------------------------

def test_an_endless_loop_times_out_and_the_session_continues():
    calls = []

    def endless(x):
        calls.append(x)
        while True:
            try:
                x = x + 1
            except Exception:   # noqa: BLE001 - a student's broad except must not swallow the timeout
                pass

    result = check("00.cube_grad", endless, timeout=0.3)
    assert result.status == "timed out" and result.misconception == "timeout"
    assert "time limit" in result.messages[0]
    assert len(calls) == 1  # one case timed out; the other two were not run (counted, not timed: CI is loaded)
    assert check("00.cube_grad", cube_grad).status == "passed"


def test_a_bare_except_cannot_swallow_the_timeout():
    # The alarm re-fires until the check regains control.  (A bare except inside an
    # endless loop would catch every alarm: only killing the process stops that, which
    # is the batch grader's job.)
    def stubborn(x):
        try:
            while True:
                pass
        except BaseException:  # noqa: B036 - exactly what a careless student writes
            pass
        while True:
            pass

    assert check("00.cube_grad", stubborn, timeout=0.2).status == "timed out"


def test_the_timed_answer_runs_on_one_thread_and_the_callers_count_comes_back():
    # Two intra-op threads on a loaded machine spin while they wait for each other, and the CPU time the
    # deadline counts grew tenfold (06.checkpointed_step at load 19): one thread keeps it to the answer's work.
    seen = []

    def counting(x):
        seen.append(torch.get_num_threads())
        return cube_grad(x)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert check("00.cube_grad", counting).status == "passed"
        assert set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_fast_answer_is_not_hit_by_a_late_alarm():
    check("00.cube_grad", cube_grad, timeout=0.05)
    time.sleep(0.2)  # a stray SIGALRM would raise here
    assert check("00.cube_grad", cube_grad, timeout=None).status == "passed"


# --- hints and solutions ---------------------------------------------------------

def test_hints_come_one_by_one_and_stop_at_the_last():
    make()
    assert [hint("99.sample").number for _ in range(3)] == [1, 2, 2]
    assert repr(hint("99.sample")) == "Hint 2 of 2 (the last one) for 99.sample: second"
    make("99.bare", hints=())
    assert "no hints" in repr(hint("99.bare"))
    make("99.html", hints=("use <b>",))
    assert "use &lt;b&gt;" in hint("99.html")._repr_html_()


def test_the_solution_waits_for_a_first_attempt():
    refused = solution("00.cube_grad")
    assert not refused.available and "after your first attempt" in repr(refused)
    check("00.cube_grad", stub)  # a stub is not an attempt
    assert not solution("00.cube_grad").available
    check("00.cube_grad", lambda x: None)
    shown = solution("00.cube_grad")
    assert shown.available and "def cube_grad(x):" in repr(shown) and "backward()" in shown.source


def test_the_solution_is_refused_in_graded_mode(monkeypatch):
    check("00.cube_grad", lambda x: None)
    monkeypatch.setenv("AUTOGRAD_LAB_GRADING", "1")
    refused = solution("00.cube_grad")
    assert not refused.available and "graded" in repr(refused)


def test_graded_mode_blocks_importing_the_solutions():
    code = ("import autograd_lab.checking as ex\n"
            "def cube_grad(x):\n"
            "    x = x.detach().requires_grad_()\n"
            "    (x ** 3).sum().backward()\n"
            "    return x.grad\n"
            "r = ex.check('00.cube_grad', cube_grad)\n"
            "assert r.status == 'passed', r\n"
            "try:\n"
            "    import autograd_lab_solutions.nb00_start_here\n"
            "except ImportError as error:\n"
            "    print('blocked:', error)\n")
    env = dict(os.environ, AUTOGRAD_LAB_GRADING="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "blocked: autograd_lab_solutions is not available while an assignment is being graded" in done.stdout


# --- the registry ----------------------------------------------------------------

def test_invalid_definitions_say_what_to_fix():
    with pytest.raises(ValueError, match="two-digit notebook number"):
        Exercise(id="cube", title="t", answer_name="a", reference=cube_grad, inputs=_vector_inputs)
    with pytest.raises(TypeError, match="inputs="):
        Exercise(id="99.a", title="t", answer_name="a", reference=cube_grad)
    with pytest.raises(ValueError, match="solution_code"):
        Exercise(id="99.a", title="t", answer_name="a", reference=dict, kind="value")
    with pytest.raises(ValueError, match="compare"):
        Exercise(id="99.a", title="t", answer_name="a", reference=cube_grad, inputs=_vector_inputs,
                 compare=("values",))
    with pytest.raises(TypeError, match="WrongAnswer"):
        Exercise(id="99.a", title="t", answer_name="a", reference=cube_grad, inputs=_vector_inputs,
                 wrong_answers=(lambda x: x,))


def test_an_id_defined_in_two_modules_is_refused():
    make()
    make()  # the same module again (a reload) replaces it
    namespace = {"__name__": "other_module", "register": register, "make_it": lambda: Exercise(
        id="99.sample", title="t", answer_name="a", reference=cube_grad, inputs=_vector_inputs)}
    with pytest.raises(ValueError, match="defined twice"):
        exec("register(make_it())", namespace)


def test_unknown_ids_list_the_known_ones():
    with pytest.raises(KeyError, match="00.cube_grad"):
        get("00.cube_gard")


def test_wrong_answers_are_checked_by_the_bank():
    exercise = get("00.cube_grad")
    assert all(isinstance(item, WrongAnswer) for item in exercise.wrong_answers)
    assert {item.expect for item in exercise.wrong_answers} >= {"doubled", "sign_flipped", "none", "scaled"}


def test_judge_refuses_a_forged_status():
    # A record is data from the student's process: a status observe never writes
    # (such as "passed") must not pass, whoever forged it.
    exercise = get("00.cube_grad")
    reference = {seed: observe(exercise, exercise.reference, seed) for seed in exercise.public_seeds}
    forged = {seed: dict(record, status="passed") for seed, record in reference.items()}
    result = judge(exercise, forged, reference)
    assert result.status == "error" and result.score == 0
    assert "not a record made by observe" in repr(result)


def test_claims_compares_equal_values_of_the_same_type():
    says_one, says_cause = checking.claims("A", 1), checking.claims("A", "no_zero_grad")
    assert says_one({"A": 1}, None, ())
    assert not says_one({"A": True}, None, ())        # True == 1, but it is not the claim
    assert not says_one({"B": 1}, None, ()) and not says_one([1], None, ())
    decoded = "".join(["no_zero", "_grad"])           # equal, but a different object
    assert says_cause({"A": decoded}, None, ())


# --- methods: the exercise checks the skill it names (docs/contracts.md §5) -----------

from autograd_lab.checking import backward_calls, no_data_attribute, no_jacobian, uses_autograd  # noqa: E402


def _cube_formula(x):
    return 3 * x ** 2


def _cube_by_grad(x):
    from torch.autograd import grad  # bound before the check starts counting: still counted
    x = x.detach().requires_grad_()
    return grad((x ** 3).sum(), x)[0]


def test_uses_autograd_rejects_a_typed_formula_and_names_the_method():
    make(method=uses_autograd())
    assert check("99.sample", cube_grad).status == "passed"
    assert check("99.sample", _cube_by_grad).status == "passed"
    result = check("99.sample", _cube_formula)
    assert result.status == "failed" and result.misconception == "typed_formula"
    assert "asks for autograd" in result.messages[0] and "`backward()`" in result.messages[0]


def test_method_facts_are_in_the_record_for_the_batch_grader():
    exercise = make(method=uses_autograd())
    record = observe(exercise, cube_grad, 0)
    from autograd_lab.checking.facts import FACTS
    assert set(record["facts"]) == set(FACTS)
    assert record["facts"]["engine_runs"] == 1 and record["facts"]["output_from_engine"] is True
    assert record["facts"]["backward_op_names"]["aten::mul"] >= 1 and record["facts"]["tape_intact"]
    assert observe(exercise, _cube_formula, 0)["facts"]["engine_runs"] == 0
    assert "facts" not in observe(make("99.plain"), cube_grad, 0)  # no method: the record is as before
    # judged outside the kernel from the record alone; a record without facts cannot pass
    reference = {0: observe(exercise, cube_grad, 0)}
    assert judge(exercise, {0: record}, reference).status == "passed"
    stripped = {k: v for k, v in record.items() if k != "facts"}
    assert judge(exercise, {0: stripped}, reference).misconception == "method"


def _sgd_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    p = torch.randn(5 if hidden else 3, generator=generator, requires_grad=True)
    p.grad = torch.randn(p.shape, generator=generator)
    return (p, 0.1)


def _sgd_no_grad(p, lr):
    with torch.no_grad():
        p.sub_(lr * p.grad)


def _sgd_data(p, lr):
    p.data.sub_(lr * p.grad)


def _sgd_detach(p, lr):
    p.detach().sub_(lr * p.grad)  # shares the version counter: autograd sees this write


def test_no_data_attribute_rejects_a_write_through_data():
    make(reference=_sgd_no_grad, inputs=_sgd_inputs, compare=("args",), modifies="all", method=no_data_attribute())
    assert check("99.sample", _sgd_no_grad).status == "passed"
    assert check("99.sample", _sgd_detach).status == "passed"
    result = check("99.sample", _sgd_data)
    assert result.misconception == "data_write" and "`.data`" in result.messages[0]
    assert "asks for updates autograd can see" in result.messages[0]


def _sgd_foreach(p, lr):
    with torch.no_grad():
        torch._foreach_add_([p], [p.grad], alpha=-lr)   # a dispatch mode does not move a _foreach_ op's counters


def _sgd_data_then_bump(p, lr):
    p.data.sub_(lr * p.grad)
    with torch.no_grad():
        p.mul_(1.0)                                       # a no-op that moves the counter afterwards


def _sgd_data_then_hidden_bump(p, lr):
    p.data.sub_(lr * p.grad)
    functools.partial(torch._C._increment_version)([p])  # the counter moved by a call no profile hook sees


def _sgd_numpy_then_bump(p, lr):
    values = p.detach().numpy()
    values -= lr * p.grad.numpy()
    p.detach().add_(0)


def test_no_data_attribute_judges_each_write_when_it_runs():
    make(reference=_sgd_no_grad, inputs=_sgd_inputs, compare=("args",), modifies="all", method=no_data_attribute())
    assert check("99.sample", _sgd_foreach).status == "passed"
    for hidden in (_sgd_data_then_bump, _sgd_data_then_hidden_bump, _sgd_numpy_then_bump):
        assert check("99.sample", hidden).misconception == "data_write", hidden.__name__


def _vjp_by_grad(x):
    x = x.detach().requires_grad_()
    y = torch.sin(x)
    return torch.autograd.grad(y, x, torch.ones_like(y))[0]


def _vjp_by_jacobian(x):
    return torch.ones_like(x) @ torch.autograd.functional.jacobian(torch.sin, x)


def test_no_jacobian_rejects_a_full_jacobian_on_every_input_size():
    make(reference=_vjp_by_grad, method=(uses_autograd(), no_jacobian()))
    exercise = get("99.sample")
    everything = exercise.public_seeds + exercise.hidden_seeds  # hidden inputs are larger (7 > 4)
    references = {s: observe(exercise, _vjp_by_grad, s) for s in everything}
    assert judge(exercise, references, references).status == "passed"
    result = judge(exercise, {s: observe(exercise, _vjp_by_jacobian, s) for s in everything}, references)
    assert result.misconception == "jacobian" and "without building the Jacobian" in result.messages[0]
    assert observe(exercise, _vjp_by_jacobian, 101)["facts"]["largest_numel"] == 49


def _two_micro_batches(x):
    x = x.detach().requires_grad_()
    for half in x.chunk(2):
        (half ** 3).sum().backward()
    return x.grad


def test_backward_calls_counts_backward_passes():
    make(reference=_two_micro_batches, method=backward_calls(2))
    assert check("99.sample", _two_micro_batches).status == "passed"
    result = check("99.sample", cube_grad)  # one full batch: right value, wrong method
    assert result.misconception == "backward_calls" and "exactly 2 backward passes" in result.messages[0]


def test_a_method_on_a_value_exercise_is_refused():
    with pytest.raises(ValueError, match="method= applies to function exercises"):
        Exercise(id="99.value", title="t", answer_name="v", kind="value", reference=lambda: 1,
                 solution_code="v = 1", method=uses_autograd())


# --- diagnoses are true: near misses get plain "wrong_value" (docs/contracts.md §5) -------

from autograd_lab.checking.compare import Tolerance, compare_tensor_values  # noqa: E402
from autograd_lab.checking.display import inline_code_html  # noqa: E402

_REF = torch.tensor([1.0, -2.0, 3.0, 0.5])


@pytest.mark.parametrize("student,tag", [
    (2 * _REF, "doubled"),
    (torch.tensor([2.0, -4.0, 6.0, 1.1]), "wrong_value"),     # doubled but for one element
    (torch.tensor([2.0, -4.0, 6.0, 1.0]) + torch.tensor([0, 0, 0, 1e-3]), "wrong_value"),
    (-_REF, "sign_flipped"),
    (torch.tensor([-1.0, 2.0, -3.0, 0.5]), "wrong_value"),    # the sign flipped on three of four
    (torch.abs(_REF), "wrong_value"),                          # right size, signs partly wrong
    (3 * _REF, "scaled"),
    (3 * _REF + torch.tensor([0, 0, 0.01, 0]), "wrong_value"), # nearly 3 times: not a scale
    (torch.zeros(4), "all_zeros"),
    (torch.tensor([0.0, 0.0, 0.0, 0.5]), "wrong_value"),      # zeros but for one element
    (_REF + 1, "wrong_value"),                                 # an offset is not a scale
])
def test_a_diagnosis_is_named_only_when_the_answer_has_it(student, tag):
    finding = compare_tensor_values(student, _REF, "the gradient", Tolerance())
    assert finding.tag == tag, finding


def test_doubled_needs_every_element_doubled_where_the_reference_is_zero_too():
    reference = torch.tensor([0.0, 1.0, 2.0])
    assert compare_tensor_values(torch.tensor([0.0, 2.0, 4.0]), reference, "g", Tolerance()).tag == "doubled"
    assert compare_tensor_values(torch.tensor([1.0, 2.0, 4.0]), reference, "g", Tolerance()).tag == "wrong_value"


def test_one_number_is_not_called_scaled():
    one = torch.tensor([3.0])
    assert compare_tensor_values(torch.tensor([4.0]), one, "the loss", Tolerance()).tag == "wrong_value"
    assert compare_tensor_values(torch.tensor([6.0]), one, "the loss", Tolerance()).tag == "doubled"
    assert compare_tensor_values(torch.tensor([-3.0]), one, "the loss", Tolerance()).tag == "sign_flipped"


def test_a_near_miss_in_the_bank_must_get_plain_feedback():
    # WrongAnswer(..., expect="wrong_value") is how a bank states "no diagnosis here";
    # the bank test then proves the feedback names none.
    make(wrong_answers=(WrongAnswer(lambda x: 6 * x ** 2 + 0.1, expect="wrong_value"),))
    result = check("99.sample", lambda x: 6 * x ** 2 + 0.1)
    assert result.misconception == "wrong_value"
    assert "twice" not in " ".join(result.messages) and "elements differ" in result.messages[0]


# --- feedback is Markdown: backticks show as code in the HTML ------------------------------

def test_backticks_render_as_code_and_everything_else_is_escaped():
    assert inline_code_html("use `x < y` & <b>bold</b>") == (
        "use <code>x &lt; y</code> &amp; &lt;b&gt;bold&lt;/b&gt;")
    assert inline_code_html("a lone ` backtick") == "a lone ` backtick"
    assert inline_code_html("`a` and `b` but ` c") == "<code>a</code> and <code>b</code> but ` c"


def test_a_result_shows_its_inline_code_as_code():
    make(title="<script>", method=uses_autograd())
    page = check("99.sample", _cube_formula)._repr_html_()
    assert "<code>backward()</code>" in page and "<code>torch.autograd.grad</code>" in page
    assert "`" not in page and "<script>" not in page and "&lt;script&gt;" in page
    make("99.hinted", hints=("call `x.backward()` & read <x.grad>",))
    assert "call <code>x.backward()</code> &amp; read &lt;x.grad&gt;" in hint("99.hinted")._repr_html_()


def _micro_batch_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(12, generator=generator, dtype=torch.float64), 3 if seed % 2 else 4)


def _per_micro_batch(x, k):
    x = x.detach().requires_grad_()
    for part in x.chunk(k):
        (part ** 3).sum().backward()
    return x.grad


def test_backward_calls_can_depend_on_the_case():
    method = backward_calls(lambda x, k: k, name="one backward pass per micro-batch")
    make(reference=_per_micro_batch, inputs=_micro_batch_inputs, method=method)
    assert check("99.sample", _per_micro_batch).status == "passed"
    result = check("99.sample", lambda x, k: _two_micro_batches(x))
    assert result.misconception == "backward_calls"
    assert "asks for one backward pass per micro-batch" in result.messages[0]


def test_building_a_distributed_sampler_is_a_recorded_fact():
    from torch.utils.data import DistributedSampler

    def by_hand(n):
        return torch.arange(n)[0::2].double()

    def through_sampler(n):
        return torch.tensor(list(DistributedSampler(range(n), num_replicas=2, rank=0, shuffle=False))).double()

    from autograd_lab.checking.facts import watch
    for answer, built in ((by_hand, 0), (through_sampler, 1)):
        with watch([]) as watched:
            answer(6)
        assert watched.facts["samplers_built"] == built
    assert DistributedSampler.__init__.__name__ == "__init__"     # restored after the watch


def test_building_a_grad_scaler_is_a_recorded_fact():
    from autograd_lab.checking.facts import watch
    before = torch.amp.GradScaler.__init__
    for build, built in ((lambda: None, 0), (lambda: torch.amp.GradScaler("cpu"), 1),
                         (lambda: [torch.amp.GradScaler("cpu", init_scale=s) for s in (1.0, 2.0)], 2)):
        with watch([]) as watched:
            build()
        assert watched.facts["scalers_built"] == built
    assert torch.amp.GradScaler.__init__ is before                  # restored after the watch


def _tiny_tanh(label):
    """d/dx [tanh(x) x] by the tiny engine, its tanh node labelled ``label``; ``one_graph``: one backward for all."""
    import math

    from autograd_lab.labs.tiny_engine import Value

    def tanh(a):
        out = Value(math.tanh(a.data), (a,), label)

        def _backward():
            a.grad += (1 - out.data ** 2) * out.grad
        out._backward = _backward
        return out

    def per_input(xs):
        grads = []
        for x in xs.tolist():
            a = Value(x)
            (tanh(a) * a).backward()
            grads.append(a.grad)
        return torch.tensor(grads, dtype=xs.dtype)

    def one_graph(xs):
        leaves = [Value(x) for x in xs.tolist()]
        total = Value(0.0)
        for a in leaves:
            total = total + tanh(a) * a
        total.backward()
        return torch.tensor([a.grad for a in leaves], dtype=xs.dtype)
    return per_input, one_graph


def test_the_tiny_engine_method_counts_the_answers_own_nodes_whatever_their_label():
    from autograd_lab.grading import release
    from autograd_lab.checking.facts import watch
    from autograd_lab.checking import tiny_engine_op
    from autograd_lab.labs.tiny_engine import Value

    per_input, one_graph = _tiny_tanh("tanh")
    make(reference=per_input, method=tiny_engine_op("tanh"))
    assert check("99.sample", per_input).status == "passed"
    assert check("99.sample", one_graph).status == "passed"      # one backward over every input: still the engine
    for label in ("Tanh", "", "my tanh"):                        # issue 20: a label is a name, not a method
        assert check("99.sample", _tiny_tanh(label)[0]).status == "passed", label
    x = torch.tensor([0.5, -1.0], dtype=torch.float64)
    with watch([x]) as watched:
        a = Value(0.5)
        out = a.exp()
        out.backward()
        out.backward()          # the same node twice counts once: distinct nodes, not calls
    assert watched.facts["tiny_engine_runs"] == 2 and watched.facts["tiny_backwards"] == {"exp": 1, "": 1}
    assert watched.facts["tiny_own_backwards"] == 0                  # exp is the engine's own op, not the answer's
    assert Value.backward.__qualname__ == "Value.backward" and out._backward.__name__ == "_backward"  # restored
    # the release carries it as its factory and argument, rebuilt there
    assert release.method_data("99.sample", tiny_engine_op("tanh")) == {"factory": "tiny_engine_op",
                                                                        "kwargs": {"op": "tanh"}}


def _tanh_without_backward(xs):
    """The tanh node is built, but its `_backward` is never attached: the engine runs the do-nothing default."""
    import math

    from autograd_lab.labs.tiny_engine import Value
    grads = []
    for x in xs.tolist():
        a = Value(x)
        out = Value(math.tanh(a.data), (a,), "tanh")
        (out * a).backward()
        grads.append(a.grad)
    return torch.tensor(grads, dtype=xs.dtype)


def test_a_forgotten_backward_closure_is_named():
    from autograd_lab.checking import tiny_engine_op
    per_input, _ = _tiny_tanh("tanh")
    make(reference=per_input, method=tiny_engine_op("tanh"))
    result = check("99.sample", _tanh_without_backward)
    assert result.misconception == "typed_formula"
    assert "has no `_backward` of its own" in result.messages[0] and "out._backward = _backward" in result.messages[0]
    result = check("99.sample", lambda xs: torch.tanh(xs) + xs * (1 - torch.tanh(xs) ** 2))
    assert "never called the tiny engine's `backward()`" in result.messages[0]


# --- the tape: method rules judged from what ran (issue 20) -------------------------------

from autograd_lab.checking import (checkpoint_used, no_autograd, no_distributed_sampler, no_forward_mode,  # noqa: E402
                                   no_grad_scaler, no_library, no_optimizer, no_torch_func, own_function,
                                   uses_autograd)
from autograd_lab.checking.tape import Tape  # noqa: E402


def test_uses_autograd_accepts_every_autograd_and_refuses_a_backward_for_show():
    make(method=uses_autograd())
    autograd_answers = {
        "torch.func.grad": lambda x: torch.func.grad(lambda t: (t ** 3).sum())(x),
        "torch.func.vjp": lambda x: torch.func.vjp(lambda t: t ** 3, x)[1](torch.ones_like(x))[0],
        "torch.func.jacrev": lambda x: torch.func.jacrev(lambda t: (t ** 3).sum())(x),
        "torch.func.jacfwd (forward mode)": lambda x: torch.func.jacfwd(lambda t: (t ** 3).sum())(x),
        "a copy of .grad": lambda x: cube_grad(x).clone() * 1.0,
    }
    for name, answer in autograd_answers.items():   # a first torch.func call imports torch._dynamo: slow
        assert check("99.sample", answer, timeout=120).status == "passed", name

    def for_show(x):
        leaf = x.detach().requires_grad_()
        (leaf ** 3).sum().backward()         # a backward pass whose result is thrown away
        return 3 * x ** 2
    result = check("99.sample", for_show)
    assert result.misconception == "typed_formula"
    assert "was not computed from that pass's result" in result.messages[0]


def test_an_engine_object_taken_before_the_check_is_still_seen():
    from torch.autograd.variable import Variable
    engine = Variable._execution_engine      # bound before the check replaces it

    def through_the_alias(x):
        leaf = x.detach().requires_grad_()
        (out,) = engine.run_backward(((leaf ** 3).sum(),), (torch.ones((), dtype=x.dtype),), False, False, (leaf,), False)
        return out
    make(method=no_autograd())
    result = check("99.sample", through_the_alias)
    assert result.misconception == "used_autograd", result
    make("99.ok", method=no_autograd(), reference=lambda x: 3 * x ** 2)
    assert check("99.ok", lambda x: 3 * x ** 2).status == "passed"


def test_no_autograd_and_no_forward_mode_see_dual_tensors_and_jvp():
    import torch.autograd.forward_ad as fwAD

    def dual(x):
        with fwAD.dual_level():
            out = fwAD.make_dual(x, torch.ones_like(x)) ** 3
            return fwAD.unpack_dual(out).tangent
    for method, tag in ((no_autograd(), "used_autograd"), (no_forward_mode(), "forward_mode")):
        make(method=method, reference=lambda x: 3 * x ** 2)
        assert check("99.sample", dual).misconception == tag
        assert check("99.sample", lambda x: torch.func.jvp(lambda t: t ** 3, (x,), (torch.ones_like(x),))[1],
                     timeout=120).misconception == tag
        assert check("99.sample", lambda x: 3 * x ** 2).status == "passed"


def test_no_torch_func_sees_every_transform_but_not_plain_autograd():
    make(method=no_torch_func())
    assert check("99.sample", cube_grad).status == "passed"
    for answer in (lambda x: torch.func.grad(lambda t: (t ** 3).sum())(x),
                   lambda x: torch.func.vmap(lambda t: 3 * t ** 2)(x)):
        assert check("99.sample", answer, timeout=120).misconception == "used_torch_func"


def _scales(init_scale, flags, interval):
    scale, clean, out = init_scale, 0, []
    for flag in flags:
        scale, clean = (scale * 0.5, 0) if flag else (scale, clean + 1)
        if clean == interval:
            scale, clean = scale * 2.0, 0
        out.append(scale)
    return out


def _flags(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    return 2.0 ** 16, (torch.rand(10, generator=generator) < 0.3).tolist(), 2 + seed % 2


_BUILT_EARLIER = torch.amp.GradScaler("cpu")


def _scaler_by(make_scaler):
    def answer(init_scale, flags, interval):
        scaler = make_scaler(init_scale, interval)
        weight = torch.nn.Parameter(torch.ones(1))
        optimizer = torch.optim.SGD([weight], lr=0.0)
        out = []
        for flag in flags:
            optimizer.zero_grad()
            scaler.scale(weight.sum()).backward()
            if flag:
                weight.grad.fill_(float("inf"))
            scaler.step(optimizer)
            scaler.update()
            out.append(scaler.get_scale())
        return out
    return answer


def _deepcopied(init_scale, interval):
    import copy
    scaler = copy.deepcopy(_BUILT_EARLIER)
    scaler._init_scale, scaler._scale, scaler._growth_interval = init_scale, None, interval
    return scaler


def _private_kernel(init_scale, flags, interval):
    scale, tracker, out = torch.tensor([init_scale]), torch.zeros(1, dtype=torch.int32), []
    for flag in flags:
        torch._amp_update_scale_(scale, tracker, torch.tensor([float(flag)]), 2.0, 0.5, interval)
        out.append(scale.item())
    return out


_KEPT = []


def _made_by_new(init_scale, flags, interval):
    _KEPT.append(object.__new__(torch.amp.GradScaler))     # built without __init__, kept
    return _scales(init_scale, flags, interval)


def _new_and_used(init_scale, flags, interval):
    scaler = object.__new__(torch.amp.GradScaler)          # built without __init__, then used
    scaler.__dict__.update(_BUILT_EARLIER.__dict__, _init_scale=init_scale, _scale=None, _growth_interval=interval)
    return _scaler_by(lambda s, i: scaler)(init_scale, flags, interval)


def test_no_grad_scaler_watches_every_amp_kernel_of_this_torch():
    """Every GradScaler kernel spelling (in place, out of place, ``.out``) dispatches an ``aten::_amp_*`` op."""
    from autograd_lab.checking.methods import AMP_KERNELS
    kernels = {schema.name for schema in torch._C._jit_get_all_schemas() if schema.name.startswith("aten::_amp_")}
    assert kernels and {f"op:{name}" for name in kernels} <= set(AMP_KERNELS) <= set(no_grad_scaler().watch)


def test_no_grad_scaler_sees_a_copy_a_private_kernel_and_new():
    make(reference=_scales, inputs=_flags, method=no_grad_scaler())
    # timeout=120 everywhere: the first scaler or optimizer step imports torch._dynamo, which took more
    # than check()'s default deadline on a loaded machine (this test failed once so; verdicts must not time out)
    assert check("99.sample", _scales, timeout=120).status == "passed"
    shortcuts = {
        "a real scaler": _scaler_by(lambda s, i: torch.amp.GradScaler("cpu", init_scale=s, growth_interval=i)),
        "deepcopy of a scaler built earlier": _scaler_by(_deepcopied),
        "the private kernel": _private_kernel,
        "object.__new__, kept": _made_by_new,
        "object.__new__, used": _new_and_used,
    }
    for name, answer in shortcuts.items():
        result = check("99.sample", answer, timeout=120)   # a first optimizer step imports torch._dynamo: slow
        assert result.misconception == "used_grad_scaler", (name, result)
    assert "`GradScaler` was built" in check("99.sample", _made_by_new, timeout=120).messages[0]


def _shard(n, world_size, rank):
    total = -(-n // world_size) * world_size
    return (list(range(n)) * 2)[:total][rank::world_size]


def _shard_inputs(seed, hidden):
    return 7 + seed, 2 + seed % 2, seed % 2


def _sampler_state(n, world_size, rank):
    import types
    return types.SimpleNamespace(shuffle=False, dataset=range(n), drop_last=False, num_replicas=world_size,
                                 total_size=-(-n // world_size) * world_size, num_samples=-(-n // world_size),
                                 rank=rank, seed=0, epoch=0)


def test_no_distributed_sampler_sees_its_code_however_it_is_reached():
    import inspect
    import textwrap
    import threading
    import types
    from torch.utils.data import DistributedSampler

    make(reference=_shard, inputs=_shard_inputs, method=no_distributed_sampler())
    iterate = DistributedSampler.__iter__
    code_copy = types.FunctionType(iterate.__code__, iterate.__globals__)
    namespace = dict(iterate.__globals__)
    exec(textwrap.dedent(inspect.getsource(iterate)), namespace)      # its source, compiled again
    recompiled = namespace["__iter__"]

    def in_a_thread(n, world_size, rank):
        box = []
        thread = threading.Thread(target=lambda: box.append(_shard(n, world_size, rank)))
        thread.start()
        thread.join()
        return box[0]
    shortcuts = {
        "its __iter__ on a namespace": lambda *a: list(iterate(_sampler_state(*a))),
        "a copy of its code": lambda *a: list(code_copy(_sampler_state(*a))),
        "its source compiled again": lambda *a: list(recompiled(_sampler_state(*a))),
        "a thread": in_a_thread,
    }
    for name, answer in shortcuts.items():
        assert check("99.sample", answer).misconception == "used_sampler", name
    assert "started another thread" in check("99.sample", in_a_thread).messages[0]
    assert check("99.sample", _shard).status == "passed"


def _sgd_list(params, lr):
    with torch.no_grad():
        for p in params:
            p.sub_(lr * p.grad)


def _sgd_list_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    p = torch.randn(3, generator=generator).requires_grad_()
    p.grad = torch.randn(3, generator=generator)
    return [p], 0.1


def test_no_optimizer_sees_the_class_and_the_functional_form():
    from torch.optim.sgd import sgd as functional_sgd

    make(reference=_sgd_list, inputs=_sgd_list_inputs, compare=("args",), modifies=("params:values",), method=no_optimizer())
    assert check("99.sample", _sgd_list).status == "passed"

    def by_class(params, lr):
        torch.optim.SGD(params, lr=lr).step()

    def by_function(params, lr):
        with torch.no_grad():
            functional_sgd(params, [p.grad for p in params], [None], lr=lr, weight_decay=0, momentum=0,
                           dampening=0, nesterov=False, maximize=False)
    for answer in (by_class, by_function):
        assert check("99.sample", answer, timeout=120).misconception == "used_optimizer"


def test_no_library_bans_functions_ops_and_modules_by_what_ran():
    import torch.nn.functional as F
    method = no_library(F.softplus, "aten::softplus", name="softplus written by hand")
    assert method.watch == ("code:torch._C._nn:softplus", "op:aten::softplus")
    make(reference=lambda x: torch.log1p(torch.exp(x)), method=method)
    assert check("99.sample", lambda x: torch.log1p(torch.exp(x))).status == "passed"
    alias = F.softplus
    for answer in (alias, lambda x: torch.ops.aten.softplus(x, 1, 20)):
        result = check("99.sample", answer)
        assert result.misconception == "used_library" and "softplus written by hand" in result.messages[0]


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


class _SquareByAutograd(_Square):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            return torch.autograd.grad(leaf * leaf, leaf, grad_output)[0]


class _Tanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * (1 - y * y)


class _TanhByKernel(_Tanh):
    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors       # PyTorch's own derivative kernel of tanh, not one's own
        return torch.ops.aten.tanh_backward(grad_output, y)


def _leaf_vector(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(4, generator=generator, dtype=torch.float64).requires_grad_(),)


def test_own_function_needs_a_function_whose_backward_computes_the_derivative():
    make(reference=_Square, inputs=_leaf_vector, compare=("value", "grad"), method=own_function())
    assert check("99.sample", _Square).status == "passed"
    not_a_function = check("99.sample", lambda x: x * x)
    assert not_a_function.misconception == "own_function" and "not a `torch.autograd.Function`" in not_a_function.messages[0]
    asks_autograd = check("99.sample", _SquareByAutograd)
    assert asks_autograd.misconception == "own_function" and "runs autograd" in asks_autograd.messages[0]
    make("99.tanh", reference=_Tanh, inputs=_leaf_vector, compare=("value", "grad"), method=own_function())
    assert check("99.tanh", _Tanh).status == "passed"
    by_kernel = check("99.tanh", _TanhByKernel)
    assert by_kernel.misconception == "own_function" and "derivative kernels" in by_kernel.messages[0]


def _blocks(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    depth = 3 + seed % 2
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(depth)])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) / 2)
    return model, torch.randn(2, 4, generator=generator)


def _checkpointed(model, x, *, per_block=True, backward_through=True):
    from torch.utils.checkpoint import checkpoint
    h = x
    for block in (model if per_block else [model]):
        h = checkpoint(block, h, use_reentrant=False)
    loss = h.pow(2).mean() if backward_through else model(x).pow(2).mean()
    loss.backward()
    return loss.detach()


def test_checkpoint_used_counts_checkpoints_and_their_recomputation():
    make(reference=_checkpointed, inputs=_blocks, compare=("value", "args"), modifies=("model:grad",),
         method=checkpoint_used())
    assert check("99.sample", _checkpointed).status == "passed"
    one = check("99.sample", lambda m, x: _checkpointed(m, x, per_block=False))
    assert one.misconception == "checkpoint" and "called `checkpoint` 1 time" in one.messages[0]
    for_show = check("99.sample", lambda m, x: _checkpointed(m, x, backward_through=False))
    assert for_show.misconception == "checkpoint" and "recomputed 0 of your" in for_show.messages[0]


def test_a_recorder_switched_off_fails_the_method():
    import sys as system
    make(method=no_torch_func())          # a ban: the profile hook runs (a requirement runs without it)

    def switches_off(x):
        system.setprofile(None)
        return cube_grad(x)
    result = check("99.sample", switches_off)
    assert result.status == "failed" and "switched off one of the checker's recorders" in result.messages[0]

    def pops_the_mode(x):
        from torch.utils._python_dispatch import _pop_mode
        _pop_mode()
        return cube_grad(x)
    assert "switched off" in check("99.sample", pops_the_mode).messages[0]
    make("99.required", method=uses_autograd())
    assert "switched off" in check("99.required", pops_the_mode).messages[0]

    def own_mode_then_pops_one_more(x):
        from torch.utils._python_dispatch import _pop_mode
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False):
            _pop_mode()                   # its own mode: fine; the exit then pops a checker's mode
            return cube_grad(x)
    assert "switched off" in check("99.sample", own_mode_then_pops_one_more).messages[0]

    def own_mode(x):                      # a dispatch mode of the answer's own pushes and pops itself
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False):
            return cube_grad(x)
    assert check("99.sample", own_mode).status == "passed"

    def behind_a_guard(x):                # no profile event reports entering a C guard: the answer names it
        with getattr(torch._C, "_DisableTorchDispatch")():
            return cube_grad(x)
    assert "switched off" in check("99.sample", behind_a_guard).messages[0]

    from autograd_lab.checking import tape as recorders   # library code (torch's, the course's) may use one
    assert recorders._names_a_guard(behind_a_guard.__code__) == "torch._C._DisableTorchDispatch"
    assert recorders._names_a_guard(recorders._small_steps.__code__) is None
    assert check("99.sample", cube_grad).status == "passed"          # and the session is whole again
    assert system.getprofile() is None and not torch._C._len_torch_dispatch_stack()


def test_the_tape_leaves_nothing_behind_and_a_profiler_keeps_running():
    import cProfile
    from torch.autograd.variable import Variable
    engine = Variable._execution_engine
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        with Tape(("code:torch.optim",)) as tape:
            cube_grad(torch.ones(3))
    finally:
        profiler.disable()
    assert Variable._execution_engine is engine and not torch._C._len_torch_dispatch_stack()
    assert tape.facts()["engine_runs"] == 1 and tape.facts()["tape_intact"]
    import gc
    assert gc.isenabled()


def test_every_factory_travels_in_a_release_and_records_the_same():
    from autograd_lab.checking import methods, public
    from autograd_lab.grading import release
    made = [uses_autograd(), no_autograd(), no_forward_mode(), no_torch_func(), no_grad_scaler(), no_optimizer(),
            no_distributed_sampler(), own_function(), checkpoint_used(), checkpoint_used(per=3),
            no_library(torch.nn.functional.softplus, "aten::softplus_backward", name="by hand"),
            checking.backward_calls(2), checking.no_jacobian(limit="input"), checking.tiny_engine_op("tanh"),
            checking.no_data_attribute()]
    for method in made:
        data = release.method_data("99.sample", method)
        rebuilt = public.method_from(data)
        assert (rebuilt.name, rebuilt.tag, rebuilt.watch, rebuilt.grad_phase) == (
            method.name, method.tag, method.watch, method.grad_phase), method.name
    assert set(methods.FACTORIES) >= {"uses_autograd", "no_library", "own_function", "checkpoint_used"}
    custom = checking.Method(name="no mm", holds=lambda facts: not facts["ran"], message="m", tag="t",
                             watch=("op:aten::mm",))
    rebuilt = public.method_from(release.method_data("99.sample", custom))
    assert rebuilt.watch == ("op:aten::mm",) and rebuilt.kept({"ran": {"op:aten::mm": 1}}, ()) is False


# --- arguments stay untouched (issue 20 point 3) -------------------------------------------

def test_an_answer_that_changes_its_input_fails_and_says_which():
    # under no_grad: some of 00.cube_grad's cases pass an x that requires grad (round 4, A5)
    def zeroes_the_caller(x):
        g = cube_grad(x)
        with torch.no_grad():
            x.zero_()
        return g

    def same_values_in_place(x):
        with torch.no_grad():
            x.mul_(1.0)                 # the same numbers, but the version counter moved
        return cube_grad(x)

    def through_data(x):
        x.data[0] = 0.0                 # a write autograd cannot see: the values tell
        return cube_grad(x)

    def sets_requires_grad(x):
        x.requires_grad_()
        return cube_grad(x)
    for answer, what in ((zeroes_the_caller, "its values"), (same_values_in_place, "its values"),
                         (through_data, "its values"), (sets_requires_grad, "its `requires_grad`")):
        result = check("00.cube_grad", answer)
        assert result.misconception == "modified_input", answer.__name__
        assert f"`x` ({what}" in result.messages[0] and "leave the arguments as they were" in result.messages[0]


def test_grads_modules_lists_and_optimizers_are_arguments_too():
    from autograd_lab.checking import untouched
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    items = [torch.zeros(2)]
    before = untouched.snapshot((model, optimizer, items))
    model(torch.randn(4, 2)).sum().backward()          # fills .grad and the running statistics
    model.eval()
    optimizer.param_groups[0]["lr"] = 1.0
    items.append(1)
    found = {(entry["argument"], entry["path"], entry["what"]) for entry in untouched.changes(before)}
    assert (0, "#0.0.weight", "grad") in found and (0, "#0.1.running_mean", "values") in found
    assert (0, "#0", "training") in found and (1, "#1", "state") in found and (2, "#2", "items") in found


def test_an_exercise_declares_what_its_answer_may_change():
    make(reference=_sgd_list, inputs=_sgd_list_inputs, compare=("args",), modifies=("params:values",))
    assert check("99.sample", _sgd_list).status == "passed"

    def clears_grad_too(params, lr):
        _sgd_list(params, lr)
        for p in params:
            p.grad = None
    result = check("99.sample", clears_grad_too)
    assert result.misconception == "modified_input" and "`params[0]` (its `.grad`)" in result.messages[0]
    with pytest.raises(ValueError, match="modifies="):
        Exercise(id="99.a", title="t", answer_name="a", reference=_sgd_list, inputs=_sgd_list_inputs, compare=("args",))
    with pytest.raises(ValueError, match="not an argument of the reference"):
        Exercise(id="99.a", title="t", answer_name="a", reference=_sgd_list, inputs=_sgd_list_inputs, modifies=("model",))


# --- feedback that names the cause (issue 20 point 5, issue 26) -----------------------------

def test_an_error_names_the_students_line_and_the_error_it_was_raised_while_handling():
    def parse_anomaly(x):
        try:
            x.detach().sum().backward()                      # forgot requires_grad_()
        except RuntimeError as error:
            return str(error).split("'")[1]

    result = check("00.cube_grad", parse_anomaly)
    message = result.messages[0]
    assert result.status == "error"
    assert "IndexError: list index out of range (in `parse_anomaly`, line" in message
    assert "`return str(error).split(\"'\")[1]`" in message
    assert "raised while handling RuntimeError: element 0 of tensors does not require grad" in message
    assert "a `requires_grad_()` is missing" in message                       # the usual cause, named
    assert "site-packages" not in message and "torch/" not in message


def test_only_the_students_own_warnings_are_shown_with_their_line():
    def anomaly(x):
        leaf = x.detach().requires_grad_()
        with torch.autograd.detect_anomaly(check_nan=True):
            (leaf ** 3).sum().backward()
        return leaf.grad

    result = check("00.cube_grad", anomaly)
    warned = [m for m in result.messages if m.startswith("Your code warned")]
    assert warned and all("Anomaly Detection has been enabled" in m for m in warned)
    assert "with torch.autograd.detect_anomaly(check_nan=True):" in warned[0]
    text = " ".join(result.messages)
    assert "ipykernel" not in text and "<frozen" not in text and "File \"" not in text


def test_feedback_markdown_renders_in_the_notebook():
    make(misconceptions=(Misconception("scaled_by_k", "The loss is *scaled* by `k`, *in a row*.",
                                       lambda s, r, a: True),))
    html = check("99.sample", lambda x: 2 * x)._repr_html_()
    assert "<em>scaled</em>" in html and "<code>k</code>" in html and "*in a row*" not in html


def test_a_mistyped_id_is_one_line_with_the_closest_ids():
    with pytest.raises(KeyError) as raised:
        check("00.cube_gard", cube_grad)
    assert str(raised.value) == "No exercise '00.cube_gard'. Did you mean '00.cube_grad' or '00.needs_grad'?"
    assert raised.value._render_traceback_() == [f"UnknownExercise: {raised.value}"]
    with pytest.raises(KeyError, match="this notebook's are '03.accumulated_grad'"):
        hint("03.zzz")


def test_no_hint_while_graded(monkeypatch):
    make()
    monkeypatch.setenv("AUTOGRAD_LAB_GRADING", "1")
    given = hint("99.sample")
    assert given.text == "" and "turned off while the assignment is graded" in repr(given)


def test_a_checker_that_cannot_compare_an_answer_never_shows_its_own_crash():
    def crashing(student, reference, args):
        raise IndexError("inside a detector")
    make(misconceptions=(Misconception("crash", "never shown", crashing),))
    result = check("99.sample", lambda x: 2 * cube_grad(x))
    assert result.misconception == "doubled" and "IndexError" not in repr(result)


# --- predictions: which entries are wrong, never what they should be -------------------------

def test_a_failed_prediction_never_shows_the_expected_value():
    make("99.bytes", kind="value", answer_name="saved_bytes", reference=lambda: 12288, solution_code="saved_bytes = 1",
         inputs=None)
    result = check("99.bytes", 4096)
    assert result.status == "failed" and "12288" not in repr(result) and "not the expected answer" in result.messages[0]
    make("99.dict", kind="value", answer_name="d", reference=lambda: {"a": True, "b": 6, "c": "detach"},
         solution_code="d = 1", inputs=None)
    result = check("99.dict", {"a": False, "b": 12, "c": "detach"})
    assert "d: not the expected answer (2 of 3 entries wrong; which ones is not said)" in result.messages[0]
    assert "6" not in result.messages[0] and "doubled" not in repr(result) and "'a'" not in result.messages[0]
    ints = check("99.dict", {"a": 1, "b": 6, "c": "detach"})      # the form is wrong: no count beside it
    assert ints.status == "failed" and "of 3" not in repr(ints) and "not of the kind" in ints.messages[0]
    make("99.tensor", kind="value", answer_name="g", reference=lambda: torch.tensor([3.0, 0.0, -1.0]),
         solution_code="g = 1", inputs=None)
    flipped = check("99.tensor", torch.tensor([-3.0, 0.0, 1.0]))
    assert flipped.misconception == "wrong_value" and "opposite sign" not in repr(flipped)


# --- a derivative laundered through a trivial backward pass (issue 20, round 3) -----------------

from autograd_lab.checking import autograd_derivative  # noqa: E402


def _fresh_leaf(x):
    return x.detach().requires_grad_()


def _backward_then_grad(loss_of):
    def answer(x):
        t = _fresh_leaf(x)
        loss_of(t, x).backward()
        return t.grad
    return answer


_CORRECT_CUBES = {
    "sum": _backward_then_grad(lambda t, x: (t ** 3).sum()),
    "x*x*x": _backward_then_grad(lambda t, x: (t * t * t).sum()),
    "ones cotangent": lambda x: (lambda t: ((t ** 3).backward(torch.ones_like(t)), t.grad)[1])(_fresh_leaf(x)),
    "leaf as x * 1.0": lambda x: (lambda t: ((t ** 3).sum().backward(), t.grad)[1])((x * 1.0).requires_grad_()),
    "leaf from tolist": lambda x: (lambda t: ((t ** 3).sum().backward(), t.grad)[1])(
        torch.tensor(x.tolist(), dtype=x.dtype, requires_grad=True)),
    "autograd.grad": lambda x: (lambda t: torch.autograd.grad((t ** 3).sum(), t)[0])(_fresh_leaf(x)),
    "torch.func.grad": lambda x: torch.func.grad(lambda t: (t ** 3).sum())(x),
    "torch.func.vjp": lambda x: torch.func.vjp(lambda t: t ** 3, x)[1](torch.ones_like(x))[0],
    "functional.vjp": lambda x: torch.autograd.functional.vjp(lambda t: (t ** 3).sum(), x)[1],
}
_LAUNDERED_CUBES = {
    "leaf's gradient=": lambda x: (lambda t: (t.backward(gradient=3 * x ** 2), t.grad)[1])(_fresh_leaf(x)),
    "(t * 1) gradient=": lambda x: (lambda t: ((t * 1).backward(gradient=3 * x.detach() ** 2), t.grad)[1])(
        _fresh_leaf(x)),
    "weight": _backward_then_grad(lambda t, x: (t * (3 * x.detach() ** 2)).sum()),
    "weight requiring grad": _backward_then_grad(lambda t, x: (t * (3 * x.detach() ** 2).requires_grad_() * 1).sum()),
    "raw x as weight": _backward_then_grad(lambda t, x: (t * 3 * x * x).sum()),
    "no_grad weight": _backward_then_grad(lambda t, x: (t * torch.no_grad()(lambda: 3 * t ** 2)()).sum()),
    ".data weight": _backward_then_grad(lambda t, x: (t * (3 * t.data ** 2)).sum()),
    "0 * t * t decoy": _backward_then_grad(lambda t, x: (t * (3 * x.detach() ** 2) + 0 * t * t).sum()),
    "tolist weight": _backward_then_grad(
        lambda t, x: (t * torch.tensor([3 * a * a for a in x.tolist()], dtype=x.dtype) + 0 * t * t).sum()),
    "numpy weight": _backward_then_grad(lambda t, x: (t * torch.from_numpy(3 * x.numpy() ** 2)).sum()),
    "python floats": _backward_then_grad(lambda t, x: sum(t[i] * (3 * a * a) for i, a in enumerate(x.tolist()))),
    "root value fixed": _backward_then_grad(
        lambda t, x: (t * (3 * x.detach() ** 2)).sum() + ((x ** 3).sum() - (t * 3 * x.detach() ** 2).sum()).detach()),
    ".grad changed afterwards": lambda x: (lambda t: (t.sum().backward(), t.grad.mul_(3 * x ** 2))[1])(_fresh_leaf(x)),
}


def test_a_derivative_laundered_through_a_backward_pass_is_refused_and_correct_autograd_is_not():
    make(method=(uses_autograd(), autograd_derivative()))
    for name, answer in _CORRECT_CUBES.items():
        assert check("99.sample", answer).status == "passed", name
    for name, answer in _LAUNDERED_CUBES.items():
        result = check("99.sample", answer)
        assert result.misconception == "laundered_formula", (name, repr(result))
        assert "derivative taken by autograd" in result.messages[0], name
    # what the tape cannot see (docs/authoring-exercises.md): Python floats with a decoy that reads the leaf
    decoyed = _backward_then_grad(
        lambda t, x: sum(t[i] * (3 * a * a) for i, a in enumerate(x.tolist())) + (0 * t * t).sum())
    assert check("99.sample", decoyed).status == "passed"


def test_data_other_than_the_differentiated_input_may_be_a_weight_or_a_cotangent():
    def vjp_inputs(seed, hidden):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(3, 2, generator=g, dtype=torch.float64), torch.randn(2, generator=g, dtype=torch.float64),
                torch.randn(3, generator=g, dtype=torch.float64))

    def reference(W, x, v):
        W = W.detach().requires_grad_()
        return torch.autograd.grad(torch.tanh(W @ x), W, grad_outputs=v)[0]

    def weighted(W, x, v):
        W = W.detach().requires_grad_()
        (torch.tanh(W @ x) * v).sum().backward()
        return W.grad

    def laundered(W, x, v):
        Wl = W.detach().requires_grad_()
        (Wl @ x).backward(gradient=v * (1 - torch.tanh(W @ x) ** 2))
        return Wl.grad

    def wrt_x(W, x, v):              # a wrong tensor differentiated: the values say so, not the ledger
        x = x.detach().requires_grad_()
        return torch.autograd.grad(torch.tanh(W @ x), x, grad_outputs=v)[0]

    make("99.vjp", reference=reference, inputs=vjp_inputs, method=(uses_autograd(), autograd_derivative(wrt=0)))
    assert check("99.vjp", reference).status == "passed" and check("99.vjp", weighted).status == "passed"
    assert check("99.vjp", laundered).misconception == "laundered_formula"
    assert check("99.vjp", wrt_x).misconception != "laundered_formula"
    record = observe(catalog.get("99.vjp"), laundered, 0)
    assert record["facts"]["laundered"]["gradient"] >= 1     # plain data: judged in the grader's process


# --- adversarial round 8: a child process however it was started; exact arithmetic held (brief escapes-0737) ----

def test_a_child_process_is_an_escape_however_it_was_started():
    import ctypes
    system = ctypes.CDLL(None).system            # fetched before the call: calling it makes no profile event
    with Tape(("code:torch.optim",)) as tape:
        system(b"true")
    assert tape.facts()["escapes"] == ["a child process that ran and ended during the call"]
    with Tape((), profile=False) as tape:        # no profile hook at all: still seen, by the child's traces
        child = subprocess.Popen(["sleep", "30"])
    child.kill()
    child.wait()
    assert tape.facts()["escapes"] == ["a child process still there at the call's end"]
    with Tape(("code:torch.optim",)) as tape:
        ctypes.CDLL(None).getpid()              # a C function looked up by ctypes (libc's system() is one)
    assert "ctypes (a C library's function looked up)" in tape.facts()["escapes"]


def test_processes_started_outside_the_call_are_not_the_answers():
    before = subprocess.Popen(["sleep", "30"])   # the course's own (08 launches ranks outside any answer's call)
    try:
        with Tape(("code:torch.optim",)) as tape:
            torch.ones(3).sum()
    finally:
        before.kill()
        before.wait()
    assert tape.facts()["escapes"] == []


def test_exact_arithmetic_held_by_the_answer_is_recorded():
    from decimal import Decimal
    from fractions import Fraction

    def in_decimal(u):
        x = Decimal(u)                           # no call a profile hook reports: seen as a value the code holds
        return float((x + 1) / 3)

    def in_fractions(u):
        return float(Fraction(u) / 3)

    def in_floats(u):
        return (u + 1) / 3

    for function, expected in ((in_decimal, ["decimal"]), (in_fractions, ["fractions"]), (in_floats, [])):
        with Tape(("held:exact",)) as tape:
            function(0.5)
        assert tape.facts()["exact_arithmetic"] == expected, function.__name__
