"""What an exercise is (``Exercise``, ``WrongAnswer``, ``Misconception``) and ``register``, the id -> exercise map.

Which exercises get registered, the repository's solutions or a student build's
public data, is ``catalog``'s business.
"""

import inspect
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .detectors import validate_detector
from .methods import Method
from .untouched import normalise as normalise_modifies

COMPARE_KINDS = ("value", "state", "args", "grad", "grad_mode")  # grad_mode: "state" without the output's
KINDS = ("function", "value")
_ID_PATTERN = re.compile(r"^\d\d\.[a-z][a-z0-9_]*$")
_CALL_PATTERN = re.compile(r"^autograd_lab\.labs\.[a-z_][a-z0-9_.]*:[a-z_][a-z0-9_]*$")
_DEFAULT_SEEDS = {"function": ((0, 1, 2), (101, 102, 103)), "value": ((0,), ())}


@dataclass(frozen=True)
class WrongAnswer:
    """A known-wrong answer and the misconception tag it must be reported as.

    ``answer`` is a function for function exercises and a value for value exercises.
    """

    answer: Any
    expect: str
    note: str = ""


@dataclass(frozen=True)
class Misconception:
    """An exercise-specific mistake: ``detect(student, reference, args) -> bool``.

    ``detect`` sees the student's and the reference's outputs as plain values
    (tensors detached on the CPU) and the case's inputs; it is tried on every
    failing case before the built-in detectors.  A detector that raises counts as
    "not detected".  A detector that also declares the keyword parameters
    ``student_run`` and/or ``reference_run`` receives each side's ``Run``: the
    arguments after the call and the input gradients (see ``checking.detectors``).
    """

    tag: str
    message: str
    detect: Callable[..., bool]

    def __post_init__(self):
        validate_detector(self.detect, f"Misconception {self.tag!r}")


@dataclass(frozen=True, kw_only=True)
class Exercise:
    """One exercise; see ``docs/authoring-exercises.md`` for every field."""

    id: str
    title: str
    answer_name: str
    reference: Callable
    kind: str = "function"
    inputs: Optional[Callable[[int, bool], tuple]] = None
    public_seeds: Optional[tuple] = None
    hidden_seeds: Optional[tuple] = None
    points: float = 1
    hints: tuple = ()
    compare: tuple = ("value",)
    gradcheck: bool = False
    rtol: Optional[float] = None
    atol: Optional[float] = None
    misconceptions: tuple = ()
    wrong_answers: tuple = ()
    solution_code: Optional[str] = None
    setup: Optional[Callable[[], dict]] = None
    experiment: Optional[Callable[[], Any]] = None  # value exercises: measures the key (contracts §5)
    method: Any = ()  # a Method or a tuple of them (``checking/methods.py``)
    modifies: Any = ()  # arguments the answer must change in place: names, indices, "name:grad" (``untouched.py``)
    call: Optional[str] = None  # "autograd_lab.labs.module:function": the check calls function(answer, *args)
    checked_numbers: dict = field(default_factory=dict, compare=False)  # {"6": lambda key: key["C"]}
    choices: tuple = ()  # a prediction's names, as the prompt lists them: a text entry must be one (``forms.py``)
    module: str = field(default="", compare=False)

    def __post_init__(self):
        if isinstance(self.method, Method):
            object.__setattr__(self, "method", (self.method,))
        _validate(self)
        public, hidden = _DEFAULT_SEEDS[self.kind]
        # Frozen dataclass: defaults that depend on ``kind`` are filled in here.
        if self.public_seeds is None:
            object.__setattr__(self, "public_seeds", public)
        if self.hidden_seeds is None:
            object.__setattr__(self, "hidden_seeds", hidden)
        for name in ("public_seeds", "hidden_seeds", "hints", "compare", "misconceptions", "wrong_answers", "method",
                     "choices"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        try:
            object.__setattr__(self, "modifies", normalise_modifies(self.modifies, self.parameter_names()))
        except ValueError as error:
            raise ValueError(f"Exercise {self.id}: {error}") from None
        if set(self.public_seeds) & set(self.hidden_seeds):
            raise ValueError(f"Exercise {self.id}: a seed cannot be both public and hidden; "
                             f"got public {self.public_seeds} and hidden {self.hidden_seeds}.")

    def caller(self):
        """The function named by ``call`` (the check calls ``caller(answer, *args)``), or None."""
        if self.call is None:
            return None
        import importlib

        module, _, name = self.call.partition(":")
        return getattr(importlib.import_module(module), name)

    def is_hidden(self, seed):
        return seed in self.hidden_seeds

    def parameter_names(self):
        """The reference's parameter names (an ``autograd.Function``'s ``forward`` without ``ctx``), or ``[]``."""
        function = self.reference
        if isinstance(function, type):
            function = getattr(function, "forward", None)
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return []
        names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return names[1:] if isinstance(self.reference, type) else names


def _validate(exercise):
    """Reject a malformed definition with a message that says how to fix it."""
    where = f"Exercise {exercise.id!r}"
    if not isinstance(exercise.id, str) or not _ID_PATTERN.match(exercise.id):
        raise ValueError(f"{where}: the id must look like '03.accumulate' "
                         "(two-digit notebook number, a dot, a lowercase name).")
    if exercise.kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {KINDS}, got {exercise.kind!r}.")
    if not exercise.answer_name.isidentifier():
        raise ValueError(f"{where}: answer_name must be a Python name, got {exercise.answer_name!r}.")
    if not callable(exercise.reference):
        raise TypeError(f"{where}: reference must be callable (for value exercises, a "
                        "zero-argument function returning the expected value).")
    if exercise.kind == "function" and not callable(exercise.inputs):
        raise TypeError(f"{where}: function exercises need inputs=(seed, hidden) -> tuple of arguments.")
    if exercise.kind == "value" and exercise.solution_code is None:
        raise ValueError(f"{where}: value exercises need solution_code, for example "
                         f"\"{exercise.answer_name} = ...\", for `autograd-lab solve`.")
    unknown = [kind for kind in exercise.compare if kind not in COMPARE_KINDS]
    if unknown or not exercise.compare:
        raise ValueError(f"{where}: compare must be a non-empty tuple drawn from {COMPARE_KINDS}; got {exercise.compare!r}.")
    if isinstance(exercise.hints, str) or not all(isinstance(h, str) for h in exercise.hints):
        raise TypeError(f"{where}: hints must be a tuple of strings.")
    if not exercise.points > 0:
        raise ValueError(f"{where}: points must be positive, got {exercise.points!r}.")
    for item in exercise.wrong_answers:
        if not isinstance(item, WrongAnswer):
            raise TypeError(f"{where}: wrong_answers must hold WrongAnswer(...) items, got {type(item).__name__}.")
    if not all(isinstance(item, Method) for item in exercise.method):
        raise TypeError(f"{where}: method must be a Method (for example uses_autograd()) or a tuple of them.")
    if exercise.method and exercise.kind != "function":
        raise ValueError(f"{where}: method= applies to function exercises (a value is typed, not computed).")
    if "args" in exercise.compare and not exercise.modifies:
        raise ValueError(f"{where}: compare 'args' judges what the answer changes in its arguments: say which it "
                         "may change with modifies=('params',) (an argument's name), or modifies='all'.")
    if exercise.call is not None and not _CALL_PATTERN.match(str(exercise.call)):
        raise ValueError(f"{where}: call names the function the check calls the answer through, as "
                         f"'autograd_lab.labs.module:function' (a student build has it), got {exercise.call!r}.")
    if exercise.experiment is not None and not callable(exercise.experiment):
        raise TypeError(f"{where}: experiment must be a zero-argument function that measures the key.")
    for item in exercise.misconceptions:
        if not isinstance(item, Misconception):
            raise TypeError(f"{where}: misconceptions must hold Misconception(...) items, got {type(item).__name__}.")


REGISTRY = {}


def register(exercise):
    """Add ``exercise`` to the registry and return it.

    Registering the same id again from the same module (a reload) replaces the old
    definition; the same id from another module is a mistake and raises.
    """
    if not isinstance(exercise, Exercise):
        raise TypeError(f"register() takes an Exercise, got {type(exercise).__name__}.")
    module = _caller_module()
    object.__setattr__(exercise, "module", module)
    previous = REGISTRY.get(exercise.id)
    if previous is not None and previous.module != module:
        raise ValueError(f"Exercise id {exercise.id!r} is defined twice: in {previous.module} and in "
                         f"{module}. Give one of them another name.")
    REGISTRY[exercise.id] = exercise
    return exercise


def _caller_module():
    frame = sys._getframe(2)  # register() <- the defining module
    return frame.f_globals.get("__name__", "?")
