"""Old import paths of modules that moved into rooms, so a student's older notebook copy still runs.

A student's ``work/`` copy made before the re-layout says ``from autograd_lab.memory
import saved_tensors``; the module is now ``autograd_lab.labs.memory``.  This finder
answers the old name with the very module object of the new one (no second copy, so
state such as the exercise registry is shared).  The shipped notebooks use the new
paths; ``tests/test_layout.py`` runs the old ones.
"""

import importlib
import importlib.abc
import importlib.util
import sys

_LAB_HELPERS = ("amp_timing", "ddp_scenarios", "distributed", "env", "errors", "gpu_records", "grad_report",
                "memory", "precision", "recompute", "timing", "tiny_engine")
OLD_NAMES = {
    **{f"autograd_lab.{name}": f"autograd_lab.labs.{name}" for name in _LAB_HELPERS},
    "autograd_lab.exercises": "autograd_lab.checking",
    "autograd_lab.doctor": "autograd_lab.course.doctor",  # notebook 00 runs its checks
    "autograd_lab.cli": "autograd_lab.course.cli",  # console scripts written by an older install
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module that now lives under the new one."""

    def find_spec(self, name, path=None, target=None):
        if name not in OLD_NAMES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return importlib.import_module(OLD_NAMES[spec.name])  # its own __spec__ and __name__ are kept

    def exec_module(self, module):
        pass  # already executed under its new name


_FINDER = _Alias()


def install():
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def old_submodule(name):
    """``autograd_lab.<name>`` for an old submodule name; AttributeError for anything else."""
    new = OLD_NAMES.get(f"autograd_lab.{name}")
    if new is None:
        raise AttributeError(f"module 'autograd_lab' has no attribute {name!r}")
    return importlib.import_module(new)
