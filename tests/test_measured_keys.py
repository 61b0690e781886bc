"""Answer keys are measured, not typed (docs/contracts.md §5).

Every value exercise (its answer is a value: a factor, a count, bytes, a dict of
predictions) has ``experiment=``: a function that runs the experiment its prompt
describes and returns the key.  Here the measured key must equal the typed one
(``reference()``) under the course's own comparison, and every number that a
hint or misconception message declares in ``checked_numbers`` must equal what
the experiment measured.
"""

import re

import pytest

from autograd_lab.checking.compare import Tolerance, compare_values
from autograd_lab.checking.records import encode
from autograd_lab.checking import Exercise, Misconception, all_exercises

VALUE_EXERCISES = [exercise for exercise in all_exercises() if exercise.kind == "value"]
_measured = {}


def measured_key(exercise):
    """``exercise.experiment()``, run once per exercise (08.grad_scale's is a DDP run)."""
    if exercise.experiment not in _measured:
        _measured[exercise.experiment] = exercise.experiment()
    return _measured[exercise.experiment]


def key_disagreement(exercise):
    """Why the typed key and the measured one differ, or ``None`` when they agree."""
    if exercise.experiment is None:
        return (f"add experiment= to {exercise.id} (in {exercise.module}): a function that runs the "
                "experiment the prompt describes and returns the key, so the key is measured, not typed.")
    tolerance = Tolerance(exercise.rtol, exercise.atol)
    measured, typed = measured_key(exercise), exercise.reference()
    finding = compare_values(encode(measured), encode(typed), f"{exercise.id}'s measured key", tolerance)
    if finding is None:
        return None
    # For the maintainer, both values: student feedback never shows the expected one, this message does.
    return (f"{exercise.id}: the typed key (reference) disagrees with the experiment: {finding.message} "
            f"(typed {typed!r}, measured {measured!r})")


def stated_number_disagreements(exercise):
    """``checked_numbers`` entries that are stale or contradicted by the measured key."""
    texts = list(exercise.hints) + [m.message for m in exercise.misconceptions]
    problems = []
    for written, from_key in exercise.checked_numbers.items():
        if not any(re.search(rf"(?<![\d.]){re.escape(written)}(?![\d.])", text) for text in texts):
            problems.append(f"{written!r} is in checked_numbers but no hint or misconception message states it")
            continue
        value = from_key(measured_key(exercise))
        if abs(float(value) - float(written)) > 1e-9 * max(1.0, abs(float(value))):
            problems.append(f"a hint or message states {written}, but the experiment measures {value}")
    return problems


@pytest.mark.parametrize("exercise", VALUE_EXERCISES, ids=lambda exercise: exercise.id)
def test_the_key_is_what_the_experiment_measures(exercise):
    problem = key_disagreement(exercise)
    assert problem is None, problem


@pytest.mark.parametrize("exercise", VALUE_EXERCISES, ids=lambda exercise: exercise.id)
def test_numbers_stated_in_hints_are_measured(exercise):
    if exercise.experiment is None:  # reported by the test above
        assert not exercise.checked_numbers, f"add experiment= to {exercise.id}: checked_numbers needs it"
        return
    problems = stated_number_disagreements(exercise)
    assert not problems, f"{exercise.id}: " + "; ".join(problems)


# --- the test catches what it is for --------------------------------------------------

def _planted(**fields):
    defaults = dict(id="99.planted", title="planted", answer_name="factor", kind="value",
                    solution_code="factor = 6", hints=("The loss is a sum over 2 outputs and 3 rows: 6.",))
    return Exercise(**{**defaults, **fields})


def test_a_planted_wrong_key_fails():
    exercise = _planted(reference=lambda: 3, experiment=lambda: 2 * 3)
    problem = key_disagreement(exercise)
    assert problem is not None and "(typed 3, measured 6)" in problem


def test_a_planted_wrong_entry_of_a_dict_key_fails():
    exercise = _planted(reference=lambda: {"A": 4, "B": 1, "C": 3}, experiment=lambda: {"A": 4, "B": 1, "C": 6})
    problem = key_disagreement(exercise)
    assert problem is not None and "['C']" in problem


def test_a_measured_key_that_matches_passes():
    assert key_disagreement(_planted(reference=lambda: 6, experiment=lambda: 6.0)) is None


def test_a_missing_experiment_says_what_to_add():
    assert "add experiment= to 99.planted" in key_disagreement(_planted(reference=lambda: 6))


def test_a_planted_wrong_number_in_a_hint_fails():
    exercise = _planted(reference=lambda: {"C": 6}, experiment=lambda: {"C": 6},
                        hints=("Setup C sums over 3 rows and 2 outputs, so the factor is 3.",),
                        checked_numbers={"3": lambda key: key["C"]})
    assert stated_number_disagreements(exercise) == ["a hint or message states 3, but the experiment measures 6"]


def test_a_checked_number_in_a_misconception_message_passes_when_measured():
    exercise = _planted(reference=lambda: {"C": 6}, experiment=lambda: {"C": 6},
                        misconceptions=(Misconception("mean", "C is 6 times the mean, not 3.",
                                                      lambda s, r, a: False),),
                        checked_numbers={"6": lambda key: key["C"]})
    assert stated_number_disagreements(exercise) == []


def test_a_stale_checked_number_is_reported():
    exercise = _planted(reference=lambda: 6, experiment=lambda: 6, checked_numbers={"12": lambda key: key})
    assert "no hint or misconception message states it" in stated_number_disagreements(exercise)[0]
