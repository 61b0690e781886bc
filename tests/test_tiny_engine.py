"""The tiny scalar engine of notebook 01 computes the same gradients as PyTorch."""

import math

import pytest
import torch

from autograd_lab.labs.tiny_engine import Value, topological_order


def _both(expression, *values):
    """Gradients of ``expression`` at ``values`` from the tiny engine and from PyTorch (float64)."""
    tiny = [Value(v) for v in values]
    expression(*tiny).backward()
    real = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    expression(*real).backward()
    return [t.grad for t in tiny], [r.grad.item() for r in real]


@pytest.mark.parametrize("expression", [
    lambda a, b: a * b + a,
    lambda a, b: (a * b).exp() + 3 * a,
    lambda a, b: (a * b + 2).relu() * a,
    lambda a, b: (a + b) * (a + b) * a,
])
@pytest.mark.parametrize("values", [(1.5, -0.5), (-2.0, 0.25), (0.3, 0.7)])
def test_gradients_match_pytorch(expression, values):
    tiny, real = _both(expression, *values)
    for t, r in zip(tiny, real):
        assert math.isclose(t, r, rel_tol=1e-12, abs_tol=1e-15)


def test_a_value_used_twice_gets_both_contributions():
    a = Value(3.0)
    (a * a).backward()
    assert a.grad == 6.0  # 2a, not a: both factors' paths add up


def test_relu_passes_no_gradient_where_the_input_was_negative():
    a = Value(-1.0)
    (a.relu() * 5).backward()
    assert a.grad == 0.0


def test_backward_twice_accumulates_like_pytorch():
    a = Value(2.0)
    out = a * 3
    out.backward()
    out.backward()
    assert a.grad == 6.0


def test_backward_twice_doubles_the_leaves_even_through_an_intermediate():
    a = Value(2.0)
    out = (a * a) * 3.0        # a * a is an intermediate: its old gradient must not be pushed down again
    out.backward()
    assert a.grad == 12.0
    out.backward()
    assert a.grad == 24.0      # PyTorch with retain_graph=True gives 12 then 24 too


def test_topological_order_puts_every_node_after_its_parents():
    a, b = Value(1.0), Value(2.0)
    root = ((a * b).exp() + a).relu()
    order = topological_order(root)
    position = {id(node): i for i, node in enumerate(order)}
    assert order[-1] is root and len(order) == 6
    for node in order:
        assert all(position[id(parent)] < position[id(node)] for parent in node.parents)


def test_a_long_chain_does_not_hit_the_recursion_limit():
    a = Value(1.0)
    out = a
    for _ in range(5000):
        out = out * 1.0
    out.backward()
    assert a.grad == 1.0
