"""Exercises: defined once, checked in the notebook, judged the same way by the batch grader.

The public names, for notebooks and for exercise authors (``docs/authoring-exercises.md``)::

    check("00.cube_grad", cube_grad)   # notebook.py: observe the answer, judge it, explain
    Exercise(...), register(...)       # registry.py: what an exercise is, and the id -> exercise map

Inside, one idea per module: ``observe`` runs an answer and records what came back
(``facts`` records how it computed, from ``tape``'s record of what ran; ``untouched``
whether it changed its arguments), ``records`` turns values into plain data,
``compare`` and ``detectors`` name what went wrong, ``judge`` turns two records
into a ``Result``, ``methods`` judges the method from the facts, ``public`` loads
a student build's exercises from data (``forms``: a prediction's form, never its
key), ``hermetic`` keeps an answer from changing the session, ``origin`` finds the
student's own line, ``display`` shows results, ``source`` shows a reference.
"""

from .detectors import Run, claims
from .display import Hint, Result, Solution
from .judge import judge
from .methods import (Method, autograd_derivative, backward_calls, checkpoint_used, no_autograd, no_data_attribute,
                      no_difference_quotient, no_distributed_sampler,
                      no_forward_mode, no_grad_scaler, no_jacobian, no_library, no_optimizer, no_torch_func,
                      own_derivatives, own_function, steps_on_autograd_grads, tiny_engine_op, uses_autograd)
from .notebook import check, hint, reference_records, solution, strict_mode
from .observe import observe
from .catalog import all_exercises, get, grading_mode
from .registry import Exercise, Misconception, WrongAnswer, register

__all__ = [
    "Exercise", "WrongAnswer", "Misconception", "Run", "register", "get", "all_exercises", "grading_mode",
    "check", "hint", "solution", "observe", "judge", "Result", "Hint", "Solution",
    "strict_mode", "reference_records", "claims",
    "Method", "uses_autograd", "autograd_derivative", "backward_calls", "no_data_attribute", "no_distributed_sampler",
    "no_grad_scaler",
    "no_jacobian", "tiny_engine_op", "no_autograd", "no_forward_mode", "no_torch_func", "no_library", "no_optimizer",
    "own_function", "own_derivatives", "checkpoint_used", "steps_on_autograd_grads", "no_difference_quotient",
]
