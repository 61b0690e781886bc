"""Which exercises exist: the reference solutions beside the package, or a student build's public data.

In the repository (and a self-study build) the exercises are defined in the
``autograd_lab_solutions`` package, which sits beside ``autograd_lab`` and is never
part of the student package: a wheel, a release and a grading kernel all lack it.
Without it, a student build registers its exercises from ``public/`` data
(``public.py``).  Graded kernels (``AUTOGRAD_LAB_GRADING=1``) refuse the import.
"""

import difflib
import importlib
import importlib.util
import os
import pkgutil
import sys

from . import public
from .registry import REGISTRY, register

SOLUTIONS_PACKAGE = "autograd_lab_solutions"
_loaded = False


class UnknownExercise(KeyError):
    """A mistyped exercise id: one line in a notebook, with the closest ids, never a traceback."""

    def __str__(self):
        return self.args[0]

    def _render_traceback_(self):   # IPython shows these lines instead of the traceback
        return [f"UnknownExercise: {self}"]


def get(exercise_id):
    """The exercise registered under ``exercise_id``; loads every solutions module first."""
    load_all()
    try:
        return REGISTRY[exercise_id]
    except (KeyError, TypeError):
        raise UnknownExercise(unknown_id_message(exercise_id)) from None


def unknown_id_message(exercise_id):
    """``No exercise '00.cube_gard'. Did you mean '00.cube_grad'?``: the closest ids, not all of them."""
    known = sorted(REGISTRY)
    close = difflib.get_close_matches(str(exercise_id), known, n=3, cutoff=0.6)
    if close:
        return f"No exercise {exercise_id!r}. Did you mean {' or '.join(map(repr, close))}?"
    same_notebook = [key for key in known if key[:2] == str(exercise_id)[:2]]
    hint = f"this notebook's are {', '.join(map(repr, same_notebook))}" if same_notebook else (
        "ids look like '00.cube_grad' (see the exercise's heading)")
    return f"No exercise {exercise_id!r}: {hint}."


def all_exercises():
    """Every registered exercise, sorted by id."""
    load_all()
    return [REGISTRY[key] for key in sorted(REGISTRY)]


def load_all():
    """Import every ``autograd_lab_solutions`` module once (each registers its exercises)."""
    global _loaded
    if _loaded:
        return
    if not has_solutions():  # a student build: exercises come from public data (contracts §3)
        public.load_all(register)
        _loaded = True
        return
    with _solutions_unblocked():
        package = importlib.import_module(SOLUTIONS_PACKAGE)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{SOLUTIONS_PACKAGE}.{info.name}")
    _loaded = True
    if grading_mode():
        _hide_solution_modules()


def has_solutions():
    """True in the repository and in a self-study build; False in a student build.

    A student build says what it is by carrying ``public/`` data: it never loads
    solutions, even where they happen to be importable (an unsandboxed grading
    kernel in the instructor's venv, say).
    """
    if public.available():
        return False
    if SOLUTIONS_PACKAGE in sys.modules:
        return True
    with _solutions_unblocked():
        return importlib.util.find_spec(SOLUTIONS_PACKAGE) is not None


# --- graded mode -----------------------------------------------------------

def grading_mode():
    """True when the batch grader runs this kernel (``AUTOGRAD_LAB_GRADING=1``)."""
    return os.environ.get("AUTOGRAD_LAB_GRADING", "").strip().lower() not in ("", "0", "false", "no")


class _SolutionsBlocker:
    """A meta-path finder that refuses ``import autograd_lab_solutions`` from student code.

    Only a speed bump: the registry itself still holds the references, which is
    why the batch grader judges answers in its own process, never in the kernel.
    """

    bypass = False

    def find_spec(self, name, path=None, target=None):
        if self.bypass or not (name == SOLUTIONS_PACKAGE or name.startswith(SOLUTIONS_PACKAGE + ".")):
            return None
        raise ImportError(f"{name} is not available while an assignment is being graded.")


_BLOCKER = _SolutionsBlocker()


class _solutions_unblocked:
    def __enter__(self):
        _BLOCKER.bypass = True

    def __exit__(self, *exc_info):
        _BLOCKER.bypass = False


def _hide_solution_modules():
    for name in [n for n in sys.modules if n == SOLUTIONS_PACKAGE or n.startswith(SOLUTIONS_PACKAGE + ".")]:
        del sys.modules[name]


def install_grading_guard():
    """In graded mode, put the import blocker first on ``sys.meta_path`` (idempotent)."""
    if grading_mode() and _BLOCKER not in sys.meta_path:
        sys.meta_path.insert(0, _BLOCKER)
