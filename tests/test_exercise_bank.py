"""Every registered exercise is solvable, and every known-wrong answer is recognised.

Generic over the whole registry: a new ``autograd_lab_solutions/nbNN_*.py`` is
covered without editing this file.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograd_lab.checking.findings import MESSAGES
from autograd_lab.checking.source import solution_source
from autograd_lab.checking import all_exercises, judge, observe

EXERCISES = all_exercises()
WRONG = [(exercise, index) for exercise in EXERCISES for index in range(len(exercise.wrong_answers))]
TIMEOUT = 60.0  # generous: the shared CI machine is slow, and a loop must still not hang the suite


def _reference_answer(exercise):
    return exercise.reference() if exercise.kind == "value" else exercise.reference


def _all_seeds(exercise):
    return exercise.public_seeds + exercise.hidden_seeds


def _records(exercise, answer):
    return {seed: observe(exercise, answer, seed, timeout=TIMEOUT) for seed in _all_seeds(exercise)}


def _check_everything(exercise, answer):
    """Public and hidden cases, as the batch grader runs them."""
    return judge(exercise, _records(exercise, answer), _records(exercise, _reference_answer(exercise)))


def test_the_registry_holds_the_warm_ups():
    ids = [exercise.id for exercise in EXERCISES]
    assert {"00.cube_grad", "00.needs_grad"} <= set(ids)
    assert ids == sorted(ids)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda exercise: exercise.id)
def test_reference_passes_every_public_and_hidden_case(exercise):
    result = _check_everything(exercise, _reference_answer(exercise))
    assert result.status == "passed", repr(result)
    assert result.score == exercise.points
    assert result.public_total == len(exercise.public_seeds)
    assert result.hidden_total == len(exercise.hidden_seeds)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda exercise: exercise.id)
def test_every_exercise_is_documented_and_has_wrong_answers(exercise):
    assert exercise.title.strip() and exercise.hints, f"{exercise.id}: give it a title and at least one hint"
    assert exercise.wrong_answers, f"{exercise.id}: list the known-wrong answers it must recognise"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda exercise: exercise.id)
def test_the_source_that_solve_writes_passes_on_its_own(exercise):
    # The solved notebook runs this source in the exercise cell, where only the notebook's
    # imports exist, plus the names the exercise's `setup` declares.
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math}
    namespace.update(exercise.setup() if exercise.setup else {})
    exec(compile(solution_source(exercise), f"<solution of {exercise.id}>", "exec"), namespace)
    result = _check_everything(exercise, namespace[exercise.answer_name])
    assert result.status == "passed", repr(result)


def _names_the_misconception(exercise, tag, messages):
    text = " ".join(messages)
    custom = {m.tag: m.message for m in exercise.misconceptions}
    methods = {m.tag: f"This exercise asks for {m.name}: " for m in exercise.method}
    if tag in methods:  # the feedback names the method the answer broke
        return methods[tag] in text
    if tag in custom:
        return custom[tag] in text
    if tag in _DIAGNOSES:
        return _DIAGNOSES[tag] in text
    return any(phrase in text for phrase in _GENERIC_PHRASES[tag])


_GENERIC_PHRASES = {
    "structure": ("expected a", "keys differ", "expected a number"),
    "shape": ("expected shape",),
    "dtype": ("expected dtype",),
    "device": ("expected device",),
    "state": ("expected requires_grad", "expected is_leaf", "expected grad_fn", "expected .grad",
              "expected _version", "grad mode after", ": expected None, got a tensor"),
    "wrong_value": ("elements differ", "expected"),
    "gradcheck": ("gradcheck",),
    "error": ("raised",),
    "timeout": ("time limit",),
    "method": ("cannot be checked",),
}


@pytest.mark.parametrize("exercise,index", WRONG,
                         ids=[f"{e.id}-{i}-{e.wrong_answers[i].expect}" for e, i in WRONG])
def test_wrong_answer_fails_with_its_misconception(exercise, index):
    wrong = exercise.wrong_answers[index]
    result = _check_everything(exercise, wrong.answer)
    assert result.status != "passed", repr(result)
    assert result.misconception == wrong.expect, repr(result)
    assert result.score < exercise.points
    public = judge(exercise, {seed: observe(exercise, wrong.answer, seed, timeout=TIMEOUT)
                              for seed in exercise.public_seeds},
                   {seed: observe(exercise, _reference_answer(exercise), seed) for seed in exercise.public_seeds})
    if public.status != "passed":  # some mistakes only show on hidden shapes
        assert public.misconception == wrong.expect, repr(public)
        assert _names_the_misconception(exercise, wrong.expect, public.messages), repr(public)
    if wrong.expect == "wrong_value":  # a near miss: the feedback must state no cause it does not have
        text = " ".join(result.messages + public.messages)
        named = [tag for tag, phrase in _DIAGNOSES.items() if phrase in text]
        named += [m.tag for m in exercise.misconceptions if m.message in text]
        assert not named, f"{exercise.id}: a near miss was diagnosed as {named}: {result!r}"


# The fixed wording of each built-in diagnosis (compare.MESSAGES), as the student reads it.
_DIAGNOSES = {"none": "is None, but a tensor was expected", "all_zeros": "is all zeros",
              "doubled": "twice the expected one", "sign_flipped": "the opposite sign",
              "scaled": "times the expected one"}
assert all(phrase in MESSAGES[tag] for tag, phrase in _DIAGNOSES.items())


METHOD_EXERCISES = [exercise for exercise in EXERCISES if exercise.method]


@pytest.mark.parametrize("exercise", METHOD_EXERCISES, ids=lambda exercise: exercise.id)
def test_every_method_has_its_shortcut_in_the_bank(exercise):
    # The shortcut that gets the right value the forbidden way must be in the bank with the
    # method's tag; test_wrong_answer_fails_with_its_misconception then proves it is caught.
    tags = {wrong.expect for wrong in exercise.wrong_answers}
    missing = [method.name for method in exercise.method if method.tag not in tags]
    assert not missing, (f"{exercise.id}: add the shortcut that breaks {missing} to wrong_answers, "
                         f"as WrongAnswer(..., expect={exercise.method[0].tag!r})")
