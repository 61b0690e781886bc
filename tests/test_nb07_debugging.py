"""Notebook 07's exercises: each failed case's feedback names the one cause the answer has, in self-study
and in the student build (whose detectors are the bank's records, `grading/release.py`)."""

import io
import warnings

import pytest
import torch

from autograd_lab import checking
from autograd_lab.checking import public
from autograd_lab.checking.judge import judge
from autograd_lab.checking.observe import observe
from autograd_lab.grading import release


def _anomaly_mode(f, x):
    """A student's answer (adversarial round 2): anomaly mode's name, None when it raises nothing."""
    x = x.detach().clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                f(x).backward()
        except RuntimeError as error:
            return str(error).split("'")[1]
    return None


@pytest.fixture(scope="module")
def released():
    return _released("07.nan_source")


def _released(exercise_id):
    exercise = next(e for e in checking.all_exercises() if e.id == exercise_id)
    buffer = io.BytesIO()
    torch.save(release.public_spec(exercise, b"salt"), buffer)
    buffer.seek(0)
    return public.build_exercise(torch.load(buffer, weights_only=True))


def _case_messages(result):
    return [m for m in result.messages if m.startswith("Check ")]


def test_an_answer_that_returned_none_is_told_only_that(released, monkeypatch):
    for name in ("CI", "AUTOGRAD_LAB_STRICT"):
        monkeypatch.delenv(name, raising=False)
    records = {seed: observe(released, _anomaly_mode, seed, timeout=30) for seed in released.public_seeds}
    in_release = judge(released, records, checking.reference_records(released, released.public_seeds))
    in_self_study = checking.check("07.nan_source", _anomaly_mode)
    for result in (in_release, in_self_study):
        assert result.status == "failed" and result.misconception == "nan_only"
        named, returned_none = _case_messages(result)      # public case 1: PowBackward0; case 3: None
        assert "first node that produced a NaN" in named and "returned None" not in named
        assert "returned None" in returned_none and "You named" not in returned_none, returned_none


def test_each_released_case_of_the_bank_names_one_cause(released, monkeypatch):
    for name in ("CI", "AUTOGRAD_LAB_STRICT"):
        monkeypatch.delenv(name, raising=False)
    exercise = next(e for e in checking.all_exercises() if e.id == "07.nan_source")
    messages = {m.tag: m.message for m in exercise.misconceptions}
    for wrong in exercise.wrong_answers:
        if wrong.expect not in messages:
            continue
        records = {seed: observe(released, wrong.answer, seed, timeout=30) for seed in released.public_seeds}
        result = judge(released, records, checking.reference_records(released, released.public_seeds))
        for text in _case_messages(result):
            assert sum(message in text for message in messages.values()) == 1, (wrong.note or wrong.expect, text)


def test_a_second_backward_is_named_as_such_not_as_nodes_called_by_hand(released, monkeypatch):
    """Adversarial round 8 (07n_twice): backward with retain_graph=True, hooks, a second backward through the same graph."""
    for name in ("CI", "AUTOGRAD_LAB_STRICT"):
        monkeypatch.delenv(name, raising=False)
    exercise = next(e for e in checking.all_exercises() if e.id == "07.nan_source")
    messages = {m.tag: m.message for m in exercise.misconceptions}
    answers = {wrong.answer.__name__: wrong.answer for wrong in exercise.wrong_answers}
    for answer, said, not_said in ((answers["_backward_then_hooks"], "second_backward", "called_by_hand"),
                                   (answers["_by_hand"], "called_by_hand", "second_backward")):
        records = {seed: observe(released, answer, seed, timeout=30) for seed in released.public_seeds}
        in_release = judge(released, records, checking.reference_records(released, released.public_seeds))
        for result in (in_release, checking.check("07.nan_source", answer)):
            assert result.status == "error", result
            for text in _case_messages(result):
                assert messages[said] in text and messages[not_said] not in text, (answer.__name__, text)


def _in_list(model, optimizer):
    """A student's slip (adversarial round 2, and the lab's Pitfalls): `p in list` compares values."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    missing = [name for name, p in model.named_parameters() if p.requires_grad and p not in params]
    return {"missing": missing, "frozen": [], "stale": 0}


def test_comparing_tensors_with_in_is_named_in_the_student_build_too(monkeypatch):
    for name in ("CI", "AUTOGRAD_LAB_STRICT"):
        monkeypatch.delenv(name, raising=False)
    released = _released("07.coverage")
    records = {seed: observe(released, _in_list, seed, timeout=30) for seed in released.public_seeds}
    in_release = judge(released, records, checking.reference_records(released, released.public_seeds))
    for result in (in_release, checking.check("07.coverage", _in_list)):
        assert result.status == "error" and "compares tensors by their values" in result.messages[0], result
