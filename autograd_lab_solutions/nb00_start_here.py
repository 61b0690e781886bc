"""Exercises of notebooks/00_start_here.ipynb: two warm-ups."""

import warnings

import torch

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, claims, register, uses_autograd


# --- 00.cube_grad ---------------------------------------------------------------

def cube_grad(x):
    x = x.detach().requires_grad_()
    (x ** 3).sum().backward()
    return x.grad


def _cube_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    size = 7 if hidden else 4  # hidden cases use other seeds and another shape
    return (torch.randn(size, generator=generator, dtype=torch.float64),)


def _autograd_of(loss_of):
    """A wrong answer that does use autograd, on the wrong loss: only its value is wrong."""
    def answer(x):
        x = x.detach().requires_grad_()
        loss_of(x).backward()
        return x.grad
    return answer


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
    method=uses_autograd(),
    wrong_answers=(
        # The shortcut the prompt forbids: the right numbers, typed as a formula.
        WrongAnswer(lambda x: 3 * x ** 2, expect="typed_formula", note="the formula 3x^2 typed by hand"),
        WrongAnswer(lambda x: 3 * x * x, expect="typed_formula"),
        WrongAnswer(_under_no_grad, expect="typed_formula", note="no backward pass ran"),
        # Near misses: autograd was used, so the feedback must be about the value, not the method.
        WrongAnswer(_backward_twice, expect="doubled", note="backward called twice: gradients accumulate"),
        WrongAnswer(_autograd_of(lambda x: (2 * x ** 3).sum()), expect="doubled"),
        WrongAnswer(_autograd_of(lambda x: -(x ** 3).sum()), expect="sign_flipped"),
        WrongAnswer(_non_leaf_grad, expect="none", note=".grad of a non-leaf tensor"),
        WrongAnswer(_autograd_of(lambda x: (x ** 3).sum() / 3), expect="scaled", note="divided by the exponent"),
        WrongAnswer(_autograd_of(lambda x: (x ** 3 + x).sum()), expect="wrong_value"),
        WrongAnswer(lambda x: _autograd_of(lambda x: (x ** 3).sum())(x).float(), expect="dtype"),
        WrongAnswer(lambda x: _autograd_of(lambda x: (x ** 3).sum())(x).sum(), expect="shape"),
    ),
))


# --- 00.needs_grad ----------------------------------------------------------------

def _grads_after_backward(**tensors):
    """{name: whether .grad is not None} (reading a non-leaf's .grad warns; the answer is still None)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return {name: tensor.grad is not None for name, tensor in tensors.items()}


def _needs_grad_experiment():
    """The notebook's computation, run: which tensors have a .grad after loss.backward()."""
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    b = torch.tensor(0.5, requires_grad=True)
    h = w * x
    loss = (h + b).sum()
    loss.backward()
    return _grads_after_backward(w=w, x=x, b=b, h=h)


def needs_grad():
    # After loss.backward(): .grad is filled only on leaves created with requires_grad=True.
    return {"w": True, "x": False, "b": True, "h": False}


register(Exercise(
    id="00.needs_grad",
    title="Which tensors get a .grad?",
    kind="value",
    answer_name="needs_grad",
    reference=needs_grad,
    experiment=_needs_grad_experiment,
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
