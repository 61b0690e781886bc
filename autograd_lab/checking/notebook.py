"""Exercises checked in the notebook, with feedback that knows about autograd.

In a notebook::

    check("00.cube_grad", cube_grad)   # a Result: passed / failed / not attempted / error / timed out
    hint("00.cube_grad")               # the next hint of the ladder
    solution("00.cube_grad")           # the reference, after a first attempt

``check`` calls the student's function and the reference on the same fresh,
seeded inputs, compares values (and, per exercise, autograd state, arguments
changed by side effect, and gradients), and names the usual mistakes (doubled,
sign flipped, off by a factor, ``None``, all zeros) before saying "wrong".

With ``CI`` or ``AUTOGRAD_LAB_STRICT`` set, a check that fails raises
``AssertionError``; an exercise not attempted never does.

Exercises are defined in ``autograd_lab_solutions/`` (see
``docs/authoring-exercises.md``).  The batch grader uses ``observe`` (run an
answer, record what came back) and ``judge`` (compare records) separately, so
that no comparison happens in the student's process.
"""

import os

from .display import Hint, Result, Solution
from .judge import judge
from .observe import observe
from .catalog import get, grading_mode, has_solutions, install_grading_guard
from .source import solution_source

DEFAULT_TIMEOUT = 10.0
_FAILURES = ("failed", "error", "timed out")
_attempted = set()
_hints_shown = {}
_reference_cache = {}

install_grading_guard()


def strict_mode():
    """True when ``CI`` or ``AUTOGRAD_LAB_STRICT`` is set (to anything but ``0``/``false``/``no``)."""
    return any(os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")
               for name in ("CI", "AUTOGRAD_LAB_STRICT"))




def reference_records(exercise, seeds):
    """The reference's records on ``seeds``; computed once per process and seed."""
    public = getattr(exercise, "public_records", None)
    if public is not None:  # a student build: records computed at release time
        return {seed: public[seed] for seed in seeds}
    records = {}
    for seed in seeds:
        key = (exercise.id, seed)
        if key not in _reference_cache:
            answer = exercise.reference() if exercise.kind == "value" else exercise.reference
            # Only the student's warnings and facts are ever judged; the reference's would tell a release's
            # reader its source lines (warnings quote them) and its recipe (the ops it ran).
            record = observe(exercise, answer, seed)
            record.pop("facts", None)
            _reference_cache[key] = dict(record, warnings=[])
        records[seed] = _reference_cache[key]
    return records


def check(exercise_id, answer, *, timeout=DEFAULT_TIMEOUT):
    """Check ``answer`` against the reference on the public cases; return a ``Result``.

    ``timeout``: seconds allowed per case (``None``: no limit).  The limit needs
    the main thread on a POSIX system; elsewhere the check runs without one.
    """
    exercise = get(exercise_id)
    unavailable = getattr(exercise, "checked_only_when_graded", None)  # a student build (contracts §3)
    if unavailable:
        return Result(exercise_id=exercise.id, title=exercise.title, status="not attempted", score=0,
                      max_score=exercise.points, misconception=None, messages=[unavailable])
    student = _observe_public(exercise, answer, timeout)
    result = judge(exercise, student, reference_records(exercise, exercise.public_seeds))
    if result.status != "not attempted":
        _attempted.add(exercise_id)
    if strict_mode() and result.status in _FAILURES:
        raise AssertionError(f"strict mode: a check did not pass.\n{result!r}")
    return result


def _observe_public(exercise, answer, timeout):
    """Observe the public seeds; after a timeout, do not make the student wait for the others."""
    records = {}
    for seed in exercise.public_seeds:
        previous = list(records.values())
        if previous and previous[-1]["status"] == "timed out":
            records[seed] = dict(previous[-1], seed=seed)
        else:
            records[seed] = observe(exercise, answer, seed, timeout=timeout)
    return records


def hint(exercise_id):
    """The next hint for the exercise (the last one again once all are shown); none in graded mode."""
    exercise = get(exercise_id)
    total = len(exercise.hints)
    if grading_mode():
        return Hint(exercise_id, 0, total, "", reason="hints are turned off while the assignment is graded.")
    if total == 0:
        return Hint(exercise_id, 0, 0, "")
    number = min(_hints_shown.get(exercise_id, 0) + 1, total)
    _hints_shown[exercise_id] = number
    return Hint(exercise_id, number, total, exercise.hints[number - 1])


def solution(exercise_id):
    """The reference solution, once the exercise has been attempted; never in graded mode."""
    exercise = get(exercise_id)
    if grading_mode():
        return Solution(exercise_id, False, reason="solutions are turned off while the assignment is graded.")
    if not has_solutions():
        return Solution(exercise_id, False, reason="solutions are not part of this build (a student release).")
    if exercise_id not in _attempted:
        return Solution(exercise_id, False, reason=(
            f"the solution unlocks after your first attempt: write your answer, run "
            f"check({exercise_id!r}, {exercise.answer_name}), then ask again."))
    return Solution(exercise_id, True, source=solution_source(exercise))
