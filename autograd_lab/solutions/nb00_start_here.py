"""Exercises of notebooks/00_start_here.ipynb: two warm-ups."""

import torch

from autograd_lab.exercises import Exercise, Misconception, WrongAnswer, claims, register


# --- 00.cube_grad ---------------------------------------------------------------

def cube_grad(x):
    x = x.detach().requires_grad_()
    (x ** 3).sum().backward()
    return x.grad


def _cube_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    size = 7 if hidden else 4  # hidden cases use other seeds and another shape
    return (torch.randn(size, generator=generator, dtype=torch.float64),)


def _backward_twice(x):
    x = x.detach().requires_grad_()
    (x ** 3).sum().backward()
    (x ** 3).sum().backward()
    return x.grad


def _under_no_grad(x):
    x = x.detach().requires_grad_()
    with torch.no_grad():
        return torch.zeros_like(x) * (x ** 3).sum()


def _non_leaf_grad(x):
    x = (x * 1.0).requires_grad_()
    y = x * 1.0          # a non-leaf: its .grad stays None
    (y ** 3).sum().backward()
    return y.grad if y.is_leaf else None


register(Exercise(
    id="00.cube_grad",
    title="Your first gradient",
    answer_name="cube_grad",
    reference=cube_grad,
    inputs=_cube_inputs,
    points=1,
    hints=(
        "Make x a leaf that requires grad: x = x.detach().requires_grad_().",
        "Build a scalar from x ** 3 with .sum(), call .backward() on it, and return x.grad.",
    ),
    wrong_answers=(
        WrongAnswer(_backward_twice, expect="doubled", note="backward called twice: gradients accumulate"),
        WrongAnswer(lambda x: 6 * x ** 2, expect="doubled"),
        WrongAnswer(lambda x: -3 * x ** 2, expect="sign_flipped"),
        WrongAnswer(lambda x: None, expect="none"),
        WrongAnswer(_non_leaf_grad, expect="none", note=".grad of a non-leaf tensor"),
        WrongAnswer(lambda x: x ** 2, expect="scaled", note="forgot the factor 3 of the power rule"),
        WrongAnswer(_under_no_grad, expect="all_zeros"),
        WrongAnswer(lambda x: 3 * x ** 2 + 1, expect="wrong_value"),
        WrongAnswer(lambda x: (3 * x ** 2).float(), expect="dtype"),
        WrongAnswer(lambda x: (3 * x ** 2).sum(), expect="shape"),
    ),
))


# --- 00.needs_grad ----------------------------------------------------------------

def needs_grad():
    # After loss.backward(): .grad is filled only on leaves created with requires_grad=True.
    return {"w": True, "x": False, "b": True, "h": False}


register(Exercise(
    id="00.needs_grad",
    title="Which tensors get a .grad?",
    kind="value",
    answer_name="needs_grad",
    reference=needs_grad,
    solution_code='needs_grad = {"w": True, "x": False, "b": True, "h": False}',
    points=1,
    hints=(
        "Only leaf tensors (made by you, not by an operation) keep a .grad.",
        "Of the leaves, only those created with requires_grad=True get one.",
    ),
    misconceptions=(
        Misconception(
            "non_leaf",
            "h = w * x is an intermediate (non-leaf) tensor: autograd fills .grad only on leaves "
            "that require grad, so h.grad stays None. Call h.retain_grad() before backward to keep it.",
            claims("h"),
        ),
        Misconception(
            "no_requires_grad",
            "x was created without requires_grad=True, so autograd computes no gradient for it "
            "and x.grad stays None.",
            claims("x"),
        ),
    ),
    wrong_answers=(
        WrongAnswer({"w": True, "x": False, "b": True, "h": True}, expect="non_leaf"),
        WrongAnswer({"w": True, "x": True, "b": True, "h": False}, expect="no_requires_grad"),
        WrongAnswer({"w": True, "x": True, "b": True, "h": True}, expect="non_leaf"),
        WrongAnswer({"w": True, "x": False, "b": False, "h": False}, expect="wrong_value"),
        WrongAnswer({"w": True, "x": False, "b": True}, expect="structure", note="a missing key"),
        WrongAnswer({"w": True, "x": False, "b": True, "h": False, "loss": False}, expect="structure"),
        WrongAnswer(["w", "b"], expect="structure"),
    ),
))
