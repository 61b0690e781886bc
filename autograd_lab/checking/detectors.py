"""Run an exercise's own ``Misconception`` detectors on a failing case.

A detector is always called as ``detect(student, reference, args)``: the two
returned values and the inputs from before the call, decoded from the records.
Answers that work by side effect or through their gradients need more, so a
detector may also declare the keyword parameters ``student_run`` and
``reference_run``; it then receives a ``Run`` of each side (or both, if it takes
``**kwargs``).  Detectors that do not declare them are called exactly as before.

Everything comes from the records, never from live objects: in the batch
grader the student's objects stay in the student's kernel.
"""

import inspect
from dataclasses import dataclass
from typing import Any, Optional

from .findings import Finding
from .records import decode

RUN_PARAMETERS = ("student_run", "reference_run")


@dataclass(frozen=True)
class Run:
    """What one answer did on one case, decoded from its record.

    ``output``: the returned value (as the detector's first two arguments).
    ``args_after``: for exercises that compare ``"args"``, a tuple of the
    arguments after the call; tensors (and a module's parameters) carry their
    ``.grad``.  ``input_grads``: for exercises that compare ``"grad"``, a tuple of
    the gradients of the tensor inputs that require grad (``None`` for an unused
    input), or ``None`` when the output could not be backpropagated.  Both are
    ``None`` when the exercise does not compare them.  ``error``: on a case where the
    answer raised, the error's text (``"IndexError: ... (in `f`, line 4: `...`)"``) and
    everything else ``None``: a detector that reads it names the cause of an error.
    """

    output: Any
    args_after: Optional[tuple] = None
    input_grads: Optional[tuple] = None
    error: Optional[str] = None


def run_of(record):
    """The ``Run`` of one ``ok`` record."""
    args_after = record.get("args_after")
    grads = record.get("input_grads")
    return Run(
        output=decode(record["output"]),
        args_after=None if args_after is None else tuple(decode(arg, grads=True) for arg in args_after),
        input_grads=None if grads is None else tuple(decode(grad) for grad in grads),
    )


def named_error(exercise, finding, student, reference):
    """An exercise-specific cause of an error: detectors that ask for ``student_run`` see its ``error``."""
    if not exercise.misconceptions:
        return finding
    args = tuple(decode(arg) for arg in reference["inputs"])
    run = Run(output=None, error=str(student.get("error") or ""))
    detected = [m for m in exercise.misconceptions
                if "student_run" in _accepted(m.detect, {"student_run": run}) and
                _detects(m.detect, (None, decode(reference["output"]), args), {"student_run": run})]
    if not detected:
        return finding
    # Tagged apart so that the generic "usual cause" line is not added beside the exercise's own cause
    # (adversarial round 7, 01.tiny_tanh: a closure called, not attached, was told about torch's `.grad`).
    return Finding(NAMED_ERROR, f"{finding.message}. {' '.join(m.message for m in detected)}")


NAMED_ERROR = "named_error"   # an error whose cause the exercise named (the case's tag stays "error")


def named(exercise, finding, student, reference):
    """An exercise-specific misconception, tried before the built-in one already in ``finding``."""
    if not exercise.misconceptions:
        return finding
    output, expected = decode(student["output"]), decode(reference["output"])
    args = tuple(decode(arg) for arg in reference["inputs"])
    try:
        runs = {"student_run": run_of(student), "reference_run": run_of(reference)}
    except Exception:  # a malformed record: detectors that ask for runs fail to bind, so do not match
        runs = {}
    detected = [m for m in exercise.misconceptions if _detects(m.detect, (output, expected, args), runs)]
    if not detected:
        return finding
    # The first match names the case; the others are told too, since a student may hold several.
    messages = " ".join(m.message for m in detected)
    if finding.tag in _BUILT_IN_CAUSES:   # "backward ran twice" beside "k times, k = 2" names two causes
        return Finding(detected[0].tag, messages)
    return Finding(detected[0].tag, f"{messages} ({finding.message})")


# Built-in diagnoses that state a cause of their own: an exercise's misconception that matched
# replaces them (adversarial round 7: 03.accumulated_grad without `/ k` at k = 2 was also told
# "backward ran twice").  A bare difference (``wrong_value``, ``structure``) is kept, as where it is.
_BUILT_IN_CAUSES = ("doubled", "sign_flipped", "scaled", "all_zeros", "none")


def _detects(detect, args, runs):
    try:
        return bool(detect(*args, **_accepted(detect, runs)))
    except Exception:  # a detector that cannot handle this answer has not detected anything
        return False


def validate_detector(detect, where):
    """Refuse a detector that could never be called (it would silently detect nothing)."""
    if not callable(detect):
        raise TypeError(f"{where}: detect must be a function (student, reference, args) -> bool.")
    try:
        signature = inspect.signature(detect)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None, None, **_accepted(detect, dict.fromkeys(RUN_PARAMETERS)))
    except TypeError:
        raise TypeError(f"{where}: detect{signature} cannot be called as detect(student, reference, args); "
                        f"besides those three it may only ask for the keyword parameters "
                        f"{' and '.join(RUN_PARAMETERS)}.") from None


def _accepted(detect, runs):
    """The runs that ``detect`` declares a parameter for; all of them for ``**kwargs``."""
    try:
        parameters = inspect.signature(detect).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the plain call
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return runs
    names = {p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return {name: run for name, run in runs.items() if name in names}

def claims(key, value=True):
    """A ``Misconception`` detector for predictions given as a dict: the answer says ``key`` is ``value``.

    ``Misconception("non_leaf", "h is not a leaf ...", claims("h"))``
    """
    def detect(student, reference, args):
        if not isinstance(student, dict) or key not in student:
            return False
        # Equal and of the same type: True must not match 1, and a decoded record holds
        # new string objects, so identity would miss equal strings.
        return type(student[key]) is type(value) and student[key] == value
    return detect
