"""A minimal scalar reverse-mode autograd engine (``+``, ``*``, ``exp``, ``relu``), after micrograd.

Notebook 01 shows this code to the student and checks its gradients against
PyTorch's: the same idea, a recorded graph walked backwards in topological
order, without tensors.  Every ``Value`` remembers the values it was made from
and a closure that pushes its gradient to them.
"""

import math


class Value:
    """One scalar in the graph: its ``data``, its ``grad`` and how to backpropagate."""

    def __init__(self, data, parents=(), op=""):
        self.data = float(data)
        self.grad = 0.0
        self.parents = parents
        self.op = op
        self._backward = lambda: None  # a leaf has nobody to pass its gradient to

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data + other.data, (self, other), "+")

        def _backward():
            self.grad += out.grad  # += not =: a value used twice gets both contributions
            other.grad += out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data * other.data, (self, other), "*")

        def _backward():
            self.grad += other.data * out.grad  # the backward of * needs the *other* input
            other.grad += self.data * out.grad
        out._backward = _backward
        return out

    def exp(self):
        out = Value(math.exp(self.data), (self,), "exp")

        def _backward():
            self.grad += out.data * out.grad  # d exp(x)/dx = exp(x): reuse the output
        out._backward = _backward
        return out

    def relu(self):
        out = Value(max(self.data, 0.0), (self,), "relu")

        def _backward():
            self.grad += (out.data > 0) * out.grad  # the mask is all relu needs
        out._backward = _backward
        return out

    __radd__ = __add__
    __rmul__ = __mul__

    def backward(self):
        """Seed d(self)/d(self) = 1 and run every node's backward, outputs before inputs.

        The intermediate nodes start from zero on every call (micrograd's do not), or a second
        call would push their old gradients down again.  The leaves' gradients accumulate, as
        ``.grad`` does in PyTorch: call it twice and every leaf's ``grad`` doubles.
        """
        order = topological_order(self)
        for node in order:
            if node.parents:
                node.grad = 0.0
        self.grad = 1.0
        for node in reversed(order):
            node._backward()

    def __repr__(self):
        return f"Value(data={self.data:.4g}, grad={self.grad:.4g})"


def topological_order(root):
    """Every node reachable from ``root``, each after all the nodes it was made from.

    Iterative, not recursive, so a long chain cannot hit Python's recursion limit.
    """
    order, visited, stack = [], set(), [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)
        elif id(node) not in visited:
            visited.add(id(node))
            stack.append((node, True))
            stack.extend((parent, False) for parent in node.parents)
    return order


# Expressions the check of exercise 01.tiny_tanh builds around a student's ``tanh``: each
# uses ``x`` more than once and sends a gradient other than 1 into the tanh node.
EXPRESSIONS = {
    "tanh(x) * x": lambda tanh, x: tanh(x) * x,
    "tanh(x * x) * 3 + x": lambda tanh, x: tanh(x * x) * 3.0 + x,
    "tanh(tanh(x) * 2) * x": lambda tanh, x: tanh(tanh(x) * 2.0) * x,
    "tanh(x).exp() + x": lambda tanh, x: tanh(x).exp() + x,
}


def gradients_through(tanh, xs, expression="tanh(x) * x"):
    """d expression / dx at each number of ``xs``, by this engine, with ``tanh`` as the tanh node.

    ``tanh`` takes a ``Value`` and returns one.  Each ``x`` gets its own graph and one
    ``backward()``; the result is a tensor with the dtype of ``xs``.
    """
    import torch

    def node(u):
        out = tanh(u)
        if not isinstance(out, Value):
            missing = ": is its `return` missing?" if out is None else ""
            raise TypeError(f"tanh must return a Value of the tiny engine, not {type(out).__name__}{missing}")
        return out

    build = EXPRESSIONS[expression]
    grads = []
    for number in xs.tolist():
        x = Value(number)
        build(node, x).backward()
        grads.append(x.grad)
    return torch.tensor(grads, dtype=xs.dtype)
