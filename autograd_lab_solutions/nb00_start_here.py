"""Exercises of notebooks/00_start_here.ipynb: two warm-ups."""

import torch

from autograd_lab.checking import (Exercise, Misconception, WrongAnswer, autograd_derivative, claims, register,
                                    uses_autograd)
from autograd_lab.checking.variation import choose


# --- 00.cube_grad ---------------------------------------------------------------

def _graph_on_callers_x(x):
    """Adversarial round 7 (00-2, a): the caller's x made the leaf; where x already requires grad, the checker
    said "the derivative typed by hand" (the ledger saw the raw argument as a weight), not the changed argument."""
    x.requires_grad_()
    (x ** 3).sum().backward()
    return x.grad


def _clone_of_callers_x(x):
    """Adversarial round 7 (00-2, b): `x.clone()` of an x that requires grad keeps the caller's x in the graph."""
    t = x.clone().requires_grad_() if not x.requires_grad else x.clone()
    (t ** 3).sum().backward()
    return t.grad


def _hook_returns_formula(x):
    """Adversarial round 7: a hook on the leaf returns 3 x^2 (was told "multiplies by a constant", not the hook)."""
    t = x.detach().clone().requires_grad_()
    t.register_hook(lambda grad: 3 * t.detach() ** 2)
    t.sum().backward()
    return t.grad


def cube_grad(x):
    x = x.detach().requires_grad_()
    (x ** 3).sum().backward()
    return x.grad


def _cube_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    size = 7 if hidden else 4  # hidden cases use other seeds and another shape
    x = torch.randn(size, generator=generator, dtype=torch.float64)
    # The caller's x may itself require grad, or already hold a .grad (round 4, A5): public and
    # hidden seeds take each of the three, so an answer that breaks such a caller fails in check().
    caller = choose(seed, ("plain", "requires_grad", "holds_grad"))
    if caller != "plain":
        x.requires_grad_()
    if caller == "holds_grad":
        x.grad = torch.randn(size, generator=generator, dtype=torch.float64)
    return (x,)


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


def _backward_for_show(x):
    torch.zeros((), requires_grad=True).backward()   # a backward pass that computes nothing used
    return 3 * x ** 2


def _forged_engine_count(x):
    from torch.autograd.variable import Variable
    setattr(Variable._execution_engine, "runs", 1)    # pretend a backward pass ran
    return 3 * x ** 2


def _laundered_as_leaf_gradient(x):
    """Round 3 (B1): the formula handed to a leaf's own backward; the engine only stores it."""
    t = x.detach().requires_grad_()
    t.backward(gradient=3 * x ** 2)
    return t.grad


def _laundered_as_cotangent(x):
    """Round 3 (C1): the formula as the cotangent of a backward pass through `t * 1`."""
    t = x.detach().requires_grad_()
    (t * 1).backward(gradient=3 * x.detach() ** 2)
    return t.grad


def _typed_from_second_leaf(x):
    """Adversarial round 5 (cgs_9): 3x^2 computed from a second leaf z, a live graph, as y's weight."""
    y = x.detach().clone().requires_grad_()
    z = x.detach().clone().requires_grad_()
    (y * (3 * z * z)).sum().backward(inputs=[y])
    return y.grad


def _typed_from_second_leaf_cut_from_a_copy(x):
    """The second leaf cut from a recorded copy (``x.clone().detach()``), which is a leaf of x's values."""
    y = x.clone().detach().requires_grad_()
    z = (x + 0).detach().requires_grad_()
    (y * (3 * z * z)).sum().backward()
    return y.grad


def _typed_from_a_second_non_leaf(x):
    """Round 8: a gradient with respect to a non-leaf copy y of x is y's graph (c1a), but 3z^2 from a second copy
    z of x, the weight of y, is not: each copy is its own origin (``provenance._hold``)."""
    y, z = (x.clone() if x.requires_grad else x.clone().requires_grad_() for _ in range(2))
    return torch.autograd.grad((y * (3 * z * z)).sum(), y)[0]


def _typed_from_callers_x_beside_its_clone(x):
    """Round 8: the gradient with respect to a clone y of x, 3x^2 taken from the caller's x itself as y's weight."""
    y = x.clone() if x.requires_grad else x.clone().requires_grad_()
    return torch.autograd.grad((y * (3 * x * x)).sum(), y)[0]


def _typed_from_second_leaf_by_torch_func(x):
    """The same weight from a second leaf, inside a torch.func transform."""
    z = x.detach().clone().requires_grad_()
    weight = 3 * z * z
    return torch.func.grad(lambda t: (t * weight).sum())(x.detach()).detach()


def _laundered_as_weight(x):
    """Round 3 (D1): the formula as a constant weight; the backward pass only multiplies by it."""
    t = x.detach().requires_grad_()
    (t * (3 * x.detach() ** 2)).sum().backward()
    return t.grad


def _laundered_through_python(x):
    """The weight rebuilt from Python numbers, plus a decoy term that reads the leaf."""
    t = x.detach().requires_grad_()
    weight = torch.tensor([3 * a * a for a in x.tolist()], dtype=x.dtype)
    (t * weight + 0 * t * t).sum().backward()
    return t.grad


def _constant_of(t):
    """Round 4 (A1): t's values to 2^-40, through `round`, whose derivative autograd defines as zero."""
    scale = 2.0 ** 40
    return torch.round(t * scale) / scale


def _laundered_through_round(x):
    """Round 4 (A1): 3x^2 computed from the leaf with grad on, made a constant by `round`, used as a weight."""
    t = x.detach().clone().requires_grad_()
    (t * _constant_of(3 * t * t)).sum().backward()
    return t.grad


def _laundered_through_detach(x):
    """The same weight cut off with `.detach()` (or `.data`, or an integer cast) after computing it in the graph."""
    t = x.detach().clone().requires_grad_()
    (t * (3 * t * t).detach()).sum().backward()
    return t.grad


def _laundered_through_data(x):
    t = x.detach().clone().requires_grad_()
    (t * (3 * t * t).data).sum().backward()
    return t.grad


def _laundered_through_integers(x):
    t = x.detach().clone().requires_grad_()
    (t * ((3 * t * t * 2 ** 40).long().double() / 2 ** 40)).sum().backward()
    return t.grad


class _NoDerivative(torch.autograd.Function):
    """A custom Function whose backward says the derivative is zero: its output is a constant to autograd."""

    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.zeros_like(grad)


def _laundered_through_function(x):
    t = x.detach().clone().requires_grad_()
    (t * _NoDerivative.apply(3 * t * t)).sum().backward()
    return t.grad


def _laundered_through_hook(x):
    """A hook zeroes the gradient that would reach the weight: autograd then differentiates t * const."""
    t = x.detach().clone().requires_grad_()
    weight = 3 * t * t
    weight.register_hook(lambda grad: grad * 0)
    (t * weight).sum().backward()
    return t.grad


def _formula_times_engine_result(x):
    """Round 4 (A4): the backward of sum(x) (ones) for show, times 3x^2 computed from the leaf, detached."""
    t = x.detach().clone().requires_grad_()
    t.sum().backward()
    return (t.grad * 3 * t * t).detach()


def _forward_mode_seeded_with_formula(x):
    """Forward-mode AD's tangent seeded with 3x^2: the dual of t * 1 only carries it out."""
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x.detach().clone(), 3 * x.detach() ** 2)
        return fwAD.unpack_dual(dual * 1).tangent


def _forward_mode_through_round(x):
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x.detach().clone(), torch.ones_like(x))
        return fwAD.unpack_dual(dual * _constant_of(3 * dual * dual)).tangent


# Adversarial round 9 (adv-00-04-r8 F1): forward mode through a map linear in x, its weight 3x^2 typed by hand.
# A value computed in a dual level from tensors that carry no tangent is a constant to forward mode.

def _forward_mode_typed_weight(x):
    """F1 as the adversary wrote it: the weight computed from the input inside the dual level."""
    import torch.autograd.forward_ad as fwAD
    xs = x.detach()
    with fwAD.dual_level():
        dual = fwAD.make_dual(xs, torch.ones_like(xs))
        return fwAD.unpack_dual(dual * (3 * xs ** 2)).tangent


def _forward_mode_weight_from_primal(x):
    """The weight from the dual's own primal, which carries no tangent."""
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x.detach(), torch.ones_like(x))
        primal = fwAD.unpack_dual(dual).primal
        return fwAD.unpack_dual(dual * (3 * primal ** 2)).tangent


def _forward_mode_weight_from_detached_dual(x):
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x.detach(), torch.ones_like(x))
        return fwAD.unpack_dual(dual * (3 * dual.detach() ** 2)).tangent


def _forward_mode_weight_from_second_dual(x):
    """The weight from a second dual of x whose tangent is zero: its primal values, differentiated, are 3x^2."""
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x.detach().clone(), torch.ones_like(x))
        other = fwAD.make_dual(x.detach().clone(), torch.zeros_like(x))
        return fwAD.unpack_dual(dual * (3 * other * other)).tangent


class _TypedJvp(torch.autograd.Function):
    """x^3 whose forward-mode derivative (``jvp``) is typed by hand."""

    @staticmethod
    def forward(ctx, t):
        ctx.save_for_forward(t)
        return t ** 3

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError

    @staticmethod
    def jvp(ctx, tangent):
        (t,) = ctx.saved_tensors
        return 3 * t ** 2 * tangent


def _forward_mode_typed_jvp(x):
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        return fwAD.unpack_dual(_TypedJvp.apply(fwAD.make_dual(x.detach().clone(), torch.ones_like(x)))).tangent


def _jvp_of_closure_weight(x):
    """torch.func.jvp of t -> t * 3x^2, the weight a closure over x: no wrapped tensor, nothing differentiated."""
    xs = x.detach()
    return torch.func.jvp(lambda t: t * (3 * xs ** 2), (xs,), (torch.ones_like(xs),))[1]


def _jacfwd_of_detached_weight(x):
    return torch.func.jacfwd(lambda t: (t * (3 * t.detach() ** 2)).sum())(x.detach())


def _grad_of_closure_weight(x):
    """The same in reverse: torch.func.grad of (t * 3x^2).sum(), the weight a closure over x."""
    xs = x.detach()
    return torch.func.grad(lambda t: (t * (3 * xs ** 2)).sum())(xs)


def _vjp_of_closure_weight(x):
    xs = x.detach()
    return torch.func.vjp(lambda t: t * (3 * xs ** 2), xs)[1](torch.ones_like(xs))[0]


# Adversarial round 9 (adv-00-04-r8 F2): autograd of another function, then algebra on its result: the returned
# value must be linear in the engine's products (copies, views, sums of passes, scales), no product or power of them.

def _square_of_the_gradient_of_x_squared(x):
    """F2 as the adversary wrote it: d(x^2)/dx = 2x, then 0.75 (2x)^2 = 3x^2."""
    t = x.detach().clone().requires_grad_()
    (t ** 2).sum().backward()
    return t.grad * t.grad * 0.75


def _power_of_a_gradient(x):
    t = x.detach().clone().requires_grad_()
    (t ** 2 / 2).sum().backward()
    return 3 * t.grad ** 2


def _product_of_two_passes(x):
    t = x.detach().clone().requires_grad_()
    (first,) = torch.autograd.grad((t ** 2 / 2).sum(), t)
    (second,) = torch.autograd.grad((t ** 2 / 2).sum(), t)
    return 3 * first * second.clone()


def _squared_in_place(x):
    t = x.detach().clone().requires_grad_()
    (t ** 2).sum().backward()
    return t.grad.mul_(t.grad).mul_(0.75)


def _square_of_a_torch_func_gradient(x):
    gradient = torch.func.grad(lambda t: (t ** 2).sum())(x.detach())
    return 0.75 * gradient * gradient


def _squared_through_numpy_in_place(x):
    """F2 where no op runs: the gradient's memory rewritten through its NumPy view, then returned as the engine's."""
    t = x.detach().clone().requires_grad_()
    (t ** 2).sum().backward()
    values = t.grad.numpy()
    values[:] = 0.75 * values * values
    return t.grad


def _square_of_a_tangent(x):
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(fwAD.make_dual(x.detach(), torch.ones_like(x)) ** 2).tangent
        return 0.75 * tangent * tangent


def forward_mode_cube_grad(x):
    """Round 4 (A3, a correct answer once refused): forward-mode AD; with tangent ones, the elementwise gradient."""
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x.detach(), torch.ones_like(x))
        return fwAD.unpack_dual(dual ** 3).tangent


def _clone_of_callers_x(x):
    """Round 4 (A5): a clone is not a leaf when the caller's x requires grad: .grad lands on the caller's x."""
    t = x.clone().requires_grad_()
    (t ** 3).sum().backward()
    return t.grad


def _callers_x_switched_back(x):
    """Round 4 (A5): the caller's x used as the leaf, requires_grad switched off afterwards."""
    (grad,) = torch.autograd.grad((x.requires_grad_() ** 3).sum(), x)
    x.requires_grad_(False)
    return grad


def _caller_requires_grad(x):
    x.requires_grad_()
    (x ** 3).sum().backward()
    return x.grad.detach().clone()


def _zeroes_caller(x):
    gradient = _autograd_of(lambda t: (t ** 3).sum())(x)
    with torch.no_grad():
        x.zero_()
    return gradient


def _grad_mode_left_off(x):
    gradient = _autograd_of(lambda t: (t ** 3).sum())(x)
    torch.set_grad_enabled(False)
    return gradient


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
        "Autograd writes a gradient into the `.grad` of a leaf that requires grad, and the caller's `x` "
        "must stay as it was: which tensor should be that leaf?",
        "`backward()` with no argument starts from a single number, and the gradient you want is the one "
        "autograd stored for your leaf, not a formula.",
    ),
    method=(uses_autograd(), autograd_derivative()),
    # Also: grad mode is on again after the call, as the caller left it. Not the returned tensor's autograd
    # state: on an x that requires grad, torch.func.grad (differentiable itself) returns a gradient that does.
    compare=("value", "grad_mode"),
    wrong_answers=(
        # The shortcut the prompt forbids: the right numbers, typed as a formula.
        WrongAnswer(lambda x: 3 * x ** 2, expect="typed_formula", note="the formula 3x^2 typed by hand"),
        WrongAnswer(lambda x: 3 * x * x, expect="typed_formula"),
        WrongAnswer(_graph_on_callers_x, expect="modified_input", note="adversarial round 7 (00-2 a)"),
        WrongAnswer(_clone_of_callers_x, expect="modified_input", note="adversarial round 7 (00-2 b)"),
        WrongAnswer(_hook_returns_formula, expect="laundered_formula", note="adversarial round 7: named as the hook"),
        WrongAnswer(_under_no_grad, expect="typed_formula", note="no backward pass ran"),
        WrongAnswer(_backward_for_show, expect="typed_formula", note="a backward pass run for show (round 1)"),
        WrongAnswer(_forged_engine_count, expect="typed_formula", note="the engine's counter forged (round 1)"),
        # The formula laundered through a trivial backward pass (round 3): the engine's product, no derivative.
        WrongAnswer(_laundered_as_leaf_gradient, expect="laundered_formula", note="round 3 B1: gradient= of the leaf"),
        WrongAnswer(_laundered_as_cotangent, expect="laundered_formula", note="round 3 C1: (t * 1).backward(gradient=...)"),
        WrongAnswer(_laundered_as_weight, expect="laundered_formula", note="round 3 D1: the formula as a weight"),
        WrongAnswer(_laundered_through_python, expect="laundered_formula", note="tolist() and a 0 * t * t decoy"),
        WrongAnswer(_typed_from_second_leaf, expect="laundered_formula", note="round 5 cgs_9: 3z^2, z a second leaf"),
        WrongAnswer(_typed_from_second_leaf_cut_from_a_copy, expect="laundered_formula",
                    note="round 6: both leaves cut from recorded copies of x (x.clone().detach(), (x + 0).detach())"),
        WrongAnswer(_typed_from_second_leaf_by_torch_func, expect="laundered_formula", note="the same in torch.func"),
        WrongAnswer(_typed_from_a_second_non_leaf, expect="laundered_formula",
                    note="round 8: grad w.r.t. a clone y, 3z^2 from a second clone z of x"),
        WrongAnswer(_typed_from_callers_x_beside_its_clone, expect="laundered_formula",
                    note="round 8: grad w.r.t. a clone y, 3x^2 from the caller's x"),
        # Round 4: the weight computed from the leaf with grad on, then made a constant to autograd (A1), the
        # engine's result multiplied by the formula (A4), and the same through forward-mode AD.
        WrongAnswer(_laundered_through_round, expect="laundered_formula", note="round 4 A1: round, derivative 0"),
        WrongAnswer(_laundered_through_detach, expect="laundered_formula", note=".detach() of a graph value"),
        WrongAnswer(_laundered_through_data, expect="laundered_formula", note=".data of a graph value"),
        WrongAnswer(_laundered_through_integers, expect="laundered_formula", note="long() and back"),
        WrongAnswer(_laundered_through_function, expect="laundered_formula", note="a Function with zero backward"),
        WrongAnswer(_laundered_through_hook, expect="laundered_formula", note="a hook zeroes the weight's gradient"),
        WrongAnswer(_formula_times_engine_result, expect="laundered_formula", note="round 4 A4: ones x 3x^2"),
        WrongAnswer(_forward_mode_seeded_with_formula, expect="laundered_formula", note="tangent seeded with 3x^2"),
        WrongAnswer(_forward_mode_through_round, expect="laundered_formula", note="forward mode through round"),
        WrongAnswer(_forward_mode_typed_weight, expect="laundered_formula", note="round 9 F1: d * (3 x^2), x no dual"),
        WrongAnswer(_forward_mode_weight_from_primal, expect="laundered_formula", note="F1 with the dual's primal"),
        WrongAnswer(_forward_mode_weight_from_detached_dual, expect="laundered_formula", note="F1 with d.detach()"),
        WrongAnswer(_forward_mode_weight_from_second_dual, expect="laundered_formula",
                    note="F1 with a second dual of x, tangent zero"),
        WrongAnswer(_forward_mode_typed_jvp, expect="laundered_formula", note="F1: a Function's jvp typed by hand"),
        WrongAnswer(_jvp_of_closure_weight, expect="laundered_formula", note="F1 in torch.func.jvp, closure weight"),
        WrongAnswer(_jacfwd_of_detached_weight, expect="laundered_formula", note="F1 in jacfwd, t.detach() weight"),
        WrongAnswer(_grad_of_closure_weight, expect="laundered_formula", note="torch.func.grad, closure weight"),
        WrongAnswer(_vjp_of_closure_weight, expect="laundered_formula", note="torch.func.vjp, closure weight"),
        WrongAnswer(_square_of_the_gradient_of_x_squared, expect="laundered_formula", note="round 9 F2: 0.75 g g"),
        WrongAnswer(_power_of_a_gradient, expect="laundered_formula", note="F2: 3 g ** 2, g = x"),
        WrongAnswer(_product_of_two_passes, expect="laundered_formula", note="F2: the product of two passes"),
        WrongAnswer(_squared_in_place, expect="laundered_formula", note="F2: g.mul_(g) in place"),
        WrongAnswer(_square_of_a_torch_func_gradient, expect="laundered_formula", note="F2 with torch.func.grad"),
        WrongAnswer(_square_of_a_tangent, expect="laundered_formula", note="F2 with forward mode's tangent"),
        WrongAnswer(_squared_through_numpy_in_place, expect="laundered_formula",
                    note="F2 written into .grad's memory through numpy()"),
        WrongAnswer(_clone_of_callers_x, expect="modified_input", note="round 4 A5: x.clone() as the leaf"),
        WrongAnswer(_callers_x_switched_back, expect="modified_input", note="round 4 A5: requires_grad reset"),
        # Right values, but the caller's tensor changed (round 1): the prompt says to leave x as it was.
        WrongAnswer(_caller_requires_grad, expect="modified_input", note="requires_grad_() on the caller's x"),
        WrongAnswer(_zeroes_caller, expect="modified_input", note="the caller's x zeroed afterwards"),
        WrongAnswer(_grad_mode_left_off, expect="state", note="grad mode switched off and left off (round 1)"),
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
    """{name: whether .grad is not None}."""
    return {name: tensor.grad is not None for name, tensor in tensors.items()}


def _needs_grad_experiment():
    """The notebook's computation, run: which tensors have a .grad after loss.backward()."""
    layer = torch.nn.Linear(3, 1)
    w, b = layer.weight, layer.bias
    x = torch.randn(4, 3)
    h = torch.tensor(0.5)
    loss = h * layer(x).sum()
    loss.backward()
    return _grads_after_backward(w=w, x=x, b=b, h=h)


def needs_grad():
    # nn.Linear makes its weight and bias as nn.Parameter, which requires grad; x and h were made without it.
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
        "backward() fills the .grad only of tensors that require grad. Which of these four were made "
        "to require grad, by you or by the code that created them?",
        "Look at what kind of tensor a layer's weight and bias are: print type(layer.weight).",
    ),
    misconceptions=(
        Misconception(
            "not_booleans",
            "Answer each entry with the Python bool True or False (not 1/0, a string or a tensor), "
            "so that the answer says exactly whether that tensor's .grad is set.",
            lambda student, reference, args: isinstance(student, dict) and set(student) == set(reference)
            and not all(type(value) is bool for value in student.values()),
        ),
        Misconception(
            "parameters_unmarked",
            "Nothing in the cell writes requires_grad, but the code that creates a tensor can: look at what "
            "kind of tensor a layer's weight and bias are, and what that kind's default is.",
            lambda student, reference, args: isinstance(student, dict) and (
                claims("w", False)(student, reference, args) or claims("b", False)(student, reference, args)),
        ),
        Misconception(
            "no_requires_grad",
            "A loss that depends on a tensor does not by itself give that tensor a .grad: autograd computes "
            "gradients only for tensors that require grad. Look at how each tensor you marked was made.",
            lambda student, reference, args: isinstance(student, dict) and (
                claims("x")(student, reference, args) or claims("h")(student, reference, args)),
        ),
    ),
    wrong_answers=(
        WrongAnswer({"w": False, "x": False, "b": False, "h": False}, expect="parameters_unmarked"),
        WrongAnswer({"w": True, "x": False, "b": False, "h": False}, expect="parameters_unmarked"),
        WrongAnswer({"w": True, "x": True, "b": True, "h": False}, expect="no_requires_grad"),
        WrongAnswer({"w": True, "x": False, "b": True, "h": True}, expect="no_requires_grad"),
        WrongAnswer({"w": True, "x": True, "b": True, "h": True}, expect="no_requires_grad"),
        WrongAnswer({"w": 1, "x": 0, "b": 1, "h": 0}, expect="not_booleans", note="round 1: ints got a bare message"),
        WrongAnswer({"w": "True", "x": "False", "b": "True", "h": "False"}, expect="not_booleans"),
        WrongAnswer({"w": True, "x": False, "b": True}, expect="structure", note="a missing key"),
        WrongAnswer({"w": True, "x": False, "b": True, "h": False, "loss": False}, expect="structure"),
        WrongAnswer(["w", "b"], expect="structure"),
    ),
))
