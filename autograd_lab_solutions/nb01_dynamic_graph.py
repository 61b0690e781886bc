"""Exercises of notebook 01 (the dynamic graph), with their reference solutions.

Each wrong answer below is a mistake students really make; the exercise bank test
proves that each one is reported with its misconception tag.
"""

import math

import torch

from autograd_lab.checking import (Exercise, Method, Misconception, WrongAnswer, claims, register,
                                    tiny_engine_op)
from autograd_lab.labs.memory import saved_tensors
from autograd_lab_solutions._mutants import mutant
from autograd_lab.labs.tiny_engine import Value

# --- 01.who_gets_grad --------------------------------------------------------


def who_gets_grad_reference():
    """The typed key, the same dict as ``solution_code``; ``_who_gets_grad_experiment`` measures it."""
    return {"a": True, "b": False, "c": False, "w": False}


def _who_gets_grad_experiment():
    """Run the exercise's code and report which tensors got a ``.grad``."""
    a = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    b = a * 2
    b.retain_grad()
    c = b.detach()
    loss = (c * a).sum()
    loss.backward()
    return {"a": a.grad is not None, "b": b.grad is not None,
            "c": c.grad is not None, "w": w.grad is not None}


register(Exercise(
    id="01.who_gets_grad",
    title="Who gets a .grad?",
    answer_name="who_gets_grad",
    kind="value",
    reference=who_gets_grad_reference,
    experiment=_who_gets_grad_experiment,
    solution_code='who_gets_grad = {"a": True, "b": False, "c": False, "w": False}',
    hints=(
        "Only leaves that require grad and that the backward pass actually reaches get a .grad, "
        "plus non-leaves with retain_grad() that it reaches.",
        "Follow the path from loss back: loss <- c * a. Which of c and a requires grad? "
        "Is b on that path at all, after c = b.detach()?",
        "c = b.detach() cuts the path to b, so b's retain_grad() never fires; w is not in this graph.",
    ),
    misconceptions=(
        Misconception("detached_path",
                      "b.retain_grad() only keeps a gradient that reaches b, and none does: "
                      "c = b.detach() cut b out of loss's graph.",
                      claims("b", True)),
        Misconception("no_requires_grad",
                      "c comes from .detach(): it does not require grad, so it never gets a .grad.",
                      claims("c", True)),
        Misconception("unused_param",
                      "w requires grad but this forward pass never used it, so it is not in the "
                      "graph and its .grad stays None (not zero).",
                      claims("w", True)),
        Misconception("missed_leaf",
                      "a is a leaf that requires grad and loss = (c * a).sum() uses it, so "
                      "backward fills a.grad (with the values of c).",
                      claims("a", False)),
    ),
    wrong_answers=(
        WrongAnswer({"a": True, "b": True, "c": False, "w": False}, expect="detached_path"),
        WrongAnswer({"a": True, "b": False, "c": True, "w": False}, expect="no_requires_grad"),
        WrongAnswer({"a": True, "b": False, "c": False, "w": True}, expect="unused_param"),
        WrongAnswer({"a": False, "b": False, "c": False, "w": False}, expect="missed_leaf"),
        WrongAnswer({"a": True, "b": False, "c": False}, expect="structure"),
    ),
))

# --- 01.count_nodes ----------------------------------------------------------


def count_nodes(output):
    counts, visited, stack = {}, set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in visited:  # None: an input that needs no gradient
            continue
        visited.add(node)                    # a node reached along two paths counts once
        name = type(node).__name__
        counts[name] = counts.get(name, 0) + 1
        stack.extend(child for child, _ in node.next_functions)
    return counts


def _count_inputs(seed, hidden):
    """A graph in which one intermediate feeds several later ops; its depth depends on the seed."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(3, generator=generator).requires_grad_()
    b = torch.randn(3, generator=generator).requires_grad_()
    data = torch.randn(3, generator=generator)
    h = torch.tanh(a * data) if hidden else a * b
    for _ in range(1 + seed % 3):
        h = h * b + a
    return ((h * h + h.exp()).sum(),)


def _count_every_path(output):
    """Naive recursion: a shared node is counted once per path that reaches it."""
    counts = {}

    def visit(node):
        if node is None:
            return
        name = type(node).__name__
        counts[name] = counts.get(name, 0) + 1
        for child, _ in node.next_functions:
            visit(child)
    visit(output.grad_fn)
    return counts


def _overcounted(student, reference, args):
    """Same node classes, never fewer, sometimes more: shared nodes counted once per path.

    The detector sees only the inputs' values (their graphs are not recorded), so it
    recognises the pattern rather than recomputing the naive count.
    """
    return (isinstance(student, dict) and student.keys() == reference.keys()
            and all(student[k] >= reference[k] for k in reference)
            and any(student[k] > reference[k] for k in reference))


def _count_without_leaves(output):
    counts = count_nodes(output)
    counts.pop("AccumulateGrad", None)
    return counts


register(Exercise(
    id="01.count_nodes",
    title="Walk the graph and count its nodes",
    answer_name="count_nodes",
    reference=count_nodes,
    inputs=_count_inputs,
    hints=(
        "Start from output.grad_fn and follow node.next_functions, a tuple of (node, input_number) pairs; "
        "skip the None entries.",
        "Count type(node).__name__ for each node. AccumulateGrad nodes count too.",
        "A node can be reached along several paths (h is used three times). Keep a set of visited nodes: "
        "reaching the same node again gives the very same Python object, so `node in visited` works.",
    ),
    misconceptions=(
        Misconception("counted_twice",
                      "Some nodes were counted once per path that reaches them. The graph is a DAG, not a "
                      "tree: a tensor used several times has one node with several parents. Keep a set of "
                      "visited nodes.",
                      _overcounted),
        Misconception("missed_accumulate",
                      "The AccumulateGrad nodes are missing: every leaf that requires grad has one, and it "
                      "is a node of the graph like any other.",
                      lambda s, r, args: s == {k: v for k, v in r.items() if k != "AccumulateGrad"}),
    ),
    wrong_answers=(
        WrongAnswer(_count_every_path, expect="counted_twice"),
        WrongAnswer(_count_without_leaves, expect="missed_accumulate"),
        WrongAnswer(lambda output: {type(output.grad_fn).__name__: 1}, expect="structure"),
    ),
))

# --- 01.saved_bytes ----------------------------------------------------------


def saved_bytes_reference():
    """The typed key, as in ``solution_code``; ``_saved_bytes_experiment`` measures it."""
    return 64 * 32 * 4 + 64 * 16 * 4


def _saved_bytes_experiment():
    """Measure what the exercise's expression saves, with the saved-tensor hooks."""
    x = torch.randn(64, 32)
    w = torch.randn(32, 16, requires_grad=True)
    with saved_tensors() as saved:
        y = (x @ w).relu()
        (y ** 2).sum()
    return saved.nbytes  # x (mm, for dL/dw) and y (relu's result = pow's input, one storage)


_FLOAT_BYTES = 4
_X_BYTES = 64 * 32 * _FLOAT_BYTES
_W_BYTES = 32 * 16 * _FLOAT_BYTES
_Y_BYTES = 64 * 16 * _FLOAT_BYTES


def _off_by(extra):
    return lambda student, reference, args: isinstance(student, (int, float)) and student == reference + extra


register(Exercise(
    id="01.saved_bytes",
    title="Count the saved bytes",
    answer_name="saved_bytes",
    kind="value",
    reference=saved_bytes_reference,
    experiment=_saved_bytes_experiment,
    solution_code="saved_bytes = 64 * 32 * 4 + 64 * 16 * 4  # x for dL/dw, and y once (relu output = pow input)",
    hints=(
        "Go node by node: x @ w, relu, ** 2, sum. For each, ask what its backward formula needs.",
        "x @ w: dL/dw = x^T G needs x; dL/dx = G w^T would need w, but x does not require grad.",
        "relu saves its output y; y ** 2 saves its input, which is the same tensor y: count it once.",
    ),
    misconceptions=(
        Misconception("saved_weight",
                      "The matmul keeps w only to compute dL/dx, and x does not require grad: "
                      "autograd saves only what the needed gradients use.",
                      lambda s, r, args: _off_by(_W_BYTES)(s, r, args) or _off_by(_W_BYTES + _Y_BYTES)(s, r, args)),
        Misconception("double_counted",
                      "relu's saved output and the input saved by ** 2 are the same tensor y: "
                      "it costs memory once.",
                      _off_by(_Y_BYTES)),
        Misconception("elements_not_bytes",
                      "That is the number of elements; a float32 element takes 4 bytes.",
                      lambda s, r, args: isinstance(s, (int, float)) and s * _FLOAT_BYTES == r),
    ),
    wrong_answers=(
        WrongAnswer(_X_BYTES + _W_BYTES + _Y_BYTES, expect="saved_weight"),
        WrongAnswer(_X_BYTES + _W_BYTES + 2 * _Y_BYTES, expect="saved_weight"),
        WrongAnswer(_X_BYTES + 2 * _Y_BYTES, expect="double_counted"),
        WrongAnswer((_X_BYTES + _Y_BYTES) // _FLOAT_BYTES, expect="elements_not_bytes"),
        WrongAnswer(_X_BYTES, expect="wrong_value"),
    ),
))

# --- 01.tiny_tanh ------------------------------------------------------------


def tiny_tanh_grads(xs):
    def tanh(a):
        t = math.tanh(a.data)
        out = Value(t, (a,), "tanh")

        def _backward():
            a.grad += (1 - t * t) * out.grad  # local derivative times the gradient arriving at out
        out._backward = _backward
        return out

    grads = []
    for x in xs.tolist():
        a = Value(x)
        (tanh(a) * a).backward()
        grads.append(a.grad)
    return torch.tensor(grads, dtype=xs.dtype)


def _engine_names():
    """The notebook imports the tiny engine's Value; the solution needs it in scope."""
    return {"Value": Value}


def _tanh_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    size = 8 if hidden else 5
    return (torch.randn(size, generator=generator, dtype=torch.float64),)


def _wrong_tanh(backward_line):
    """The reference with its tanh backward line replaced: one mistake, nothing else changed."""
    return mutant(tiny_tanh_grads, "a.grad += (1 - t * t) * out.grad", backward_line)


def _true_parts(xs):
    """tanh(x) and its derivative at each x, the pieces of every wrong answer's formula."""
    t = torch.tanh(xs)
    return t, 1 - t * t


def _matches(student, expected):
    return torch.is_tensor(student) and student.shape == expected.shape and torch.allclose(student, expected)


def _forgot_chain(student, reference, args):
    t, local = _true_parts(args[0])
    return _matches(student, local + t)  # (1 - t^2) * 1 instead of (1 - t^2) * x, plus the mul path


def _overwrote(student, reference, args):
    t, local = _true_parts(args[0])
    return _matches(student, local * args[0])  # a.grad = ... threw away the mul path's t


def _tanh_by_torch_autograd(xs):
    """A shortcut the prompt rules out: PyTorch's autograd on torch.tanh, the tiny engine never runs."""
    x = xs.detach().clone().requires_grad_()
    (torch.tanh(x) * x).sum().backward()
    return x.grad


def _tanh_formula_typed(xs):
    """The other shortcut: d/dx [tanh(x) x] = tanh(x) + x (1 - tanh(x)^2), typed in; no engine at all."""
    t = torch.tanh(xs)
    return t + xs * (1 - t ** 2)


def _tanh_graph_without_backward(xs):
    """The graph is built with a 'tanh' node, but the derivative is typed, not backpropagated."""
    grads = []
    for x in xs.tolist():
        a = Value(x)
        t = Value(math.tanh(x), (a,), "tanh")
        t * a  # built, never backpropagated
        grads.append(t.data + x * (1 - t.data ** 2))
    return torch.tensor(grads, dtype=xs.dtype)


NOT_TORCH_AUTOGRAD = Method(
    name="the tiny engine, not PyTorch's autograd",
    holds=lambda facts: facts["engine_runs"] == 0,
    message=("your answer ran PyTorch's autograd (`backward()` on a tensor, or `torch.autograd.grad`), so the "
             "derivative came from PyTorch, not from the tanh you were to give the tiny engine. Build "
             "`Value` nodes and call the tiny engine's `backward()` instead."),
    tag="used_autograd")


register(Exercise(
    id="01.tiny_tanh",
    title="Give the tiny engine a tanh",
    answer_name="tiny_tanh_grads",
    reference=tiny_tanh_grads,
    inputs=_tanh_inputs,
    setup=_engine_names,
    # Checked on what ran: the tiny engine's backward through a 'tanh' node per input, and no torch autograd.
    method=(NOT_TORCH_AUTOGRAD, tiny_engine_op("tanh")),
    hints=(
        "Copy the shape of Value.exp: compute t = math.tanh(a.data), build out = Value(t, (a,), 'tanh'), "
        "define _backward, attach it with out._backward = _backward, return out.",
        "The chain rule: a.grad += (local derivative of tanh at a) * out.grad, where the local derivative is 1 - t**2.",
        "Use += in _backward: x appears twice in tanh(x) * x, and the * node has already added its share to a.grad.",
        "For each x in xs.tolist(): a = Value(x); (tanh(a) * a).backward(); keep a.grad. "
        "Return torch.tensor(grads, dtype=xs.dtype).",
    ),
    misconceptions=(
        Misconception("forgot_chain",
                      "Your tanh backward adds the local derivative 1 - tanh^2 but does not multiply it "
                      "by out.grad, the gradient arriving from above (the chain rule).",
                      _forgot_chain),
        Misconception("overwrote_grad",
                      "Your tanh backward assigns a.grad = ... instead of adding to it: the contribution of "
                      "the other use of x (through *) is lost. Gradients of a value used twice add up.",
                      _overwrote),
    ),
    wrong_answers=(
        WrongAnswer(_wrong_tanh("a.grad += (1 - t * t)"), expect="forgot_chain"),
        WrongAnswer(_wrong_tanh("a.grad = (1 - t * t) * out.grad"), expect="overwrote_grad"),
        WrongAnswer(_wrong_tanh("a.grad += (1 + t * t) * out.grad"), expect="wrong_value"),
        WrongAnswer(mutant(tiny_tanh_grads, "return torch.tensor(grads, dtype=xs.dtype)",
                           "grads = torch.tensor(grads, dtype=xs.dtype)"), expect="none", note="no return"),
        # The shortcuts the prompt rules out: the right numbers without the tiny engine.
        WrongAnswer(_tanh_by_torch_autograd, expect="used_autograd", note="torch autograd on torch.tanh"),
        WrongAnswer(_tanh_formula_typed, expect="typed_formula", note="the derivative typed as a formula"),
        WrongAnswer(_tanh_graph_without_backward, expect="typed_formula", note="tanh node built, no backward"),
    ),
))
