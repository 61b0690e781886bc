"""autograd-lab: the package behind the course notebooks.

Everything a notebook needs is one attribute away from ``import autograd_lab``:

* ``draw``, ``trace_backward``, ``diff``: pictures of the autograd graph (``viz``);
* ``check``, ``hint``, ``solution``: exercises graded in the notebook (``exercises``);
* ``expect_error``, ``expect_warning``: teach a real PyTorch error without
  stopping the notebook (``errors``);
* ``saved_tensors``, ``memory_breakdown``: what the graph keeps alive (``memory``);
* ``seed``, ``pick_device``: reproducible runs on CPU or GPU (``env``).

Submodules are imported on first use, so ``import autograd_lab`` stays fast and a
problem in one part never breaks the others.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "draw": "viz",
    "trace_backward": "viz",
    "diff": "viz",
    "check": "exercises",
    "hint": "exercises",
    "solution": "exercises",
    "expect_error": "errors",
    "expect_warning": "errors",
    "saved_tensors": "memory",
    "memory_breakdown": "memory",
    "seed": "env",
    "pick_device": "env",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'autograd_lab' has no attribute {name!r}")
    value = getattr(import_module(f"autograd_lab.{module_name}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
