"""Wrong answers made from a reference solution by changing one line.

A known-wrong answer is most useful when it differs from the reference by exactly
one mistake.  Writing it out again would copy the whole solution; ``mutant``
copies nothing: it edits the reference's own source and compiles the result.
"""

import inspect
import math
import textwrap

import torch
import torch.nn.functional as F

from autograd_lab.labs.tiny_engine import Value

# The names an exercise cell can use (see docs/authoring-exercises.md), plus the tiny engine.
_NOTEBOOK_NAMES = {"math": math, "torch": torch, "F": F, "Value": Value}


def mutant(reference, line, replacement):
    """``reference`` (a function or class) with the source text ``line`` replaced by ``replacement``."""
    source = textwrap.dedent(inspect.getsource(reference))
    if source.count(line) != 1:
        raise ValueError(f"{line!r} must occur exactly once in the source of {reference.__name__}.")
    namespace = dict(_NOTEBOOK_NAMES)
    code = compile(source.replace(line, replacement), f"<{reference.__name__}, mutated>", "exec")
    exec(code, namespace)
    return namespace[reference.__name__]
