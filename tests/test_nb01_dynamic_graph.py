"""Notebook 01's exercises: correct answers that a rule once refused pass, public and hidden (adversarial round 4)."""

import math
import types

import pytest

from autograd_lab.checking import all_exercises, judge, observe
from autograd_lab.labs.tiny_engine import Value
from autograd_lab_solutions import nb01_dynamic_graph as nb01

TIMEOUT = 60.0


def _exercise(exercise_id):
    return next(e for e in all_exercises() if e.id == exercise_id)


def _graded(exercise, answer):
    """The grader's verdict (public and hidden seeds) and check()'s (public seeds), judged alike."""
    seeds = exercise.public_seeds + exercise.hidden_seeds
    student = {seed: observe(exercise, answer, seed, timeout=TIMEOUT) for seed in seeds}
    reference = {seed: observe(exercise, exercise.reference, seed, timeout=TIMEOUT) for seed in seeds}
    public = exercise.public_seeds
    return (judge(exercise, student, reference),
            judge(exercise, {s: student[s] for s in public}, {s: reference[s] for s in public}))


def _notebook_answer(source):
    """An answer defined as a notebook cell defines it: in a namespace of its own, after its imports ran."""
    namespace = {"Value": Value}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace["tiny_tanh"]


_FROM_IMPORT = '''
from math import tanh
def tiny_tanh(a):
    out = Value(tanh(a.data), (a,), "tanh")
    def _backward():
        a.grad += (1 - tanh(a.data)) * (1 + tanh(a.data)) * out.grad
    out._backward = _backward
    return out
'''


_BY_EXP = """
def tiny_tanh(a):
    import math
    u = a.data
    out = Value((math.exp(u) - math.exp(-u)) / (math.exp(u) + math.exp(-u)), (a,), "tanh")
    def _backward():
        a.grad += 4 / (math.exp(u) + math.exp(-u)) ** 2 * out.grad
    out._backward = _backward
    return out
"""

_BY_COSH = """
import math
def tiny_tanh(a):
    out = Value(2 / (1 + math.exp(-2 * a.data)) - 1, (a,), "tanh")
    def _backward():
        a.grad += out.grad / math.cosh(a.data) ** 2
    out._backward = _backward
    return out
"""


@pytest.mark.parametrize("answer", [nb01._textbook_twice, nb01._textbook_factored, _notebook_answer(_FROM_IMPORT),
                                    _notebook_answer(_BY_EXP), _notebook_answer(_BY_COSH)],
                         ids=["tanh_times_tanh", "factored", "from_math_import_tanh", "by_exp", "by_cosh"])
def test_tiny_tanh_accepts_tanh_called_again_at_the_nodes_own_input(answer):
    """adv-00-04-r3 A4: three math.tanh calls per node, all at the node's input, are the textbook formula; so are
    formulas written with exp (at u, -u, -2u) and cosh."""
    full, public = _graded(_exercise("01.tiny_tanh"), answer)
    assert full.status == "passed" and public.status == "passed", (full, public)


def test_tiny_tanh_judges_the_count_only_where_it_cannot_see_the_point():
    """A tanh the recorder cannot replace (held in an object made before the check) falls back to the count."""
    held = types.SimpleNamespace(tanh=math.tanh)

    def twice(a):                       # forward and one call in the closure: within two per node
        out = Value(held.tanh(a.data), (a,), "tanh")

        def _backward():
            a.grad += (1 - held.tanh(a.data) ** 2) * out.grad
        out._backward = _backward
        return out

    def quotient(a):                    # a central difference through the held reference: more than two per node
        out = Value(held.tanh(a.data), (a,), "tanh")

        def _backward():
            a.grad += (held.tanh(a.data + 1e-6) - held.tanh(a.data - 1e-6)) / 2e-6 * out.grad
        out._backward = _backward
        return out

    exercise = _exercise("01.tiny_tanh")
    assert _graded(exercise, twice)[0].status == "passed"
    full, public = _graded(exercise, quotient)
    assert (full.misconception, public.misconception) == ("finite_differences", "finite_differences")
    said = " ".join(public.messages)
    assert "could not see where" in said and "evaluated tanh at a point" not in said   # a count cannot say where


def test_a_float32_value_is_told_it_may_be_float32():
    """A forward value from torch.tanh on a float32 tensor is right to 1e-8 only: the message names float32 too."""
    full, public = _graded(_exercise("01.tiny_tanh"), nb01._float32_forward)
    assert public.misconception == "difference_quotient" and "float32" in " ".join(public.messages)


def _torch_functions_reading_next_functions():
    """``code:module:qualname`` of every function or method in the installed torch's Python source that reads
    ``.next_functions`` (torch.testing's own test cases left out)."""
    import ast
    import pathlib

    import torch

    root = pathlib.Path(torch.__file__).parent
    found = set()

    def reads(node):
        return any(isinstance(n, ast.Attribute) and n.attr == "next_functions" for n in ast.walk(node))

    def visit(node, module, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, module, prefix + [child.name])
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and reads(child):
                found.add(f"code:{module}:{'.'.join(prefix + [child.name])}")
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and reads(child):
                found.add(f"code:{module}")                  # module-level code that walks: the module itself

    for path in root.rglob("*.py"):
        text = path.read_text(errors="ignore")
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        if "next_functions" in text and not module.startswith("torch.testing."):
            visit(ast.parse(text), module, [])
    return found


def test_count_nodes_bans_every_torch_function_that_reads_next_functions():
    """Adversarial round 9 (adv-00-04-r8 F6): the family of torch's graph walkers is closed, not one name at a
    time. A new torch that adds a walker fails here until TORCH_GRAPH_WALKERS names it."""
    banned = set(nb01.TORCH_GRAPH_WALKERS)
    missing = {spec for spec in _torch_functions_reading_next_functions()
               if spec not in banned and spec.rsplit(":", 1)[0] not in banned}
    assert not missing, f"torch functions that walk next_functions, not banned in 01.count_nodes: {sorted(missing)}"
    full, public = _graded(_exercise("01.count_nodes"), nb01._count_by_dynamo_walk)
    assert (full.status, full.misconception) == ("failed", "used_library")
