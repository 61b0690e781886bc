"""Exercises of notebook 02 (vector-Jacobian products and the scalar-loss rule)."""

import math

import numpy

import torch
import torch.nn.functional as F

from torch.autograd.functional import jacobian

from autograd_lab.checking import (Exercise, Method, Misconception, WrongAnswer, autograd_derivative, backward_calls,
                                    no_autograd, no_difference_quotient, no_jacobian, own_derivatives, own_function,
                                    register, uses_autograd)
from autograd_lab.checking.methods import EXACT_ARITHMETIC, complex_numbers
from autograd_lab.checking.variation import choose, generator
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
    # The shape of W varies over the public seeds, so an answer that hard-codes the demo's 4 x 3 fails in check().
    m, n = choose(seed, ((4, 3), (5, 2), (3, 5)), hidden=hidden, hidden_choices=((6, 5), (2, 7)))
    g = generator(seed)
    return _randn(g, m, n), _randn(g, n), _randn(g, m)


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


def _vjp_formula_after_sham_backward(W, x, v):
    """One backward pass "for show" on an unrelated scalar, then the derivative typed by hand."""
    torch.zeros((), requires_grad=True).backward()
    return torch.outer(v * (1 - torch.tanh(W @ x) ** 2), x)


def _vjp_laundered_as_cotangent(W, x, v):
    """Round 3 (B1): the typed closed form as the cotangent of a backward pass through `Wl * 1`."""
    Wl = W.detach().requires_grad_()
    (Wl * 1).backward(gradient=torch.outer(v * (1 - torch.tanh(W @ x) ** 2), x))
    return Wl.grad


def _vjp_laundered_local_derivative(W, x, v):
    """tanh's derivative typed by hand and folded into the cotangent of W @ x (a linear graph)."""
    Wl = W.detach().requires_grad_()
    (Wl @ x).backward(gradient=v * (1 - torch.tanh(W @ x) ** 2))
    return Wl.grad


def _vjp_typed_from_second_leaf(W, x, v):
    """Adversarial round 5 (vjs_3): the typed VJP computed from a second leaf z (a live graph) as Wl's weight."""
    Wl = W.detach().clone().requires_grad_()
    z = W.detach().clone().requires_grad_()
    (Wl * torch.outer(v * (1 - torch.tanh(z @ x) ** 2), x)).sum().backward(inputs=[Wl])
    return Wl.grad


def _vjp_laundered_through_round(W, x, v):
    """Round 4 (A1): tanh's derivative computed from the leaf, made a constant by `round` (derivative 0)."""
    Wl = W.detach().clone().requires_grad_()
    z = Wl @ x
    scale = 2.0 ** 40
    weight = torch.round(v * (1 - torch.tanh(z) ** 2) * scale) / scale
    (z * weight).sum().backward()
    return Wl.grad


def _vjp_linear_part_times_formula(W, x, v):
    """Round 4 (A4): the backward of the linear part W @ x only, tanh' typed from the leaf and multiplied in."""
    Wl = W.detach().clone().requires_grad_()
    (Wl @ x).backward(v)
    return (Wl.grad * (1 - torch.tanh(Wl @ x) ** 2)[:, None]).detach()


def _vjp_vectorized_jacobian(W, x, v):
    """The full (m, m, n) Jacobian in one vmapped backward pass, then contracted with v."""
    J = jacobian(lambda W: torch.tanh(W @ x), W, vectorize=True)
    return torch.einsum("i,ijk->jk", v, J)


def _vjp_jacrev(W, x, v):
    """torch.func.jacrev: the full Jacobian again, one vmapped backward pass."""
    J = torch.func.jacrev(lambda W: torch.tanh(W @ x))(W)
    return torch.einsum("i,ijk->jk", v, J)


def _vjp_on_callers_W(W, x, v):
    """Right value, but the caller's W is switched to requires_grad (the prompt: do not modify the arguments)."""
    W.requires_grad_()
    (grad,) = torch.autograd.grad(torch.tanh(W @ x), W, grad_outputs=v)
    return grad


def _vjp_zeroes_v(W, x, v):
    grad = vjp_without_jacobian(W, x, v)
    v.zero_()
    return grad


def _vjp_demo_shape(W, x, v):
    """The demo's 4 x 3 hard-coded."""
    W = W.detach().reshape(4, 3).requires_grad_()
    (grad,) = torch.autograd.grad(torch.tanh(W @ x), W, grad_outputs=v)
    return grad


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
        "The tensor to differentiate with respect to is now the weight matrix, not x. Make a leaf of your own "
        "from it, so that the caller's tensor is left as it was, and compute f with that leaf.",
        "The output has one entry per row of W, so backward needs a cotangent: look at the `gradient=` argument "
        "of `backward` (or `grad_outputs=` of `torch.autograd.grad`) and at which vector the exercise gives you.",
        "The answer has W's shape: it is what the single backward pass leaves for your leaf.",
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
    # One backward pass whose result is returned, and nothing of the Jacobian's size (m x m x n, more than W).
    # The Jacobian is judged first (adversarial round 7): built row by row it also runs m backward passes,
    # and "ran 4 backward passes" did not say what was wrong with them.
    method=(no_jacobian(limit="input"), backward_calls(1), uses_autograd(), autograd_derivative()),
    wrong_answers=(
        # The shortcuts: a full Jacobian (row by row, vectorized, or jacrev), or the derivative typed by hand.
        WrongAnswer(_vjp_from_full_jacobian, expect="jacobian",
                    note="one backward pass per row: named as the Jacobian it builds (adversarial round 7)"),
        WrongAnswer(_vjp_vectorized_jacobian, expect="jacobian", note="jacobian(..., vectorize=True): one pass"),
        WrongAnswer(_vjp_jacrev, expect="jacobian", note="torch.func.jacrev: one pass"),
        WrongAnswer(_vjp_typed_formula, expect="backward_calls"),
        WrongAnswer(_vjp_formula_after_sham_backward, expect="typed_formula", note="a backward pass for show"),
        WrongAnswer(_vjp_laundered_as_cotangent, expect="laundered_formula", note="round 3 B1: (Wl * 1).backward(typed)"),
        WrongAnswer(_vjp_laundered_local_derivative, expect="laundered_formula", note="1 - tanh^2 typed into gradient="),
        WrongAnswer(_vjp_laundered_through_round, expect="laundered_formula", note="round 4 A1: round, derivative 0"),
        WrongAnswer(_vjp_typed_from_second_leaf, expect="laundered_formula", note="round 5 vjs_3: from a second leaf"),
        WrongAnswer(_vjp_linear_part_times_formula, expect="laundered_formula", note="round 4 A4: W @ x, then tanh'"),
        WrongAnswer(_vjp_on_callers_W, expect="modified_input"),
        WrongAnswer(_vjp_zeroes_v, expect="modified_input"),
        WrongAnswer(_vjp_demo_shape, expect="error", note="the demo's shape hard-coded"),
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
    # The sizes vary over the public seeds (N == C and D == H in none of them), so transposes and
    # hard-coded shapes fail in check().
    N, D, H, C = choose(seed, ((6, 4, 5, 3), (3, 6, 2, 5), (5, 2, 7, 4)), hidden=hidden,
                        hidden_choices=((9, 5, 7, 4), (4, 3, 6, 2)))
    g = generator(seed)
    return (_randn(g, N, D), _randn(g, D, H), _randn(g, H), _randn(g, H, C), _randn(g, C), _randn(g, N, C))


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


def _mlp_backward_by_private_engine(X, W1, b1, W2, b2, G_Z):
    """Autograd through a private engine object, which a counting stand-in would not see."""
    leaves = [t.detach().requires_grad_() for t in (W1, b1, W2, b2)]
    Z = torch.tanh(X @ leaves[0] + leaves[1]) @ leaves[2] + leaves[3]
    torch._C._ImperativeEngine().run_backward((Z,), (G_Z,), False, False, tuple(leaves), False, False)
    return dict(zip(("W1", "b1", "W2", "b2"), (leaf.grad for leaf in leaves)))


def _mlp_backward_forging_the_count(X, W1, b1, W2, b2, G_Z):
    """Autograd, then the engine's run counter set back to zero."""
    from torch.autograd.variable import Variable
    grads = _mlp_backward_by_autograd(X, W1, b1, W2, b2, G_Z)
    try:
        Variable._execution_engine.runs = 0
    except (AttributeError, TypeError):
        pass
    return grads


def _mlp_backward_by_finite_differences(X, W1, b1, W2, b2, G_Z):
    """No autograd, no chain rule: central differences of L = (G_Z * Z).sum(), one parameter entry at a time."""
    params = {"W1": W1, "b1": b1, "W2": W2, "b2": b2}

    def loss(p):
        return (G_Z * (torch.tanh(X @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"])).sum()

    grads = {}
    for name, tensor in params.items():
        grad = torch.zeros_like(tensor)
        for i in range(tensor.numel()):
            for sign in (1, -1):
                moved = {key: value.clone() for key, value in params.items()}
                moved[name].view(-1)[i] += sign * 1e-6
                grad.view(-1)[i] += sign * loss(moved) / 2e-6
        grads[name] = grad
    return grads


def _mlp_backward_by_tanh_kernel(X, W1, b1, W2, b2, G_Z):
    """The chain rule by hand, except tanh's derivative: PyTorch's own kernel for it (adversarial round 2, E1)."""
    H = torch.tanh(X @ W1 + b1)
    G_A = torch.ops.aten.tanh_backward(G_Z @ W2.T, H)
    return {"W1": X.T @ G_A, "b1": G_A.sum(0), "W2": H.T @ G_Z, "b2": G_Z.sum(0)}


def _mlp_backward_by_sigmoid_kernel(X, W1, b1, W2, b2, G_Z):
    """tanh(a) = 2 sigmoid(2a) - 1, so tanh'(a) = 4 sigmoid'(2a): the derivative from sigmoid's kernel."""
    A = X @ W1 + b1
    H = torch.tanh(A)
    G_A = 4 * torch.ops.aten.sigmoid_backward(G_Z @ W2.T, torch.sigmoid(2 * A))
    return {"W1": X.T @ G_A, "b1": G_A.sum(0), "W2": H.T @ G_Z, "b2": G_Z.sum(0)}


def _mlp_backward_by_convolution_kernel(X, W1, b1, W2, b2, G_Z):
    """Each layer's three products from the convolution's backward kernel (a linear layer is a 1-wide convolution)."""
    def layer_backward(inputs, weight, grad_out):
        grad_in, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
            grad_out.unsqueeze(-1), inputs.unsqueeze(-1), weight.T.unsqueeze(-1), [weight.shape[1]],
            [1], [0], [1], False, [0], 1, [True, True, True])
        return grad_in.squeeze(-1), grad_weight.squeeze(-1).T, grad_bias
    H = torch.tanh(X @ W1 + b1)
    G_H, G_W2, G_b2 = layer_backward(H, W2, G_Z)
    _, G_W1, G_b1 = layer_backward(X, W1, G_H * (1 - H ** 2))
    return {"W1": G_W1, "b1": G_b1, "W2": G_W2, "b2": G_b2}


def _mlp_backward_by_batched_differences(X, W1, b1, W2, b2, G_Z):
    """Central differences with every perturbation of a parameter in one batched forward pass (per sign)."""
    params = {"W1": W1, "b1": b1, "W2": W2, "b2": b2}
    grads = {}
    for name, tensor in params.items():
        steps = torch.eye(tensor.numel(), dtype=tensor.dtype).view(-1, *tensor.shape) * 1e-6
        losses = []
        for sign in (1, -1):
            moved = {key: value.expand(steps.shape[0], *value.shape) for key, value in params.items()}
            moved[name] = tensor + sign * steps
            Z = torch.tanh(X @ moved["W1"] + moved["b1"].unsqueeze(1)) @ moved["W2"] + moved["b2"].unsqueeze(1)
            losses.append((G_Z * Z).sum((1, 2)))
        grads[name] = ((losses[0] - losses[1]) / 2e-6).view(tensor.shape)
    return grads


WITHOUT_AUTOGRAD = no_autograd()   # no backward pass, no forward mode, no torch.func: judged on what ran
# The cheap-gradient principle: a backward pass costs a few forward passes, however it is written (batched, one
# example at a time, one hidden unit at a time), while a numerical derivative costs one forward pass per parameter
# entry (29 to 74 here). Judged on the work the answer's ops did (``facts["work"]``: elements produced plus the
# multiply-adds of products), against F = (N + 1)(D*H + H*C) + N(D + H + C), about one forward pass with its
# weights: every chain-rule style measured stays under 8 F, every numerical derivative (complex step, central
# differences with tanh and the products renamed, batched or chunked perturbations) above 60 F, the leanest
# imaginable forward difference near 25 F. Also no complex tensor (a complex step) and no batch of perturbed
# copies (a tensor more than 8 times the largest argument and more than N per-example Jacobians of the widest
# layer, N * max(D, H, C)^2: the chain rule with explicit diagonal Jacobians, diag_embed(1 - H^2), builds N * H^2,
# adversarial round 7, 02-3). One line of subscripts, no global names: a release carries it as text.


def _chain_rule_why(facts):
    """Which of CHAIN_RULE's three measures failed, in words (``None``: the general message)."""
    N, (D, H), C = facts["input_shapes"][0][0], facts["input_shapes"][1], facts["input_shapes"][3][1]
    if facts["complex_outputs"]:
        return "your answer computed with complex tensors: a complex-step derivative is numerical."
    if facts.get("complex_values") or facts.get("complex_code"):
        return complex_numbers(facts)
    if facts["largest_numel"] > max(8 * facts["largest_input_numel"], N * max(D, H, C) ** 2):
        return (f"your answer made a tensor of {facts['largest_numel']} elements, more than {N} per-example "
                f"Jacobians of the widest layer ({N} x {max(D, H, C)} x {max(D, H, C)}): a batch of perturbed "
                "copies of the parameters is a numerical derivative. The backward pass needs tensors the size "
                "of the forward pass's.")
    return None


CHAIN_RULE = Method(
    name="the chain rule (no numerical derivative)",
    holds=lambda facts: facts["complex_outputs"] == 0 and facts["complex_values"] == [] and facts["complex_code"] == [] and (facts["largest_numel"] <= 8 * facts["largest_input_numel"] or facts["largest_numel"] <= facts["input_shapes"][0][0] * facts["input_shapes"][1][0] ** 2 or facts["largest_numel"] <= facts["input_shapes"][0][0] * facts["input_shapes"][1][1] ** 2 or facts["largest_numel"] <= facts["input_shapes"][0][0] * facts["input_shapes"][3][1] ** 2) and facts["work"] <= 16 * ((facts["input_shapes"][0][0] + 1) * (facts["input_shapes"][1][0] * facts["input_shapes"][1][1] + facts["input_shapes"][3][0] * facts["input_shapes"][3][1]) + facts["input_shapes"][0][0] * (facts["input_shapes"][1][0] + facts["input_shapes"][1][1] + facts["input_shapes"][3][1])),
    explain=_chain_rule_why, watch=EXACT_ARITHMETIC,    # ``held:``: the complex numbers the answer's code holds
    message=("your answer did the work of many forward passes (a backward pass by the chain rule costs a few, even "
             "one example or one hidden unit at a time), made a tensor larger than one Jacobian per example (a "
             "batch of perturbed copies of its parameters), or computed with complex numbers: that is a numerical "
             "derivative, not the backward pass. Recompute the forward pass once and apply the chain rule, one "
             "layer at a time, from the output down."),
    tag="finite_differences")
# PyTorch's derivative kernels (aten ops named *_backward: tanh_backward, sigmoid_backward, convolution_backward...)
# are the local derivatives autograd itself would run; called directly they do the exercise's one non-trivial step
# (as aten::softplus_backward would for 02.softplus, whose own_function() refuses it the same way). The same rules
# written in Python (torch._decomp.decompositions.tanh_backward runs aten::mul and aten::sub) are refused by what ran.
OWN_DERIVATIVES = own_derivatives()   # 01.tiny_tanh asks for the same (methods.own_derivatives)
# tanh' by a difference quotient of tanh (or of the exponentials it is written with) costs two cheap evaluations,
# inside the work budget (adversarial round 6: full marks): judged on the points tanh & co. ran at, by torch,
# NumPy, math or mpmath (methods.no_difference_quotient, the mechanism 01.tiny_tanh's points use).
NO_DIFFERENCE_QUOTIENT = no_difference_quotient(("tanh", "exp", "expm1", "cosh", "sinh", "sigmoid"))


def _mlp_backward_by_decomposition(X, W1, b1, W2, b2, G_Z):
    """The chain rule by hand, tanh's derivative from PyTorch's Python rule (adv-00-04-r3 A2)."""
    import torch._decomp.decompositions as rules

    H = torch.tanh(X @ W1 + b1)
    G_A = rules.tanh_backward(G_Z @ W2.T, H)
    return {"W1": X.T @ G_A, "b1": G_A.sum(0), "W2": H.T @ G_Z, "b2": G_Z.sum(0)}


def _mlp_numerical(step, evaluate, perturbations):
    """A numerical derivative of L = (G_Z * Z).sum() that renames tanh and the products (adv-00-04-r3 A3).

    ``evaluate(params)`` is L; ``perturbations`` the signed steps; tanh is 1 - 2 / (e^(2a) + 1) and a product
    a broadcast multiply and sum, so no aten::tanh or aten::mm runs.
    """
    def backward(X, W1, b1, W2, b2, G_Z):
        def mm(a, b):
            return (a[:, :, None] * b[None, :, :]).sum(1)

        def loss(p):
            H = 1 - 2 / (torch.pow(math.e, 2 * (mm(X.to(p[0].dtype), p[0]) + p[1])) + 1)
            return ((mm(H, p[2]) + p[3]) * G_Z).sum()
        params, grads = [W1, b1, W2, b2], {}
        for i, name in enumerate(("W1", "b1", "W2", "b2")):
            values = []
            for j in range(params[i].numel()):
                total = 0
                for weight, delta in perturbations:
                    moved = [p.to(delta.dtype) for p in params]
                    bump = torch.zeros(params[i].numel(), dtype=delta.dtype)
                    bump[j] = delta
                    moved[i] = moved[i] + bump.view(params[i].shape)
                    total = total + weight * evaluate(loss(moved))
                values.append(float(total / step))
            grads[name] = torch.tensor(values, dtype=params[i].dtype).view(params[i].shape)
        return grads
    return backward


def _mlp_with_tanh_slope(slope):
    """The chain rule by hand, tanh'(A) from ``slope(A)`` (a numerical derivative, in the variants below)."""
    def backward(X, W1, b1, W2, b2, G_Z):
        A = X @ W1 + b1
        H = torch.tanh(A)
        G_A = (G_Z @ W2.T) * slope(A)
        return {"W1": X.T @ G_A, "b1": G_A.sum(0), "W2": H.T @ G_Z, "b2": G_Z.sum(0)}
    return backward


def _slope_by_torch(A, h=1e-6):
    """Adversarial round 6 (attempt 4): a central difference of torch.tanh."""
    return (torch.tanh(A + h) - torch.tanh(A - h)) / (2 * h)


def _slope_by_numpy(A, h=1e-6):
    """The same quotient with its points made and evaluated by NumPy."""
    import numpy

    a = A.numpy()
    return torch.from_numpy((numpy.tanh(a + h) - numpy.tanh(a - h)) / (2 * h))


def _slope_by_python_floats(A, h=1e-6):
    """The same quotient in Python floats, entry by entry, with math.tanh."""
    return torch.tensor([(math.tanh(a + h) - math.tanh(a - h)) / (2 * h) for a in A.reshape(-1).tolist()],
                        dtype=A.dtype).reshape(A.shape)


def _slope_in_decimal(A):
    """Adversarial round 8 (m_s5, cheaper): tanh' by a central difference in 50-digit ``decimal``, entry by entry."""
    import decimal
    with decimal.localcontext() as context:
        context.prec = 50
        h = decimal.Decimal(10) ** -20

        def tanh(v):
            e = (2 * v).exp()
            return (e - 1) / (e + 1)
        slopes = [float((tanh(decimal.Decimal(a) + h) - tanh(decimal.Decimal(a) - h)) / (2 * h))
                  for a in A.reshape(-1).tolist()]
    return torch.tensor(slopes, dtype=A.dtype).reshape(A.shape)


def _slope_by_numpy_points_torch_tanh(A, h=1e-6):
    """Points made in NumPy (no torch op moves a value), evaluated by torch.tanh."""
    a = A.numpy()
    return (torch.tanh(torch.from_numpy(a + h)) - torch.tanh(torch.from_numpy(a - h))) / (2 * h)


def _slope_by_forward_difference_of_exp(A, h=1e-7):
    """A forward difference of tanh written with exp, the point moved by a relative step."""
    def tanh(u):
        return 1 - 2 / (torch.exp(2 * u) + 1)
    return (tanh(A * (1 + h)) - tanh(A)) / (A * h)


def _richardson(f, A, steps=(1e-2, 5e-3, 2.5e-3)):
    """Central differences of ``f`` at ``A`` extrapolated to step zero (Richardson): accurate to about 1e-11 with
    steps of 1e-2, ten times the 0.1 % a plain quotient's step stays under (adv-00-04-r8 F4, F5)."""
    D = [(f(A + h) - f(A - h)) / (2 * h) for h in steps]
    R = [(4 * D[i + 1] - D[i]) / 3 for i in range(len(D) - 1)]
    return (16 * R[1] - R[0]) / 15


def _slope_by_richardson_powers(A):
    """Adversarial round 9 (adv-00-04-r8 F4): tanh' by Richardson differences of tanh written with ``torch.e **``
    (no tanh or exp call: ``aten::pow``'s exponent is a watched point, ``facts._POWERS``)."""
    return _richardson(lambda u: 1 - 2 / (torch.e ** (2 * u) + 1), A)


def _slope_by_richardson_inline(A):
    """The same with the powers written inline, no function called at the stepped points."""
    D = [((1 - 2 / (torch.e ** (2 * (A + h)) + 1)) - (1 - 2 / (torch.e ** (2 * (A - h)) + 1))) / (2 * h)
         for h in (1e-2, 5e-3, 2.5e-3)]
    return (16 * (4 * D[2] - D[1]) / 3 - (4 * D[1] - D[0]) / 3) / 15


def _slope_by_numpy_complex_step(A, h=1e-30):
    """Adversarial round 10 (adv-00-04-r9 F4): tanh'(A) by a complex step in NumPy, the unit from np.emath.sqrt, the
    imaginary part read with getattr (``tape._complex_kind``: the values, however they were made)."""
    from autograd_lab_solutions.nb01_dynamic_graph import _IMAGINARY, _UNIT

    return torch.from_numpy(getattr(numpy.tanh(A.numpy() + _UNIT * h), _IMAGINARY) / h)


def _slope_by_dual_tensors(A):
    """Adversarial round 10 (adv-00-04-r9 F5): tanh'(A) from dual numbers of one's own over tensors, tanh(|A|) as
    (1 - e) / (1 + e) with e = exp(-2|A|) (``tape._own_arithmetic``)."""
    from autograd_lab_solutions.nb01_dynamic_graph import _Dual, _dual_exp

    e = _dual_exp(_Dual(-2 * A.abs(), -2 * torch.sign(A)), torch.exp)
    return ((1 - e) / (1 + e)).part * torch.sign(A)


_mlp_backward_by_complex_step = _mlp_numerical(1e-30, lambda loss: loss.imag, [(1.0, torch.tensor(1e-30j))])
_mlp_backward_by_renamed_differences = _mlp_numerical(
    2e-5, lambda loss: loss, [(1.0, torch.tensor(1e-5, dtype=torch.float64)), (-1.0, torch.tensor(-1e-5, dtype=torch.float64))])


register(Exercise(
    id="02.mlp_backward",
    title="The MLP backward by hand",
    answer_name="mlp_backward",
    reference=mlp_backward,
    inputs=_mlp_inputs,
    hints=(
        "Recompute the forward pass first: the backward formulas need the hidden activations. Then walk the "
        "chain rule from the output down, one operation at a time, and check every shape against its tensor.",
        "The chain-rule section's table covers the output layer. The first layer follows the same pattern one "
        "level down, once the gradient has passed through tanh.",
        "Passing through tanh multiplies element-wise by its derivative; write the derivative with tanh's output, "
        "which you already computed, rather than its input. A bias is added to every row of the batch.",
    ),
    misconceptions=(
        Misconception("missing_activation_grad",
                      "The hidden layer's gradients skip tanh: the gradient reaching H goes through W1 as if the "
                      "activation were the identity. Going back through tanh multiplies element-wise by tanh's own "
                      "derivative first.",
                      _dict_detector(_mlp_without_activation_grad)),
        Misconception("activation_of_preactivation",
                      "Your tanh derivative is computed from the pre-activation A where it is written with tanh's "
                      "output, the H you already computed.",
                      _dict_detector(_mlp_activation_of_pre)),
        Misconception("bias_mean",
                      "A bias is added to every row of the batch, so its gradient is the sum over the batch, "
                      "not the mean.",
                      _dict_detector(_mlp_bias_mean)),
    ),
    method=(WITHOUT_AUTOGRAD, CHAIN_RULE, OWN_DERIVATIVES, NO_DIFFERENCE_QUOTIENT),
    wrong_answers=(
        WrongAnswer(_mlp_backward_by_autograd, expect="used_autograd"),
        WrongAnswer(_mlp_backward_by_finite_differences, expect="finite_differences"),
        WrongAnswer(_mlp_backward_by_batched_differences, expect="finite_differences", note="one batched forward"),
        WrongAnswer(_mlp_backward_by_jacfwd, expect="used_autograd", note="forward mode is autograd too"),
        WrongAnswer(_mlp_backward_by_private_engine, expect="used_autograd", note="the engine called directly"),
        WrongAnswer(_mlp_backward_forging_the_count, expect="used_autograd", note="the engine's counter reset"),
        WrongAnswer(_mlp_backward_by_tanh_kernel, expect="library_derivative", note="aten::tanh_backward"),
        WrongAnswer(_mlp_backward_by_sigmoid_kernel, expect="library_derivative", note="aten::sigmoid_backward"),
        WrongAnswer(_mlp_backward_by_convolution_kernel, expect="library_derivative",
                    note="aten::convolution_backward for each layer's products"),
        WrongAnswer(_mlp_backward_by_decomposition, expect="library_derivative",
                    note="torch._decomp's tanh_backward (adv-00-04-r3 A2)"),
        WrongAnswer(_mlp_backward_by_complex_step, expect="finite_differences",
                    note="complex step, tanh and products renamed (adv-00-04-r3 A3)"),
        WrongAnswer(_mlp_backward_by_renamed_differences, expect="finite_differences",
                    note="real central differences, tanh and products renamed"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_torch), expect="difference_quotient",
                    note="adversarial round 6 (attempt 4): tanh' by a central difference of torch.tanh, full marks"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_numpy), expect="difference_quotient",
                    note="the quotient in NumPy"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_python_floats), expect="difference_quotient",
                    note="the quotient in Python floats with math.tanh"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_numpy_points_torch_tanh), expect="difference_quotient",
                    note="points moved in NumPy, evaluated by torch.tanh"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_forward_difference_of_exp), expect="difference_quotient",
                    note="forward difference of tanh written with exp, relative step"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_richardson_powers), expect="difference_quotient",
                    note="adversarial round 9 (adv-00-04-r8 F4): Richardson differences, tanh via torch.e **"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_richardson_inline), expect="difference_quotient",
                    note="the same written inline: torch's ops are dispatched, no helper needed"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_numpy_complex_step), expect="finite_differences",
                    note="adversarial round 10 (adv-00-04-r9 F4): complex step in NumPy, getattr(.., 'ima' + 'g')"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_by_dual_tensors), expect="library_derivative",
                    note="adversarial round 10 (adv-00-04-r9 F5): dual numbers of its own over tensors"),
        WrongAnswer(_mlp_with_tanh_slope(_slope_in_decimal), expect="library_derivative",
                    note="adversarial round 8 (m_s5): exact-arithmetic quotient (methods.EXACT_ARITHMETIC)"),
        WrongAnswer(_mlp_without_activation_grad, expect="missing_activation_grad"),
        WrongAnswer(_mlp_activation_of_pre, expect="activation_of_preactivation"),
        WrongAnswer(_mlp_bias_mean, expect="bias_mean"),
        WrongAnswer(lambda X, W1, b1, W2, b2, G_Z: {k: v for k, v in mlp_backward(X, W1, b1, W2, b2, G_Z).items()
                                                    if k != "b1"}, expect="structure"),
        WrongAnswer(lambda *args: {k: v.numpy() for k, v in mlp_backward(*args).items()}, expect="structure",
                    note="adv-00-04-r9 F12: a dict of NumPy arrays; the prompt asks for tensors, the message says how"),
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
    shape = choose(seed, ((5,), (2, 3), (4, 1, 2)), hidden=hidden, hidden_choices=((3, 4), (7,)))
    return (_randn(generator(seed), *shape).requires_grad_(),)


def _softplus_plain_function(x):
    """Not a Function at all: PyTorch's softplus, with PyTorch's backward."""
    return F.softplus(x)


class _softplus_apply_alias(torch.autograd.Function):
    """A Function subclass whose apply is PyTorch's softplus: no forward or backward of its own ran."""
    apply = staticmethod(F.softplus)


class _softplus_by_library_kernel(Softplus):
    """A backward that calls PyTorch's own derivative kernel instead of computing the derivative."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return torch.ops.aten.softplus_backward(grad_output, x, 1, 20)


class _softplus_by_decomposition(Softplus):
    """A backward that calls PyTorch's derivative rule written in Python (adv-00-04-r3, 02.mlp_backward A2)."""

    @staticmethod
    def backward(ctx, grad_output):
        import torch._decomp.decompositions as rules

        (x,) = ctx.saved_tensors
        return rules.softplus_backward(grad_output, x, 1, 20)


class _softplus_by_autograd(Softplus):
    """The shortcut of a backward that does not compute the derivative: it asks autograd for it."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            (grad,) = torch.autograd.grad(F.softplus(leaf), leaf, grad_output)
        return grad


class _softplus_by_difference_quotient(Softplus):
    """Adversarial round 5 (sps_2): a central difference quotient of softplus in backward."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        h = 1e-6
        return grad_output * (torch.log1p(torch.exp(x + h)) - torch.log1p(torch.exp(x - h))) / (2 * h)


class _softplus_by_scaled_difference(Softplus):
    """The same quotient with no x + h: e^x scaled by e^h and e^-h."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        return grad_output * (torch.log1p(e * math.exp(1e-6)) - torch.log1p(e * math.exp(-1e-6))) / 2e-6


class _softplus_by_complex_step(Softplus):
    """Adversarial round 5 (sps_4): the complex step, exact to rounding."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.log1p(torch.exp(x + 1e-20j)).imag / 1e-20


class _softplus_by_mpmath(Softplus):
    """Adversarial round 6: mpmath differentiates softplus, entry by entry, inside backward."""

    @staticmethod
    def backward(ctx, grad_output):
        import mpmath

        (x,) = ctx.saved_tensors
        slopes = [float(mpmath.diff(lambda t: mpmath.log(1 + mpmath.exp(t)), v)) for v in x.reshape(-1).tolist()]
        return grad_output * torch.tensor(slopes, dtype=x.dtype).reshape(x.shape)


def _python_quotient(slope):
    """A Softplus whose backward takes the saved tensors out to Python and calls ``slope(x, y)`` per entry."""
    class _Quotient(Softplus):
        @staticmethod
        def forward(ctx, x):
            y = F.softplus(x)
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, grad_output):
            x, y = ctx.saved_tensors
            slopes = [slope(u, v) for u, v in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist())]
            return grad_output * torch.tensor(slopes, dtype=x.dtype).reshape(x.shape)
    _Quotient.__doc__ = slope.__doc__
    return _Quotient


def _central_in_floats(u, v, h=1e-6):
    """Adversarial round 6 (brief, issue 20): a central difference over Python floats with math."""
    return (math.log1p(math.exp(u + h)) - math.log1p(math.exp(u - h))) / (2 * h)


def _central_in_decimal(u, v):
    """Adversarial round 8 (sp_s1): a central difference of log(1 + exp) in 60-digit ``decimal``."""
    import decimal
    with decimal.localcontext() as context:
        context.prec = 60
        x, h = decimal.Decimal(u), decimal.Decimal(10) ** -25
        return float(((1 + (x + h).exp()).ln() - (1 + (x - h).exp()).ln()) / (2 * h))


def _forward_from_saved_output(u, v, h=1e-7):
    """A forward difference in Python floats from the saved output, the functions imported by name."""
    from math import exp, log1p

    return (log1p(exp(u + h)) - v) / h


def _central_through_powers(u, v, h=1e-6):
    """The quotient with no exp call: math.e ** (u + h), then math.log."""
    return (math.log(1 + math.e ** (u + h)) - math.log(1 + math.e ** (u - h))) / (2 * h)


class _softplus_by_richardson_powers(Softplus):
    """Adversarial round 9 (adv-00-04-r8 F5): Richardson differences of softplus written as log(1 + e ** u)."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * _richardson(lambda u: torch.log(1 + torch.e ** u), x)


class _softplus_by_numpy_quotient(Softplus):
    """The quotient in NumPy, from x.numpy()."""

    @staticmethod
    def backward(ctx, grad_output):
        import numpy

        (x,) = ctx.saved_tensors
        a = x.detach().numpy()
        return grad_output * torch.from_numpy((numpy.logaddexp(0, a + 1e-6) - numpy.logaddexp(0, a - 1e-6)) / 2e-6)


class _softplus_quotient_in_forward(torch.autograd.Function):
    """The quotient computed in forward with NumPy and saved; backward only multiplies."""

    @staticmethod
    def forward(ctx, x):
        import numpy

        a = x.detach().numpy()
        ctx.save_for_backward(torch.from_numpy((numpy.log1p(numpy.exp(a + 1e-6)) - numpy.log1p(numpy.exp(a - 1e-6)))
                                               / 2e-6))
        return F.softplus(x)

    @staticmethod
    def backward(ctx, grad_output):
        (slope,) = ctx.saved_tensors
        return grad_output * slope


class _softplus_by_numpy_contour(Softplus):
    """Adversarial round 10 (adv-00-04-r9 F6): Cauchy's integral of log(1 + e^z) on 64 points of a circle of radius 1
    around each entry, in NumPy complex arrays (no point near x: no step to see; the values are complex)."""

    @staticmethod
    def backward(ctx, grad_output):
        from autograd_lab_solutions.nb01_dynamic_graph import _UNIT

        (x,) = ctx.saved_tensors
        a, total = x.detach().numpy(), 0
        for k in range(64):
            w = numpy.exp(2 * numpy.pi * k / 64 * _UNIT)
            total = total + numpy.log(1 + numpy.exp(a + w)) / w
        return grad_output * torch.from_numpy(numpy.ascontiguousarray((total / 64).real)).to(x.dtype)


class _softplus_by_numpy_complex_step(Softplus):
    """Adversarial round 10 (adv-00-04-r9 F7): the complex step in NumPy, getattr on a computed name."""

    @staticmethod
    def backward(ctx, grad_output):
        from autograd_lab_solutions.nb01_dynamic_graph import _IMAGINARY, _UNIT

        (x,) = ctx.saved_tensors
        slope = getattr(numpy.log(1 + numpy.exp(x.detach().numpy() + _UNIT * 1e-30)), _IMAGINARY) / 1e-30
        return grad_output * torch.from_numpy(numpy.ascontiguousarray(slope)).to(x.dtype)


class _softplus_by_dual_numbers(Softplus):
    """Adversarial round 10 (adv-00-04-r9 F8): log(1 + e^x) on dual numbers of one's own, exp and log written out."""

    @staticmethod
    def backward(ctx, grad_output):
        from autograd_lab_solutions.nb01_dynamic_graph import _Dual, _dual_exp

        (x,) = ctx.saved_tensors
        inner = 1 + _dual_exp(_Dual(x, torch.ones_like(x)), torch.exp)
        return grad_output * _Dual(torch.log(inner.value), inner.part / inner.value).part


class _softplus_by_forward_mode(Softplus):
    """Adversarial round 5 (sps_7): forward-mode AD inside backward, the tangent seeded with the gradient."""

    @staticmethod
    def backward(ctx, grad_output):
        import torch.autograd.forward_ad as fwAD

        (x,) = ctx.saved_tensors
        with fwAD.dual_level():
            return fwAD.unpack_dual(torch.log1p(torch.exp(fwAD.make_dual(x, grad_output)))).tangent


class _softplus_on_ctx(torch.autograd.Function):
    """Round 4 (still open in round 5): the input kept as ``ctx.x``, not through save_for_backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return F.softplus(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * torch.sigmoid(ctx.x)


def _local_derivative_alone(student, reference, args, *, student_run):
    """The input's gradient is sigmoid(x) itself, whatever cotangent the checker sent down (it is not ones)."""
    (grad,) = student_run.input_grads
    return grad is not None and torch.allclose(grad, torch.sigmoid(args[0].detach()), rtol=1e-5, atol=1e-6)


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
    # Adversarial round 7 (02-4): the slip hint 3 calls classic got a bare wrong value.
    misconceptions=(
        Misconception("forgot_grad_output",
                      "Your backward ignores the gradient arriving from above: the input's gradient is softplus's "
                      "local derivative alone, whatever `grad_output` was. backward returns a vector-Jacobian "
                      "product, so the gradient from above has to enter it.",
                      _local_derivative_alone),
    ),
    hints=(
        "forward computes softplus and keeps, through the ctx method the prompt names, the tensor that backward "
        "will need to evaluate the derivative.",
        "backward starts by taking back what forward kept (the ctx attribute that holds saved tensors), and "
        "evaluates the local derivative of softplus there.",
        "backward returns a VJP: combine the gradient arriving from above with the local derivative, element by "
        "element. Forgetting the gradient from above is the classic slip.",
    ),
    wrong_answers=(
        WrongAnswer(_wrong_backward("return -grad_output * torch.sigmoid(x)"), expect="sign_flipped"),
        WrongAnswer(_wrong_backward("return 2 * grad_output * torch.sigmoid(x)"), expect="doubled"),
        WrongAnswer(_wrong_backward("return torch.sigmoid(x)"), expect="forgot_grad_output",
                    note="adversarial round 7 (02-4): was a bare wrong value"),
        WrongAnswer(_wrong_backward("return grad_output * torch.exp(x)"), expect="wrong_value"),
        # The shortcuts: PyTorch's own softplus (and its backward), or a backward that asks autograd.
        WrongAnswer(F.softplus, expect="own_function", note="Softplus = F.softplus: not a Function of one's own"),
        WrongAnswer(_softplus_by_autograd,
                    expect="own_function", note="a backward that calls autograd"),
        WrongAnswer(_softplus_plain_function, expect="own_function", note="a plain function, not a Function"),
        WrongAnswer(_softplus_apply_alias, expect="own_function", note="apply = staticmethod(F.softplus)"),
        WrongAnswer(_softplus_by_library_kernel, expect="own_function", note="aten::softplus_backward"),
        WrongAnswer(_softplus_by_decomposition, expect="own_function", note="torch._decomp's softplus_backward"),
        WrongAnswer(_softplus_by_difference_quotient, expect="own_function", note="round 5 sps_2: central difference"),
        WrongAnswer(_softplus_by_scaled_difference, expect="own_function", note="the quotient without x + h"),
        WrongAnswer(_softplus_by_complex_step, expect="own_function", note="round 5 sps_4: complex step"),
        WrongAnswer(_softplus_by_forward_mode, expect="own_function", note="round 5 sps_7: forward-mode AD"),
        WrongAnswer(_softplus_by_mpmath, expect="own_function", note="adversarial round 6: mpmath.diff in backward"),
        WrongAnswer(_softplus_on_ctx, expect="own_function", note="ctx.x = x instead of save_for_backward"),
        WrongAnswer(_python_quotient(_central_in_floats), expect="own_function",
                    note="round 6 (issue 20 brief): central difference over floats from tolist(), math"),
        WrongAnswer(_python_quotient(_forward_from_saved_output), expect="own_function",
                    note="forward difference from the saved output, exp and log1p imported by name"),
        WrongAnswer(_python_quotient(_central_through_powers), expect="own_function",
                    note="math.e ** (x + h) and math.log: no exp call"),
        WrongAnswer(_softplus_by_numpy_quotient, expect="own_function", note="NumPy logaddexp quotient"),
        WrongAnswer(_softplus_by_richardson_powers, expect="own_function",
                    note="adversarial round 9 (adv-00-04-r8 F5): Richardson differences, softplus via torch.e **"),
        WrongAnswer(_python_quotient(_central_in_decimal), expect="own_function",
                    note="adversarial round 8 (sp_s1): a quotient in 60-digit decimal (methods.EXACT_ARITHMETIC)"),
        WrongAnswer(_softplus_quotient_in_forward, expect="own_function", note="NumPy quotient in forward, saved"),
        WrongAnswer(_softplus_by_numpy_contour, expect="own_function",
                    note="adversarial round 10 (adv-00-04-r9 F6): contour integral in NumPy complex arrays"),
        WrongAnswer(_softplus_by_numpy_complex_step, expect="own_function",
                    note="adversarial round 10 (adv-00-04-r9 F7): complex step in NumPy"),
        WrongAnswer(_softplus_by_dual_numbers, expect="own_function",
                    note="adversarial round 10 (adv-00-04-r9 F8): dual numbers of its own in backward"),
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
    solution_code="cotangent = torch.tensor([3.0, 0.0, -1.0])",
    hints=(
        "y.backward(gradient=g) computes the gradient of (g * y).sum(), the weighted sum of the outputs.",
        "Write the combination the prompt asks for as a weighted sum over all three outputs, giving a weight to "
        "each one, also to the output it leaves out; those weights, in the order of y, are the cotangent.",
    ),
    misconceptions=(
        Misconception("reversed",
                      "The weights are in the wrong order: g[i] multiplies y[i].",
                      _is([-1.0, 0.0, 3.0])),
        Misconception("ones_cotangent",
                      "All ones gives the gradient of y.sum(); the weights should be those of the combination the prompt asks for.",
                      _is([1.0, 1.0, 1.0])),
    ),
    wrong_answers=(
        WrongAnswer(torch.tensor([-1.0, 0.0, 3.0]), expect="reversed"),
        WrongAnswer(torch.tensor([1.0, 1.0, 1.0]), expect="ones_cotangent"),
        WrongAnswer(torch.tensor([-3.0, 0.0, 1.0]), expect="wrong_value",
                    note="a prediction is never told its sign is flipped: that would give the key away"),
        WrongAnswer(torch.tensor([3.0, -1.0]), expect="shape"),
        WrongAnswer([3.0, 0.0, -1.0], expect="structure",
                    note="adversarial round 7: a list, told 'expected a single value' in a release; now the tensor asked for"),
    ),
))
