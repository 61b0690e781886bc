"""Methods an exercise requires or forbids, judged on the facts the tape recorded while the answer ran.

``Exercise(..., method=uses_autograd())`` makes ``check`` (and the batch grader) fail
an answer that gets the right value the wrong way, with a message that names the
method.  A ``Method`` is a name, a predicate on the recorded facts (``facts.FACTS``),
the message shown when the predicate is false, and what the tape must watch (``watch``:
specs of code and ops to count, ``tape.py``).  The ready-made factories below cover
the course; each remembers how it was made (``origin``), so a student build rebuilds it
from plain data.  Write another by giving the fields; a predicate that reads only
``facts`` travels in a release as the text of a one-line lambda.

Every method also fails an answer that switched a recorder off (``tape_intact``), and,
where the profile hook runs (a method that names code to watch: the bans), one that ran
code in another thread or process (``escapes``): what the tape could not see cannot be
judged.
"""

import inspect
from dataclasses import dataclass, field
from typing import Callable, Optional

from .facts import VERSION_FORGERS
from .tape import spec_of


@dataclass(frozen=True)
class Method:
    """A required or forbidden method.

    ``name``: what the prompt asks for ("autograd", "no .data").  ``holds(facts)``:
    True when the answer kept to it; ``holds(facts, args)`` also receives the case's
    arguments (as recorded before the call: a module is a dict of its parameters).
    ``message``: the feedback when it did not; it should say what the answer did.
    ``explain(facts, args)``: optionally, a more precise message for this failure
    (``None``: use ``message``).  ``tag``: the misconception tag of a failure (the bank's
    ``WrongAnswer.expect``).  ``watch``: the specs the tape must count (``facts["ran"]``).
    ``grad_phase``: also record the backward the checker runs through the answer's output
    (``facts["grad_phase"]``).  ``sizes`` is kept for older definitions (sizes are always
    recorded).  ``origin``: ``(factory name, plain keyword arguments)``, set by the factories.
    """

    name: str
    holds: Callable[..., bool]
    message: str
    tag: str = "method"
    sizes: bool = False
    watch: tuple = ()
    grad_phase: bool = False
    explain: Optional[Callable[..., Optional[str]]] = field(default=None, compare=False)
    origin: Optional[tuple] = field(default=None, compare=False)

    def kept(self, facts, args):
        """``holds`` called with the arguments it declares, after the recorders' own check."""
        if unobserved(facts):
            return False
        return bool(_call(self.holds, facts, args))

    def feedback(self, facts=None, args=()):
        """``This exercise asks for {name}: {why}``, the why as precise as the facts allow."""
        why = unobserved(facts) if facts is not None else None
        if why is None and facts is not None and self.explain is not None:
            try:
                why = _call(self.explain, facts, args)
            except (KeyError, TypeError, ValueError, AttributeError):
                why = None
        return f"This exercise asks for {self.name}: {why or self.message}"


def _call(function, facts, args):
    if len(inspect.signature(function).parameters) >= 2:
        return function(facts, args)
    return function(facts)


def unobserved(facts):
    """Why the facts cannot be trusted to describe the answer (a recorder off, an escape), or ``None``."""
    if not facts.get("tape_intact", True):
        return ("your answer switched off one of the checker's recorders (a profile hook, a dispatch mode "
                "or the autograd engine's stand-in), so the checker cannot see how it computed its result.")
    if facts.get("escapes"):
        threads = [e for e in facts["escapes"] if e.startswith("_thread.")]
        if len(threads) < len(facts["escapes"]):    # a process (or ctypes, which can start one out of sight)
            return (f"your answer started another process ({', '.join(facts['escapes'])}): the check cannot see "
                    "what ran there. Compute the result in the function itself.")
        return (f"your answer started another thread ({', '.join(threads)}), where the "
                "checker cannot see what runs: compute the result in the function itself.")
    processes = [entry for entry in facts.get("other_threads", ()) if entry.startswith("process ")]
    if processes:
        return (f"another process was running while your answer ran ({'; '.join(processes)}): the checker "
                "cannot see what it computes. A process your notebook started is still running: end it "
                "(terminate() and wait()) before check(), and compute the result in the function itself.")
    if facts.get("other_threads"):
        return (f"another thread was at work while your answer ran ({'; '.join(facts['other_threads'])}): the "
                "checker cannot see what it computes. A thread your notebook started is still running: stop and "
                "join it before check(), and compute the result in the function itself.")
    return None


def _made(factory, **kwargs):
    """The ``origin`` of a method built by ``factory(**kwargs)``: how a student build rebuilds it."""
    return (factory, kwargs)


def _ran(facts, specs):
    """Which of ``specs`` ran, were copied, or left objects behind: ``[(spec, what)]``."""
    found = []
    for spec in specs:
        for table, what in (("ran", "ran"), ("copied", "was copied"), ("instances", "was built")):
            if facts.get(table, {}).get(spec):
                recompiled = table == "ran" and facts.get("recompiled", {}).get(spec)
                found.append((spec, "ran, as a copy compiled from its source text" if recompiled else what))
    return found


def _shown(spec):
    """``torch.optim`` for ``code:torch.optim``, ``GradScaler`` for a class spec, ``aten::x`` for an op."""
    kind, _, target = spec.partition(":")
    module, _, qualname = target.partition(":")
    return f"`{qualname.split('.<locals>.')[-1] if qualname else module}`" if kind == "code" else f"`{target}`"


# --- autograd: required, counted, or forbidden -------------------------------------------

_TORCH_FUNC = ("code:torch._functorch", "code:torch.func")
# PyTorch's derivative rules written in Python (``torch._decomp.decompositions.tanh_backward``, ``torch._refs``,
# ``torch._prims``): the same local derivatives as the ``aten::*_backward`` kernels, run as ordinary ops.
DECOMPOSITIONS = ("code:torch._decomp", "code:torch._prims", "code:torch._refs")
# Differentiation done by a library that ships with torch (sympy's symbolic diff, mpmath's numerical one):
# the derivative is found, not worked out (adversarial round 6, 01.tiny_tanh).
DIFFERENTIATORS = ("code:sympy.core.function:diff", "code:sympy.core.function:Derivative",
                   "code:mpmath.calculus.differentiation")
_FUNCTIONAL = ("code:torch.autograd.functional",)
# Exact or extra-precision arithmetic (``decimal``, ``fractions``, mpmath, sympy, gmpy2) held or run by the answer
# (fact ``exact_arithmetic``, ``tape._EXACT_ROOTS``): what makes a difference quotient as accurate as a formula
# (adversarial round 8); a derivative worked out as a formula never needs it.  One mechanism for every exercise
# whose skill is the derivative (``own_derivatives``, ``own_function``).
EXACT_ARITHMETIC = ("held:exact",)


def _exact_arithmetic(facts):
    """Why the answer's derivative is refused for exact or extra-precision arithmetic, or ``None``."""
    found = sorted(set(facts.get("exact_arithmetic") or ()) | set((facts.get("grad_phase") or {}).get("exact_arithmetic") or ()))
    if not found:
        return None
    return (f"your answer computed with exact or extra-precision arithmetic (`{'`, `'.join(found)}`): that is how a "
            "numerical derivative (a difference quotient in many digits) gets as accurate as a formula, and a "
            "derivative worked out as a formula never needs it. Write the derivative as a formula and evaluate "
            "it with ordinary floats or tensors.")


def _phases(facts, key):
    """The entries of list fact ``key`` in the call and in the checker's backward (``grad_phase``), sorted."""
    return sorted(set(facts.get(key) or ()) | set((facts.get("grad_phase") or {}).get(key) or ()))


def complex_numbers(facts):
    """Why the answer's derivative is refused for computing with complex numbers (``complex_values``), or ``None``.

    Adversarial round 10 (adv-00-04-r9 F1, F2, F4, F6, F7): a complex step (``f(u + ih).imag / h``) or a Cauchy
    contour integral is a numerical derivative exact to rounding; a real function's derivative written as a formula
    never needs a complex number.  Judged on the values (``tape._complex_kind``), however they were made."""
    found = _phases(facts, "complex_values") + [f"`complex`, `1j` or `.imag` in `{name}`"
                                                for name in _phases(facts, "complex_code")]
    if not found:
        return None
    return (f"your code computed with complex numbers ({'; '.join(found[:3])}): evaluating a function at complex "
            "points (a complex step, f(u + ih) / h, or a contour integral) is a numerical derivative, not one you "
            "worked out. Write the derivative as a formula and evaluate it with real numbers.")


def own_arithmetic(facts):
    """Why the answer's derivative is refused for arithmetic of its own classes (``own_arithmetic``), or ``None``.

    Adversarial round 10 (adv-00-04-r9 F3, F5, F8): dual numbers in a class of the answer's own (``__add__``,
    ``__mul__``, ``__truediv__`` carrying a derivative part) are forward-mode AD written by hand: the product and
    quotient rules in the class differentiate, nobody works out the function's derivative."""
    found = _phases(facts, "own_arithmetic")
    if not found:
        return None
    return (f"your code computed with objects of a class of your own that defines arithmetic (`{'`, `'.join(found[:3])}`): "
            "numbers that carry a derivative part through `+`, `*` and `/` (dual numbers) are forward-mode automatic "
            "differentiation written by hand, and the derivative comes out of the product and quotient rules in the "
            "class, not out of your own work. Write the local derivative as a formula with ordinary floats or tensors.")


def uses_autograd():
    """The result must come out of autograd: a backward pass (or forward-mode AD) whose result is returned.

    Reverse mode is followed to the output: the returned tensors must be computed from what
    the engine produced, so a backward run "for show" next to a typed formula fails.
    """
    def holds(facts):
        reverse = facts["engine_runs"] >= 1 or facts.get("backward_ops", 0) > 0
        forward = facts.get("forward_ad", 0) > 0
        # The flow is judged only where the dispatch mode saw the backward's ops (it follows the
        # engine's products through them); a backward it could not see is given the benefit of the doubt.
        followed = facts.get("backward_ops", 0) > 0
        return forward or (reverse and not (followed and facts.get("output_from_engine") is False))

    def explain(facts):
        if facts["engine_runs"] >= 1 or facts.get("backward_ops", 0) > 0:
            return ("your answer ran a backward pass, but the value it returned was not computed from that "
                    "pass's result: return the gradient autograd produced (`x.grad`, or what "
                    "`torch.autograd.grad` returns), not a formula next to it.")
        return None

    return Method(
        name="autograd",
        holds=holds, explain=explain,
        message=("your answer computed the result without calling `backward()` or `torch.autograd.grad` (or a "
                 "`torch.func` transform built on them), so it is a formula typed by hand, not a gradient "
                 "taken by autograd."),
        tag="typed_formula", origin=_made("uses_autograd"))


def autograd_derivative(wrt=0):
    """The derivative is autograd's own: none worked out by hand and passed through a backward pass.

    ``wrt``: the tensor argument(s) (index among the call's tensor arguments) being
    differentiated; the others are data.  The provenance ledger (``provenance.py``) refuses
    a ``gradient=`` / ``grad_outputs`` (or a forward-mode tangent seed) or a weight the
    backward multiplies by, that was computed from the input's values where autograd does
    not differentiate them (detached, ``.data``, under ``no_grad``, through a zero-derivative
    op such as ``round`` or an integer cast, a custom ``Function``, rebuilt from ``tolist()`` /
    NumPy); a returned value computed from the input besides the engine's product (a formula
    multiplied or added into ``.grad``, with grad mode on or off); a gradient hook on a value
    computed from the input; and, where the input's values went to Python, a backward pass
    that never reads a value autograd recorded from the input (a pass linear in the leaf,
    while the exercise's function is not): use it only where it is not.
    """
    wrt = tuple(wrt) if isinstance(wrt, (tuple, list)) else (wrt,)

    def explain(facts):
        laundered = facts.get("laundered") or {}
        # A hook first (adversarial round 7, 00.cube_grad): the gradient it returns is also read downstream
        # as a weight, and "multiplies by a value ... treated as a constant" did not name the hook.
        if laundered.get("hook"):
            return ("your answer registered a gradient hook on a value computed from the input: a hook rewrites "
                    "the derivative autograd computes. Let autograd differentiate the function as it is.")
        if laundered.get("gradient"):
            return ("the `gradient=` (or `grad_outputs`) you passed to the backward pass was computed from "
                    + (_COPIED if facts.get("copied_outside") else "the input's values outside autograd") +
                    ": that is the derivative typed by hand, and the backward pass only carried it to `.grad`. "
                    "Backpropagate from the function itself, with the cotangent the prompt gives (ones for a sum).")
        if laundered.get("weight"):
            how = (f"{_COPIED} (or computed from one), which autograd treats as a constant" if facts.get("copied_outside") else
                   "computed from the input that autograd treats as a constant (detached, `.data`, under `no_grad`, "
                   "through an op whose derivative is zero such as `round`, an integer cast, or rebuilt from Python "
                   "numbers)")
            return (f"the graph you backpropagated through multiplies by a value {how}: that constant is the "
                    "derivative typed by hand. Build the function itself from your leaf and let autograd "
                    "differentiate it.")
        if laundered.get("forward_weight"):
            return ("the function you pushed forward mode's tangent through multiplies by a value computed from the "
                    "input that forward mode treats as a constant (made from a tensor that carries no tangent: the "
                    "input itself, the dual's `primal`, `.detach()`, `.data`, or a closure of a `torch.func` "
                    "transform): that constant is the derivative typed by hand. Build the function itself from "
                    "the dual tensor and let forward mode differentiate it.")
        if laundered.get("other_dual"):
            return ("the tangent you returned was computed with the primal values of a second dual tensor of the "
                    "input (one whose tangent you did not push): forward mode multiplied by a value built from that "
                    "other copy, which is the derivative typed by hand. Push the tangent through the function of "
                    "one dual tensor and return its tangent.")
        if laundered.get("output"):
            return ("the value you returned is not only what autograd produced: it was computed with the input's "
                    "values besides the gradient (a formula multiplied or added in, with grad mode on or off). "
                    "Return the gradient autograd produced for the function the prompt names.")
        if laundered.get("other_leaf"):
            return ("the gradient you returned was computed from a second copy of the input (another leaf, or the "
                    "caller's tensor) rather than from the leaf it belongs to: the backward pass multiplied by a "
                    "value built from that other copy, which is the derivative typed by hand. Differentiate the "
                    "function of one leaf and return that leaf's gradient.")
        if laundered.get("reworked"):
            return ("the value you returned was computed from autograd's result by a step that is not linear in it "
                    "(a product of gradients, a power or another function of one, or its memory rewritten where no "
                    "op runs, through `numpy()`): autograd differentiated some "
                    "other function, and turning its derivative into the one asked for was worked out by hand. "
                    "Let autograd differentiate the function the prompt names and return what it produced (a "
                    "copy, a view or a sum of passes is fine).")
        if facts.get("passes_linear_in_input"):
            return ("your answer took the input's values out to Python (`tolist`, `item`, `numpy`, its memory's "
                    "address or bytes), and one of "
                    "your backward passes never read a value autograd recorded from your leaf: it differentiated "
                    "something linear in the leaf (a weight or a `gradient=` worked out from those numbers), not "
                    "the function the prompt names. Compute that function from your leaf and backpropagate "
                    "through it.")
        return None

    return Method(
        name="a derivative taken by autograd",
        holds=lambda facts: not facts["laundered"] and not facts["passes_linear_in_input"],
        explain=explain, watch=tuple(f"wrt:{index}" for index in wrt),
        message="your answer's derivative was worked out outside autograd and passed through a backward pass.",
        tag="laundered_formula", origin=_made("autograd_derivative", wrt=wrt))


# A copy the provenance ledger recognised by its contents (``provenance.Provenance._sight``).
_COPIED = ("a value copied from the input outside autograd (`pickle`, `torch.save`, a raw memory copy, the bytes "
           "of its storage, a file: the checker recognises the input's values however they were copied)")


def steps_on_autograd_grads(wrt=0):
    """Every ``.grad`` an optimizer's ``step`` applies is the engine's product, not a formula written into it.

    ``wrt`` as for ``autograd_derivative``.  The ledger looks at each parameter's ``.grad``
    as a watched ``step`` starts; one computed from the input's values outside the engine
    (``w.grad = w.grad + formula``, ``w.grad.add_(formula)``) fails.
    """
    wrt = tuple(wrt) if isinstance(wrt, (tuple, list)) else (wrt,)
    return Method(
        name="gradients autograd computed, applied by the optimizer",
        holds=lambda facts: not (facts.get("laundered") or {}).get("step"),
        explain=lambda facts: (f"the `.grad` your optimizer stepped on was computed with {_COPIED}: the backward "
                               "passes only carried a gradient worked out by hand. Let each micro-batch's loss, "
                               "computed from your weights, fill `.grad`, then call `step()`."
                               if facts.get("copied_outside") else None),
        watch=tuple(f"wrt:{index}" for index in wrt) + ("code:torch.optim",),
        message=("the update your optimizer made was not computed from what the backward passes produced "
                 "alone: values computed from the weights or the data entered it outside autograd, written "
                 "into `.grad` (a gradient formula) or added by the optimizer itself (an optimizer changed from "
                 "the given one, such as one with `weight_decay`). Keep the given optimizer, let the "
                 "micro-batches' backward passes fill `.grad`, then call `step()`."),
        tag="laundered_formula", origin=_made("steps_on_autograd_grads", wrt=wrt))


def micro_batches(rows=(1,), k=1, steps=None):
    """Each backward pass differentiates one micro-batch: the rows of the data that flowed into its loss.

    ``rows``: the data arguments (index among the call's tensor arguments; micro-batches are
    their rows); ``k``: the index of the argument that holds the number of micro-batches;
    ``steps``: of the one that holds the number of optimizer steps (each step's ``k`` passes
    are judged together), or ``None`` for one step.  Each group of ``k`` passes must split
    every data argument's rows into ``k`` disjoint parts of equal size that cover them all,
    one per pass, judged on what each pass's loss was computed from (``rows.py``), not on
    the sizes of the tensors it produced.
    """
    def groups(facts, args):
        runs, count = facts["backward_rows"]["runs"], args[k] * (args[steps] if steps is not None else 1)
        if len(runs) != count:
            return None
        return [runs[start:start + args[k]] for start in range(0, count, args[k])]

    def holds(facts, args):
        found = groups(facts, args)
        if found is None:
            return False
        totals = facts["backward_rows"]["totals"]
        return all(sorted(row for run in group for row in run[j]) == list(range(total))
                   and all(len(run[j]) * args[k] == total for run in group)
                   for group in found for j, total in enumerate(totals))

    def explain(facts, args):
        found, totals = groups(facts, args), facts["backward_rows"]["totals"]
        if found is None:
            return None
        for group in found:
            for run in group:
                if any(len(run[j]) == total for j, total in enumerate(totals)):
                    return ("one of your backward passes differentiated a loss computed from every row of the "
                            "batch (the whole batch's loss, or something computed from all of it such as "
                            "`x.T @ x`): each pass's loss must be computed from one micro-batch's rows alone.")
                if not any(run):
                    return ("one of your backward passes differentiated a loss computed from none of the batch's "
                            "rows: each pass must go through one micro-batch's loss.")
        return None

    return Method(
        name="one backward pass per micro-batch, each through that micro-batch's own loss",
        holds=holds, explain=explain, watch=tuple(f"rows:{index}" for index in rows),
        message=("each of your `k` backward passes must differentiate the loss of one micro-batch: a forward "
                 "pass on that micro-batch's rows of the data alone, the `k` micro-batches splitting the batch "
                 "into equal parts. Your passes did not each work on their own `k`-th of the rows."),
        tag="micro_batches", origin=_made("micro_batches", rows=tuple(rows), k=k, steps=steps))


def backward_calls(n, *, name=None):
    """Exactly ``n`` backward passes; ``n`` may be a function of the case's arguments.

    ``backward_calls(1)``; ``backward_calls(lambda x, k: k, name="one backward pass per
    micro-batch")`` for an answer called as ``answer(x, k)`` (a function does not travel
    in a student build: there the method is checked when graded).
    """
    wanted = "" if callable(n) else f" ({n})"
    default = (f"exactly {n} backward pass{'es' if n != 1 else ''}" if not callable(n)
               else "one backward pass per step the prompt names")
    return Method(
        name=name or default,
        holds=lambda facts, args: facts["engine_runs"] == (n(*args) if callable(n) else n),
        explain=lambda facts, args: (f"your answer ran {facts['engine_runs']} backward pass"
                                     f"{'es' if facts['engine_runs'] != 1 else ''} (`backward()` or `torch.autograd.grad` "
                                     f"calls); the prompt asks for {n(*args) if callable(n) else n}."),
        message=("your answer ran a different number of backward passes "
                 f"(`backward()` or `torch.autograd.grad` calls) than the prompt asks for{wanted}."),
        tag="backward_calls", origin=None if callable(n) else _made("backward_calls", n=n, name=name))


def no_autograd(*, name=None):
    """No autograd at all: no backward pass, no forward-mode AD, no ``torch.func`` or ``torch.autograd.functional``."""
    watched = _TORCH_FUNC + _FUNCTIONAL

    def holds(facts):
        return (facts["engine_runs"] == 0 and facts.get("backward_ops", 0) == 0
                and facts.get("forward_ad", 0) == 0 and not _ran(facts, watched))

    def explain(facts):
        if facts.get("forward_ad", 0):
            return ("your answer used forward-mode AD (`jvp`, `jacfwd` or dual tensors): that is autograd too; "
                    "compute every gradient with the formulas instead.")
        if _ran(facts, watched):
            return "your answer used `torch.func` or `torch.autograd.functional`, which is autograd; compute every gradient with the formulas instead."
        return None

    return Method(
        name=name or "a backward pass by hand (no autograd)",
        holds=holds, explain=explain, watch=watched,
        message=("your answer ran autograd (`backward()` or `torch.autograd.grad`); compute every gradient "
                 "with the matrix formulas instead."),
        tag="used_autograd", origin=_made("no_autograd", name=name))


def no_forward_mode():
    """No forward-mode AD: no dual tensors, ``jvp`` or ``jacfwd`` (each enters a dual level)."""
    return Method(
        name="reverse mode (no forward-mode AD)",
        holds=lambda facts: facts.get("forward_ad", 0) == 0, watch=("code:torch._C:_enter_dual_level",),
        message=("your answer used forward-mode AD (`torch.func.jvp`, `jacfwd` or dual tensors of "
                 "`torch.autograd.forward_ad`); the exercise is about the backward pass."),
        tag="forward_mode", origin=_made("no_forward_mode"))


def no_torch_func():
    """No ``torch.func`` transform (``grad``, ``vjp``, ``jacrev``, ``jacfwd``, ``vmap``, ``hessian``, ...)."""
    return Method(
        name="plain autograd (no `torch.func`)",
        holds=lambda facts: not _ran(facts, _TORCH_FUNC),
        message="your answer used a `torch.func` transform; the exercise asks for `backward()` or `torch.autograd.grad`.",
        tag="used_torch_func", watch=_TORCH_FUNC, origin=_made("no_torch_func"))


def no_jacobian(max_numel=None, *, limit="square"):
    """No Jacobian-sized tensor, in the forward or the backward.

    ``max_numel``: a fixed limit; else ``limit="square"`` (less than n * n, n the size of the
    largest tensor argument: the Jacobian of a map from n numbers to n numbers) or
    ``limit="input"`` (no tensor larger than the largest argument: for a VJP with respect to
    a weight matrix, whose Jacobian is smaller than n * n but larger than the weight).
    """
    if limit not in ("square", "input"):
        raise ValueError("no_jacobian(limit=...) is 'square' or 'input'")

    def holds(facts):
        n = facts["largest_input_numel"]
        if max_numel is not None:
            bound = max_numel
        elif limit == "input":
            bound = n
        else:
            bound = n * n - 1 if n > 1 else float("inf")
        return facts["largest_numel"] <= bound

    size = f"more than {max_numel} elements" if max_numel is not None else "as many elements as a Jacobian"
    return Method(
        name="a vector-Jacobian product without building the Jacobian",
        holds=holds,
        message=(f"your answer built a tensor with {size} (a `jacobian`, `jacrev` or `vmap` over the outputs "
                 "builds it); compute the product with `backward(v)` or `torch.autograd.grad(..., v)`, which "
                 "never builds the Jacobian."),
        tag="jacobian", sizes=True, origin=_made("no_jacobian", max_numel=max_numel, limit=limit))


# Where a Function's forward and backward evaluate the pieces of softplus and of its derivative: a difference
# quotient evaluates one of them at points a small step apart, in torch, NumPy, math, cmath or mpmath
# (``stepped_points``; round 6: a quotient over Python floats from ``tolist()`` got full marks).
_SOFTPLUS_POINTS = tuple(f"args:{module}:{name}" for module in ("math", "cmath", "numpy", "mpmath", "aten")
                         for name in ("exp", "expm1", "log", "log1p", "logaddexp", "tanh", "sigmoid", "softplus"))


def own_function():
    """A ``torch.autograd.Function`` of the answer's own, whose ``backward`` computes the derivative itself.

    Fails an answer that is not a ``Function`` (``Softplus = F.softplus``), whose backward
    never ran, or whose forward or backward calls autograd (forward-mode AD included) or one of
    PyTorch's derivative kernels (``aten::*_backward``) or Python derivative rules
    (``DECOMPOSITIONS``) instead of computing the derivative; one that computes a numerical
    derivative (complex tensors: a complex step; a value moved by a small step, ``x + h``: a
    difference quotient, ``tape._small_steps``); and one that keeps tensors as ``ctx``
    attributes instead of ``ctx.save_for_backward``.
    """
    def holds(facts):
        grad = facts.get("grad_phase") or {}
        return (facts.get("answer_kind") == "autograd.Function" and grad.get("own_backward_ops", 0) > 0
                and facts["engine_runs"] == 0 and grad.get("nested_engine_runs", 0) == 0
                and grad.get("own_library_derivatives", 0) == 0 and facts.get("library_derivatives", 0) == 0
                and not _ran(facts, DECOMPOSITIONS) and not _ran(grad, DECOMPOSITIONS)
                and not _ran(facts, DIFFERENTIATORS) and not _ran(grad, DIFFERENTIATORS)
                and not facts.get("forward_ad", 0) and not grad.get("forward_ad", 0)
                and not facts.get("complex_outputs", 0) and not grad.get("complex_outputs", 0)
                and not facts.get("small_steps", 0) and not grad.get("small_steps", 0)
                and not facts.get("stepped_points", 0) and not grad.get("stepped_points", 0)
                and not grad.get("ctx_tensors", 0) and not _exact_arithmetic(facts)
                and not complex_numbers(facts) and not own_arithmetic(facts))

    def explain(facts):
        grad = facts.get("grad_phase") or {}
        if facts.get("answer_kind") == "autograd.Function" and _exact_arithmetic(facts):
            return _exact_arithmetic(facts)
        if facts.get("answer_kind") == "autograd.Function" and own_arithmetic(facts):
            return own_arithmetic(facts)
        if (facts.get("answer_kind") == "autograd.Function" and not facts.get("complex_outputs", 0)
                and not grad.get("complex_outputs", 0) and complex_numbers(facts)):
            return complex_numbers(facts)
        if facts.get("answer_kind") != "autograd.Function":
            return ("your answer is not a `torch.autograd.Function` of your own (a library function such as "
                    "`F.softplus` already has PyTorch's backward): write `class ...(torch.autograd.Function)` "
                    "with a `forward` and a `backward`.")
        if facts["engine_runs"] or grad.get("nested_engine_runs", 0):
            return ("your Function runs autograd (`backward()`, `torch.autograd.grad` or `torch.func`) to get "
                    "its derivative: `backward` must compute it from what `forward` saved.")
        if facts.get("forward_ad", 0) or grad.get("forward_ad", 0):
            return ("your Function runs forward-mode AD (dual numbers, `torch.autograd.forward_ad` or "
                    "`torch.func.jvp`) to get its derivative: that is autograd's derivative, not yours; "
                    "`backward` must compute it with ordinary tensor operations.")
        if facts.get("complex_outputs", 0) or grad.get("complex_outputs", 0):
            return ("your Function computes with complex tensors: a complex-step derivative is numerical. Work "
                    "out the derivative as a formula and evaluate it in `backward`.")
        if facts.get("stepped_points", 0) or grad.get("stepped_points", 0):
            return ("your Function evaluates a function (exp, log, log1p, sigmoid, softplus, a power e ** x...) at "
                    "points a step apart (such as x + h and x - h, in torch, NumPy or Python floats): that is a "
                    "numerical derivative (a difference quotient), not one you worked out. Write the derivative as "
                    "a formula and evaluate it at the saved tensor.")
        if facts.get("small_steps", 0) or grad.get("small_steps", 0):
            return ("your Function evaluates at a point moved by a small step from its input (such as x + h and "
                    "x - h): that is a numerical derivative (a difference quotient), not one you worked out. "
                    "Write the derivative as a formula and evaluate it at the saved tensor.")
        if grad.get("ctx_tensors", 0):
            return ("your Function keeps a tensor as an attribute of `ctx` (such as `ctx.x = x`): tensors that "
                    "`backward` needs must go through `ctx.save_for_backward(...)` and come back from "
                    "`ctx.saved_tensors` (autograd then checks they were not modified in place, and frees them "
                    "with the graph). Keep only non-tensor values as attributes.")
        if grad.get("own_library_derivatives", 0) or facts.get("library_derivatives", 0):
            return ("your Function calls one of PyTorch's own derivative kernels (an `aten::*_backward` op); "
                    "`backward` must compute the derivative with ordinary tensor operations.")
        if _ran(facts, DECOMPOSITIONS) or _ran(grad, DECOMPOSITIONS):
            return ("your Function calls PyTorch's own derivative rules written in Python (`torch._decomp`, "
                    "`torch._refs` or `torch._prims`); `backward` must compute the derivative itself.")
        if _ran(facts, DIFFERENTIATORS) or _ran(grad, DIFFERENTIATORS):
            return ("your Function has a library differentiate for it (sympy's `diff`, mpmath's `diff`): that "
                    "derivative was found for you; work it out and write it with tensor operations in `backward`.")
        if not grad.get("own_backward_ops", 0):
            return "your Function's `backward` did not run when the checker backpropagated through its output."
        return None

    return Method(
        name="a custom `torch.autograd.Function` with its own backward",
        holds=holds, explain=explain, grad_phase=True,
        watch=DECOMPOSITIONS + DIFFERENTIATORS + _SOFTPLUS_POINTS + EXACT_ARITHMETIC,
        message="your answer's gradient does not come from a `backward` you wrote.",
        tag="own_function", origin=_made("own_function"))


def own_derivatives():
    """Local derivatives worked out by the answer: none of PyTorch's derivative kernels or rules ran.

    Refuses the ``aten::*_backward`` ops (``tanh_backward``, ``sigmoid_backward``...: the local
    derivatives autograd itself runs, callable directly as ``torch.ops.aten``) and the same rules
    written in Python (``DECOMPOSITIONS``), wherever in the call they ran: for an exercise whose
    skill is the derivative itself (a tiny engine's node, a backward written by hand).
    """
    return Method(
        name="local derivatives you work out yourself (no PyTorch derivative kernel or rule)",
        holds=lambda facts: (facts["library_derivatives"] == 0 and not _ran(facts, DECOMPOSITIONS + DIFFERENTIATORS)
                             and not _exact_arithmetic(facts) and not own_arithmetic(facts)
                             and not complex_numbers(facts)),
        explain=lambda facts: _exact_arithmetic(facts) or own_arithmetic(facts) or complex_numbers(facts),
        watch=DECOMPOSITIONS + DIFFERENTIATORS + EXACT_ARITHMETIC,
        message=("your answer called one of PyTorch's own derivative kernels (an `aten::*_backward` op), "
                 "derivative rules written in Python (`torch._decomp`, `torch._refs`, `torch._prims`) or a "
                 "library that differentiates (sympy's `diff`, mpmath's `diff`): that derivative was found for "
                 "you, not worked out. Write every local derivative with ordinary operations."),
        tag="library_derivative", origin=_made("own_derivatives"))


_EVALUATORS = ("math", "cmath", "numpy", "mpmath", "aten")


def no_difference_quotient(functions=("tanh", "exp", "cosh", "sinh")):
    """No numerical derivative of ``functions``: none evaluated at points a small step apart.

    Watches where those functions were evaluated, however they were reached (torch's ops as dispatched,
    and ``math``, ``cmath``, NumPy and mpmath's functions of the same names: ``facts._Points``), and
    refuses calls at points a small step apart (``stepped_points``: ``u + h`` and ``u - h``, or ``u + h``
    next to ``u``).  ``functions``: the names of the functions whose derivative the exercise asks for, and
    of those a formula for them is written with.  Not the op-level rule (``small_steps``) that
    ``own_function`` uses: outside a ``Function``, a sum accumulated in a loop (``g[j] += small``) moves a
    tensor by small steps too.
    """
    functions = tuple(functions)
    watched = tuple(f"args:{module}:{name}" for module in _EVALUATORS for name in functions)
    return Method(
        name="a derivative you work out (no numerical derivative)",
        holds=lambda facts: facts["stepped_points"] == 0,
        watch=watched,
        message=("your answer evaluated a function (" + "/".join(functions) + ", or a power such as e ** u) at "
                 "points a step apart, such as u + h and u - h (extrapolated or not): that is a numerical derivative "
                 "(a difference quotient), not one you worked out. Write the derivative as a formula and evaluate it "
                 "at the point itself."),
        tag="difference_quotient", origin=_made("no_difference_quotient", functions=functions))


# --- library code the prompt asks the student to replace -----------------------------------

def no_library(*targets, name=None, tag="used_library", specs=None):
    """None of ``targets`` may run: functions, classes, modules, builtins or aten ops (``tape.spec_of``).

    ``no_library(F.softplus, "aten::softplus_backward", name="softplus written by hand")``.
    A builtin such as ``F.softplus`` is a C function: name its aten op too, since a
    Python caller can reach the kernel without the builtin (``torch.ops.aten.softplus``).
    """
    specs = tuple(specs) if specs is not None else tuple(spec_of(t) for t in targets)
    shown = ", ".join(_shown(spec) for spec in specs)
    return Method(
        name=name or f"your own code (no {shown})",
        holds=lambda facts: not _ran(facts, specs),
        explain=lambda facts: "your answer " + "; ".join(f"{_shown(s)} {what}" for s, what in _ran(facts, specs)) + ".",
        message=f"your answer used {shown}, which the prompt asks you to write yourself.",
        tag=tag, watch=specs, origin=_made("no_library", name=name, tag=tag, specs=specs))


_SAMPLER = ("code:torch.utils.data.distributed:DistributedSampler",)
# GradScaler's kernels, every spelling: the in-place ops it calls and their out-of-place twins, which run the
# same rule (``torch.ops.aten._amp_update_scale`` returns the new scale and tracker; adversarial round 5, q05c).
# An overload (``.out``) dispatches under its op's name. tests/test_exercises.py checks that every
# ``aten::_amp_*`` schema of the installed torch is here.
AMP_KERNELS = ("op:aten::_amp_update_scale_", "op:aten::_amp_update_scale",
               "op:aten::_amp_foreach_non_finite_check_and_unscale_",
               "op:aten::_amp_foreach_non_finite_check_and_unscale")
# FSDP's scaler carries a pure-Python copy of the update rule (``_amp_update_scale_cpu_``, adversarial round 6).
_SCALER = ("code:torch.amp.grad_scaler", "code:torch.cuda.amp.grad_scaler",
           "code:torch.amp.grad_scaler:GradScaler",
           "code:torch.distributed.fsdp.sharded_grad_scaler:ShardedGradScaler") + AMP_KERNELS
# The fused kernels are what `SGD(fused=True)` / `Adam(fused=True)` run: callable as `torch._fused_sgd_` without
# any torch.optim code (adversarial round 4, 04.sgd_step A1). `_foreach_*` ops are ordinary tensor ops: allowed.
_OPTIMIZER = ("code:torch.optim", "code:torch.optim.optimizer:Optimizer", "op:aten::_fused_sgd_",
              "op:aten::_fused_adam_", "op:aten::_fused_adamw_", "op:aten::_fused_adagrad_")


def no_distributed_sampler():
    """The sharding is written by hand: no ``DistributedSampler`` is built, copied, or has its code run."""
    return Method(
        name="sharding written by hand (no `DistributedSampler`)",
        holds=lambda facts: facts.get("samplers_built", 0) == 0 and not _ran(facts, _SAMPLER),
        message=("your answer used a `DistributedSampler` (built one, copied one, or ran its code, or a copy of "
                 "its code compiled from its source text); the exercise "
                 "asks you to compute the indices yourself, from the padding and the interleaving measured above."),
        tag="used_sampler", watch=_SAMPLER, origin=_made("no_distributed_sampler"))


def no_grad_scaler():
    """The scaler's rule is written by hand: no ``GradScaler`` code, object or kernel (``AMP_KERNELS``)."""
    return Method(
        name="the update rule written by hand (no `GradScaler`)",
        holds=lambda facts: facts.get("scalers_built", 0) == 0 and not _ran(facts, _SCALER),
        explain=lambda facts: ("your answer " + "; ".join(f"{_shown(s)} {what}" for s, what in _ran(facts, _SCALER))
                               + ". The exercise asks you to write the update rule yourself.") if _ran(facts, _SCALER) else None,
        message=("your answer used a `GradScaler` (built one, copied one, ran its code or its kernel "
                 "`torch._amp_update_scale_`); the exercise asks you to write its update rule yourself, from the "
                 "skip-and-halve and grow-after-clean-steps behaviour measured above."),
        tag="used_grad_scaler", watch=_SCALER, origin=_made("no_grad_scaler"))


def no_optimizer():
    """The update is written by hand: no ``torch.optim`` code (an optimizer's ``step``, its functional form)."""
    return Method(
        name="the update written by hand (no `torch.optim`)",
        holds=lambda facts: not _ran(facts, _OPTIMIZER),
        message=("your answer used `torch.optim` (an optimizer's `step`, its functional form, or the fused kernel "
                 "it runs, such as `torch._fused_sgd_`); the exercise asks you to write the update yourself."),
        tag="used_optimizer", watch=_OPTIMIZER, origin=_made("no_optimizer"))


# --- in-place updates, the tiny engine, checkpoints ---------------------------------------

def no_data_attribute():
    """No write through ``.data``: a tensor argument must not change behind autograd's back.

    The write ledger (``facts._WriteLedger``) sees every write into an argument's memory, so
    a ``.data`` write followed by an in-place op that moves the counter for show is still one;
    setting a version counter by hand (``_unsafe_set_version_counter``, ``_increment_version``)
    is refused too, since it would hide one.
    """
    def explain(facts):
        if _ran(facts, VERSION_FORGERS):
            return ("your answer moved a version counter by hand (`torch._C._autograd._unsafe_set_version_counter` "
                    "or `torch.autograd.graph.increment_version`), which hides a write from autograd. Update the "
                    "tensor in place under `torch.no_grad()` instead.")
        return None

    return Method(
        name="updates autograd can see (no `.data`)",
        holds=lambda facts: facts["silent_writes"] == 0 and not _ran(facts, VERSION_FORGERS),
        explain=explain,
        message=("your answer wrote into a tensor without moving its version counter, which is what a write "
                 "through `.data` (or into a NumPy view of it) does, even if an in-place op moved the counter "
                 "afterwards; autograd cannot see such a write. Update it in place under `torch.no_grad()` "
                 "instead."),
        tag="data_write", watch=VERSION_FORGERS, origin=_made("no_data_attribute"))


def tiny_engine_op(op):
    """The result comes out of the tiny engine, through a node of the answer's own.

    For every element of the tensor arguments, the tiny engine's ``Value.backward`` ran the
    ``_backward`` of a distinct ``Value`` whose ``_backward`` closure the answer wrote (not one
    of the engine's own ops).  ``op`` is the node the prompt names (``"tanh"``): it words the
    feedback; the label the answer gives its node is not judged.
    """
    def explain(facts, args):
        if not facts.get("tiny_engine_runs"):
            return (f"your answer never called the tiny engine's `backward()`, so its numbers came from somewhere "
                    f"else (a formula typed in, or a torch function). Build your `{op}` node as a `Value` and call "
                    "`.backward()` on the tiny engine's result for each input.")
        if facts.get("tiny_missing_backwards"):
            return (f"your `{op}` node has no `_backward` of its own, so the engine ran the do-nothing default and "
                    "no gradient went through it: define `_backward` and attach it with `out._backward = _backward`.")
        if facts.get("tiny_orphans"):   # adversarial round 7: was told its derivative was numerical
            return (f"your `{op}` node lists no parent, so the engine does not know it depends on its input: "
                    "it orders the nodes by following parents, and the input can pass its gradient on before your "
                    "closure has added to it. Give the new `Value` its input as a parent, as the engine's own ops do.")
        return None

    return Method(
        name=f"the tiny engine's backward pass through your `{op}` node",
        holds=lambda facts, args: facts.get("tiny_own_backwards", 0) >= _elements(args) and not facts.get("tiny_orphans"),
        explain=explain,
        message=(f"the tiny engine's `backward()` did not run a `_backward` closure of your own `{op}` node for "
                 f"each input, so the gradient never went through your code. Your `{op}` must return a new `Value` "
                 "that knows its input as a parent and carries a `_backward` closure you wrote."),
        tag="typed_formula", origin=_made("tiny_engine_op", op=op))


_CHECKPOINT = "code:torch.utils.checkpoint:checkpoint"
_REENTRANT = "code:torch.utils.checkpoint:CheckpointFunction"
_RECOMPUTE = ("code:torch.utils.checkpoint:_checkpoint_without_reentrant_generator.<locals>.recompute_fn",
              "code:torch.utils.checkpoint:_checkpoint_without_reentrant_generator_impl.<locals>.recompute_fn")


def checkpoint_used(per="block", *, reentrant=False):
    """``torch.utils.checkpoint.checkpoint`` ran once per block, and the backward recomputed through each.

    ``per="block"``: one checkpoint per child of the first argument (a model); an ``int``: that
    many.  The recomputations (counted in the backward the answer runs) prove the returned
    result went through the checkpoints.  ``reentrant=False``: the reentrant variant is refused.
    """
    def wanted(args):
        return per if isinstance(per, int) else _blocks(args[0])

    def counts(facts):
        ran = facts.get("ran", {})
        return ran.get(_CHECKPOINT, 0), sum(ran.get(spec, 0) for spec in _RECOMPUTE), ran.get(_REENTRANT, 0)

    def holds(facts, args):
        calls, recomputed, reentrant_runs = counts(facts)
        return calls == wanted(args) and (recomputed >= calls or reentrant) and (reentrant or not reentrant_runs)

    def explain(facts, args):
        calls, recomputed, reentrant_runs = counts(facts)
        if calls != wanted(args):
            return (f"your answer called `checkpoint` {calls} time{'s' if calls != 1 else ''}; the prompt asks for "
                    f"one checkpoint per block ({wanted(args)} here).")
        if reentrant_runs and not reentrant:
            return "your answer used the reentrant checkpoint; use `use_reentrant=False`."
        return (f"the backward recomputed {recomputed} of your {calls} checkpointed segments: the loss you "
                "backpropagate and return must come from the checkpointed forward pass.")

    return Method(
        name="one checkpoint per block, recomputed in the backward",
        holds=holds, explain=explain, watch=(_CHECKPOINT, _REENTRANT) + _RECOMPUTE,
        message="your answer did not checkpoint each block once.",
        tag="checkpoint", origin=_made("checkpoint_used", per=per, reentrant=reentrant))


def _blocks(model):
    """Blocks of a model recorded as a dict of its parameters: the distinct first parts of their names."""
    if isinstance(model, dict):
        names = [name.removeprefix("module.") for name in model]
        return len({name.split(".")[0] for name in names if "." in name})
    return len(model)


def _elements(args):
    """How many numbers the tensor arguments hold together."""
    return sum(arg.numel() for arg in args if hasattr(arg, "numel"))


def broken(methods, facts, args=()):
    """The first method in ``methods`` that ``facts`` break, or ``None``."""
    for method in methods:
        if not method.kept(facts, args):
            return method
    return None


def watch_specs(methods):
    """Everything the tape must watch for ``methods``."""
    return tuple(sorted({spec for method in methods for spec in method.watch}))


def rebuild(origin):
    """A ready-made method back from its ``origin`` (a student build's plain data)."""
    factory, kwargs = origin
    if factory not in FACTORIES:
        raise ValueError(f"unknown method factory {factory!r}")
    return FACTORIES[factory](**kwargs)


FACTORIES = {function.__name__: function for function in (
    uses_autograd, autograd_derivative, steps_on_autograd_grads, micro_batches, backward_calls, no_autograd, no_forward_mode, no_torch_func, no_jacobian,
    own_function, own_derivatives, no_difference_quotient,
    no_library, no_distributed_sampler, no_grad_scaler, no_optimizer, no_data_attribute, tiny_engine_op,
    checkpoint_used)}
