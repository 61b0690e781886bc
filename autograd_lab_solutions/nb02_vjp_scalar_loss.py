"""Exercises of notebook 02 (vector-Jacobian products and the scalar-loss rule)."""

import torch
import torch.nn.functional as F

from torch.autograd.functional import jacobian

from autograd_lab.checking import (Exercise, Misconception, WrongAnswer, backward_calls, no_autograd, own_function,
                                    register)
from autograd_lab_solutions._mutants import mutant


def _randn(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


def _matches(student, expected):
    return (torch.is_tensor(student) and student.shape == expected.shape
            and torch.allclose(student, expected, rtol=1e-7, atol=1e-7))

# --- 02.vjp ------------------------------------------------------------------
# The notebook's demo takes the VJP with respect to x; the exercise transfers the idea to the
# weight matrix W, whose Jacobian (m outputs by m x n weights) is never built.


def vjp_without_jacobian(W, x, v):
    W = W.detach().requires_grad_()
    y = torch.tanh(W @ x)
    (grad,) = torch.autograd.grad(y, W, grad_outputs=v)
    return grad


def _vjp_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    m, n = (6, 5) if hidden else (4, 3)
    return _randn(generator, m, n), _randn(generator, n), _randn(generator, m)


def _vjp_with_ones(W, x, v):
    return vjp_without_jacobian(W, x, torch.ones_like(v))


def _vjp_without_tanh(W, x, v):
    """One backward pass, as asked, but through W @ x alone: tanh's derivative is missing."""
    W = W.detach().requires_grad_()
    (grad,) = torch.autograd.grad(W @ x, W, grad_outputs=v)
    return grad


def _vjp_wrt_x(W, x, v):
    """The demo copied: the VJP with respect to x, not W."""
    x = x.detach().requires_grad_()
    (grad,) = torch.autograd.grad(torch.tanh(W @ x), x, grad_outputs=v)
    return grad


def _vjp_from_full_jacobian(W, x, v):
    """The shortcut the prompt forbids: build J (one backward pass per output row), then contract with v."""
    J = jacobian(lambda W: torch.tanh(W @ x), W)          # shape (m, m, n)
    return torch.einsum("i,ijk->jk", v, J)


def _vjp_typed_formula(W, x, v):
    """The shortcut of typing the derivative: no backward pass at all."""
    return torch.outer(v * (1 - torch.tanh(W @ x) ** 2), x)


def _vjp_backward_twice(W, x, v):
    W = W.detach().requires_grad_()
    y = torch.tanh(W @ x)
    y.backward(v, retain_graph=True)
    y.backward(v)
    return W.grad


register(Exercise(
    id="02.vjp",
    title="A VJP with respect to the weights, without building J",
    answer_name="vjp_without_jacobian",
    reference=vjp_without_jacobian,
    inputs=_vjp_inputs,
    hints=(
        "This time the leaf is W: W = W.detach().requires_grad_(), then y = torch.tanh(W @ x).",
        "y is a vector, so backward needs the cotangent: y.backward(gradient=v) or "
        "torch.autograd.grad(y, W, grad_outputs=v).",
        "The answer has W's shape: W.grad after backward, or the single element of the tuple autograd.grad returns.",
    ),
    misconceptions=(
        Misconception("ones_cotangent",
                      "This is the VJP with v = ones (y.sum().backward()), not with the given v: "
                      "pass v as gradient= or grad_outputs=.",
                      lambda s, r, args: _matches(s, _vjp_with_ones(*args))),
        Misconception("missed_local_derivative",
                      "This is the VJP of W @ x alone (the outer product of v and x): the derivative of tanh, "
                      "1 - tanh(W x)^2, is missing. Let autograd differentiate the whole f.",
                      lambda s, r, args: _matches(s, torch.outer(args[2], args[1]))),
        Misconception("wrt_x",
                      "This is the VJP with respect to x (the notebook's demo); the exercise asks for it with "
                      "respect to W, so the answer has W's shape.",
                      lambda s, r, args: _matches(s, _vjp_wrt_x(*args))),
    ),
    method=backward_calls(1),
    wrong_answers=(
        # The shortcuts: a full Jacobian (one pass per output), or the derivative typed by hand.
        WrongAnswer(_vjp_from_full_jacobian, expect="backward_calls"),
        WrongAnswer(_vjp_typed_formula, expect="backward_calls"),
        WrongAnswer(_vjp_backward_twice, expect="backward_calls", note="two passes: also doubled"),
        # One backward pass: the feedback is about the value.
        WrongAnswer(_vjp_with_ones, expect="ones_cotangent"),
        WrongAnswer(_vjp_without_tanh, expect="missed_local_derivative"),
        WrongAnswer(_vjp_wrt_x, expect="wrt_x", note="the demo copied"),
        WrongAnswer(lambda W, x, v: -vjp_without_jacobian(W, x, v), expect="sign_flipped"),
        WrongAnswer(lambda W, x, v: (vjp_without_jacobian(W, x, v), None)[1], expect="none"),
    ),
))

# --- 02.mlp_backward ---------------------------------------------------------


def mlp_backward(X, W1, b1, W2, b2, G_Z):
    H = torch.tanh(X @ W1 + b1)
    G_W2 = H.T @ G_Z
    G_b2 = G_Z.sum(0)                 # b2 is added to every row: sum over the batch
    G_H = G_Z @ W2.T
    G_A = G_H * (1 - H ** 2)          # tanh'(A) = 1 - tanh(A)^2
    G_W1 = X.T @ G_A
    G_b1 = G_A.sum(0)
    return {"W1": G_W1, "b1": G_b1, "W2": G_W2, "b2": G_b2}


def _mlp_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    N, D, H, C = (9, 5, 7, 4) if hidden else (6, 4, 5, 3)
    return (_randn(generator, N, D), _randn(generator, D, H), _randn(generator, H),
            _randn(generator, H, C), _randn(generator, C), _randn(generator, N, C))


def _mlp_without_activation_grad(X, W1, b1, W2, b2, G_Z):
    grads = mlp_backward(X, W1, b1, W2, b2, G_Z)
    G_A = G_Z @ W2.T                  # the mistake: tanh' left out
    return {**grads, "W1": X.T @ G_A, "b1": G_A.sum(0)}


def _mlp_bias_mean(X, W1, b1, W2, b2, G_Z):
    grads = mlp_backward(X, W1, b1, W2, b2, G_Z)
    return {**grads, "b1": grads["b1"] / X.shape[0], "b2": grads["b2"] / X.shape[0]}


def _mlp_activation_of_pre(X, W1, b1, W2, b2, G_Z):
    grads = mlp_backward(X, W1, b1, W2, b2, G_Z)
    A = X @ W1 + b1
    G_A = (G_Z @ W2.T) * (1 - A ** 2)  # the mistake: 1 - A^2 instead of 1 - tanh(A)^2
    return {**grads, "W1": X.T @ G_A, "b1": G_A.sum(0)}


def _dict_detector(wrong):
    """Detect a dict answer equal, key by key, to what the wrong function returns."""
    def detect(student, reference, args):
        expected = wrong(*args)
        return isinstance(student, dict) and all(_matches(student.get(k), expected[k]) for k in expected)
    return detect


def _mlp_backward_by_autograd(X, W1, b1, W2, b2, G_Z):
    """The shortcut the prompt forbids: let autograd do the backward pass."""
    leaves = {name: t.detach().requires_grad_() for name, t in {"W1": W1, "b1": b1, "W2": W2, "b2": b2}.items()}
    Z = torch.tanh(X @ leaves["W1"] + leaves["b1"]) @ leaves["W2"] + leaves["b2"]
    grads = torch.autograd.grad(Z, list(leaves.values()), grad_outputs=G_Z)
    return dict(zip(leaves, grads))


def _mlp_backward_by_jacfwd(X, W1, b1, W2, b2, G_Z):
    """The same shortcut in forward mode: jacfwd builds each Jacobian from dual tensors, no backward pass."""
    def output(W1, b1, W2, b2):
        return torch.tanh(X @ W1 + b1) @ W2 + b2
    jacobians = torch.func.jacfwd(output, argnums=(0, 1, 2, 3))(W1, b1, W2, b2)
    return {name: torch.einsum("nc,nc...->...", G_Z, J) for name, J in zip(("W1", "b1", "W2", "b2"), jacobians)}


WITHOUT_AUTOGRAD = no_autograd()   # no backward pass, no forward mode, no torch.func: judged on what ran


register(Exercise(
    id="02.mlp_backward",
    title="The MLP backward by hand",
    answer_name="mlp_backward",
    reference=mlp_backward,
    inputs=_mlp_inputs,
    hints=(
        "Recompute the forward first: H = torch.tanh(X @ W1 + b1). Then walk the table from the output down.",
        "Output layer: G_W2 = H.T @ G_Z, G_b2 = G_Z.sum(0), G_H = G_Z @ W2.T.",
        "Through tanh: G_A = G_H * (1 - H ** 2), using H = tanh(A), not A. Then G_W1 = X.T @ G_A, G_b1 = G_A.sum(0).",
    ),
    misconceptions=(
        Misconception("missing_activation_grad",
                      "The hidden layer's gradients miss tanh'(A) = 1 - H^2: multiply G_H by it element-wise "
                      "before going through W1.",
                      _dict_detector(_mlp_without_activation_grad)),
        Misconception("activation_of_preactivation",
                      "tanh'(A) is 1 - tanh(A)^2 = 1 - H^2, not 1 - A^2.",
                      _dict_detector(_mlp_activation_of_pre)),
        Misconception("bias_mean",
                      "A bias is added to every row of the batch, so its gradient is the sum over the batch, "
                      "not the mean.",
                      _dict_detector(_mlp_bias_mean)),
    ),
    method=WITHOUT_AUTOGRAD,
    wrong_answers=(
        WrongAnswer(_mlp_backward_by_autograd, expect="used_autograd"),
        WrongAnswer(_mlp_backward_by_jacfwd, expect="used_autograd", note="forward mode is autograd too"),
        WrongAnswer(_mlp_without_activation_grad, expect="missing_activation_grad"),
        WrongAnswer(_mlp_activation_of_pre, expect="activation_of_preactivation"),
        WrongAnswer(_mlp_bias_mean, expect="bias_mean"),
        WrongAnswer(lambda X, W1, b1, W2, b2, G_Z: {k: v for k, v in mlp_backward(X, W1, b1, W2, b2, G_Z).items()
                                                    if k != "b1"}, expect="structure"),
    ),
))

# --- 02.softplus -------------------------------------------------------------


class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.softplus(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)  # the VJP: incoming gradient times softplus'(x)


def _softplus_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    shape = (3, 4) if hidden else (5,)
    return (_randn(generator, *shape).requires_grad_(),)


class _softplus_by_autograd(Softplus):
    """The shortcut of a backward that does not compute the derivative: it asks autograd for it."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            (grad,) = torch.autograd.grad(F.softplus(leaf), leaf, grad_output)
        return grad


def _wrong_backward(return_line):
    """The reference Softplus with its backward's return line replaced."""
    return mutant(Softplus, "return grad_output * torch.sigmoid(x)", return_line)


register(Exercise(
    id="02.softplus",
    title="A custom Function that passes gradcheck",
    answer_name="Softplus",
    reference=Softplus,
    inputs=_softplus_inputs,
    compare=("value", "grad"),
    gradcheck=True,
    method=own_function(),   # a Function of one's own whose backward computes the derivative (judged on what ran)
    hints=(
        "forward: ctx.save_for_backward(x), then return torch.log1p(torch.exp(x)) or F.softplus(x).",
        "backward: (x,) = ctx.saved_tensors; the local derivative is torch.sigmoid(x).",
        "Return grad_output * torch.sigmoid(x): the incoming gradient times the local derivative.",
    ),
    wrong_answers=(
        WrongAnswer(_wrong_backward("return -grad_output * torch.sigmoid(x)"), expect="sign_flipped"),
        WrongAnswer(_wrong_backward("return 2 * grad_output * torch.sigmoid(x)"), expect="doubled"),
        WrongAnswer(_wrong_backward("return torch.sigmoid(x)"), expect="wrong_value"),
        WrongAnswer(_wrong_backward("return grad_output * torch.exp(x)"), expect="wrong_value"),
        # The shortcuts: PyTorch's own softplus (and its backward), or a backward that asks autograd.
        WrongAnswer(F.softplus, expect="own_function", note="Softplus = F.softplus: not a Function of one's own"),
        WrongAnswer(_softplus_by_autograd,
                    expect="own_function", note="a backward that calls autograd"),
    ),
))

# --- 02.pick_gradient --------------------------------------------------------


def pick_gradient_reference():
    """The cotangent whose VJP is the gradient of 3 * y[0] - y[2]: its weights, one per output."""
    return torch.tensor([3.0, 0.0, -1.0])


def _pick_gradient_experiment():
    """Measure the cotangent: the gradient of 3 * y[0] - y[2] with respect to y, then check it on x."""
    y = torch.zeros(3, requires_grad=True)          # y as a leaf: d(target)/dy is the weighting
    (3 * y[0] - y[2]).backward()
    cotangent = y.grad

    x = torch.randn(3, requires_grad=True)
    outputs = torch.stack([x.sum(), (x ** 2).sum(), x.prod()])
    outputs.backward(gradient=cotangent)
    (direct,) = torch.autograd.grad(3 * x.sum() - x.prod(), x)
    assert torch.allclose(x.grad, direct)
    return cotangent


def _is(values):
    return lambda s, r, args: torch.is_tensor(s) and s.shape == (3,) and torch.equal(s.float(), torch.tensor(values))


register(Exercise(
    id="02.pick_gradient",
    title="Pick the gradient= argument",
    answer_name="cotangent",
    kind="value",
    reference=pick_gradient_reference,
    experiment=_pick_gradient_experiment,
    # hint 2 reads the weights off "3 * y[0] + 0 * y[1] - 1 * y[2]": they must be the measured key
    checked_numbers={"3": lambda key: key[0].item(), "0": lambda key: key[1].item(), "1": lambda key: -key[2].item()},
    solution_code="cotangent = torch.tensor([3.0, 0.0, -1.0])",
    hints=(
        "y.backward(gradient=g) computes the gradient of (g * y).sum(), the weighted sum of the outputs.",
        "You want 3 * y[0] + 0 * y[1] - 1 * y[2]: read off one weight per element of y.",
    ),
    misconceptions=(
        Misconception("reversed",
                      "The weights are in the wrong order: g[i] multiplies y[i].",
                      _is([-1.0, 0.0, 3.0])),
        Misconception("ones_cotangent",
                      "All ones gives the gradient of y.sum(); the weights should be those of 3 * y[0] - y[2].",
                      _is([1.0, 1.0, 1.0])),
    ),
    wrong_answers=(
        WrongAnswer(torch.tensor([-1.0, 0.0, 3.0]), expect="reversed"),
        WrongAnswer(torch.tensor([1.0, 1.0, 1.0]), expect="ones_cotangent"),
        WrongAnswer(torch.tensor([-3.0, 0.0, 1.0]), expect="wrong_value",
                    note="a prediction is never told its sign is flipped: that would give the key away"),
        WrongAnswer(torch.tensor([3.0, -1.0]), expect="shape"),
    ),
))
