"""autograd-lab: the package behind the course notebooks.

Everything a notebook needs is one attribute away from ``import autograd_lab``:

* ``draw``, ``trace_backward``, ``diff``: pictures of the autograd graph (``viz``);
* ``check``, ``hint``, ``solution``: exercises graded in the notebook (``checking``);
* ``expect_error``, ``expect_warning``: teach a real PyTorch error without
  stopping the notebook (``labs.errors``);
* ``saved_tensors``, ``memory_breakdown``: what the graph keeps alive (``labs.memory``);
* ``seed``, ``pick_device``: reproducible runs on CPU or GPU (``labs.env``).

The rooms (``docs/architecture.md``): ``viz``, ``checking``, ``grading`` (batch
grading, the student build, Gradescope), ``course`` (the command and the student's
workspace), ``labs`` (helpers the notebooks import) and ``versions`` (what differs
between torch releases).  Reference solutions are not in this package: they live in
``autograd_lab_solutions``, beside it in the repository.

Submodules are imported on first use, so ``import autograd_lab`` stays fast and a
problem in one part never breaks the others.
"""

from importlib import import_module

from . import _moved

__version__ = "0.1.0"

_EXPORTS = {
    "draw": "viz",
    "trace_backward": "viz",
    "diff": "viz",
    "check": "checking",
    "hint": "checking",
    "solution": "checking",
    "expect_error": "labs.errors",
    "expect_warning": "labs.errors",
    "saved_tensors": "labs.memory",
    "memory_breakdown": "labs.memory",
    "seed": "labs.env",
    "pick_device": "labs.env",
}

__all__ = sorted(_EXPORTS)

_moved.install()


def __getattr__(name):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        return _moved.old_submodule(name)  # `from autograd_lab import memory` in a notebook copied before the move
    value = getattr(import_module(f"autograd_lab.{module_name}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
