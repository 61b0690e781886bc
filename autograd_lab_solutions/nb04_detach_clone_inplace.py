"""Exercises of notebook 04 (detach, clone, in-place): choose the copy, fix an in-place error, an SGD step."""

import functools

import torch

from autograd_lab.checking import (Exercise, Misconception, WrongAnswer, no_data_attribute, no_library, no_optimizer,
                                   register)
from autograd_lab.checking.variation import choose, generator


# --- 04.copy_choice -------------------------------------------------------------

_OPTIONS = ("detach", "clone", "detach().clone()")
_CHOICES = {"target": "detach", "masked_copy": "clone", "moved_by": "detach().clone()", "history": "detach"}


def copy_choice():
    return dict(_CHOICES)


_COPIES = {"detach": lambda t: t.detach(), "clone": lambda t: t.clone(),
           "detach().clone()": lambda t: t.detach().clone()}


def _copy_choice_experiment():
    """Try each call in each scenario; the key is the one call that does what the scenario asks."""
    scenarios = {"target": _constant_without_a_copy, "masked_copy": _masked_copy_in_graph,
                 "moved_by": _frozen_outside_the_graph, "history": _log_without_graph_or_copy}
    key = {}
    for scenario, works in scenarios.items():
        fitting = [name for name, copy in _COPIES.items() if works(copy)]
        assert len(fitting) == 1, (scenario, fitting)
        key[scenario] = fitting[0]
    return key


def _net():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 3)


def _constant_without_a_copy(copy):
    """The loss treats the target as a constant (no gradient through it), and its values are not copied."""
    net, x = _net(), torch.ones(1, 3)
    target = net(x).max()
    kept = copy(target)
    ((net(x) - kept) ** 2).sum().backward()
    with_target = net.weight.grad.clone()
    net.zero_grad()
    ((net(x) - target.detach()) ** 2).sum().backward()
    return torch.equal(with_target, net.weight.grad) and kept.data_ptr() == target.data_ptr()


def _masked_copy_in_graph(copy):
    """Zeroing entries of the new tensor in place leaves the activation as it was, and gradients reach the layer."""
    net, x = _net(), torch.ones(1, 3)
    activation = net(x)
    before = activation.detach().clone()
    masked = copy(activation)
    masked[0, 0] = 0.0
    if not masked.requires_grad:
        return False
    masked.sum().backward()
    return torch.equal(activation.detach(), before) and net.weight.grad is not None


def _frozen_outside_the_graph(copy):
    """What was kept still holds the old weights after optimizer.step(), and is part of no graph."""
    net = _net()
    kept = copy(net.weight)
    old = net.weight.detach().clone()
    net(torch.ones(1, 3)).sum().backward()
    torch.optim.SGD(net.parameters(), lr=0.1).step()
    return torch.equal(kept, old) and not kept.requires_grad and kept.grad_fn is None


def _log_without_graph_or_copy(copy):
    """A logged loss holds no graph (no grad_fn, no requires_grad) and shares the loss's storage (no copy)."""
    net = _net()
    loss = net(torch.ones(1, 3)).pow(2).sum()
    logged = copy(loss)
    return logged.grad_fn is None and not logged.requires_grad and logged.data_ptr() == loss.data_ptr()


def _answered(scenario, *choices):
    """A detector: the student picked one of ``choices`` for ``scenario``."""
    return lambda student, reference, args: isinstance(student, dict) and student.get(scenario) in choices


def _answered_any(pairs):
    """A detector: for some ``(scenario, choice)`` of ``pairs``, the student picked that choice."""
    return lambda student, reference, args: isinstance(student, dict) and any(
        student.get(scenario) == choice for scenario, choice in pairs)


def _with(**changes):
    return {**_CHOICES, **changes}


register(Exercise(
    id="04.copy_choice",
    title="detach, clone or detach().clone()?",
    answer_name="copy_choice",
    kind="value",
    reference=copy_choice,
    experiment=_copy_choice_experiment,
    choices=_OPTIONS,       # the prompt's three calls: a spelling outside them is told in check() (round 7, 04-4)
    solution_code=('copy_choice = {"target": "detach", "masked_copy": "clone", '
                   '"moved_by": "detach().clone()", "history": "detach"}'),
    hints=(
        "Ask three questions of each scenario: must gradients flow through the result? Will anything write "
        "into the result, or into t, while the result is still needed? Is a copy of the values allowed?",
        "The table in the section 'What each call keeps' measured, call by call, whether the result shares "
        "storage with t and whether it is part of the graph.",
        "optimizer.step() writes the new values into the weights' own storage, in place.",
    ),
    misconceptions=(
        Misconception(
            "clone_keeps_graph",
            "clone() stays in the graph: the loss would send gradients through the Q-learning target, which "
            "it must treat as a constant.",
            _answered("target", "clone")),
        Misconception(
            "graph_kept_alive",
            "clone() stays in the graph: every logged loss would hold on to its step's whole graph, so memory "
            "would grow with each step.",
            _answered("history", "clone")),
        Misconception(
            "needless_copy",
            "A copy that nothing needs: nothing writes into that tensor afterwards, so copying its values "
            "costs memory and buys nothing.",
            _answered_any((("target", "detach().clone()"), ("history", "detach().clone()")))),
        Misconception(
            "writes_into_activation",
            "detach() does not copy: zeroing entries of its result writes into the activation itself, and "
            "the result is outside the graph, so no gradient flows through it.",
            _answered("masked_copy", "detach")),
        Misconception(
            "cuts_graph",
            "A detached copy is outside the graph: no gradient could flow back through it to the layers "
            "before.",
            _answered("masked_copy", "detach().clone()")),
        Misconception(
            "detach_shares_storage",
            "detach() does not copy: what you kept shares the weight's storage, so the in-place optimizer "
            "step changes it too, and you would measure no movement.",
            _answered("moved_by", "detach")),
        Misconception(
            "kept_in_graph",
            "clone() copies the numbers but stays in the graph: what you kept requires grad and hangs on the "
            "weight's node, and the prompt asks for something that is part of no graph.",
            _answered("moved_by", "clone")),
    ),
    wrong_answers=(
        WrongAnswer(_with(moved_by="clone().detach()"), expect="structure",
                    note="a frozen copy, but not one of the three strings"),
        WrongAnswer({"target": ".detach()", "masked_copy": ".clone()", "moved_by": ".detach().clone()",
                     "history": ".detach()"}, expect="structure", note="the options with a leading dot"),
        WrongAnswer({"target": "detach()", "masked_copy": "clone()", "moved_by": "detach().clone()",
                     "history": "detach()"}, expect="structure",
                    note="the right calls with parentheses (adversarial round 7, 04-4: check() said 'expected form')"),
        WrongAnswer(_with(target="clone"), expect="clone_keeps_graph"),
        WrongAnswer(_with(history="clone"), expect="graph_kept_alive"),
        WrongAnswer(_with(target="detach().clone()"), expect="needless_copy"),
        WrongAnswer(_with(history="detach().clone()"), expect="needless_copy"),
        WrongAnswer(_with(masked_copy="detach"), expect="writes_into_activation"),
        WrongAnswer(_with(masked_copy="detach().clone()"), expect="cuts_graph"),
        WrongAnswer(_with(moved_by="detach"), expect="detach_shares_storage"),
        WrongAnswer(_with(moved_by="clone"), expect="kept_in_graph"),
        WrongAnswer({"target": "detach", "masked_copy": "clone", "moved_by": "detach().clone()"}, expect="structure",
                    note="a scenario left out"),
    ),
))


# --- 04.squash ------------------------------------------------------------------

def _squash_mutation_allowed_inside(x):
    """Adversarial round 7 (04-3): the broken body inside `allow_mutation_on_saved_tensors()` (check() said
    "timed out": the tape's count of new objects took 63 s over the objects the context leaves)."""
    with torch.autograd.graph.allow_mutation_on_saved_tensors():
        y = torch.sigmoid(x)
        gate = y * x
        y.mul_(2).sub_(1)
        return gate + y * x


def squash(x):
    y = torch.sigmoid(x)
    gate = y * x
    mapped = y * 2 - 1                 # a new tensor: what sigmoid and the product saved stays intact
    return gate + mapped * x


def _squash_inputs(seed, hidden):
    shape = choose(seed, ((6,), (2, 3), (4, 1)), hidden=hidden, hidden_choices=((3, 5), (7,), (2, 2, 2)))
    return (torch.randn(shape, generator=generator(seed), dtype=torch.float64).requires_grad_(),)


def _squash_in_place(x):
    y = torch.sigmoid(x)
    gate = y * x
    y.mul_(2).sub_(1)                  # the function as given: overwrites what sigmoid and the product saved
    return gate + y * x


def _squash_through_data(x):
    y = torch.sigmoid(x)
    gate = y * x
    y.data.mul_(2).sub_(1)             # no error, but both saved copies of y now hold the mapped numbers
    return gate + y * x


def _squash_through_numpy(x):
    y = torch.sigmoid(x)
    gate = y * x
    edited = y.detach().numpy()        # shares y's memory: the same invisible write, without .data
    edited *= 2
    edited -= 1
    return gate + y * x


def _squash_detached(x):
    y = torch.sigmoid(x)
    gate = y * x
    mapped = y.detach() * 2 - 1        # right values, but the path through sigmoid is cut here
    return gate + mapped * x


def _squash_sigmoid_detached(x):
    y = torch.sigmoid(x.data)          # adversarial round 1 (x.data): no path through sigmoid at all
    gate = y * x
    return gate + (y * 2 - 1) * x


def _squash_under_no_grad(x):
    y = torch.sigmoid(x)
    gate = y * x
    with torch.no_grad():
        mapped = y * 2 - 1             # no detach() anywhere, but just as constant
    return gate + mapped * x


def _squash_mapped_first(x):
    y = torch.sigmoid(x) * 2 - 1       # out of place, but before gate: gate sees the mapped values
    gate = y * x
    return gate + y * x


def _squash_clone_first(x):
    y = torch.sigmoid(x).clone()
    y.mul_(2).sub_(1)                  # edits the clone, but before gate: the same mistake
    gate = y * x
    return gate + y * x


class _TypedSquash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        s = torch.sigmoid(x)
        return (3 * s - 1) * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * (3 * s - 1 + 3 * s * (1 - s) * x)


def _squash_by_own_function(x):
    return _TypedSquash.apply(x)       # right values and gradient, from a derivative typed by hand


# What takes a value out of autograd's sight by switching recording off: every switch of grad mode (no_grad,
# enable_grad, set_grad_enabled and inference_mode are grad_mode's code; the builtin and the class are what
# they call, reachable without them). Not here: `x.detach()` (a bound builtin method, which the tape does not
# match, and the aten::detach op also runs when sigmoid saves its output) and `.data` (no op, no call): the
# gradient detectors judge those where the gradient is wrong.
_HIDING = ("code:torch.autograd.grad_mode", "code:torch._C:_set_grad_enabled", "code:torch._C:_InferenceMode")


def _squash_straight_through(x):
    with torch.no_grad():              # adversarial round 2: the broken code, harmless where nothing records ...
        y = torch.sigmoid(x)
        gate = y * x
        y.mul_(2).sub_(1)
        values = gate + y * x
    s = torch.sigmoid(x.detach())
    typed = 3 * s - 1 + 3 * x.detach() * s * (1 - s)     # ... and a derivative typed by hand, added with zero value
    return values + (x * typed - (x * typed).detach())


def _squash_data_straight_through(x):
    values_x = x.data                  # adversarial round 3's trick without detach() or no_grad: .data ...
    y = torch.sigmoid(values_x)
    gate = y * values_x
    y.mul_(2).sub_(1)
    s = torch.sigmoid(values_x)
    typed = 3 * s - 1 + 3 * values_x * s * (1 - s)        # ... and a derivative typed by hand, as a constant
    return (gate + y * values_x - values_x * typed) + x * typed


def _squash_no_grad_values_autograd_gradient(x):
    with torch.no_grad():              # the broken code's values, out of autograd's sight ...
        y = torch.sigmoid(x)
        gate = y * x
        y.mul_(2).sub_(1)
        values = gate + y * x
    right = x * (3 * torch.sigmoid(x) - 1)                # ... and a right squash, for its gradient only
    with torch.no_grad():
        offset = values - right
    return offset + right


def _squash_set_grad_enabled(x):
    torch.set_grad_enabled(False)      # no detach() and no no_grad(): the same constant, by a mode switch
    y = torch.sigmoid(x)
    gate = y * x
    y.mul_(2).sub_(1)
    typed = 3 * torch.sigmoid(x) - 1 + 3 * x * torch.sigmoid(x) * (1 - torch.sigmoid(x))
    constant = gate + y * x - x * typed
    torch.set_grad_enabled(True)
    return constant + x * typed


# Saved-tensor hooks decide what a node keeps: a pack hook that copies (`saved_tensors_hooks`, `save_on_cpu`) lets
# the broken in-place write run without the version error (adversarial round 4, A1). Any push of default hooks
# goes through the builtin, whatever class or alias pushed it. A version counter set back by hand hides the same
# write (round 4, A2: it got a bare wrong value); `increment_version` calls the second builtin.
_WRITE_HIDERS = ("code:torch.autograd.graph:saved_tensors_hooks",
                 "code:torch._C._autograd:_push_saved_tensors_default_hooks",
                 "code:torch._C._autograd:_unsafe_set_version_counter", "code:torch._C:_increment_version")


_FUNCTIONALIZERS = ("code:torch.func:functionalize", "code:torch._C._functorch:_wrap_functional_tensor",
                    "code:torch:_to_functional_tensor", "code:torch:_enable_functionalization")


def _squash_functionalized(x):
    """Adversarial round 9 (adv-00-04-r8 F7): the broken code kept as given, its in-place ops rewritten by torch."""
    def broken(x):
        y = torch.sigmoid(x)
        gate = y * x
        y.mul_(2).sub_(1)
        return gate + y * x
    return torch.func.functionalize(broken)(x)


def _squash_forged_version(x):
    y = torch.sigmoid(x)
    gate = y * x
    version = y._version
    y.mul_(2).sub_(1)                  # adversarial round 4 (A2): the broken write, its counter set back by hand
    forge = torch._C._autograd._unsafe_set_version_counter
    if "Sequence" in (forge.__doc__ or ""):
        forge((y,), (version,))
    else:                              # torch 2.5 takes one tensor and one version
        forge(y, version)
    return gate + y * x


def _squash_detach_straight_through(x):
    values_x = x.detach()              # adversarial round 3 (E1): the broken code on a detached copy ...
    y = torch.sigmoid(values_x)
    gate = y * values_x
    y.mul_(2).sub_(1)
    values = gate + y * values_x
    right = x * (3 * torch.sigmoid(x) - 1)                # ... and a right squash, straight-through, for the gradient
    return values + (right - right.detach())


def _squash_hooks_copy(x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
        y = torch.sigmoid(x)           # adversarial round 4 (A1): the nodes save copies, so ...
        gate = y * x
    y.mul_(2).sub_(1)                  # ... the same in-place write as the broken code raises nothing
    return gate + y * x


def _squash_hooks_pushed_directly(x):
    push, pop = torch._C._autograd._push_saved_tensors_default_hooks, torch._C._autograd._pop_saved_tensors_default_hooks
    push(lambda t: t.clone(), lambda t: t)     # the same, without the context manager
    try:
        y = torch.sigmoid(x)
        gate = y * x
    finally:
        pop()
    y.mul_(2).sub_(1)
    return gate + y * x


def _derivative(function, x):
    """d(function)/dx element by element (squash and its variants are elementwise), by autograd."""
    x = x.detach().clone().requires_grad_()
    function(x).sum().backward()
    return x.grad


def _grads_like(*variants):
    """A detector: the student's input gradient is the one one of ``variants`` computes.

    Each input gradient is the case's random cotangent times the elementwise derivative, so
    two agree when student_grad * reference_derivative == reference_grad * variant_derivative.
    """
    def detect(student, reference, args, *, student_run, reference_run):
        ours, theirs = student_run.input_grads[0], reference_run.input_grads[0]
        return any(torch.allclose(ours * _derivative(squash, args[0]), theirs * _derivative(variant, args[0]),
                                  rtol=1e-6, atol=1e-9) for variant in variants)
    return detect


def _values_like(variant):
    """A detector: the student returned what ``variant`` returns."""
    def detect(student, reference, args):
        return isinstance(student, torch.Tensor) and torch.allclose(student, variant(args[0].detach()))
    return detect


register(Exercise(
    id="04.squash",
    title="Fix the in-place error without changing the result",
    answer_name="squash",
    reference=squash,
    inputs=_squash_inputs,
    compare=("value", "grad"),
    # Adversarial round 3: values from `.data` with a typed derivative added as a constant pass values and
    # gradient; such a gradient has no second derivative of its own, which this caller checks.
    call="autograd_lab.labs.inplace:squash_with_second_derivative",
    method=(no_library("code:torch.autograd.function:Function", "code:torch.autograd.function:BackwardCFunction",
                       name="autograd's own derivatives (no custom `autograd.Function`)", tag="custom_function"),
            # Adversarial round 2: the broken code's values computed out of autograd's sight (detach, no_grad),
            # plus a derivative typed by hand added straight-through, got full marks on values and gradients.
            no_library(name="nothing hidden from autograd (no `no_grad()`, `set_grad_enabled` or `inference_mode()`: "
                            "every value is computed where autograd records)", tag="hidden_from_autograd",
                       specs=_HIDING),
            no_library(name="the in-place write fixed, not hidden (no saved-tensor hooks, whose pack hook can copy "
                            "what a node saves, and no version counter set by hand: both silence the version error "
                            "while the write into what a node saved stays)",
                       tag="write_hidden", specs=_WRITE_HIDERS),
            # Adversarial round 9 (adv-00-04-r8 F7): functionalize(broken)(x) kept the broken code and let torch
            # rewrite its in-place ops. Every functionalization makes a functional tensor wrapper (functorch's
            # wrap, `torch._to_functional_tensor` for FunctionalTensorMode and AOT autograd), so those are refused.
            no_library(name="the in-place write rewritten by hand (no functionalization: `torch.func.functionalize` "
                            "or a functional tensor, which let torch rewrite the in-place ops while the broken code "
                            "stays as it was)",
                       tag="functionalized", specs=_FUNCTIONALIZERS)),
    hints=(
        "Read the error, or draw the graph with show_saved=True: which nodes saved the tensor that the in-place "
        "line overwrote? There are two.",
        "gate needs sigmoid(x) as it was; the return line needs the mapped values. Those are two different "
        "tensors, so the mapped one must be a new tensor, made after gate.",
        "Hiding the write from autograd (.data, a NumPy view, no_grad, detach) silences the error without fixing "
        "it: the check compares the gradient too.",
    ),
    misconceptions=(
        Misconception(
            "edited_through_data",
            "The values are right but the gradient is not: the in-place edit was hidden from autograd (a write "
            "through `.data`, or into a NumPy array, does not move the version counter), so the `* 2 - 1` is "
            "missing from backward, and sigmoid and the product read the edited numbers as the ones they saved. "
            "Silencing the error is not fixing it.",
            _grads_like(_squash_through_data)),
        Misconception(
            "detached_path",
            "The values are right but the gradient misses a path: part of the computation entered as a constant, "
            "cut from the graph (by `detach()`, `.data`, `torch.no_grad()` or a copy made outside autograd), so "
            "nothing flows back through sigmoid from there. Keep every value in the graph.",
            _grads_like(_squash_detached, _squash_sigmoid_detached)),
        Misconception(
            "mapped_too_early",
            "The values are wrong: gate must be sigmoid(x) times x, as in the original, where the mapping onto "
            "(-1, 1) comes after gate. Yours maps first, so gate uses the mapped values.",
            _values_like(_squash_mapped_first)),
    ),
    wrong_answers=(
        WrongAnswer(_squash_in_place, expect="error", note="the function as given"),
        WrongAnswer(_squash_mutation_allowed_inside, expect="error",
                    note="adversarial round 7 (04-3): backward outside the context raises; was reported as a time-out"),
        WrongAnswer(_squash_through_data, expect="edited_through_data", note=".data hides the error"),
        WrongAnswer(_squash_through_numpy, expect="edited_through_data",
                    note="a NumPy view hides it too: the message must not say .data only"),
        WrongAnswer(_squash_detached, expect="detached_path", note="detach cuts a path"),
        WrongAnswer(_squash_sigmoid_detached, expect="detached_path", note="sigmoid of x.data: every sigmoid path cut"),
        WrongAnswer(_squash_under_no_grad, expect="hidden_from_autograd",
                    note="no_grad cuts the same path; round 2: refused by the method, before its gradient is compared"),
        WrongAnswer(_squash_mapped_first, expect="mapped_too_early", note="the naive out-of-place fix"),
        WrongAnswer(_squash_clone_first, expect="mapped_too_early", note="a clone, edited before gate"),
        WrongAnswer(_squash_straight_through, expect="error",
                    note="adversarial round 3 (I1): no_grad values plus a typed derivative, straight-through: the "
                         "caller's second-derivative check raises before the method is judged"),
        WrongAnswer(_squash_no_grad_values_autograd_gradient, expect="hidden_from_autograd",
                    note="values under no_grad, a right squash's graph added straight-through: the method"),
        WrongAnswer(_squash_data_straight_through, expect="error",
                    note="the same through .data: right values and gradient, no second derivative (the caller)"),
        WrongAnswer(_squash_set_grad_enabled, expect="error",
                    note="the same shortcut without detach() or no_grad(): set_grad_enabled (second derivative)"),
        WrongAnswer(_squash_detach_straight_through, expect="error",
                    note="adversarial round 3 (E1): values through detach(), a right squash added straight-through: "
                         "with detach() kept in the graph the caller sees the version error"),
        WrongAnswer(_squash_hooks_copy, expect="write_hidden",
                    note="adversarial round 4 (A1): the broken code kept, its saves copied by saved_tensors_hooks"),
        WrongAnswer(_squash_hooks_pushed_directly, expect="write_hidden",
                    note="the same hooks pushed with the builtin the context manager calls"),
        WrongAnswer(_squash_forged_version, expect="write_hidden",
                    note="adversarial round 4 (A2): the version counter set back by hand (was a bare wrong value)"),
        WrongAnswer(_squash_functionalized, expect="functionalized",
                    note="adversarial round 9 (adv-00-04-r8 F7): torch.func.functionalize of the broken code"),
        WrongAnswer(_squash_by_own_function, expect="custom_function",
                    note="adversarial round 1: a custom Function with a typed derivative"),
    ),
))


# --- 04.sgd_step ----------------------------------------------------------------

def sgd_step(params, lr, weight_decay):
    with torch.no_grad():              # an update is not part of the model: do not record it
        for p in params:
            if p.grad is None:         # no gradient this step: torch.optim leaves such a p alone too
                continue
            p.sub_(lr * (p.grad + weight_decay * p))   # in place: the same leaf objects get the new values
            p.grad = None


def _sgd_step_inputs(seed, hidden):
    g = generator(seed)
    shapes = choose(seed, ([(3, 2), (2,), (4,)], [(2, 2), (3,), (1, 3), (2,)], [(5,), (2, 3)]),
                    hidden=hidden, hidden_choices=([(4, 3), (3,), (2, 2)], [(6,), (2, 1), (3, 3)], [(2,), (5, 2)]))
    # No public lr is 0.1: an answer with lr fixed at 0.1 would be right on that case, and a release names
    # a wrong answer by its public records (the fixed-lr bank entry would rename every right-valued slip).
    lr = choose(seed, (0.05, 0.5, 0.2), hidden=hidden, hidden_choices=(0.1, 0.01, 0.3))
    weight_decay = choose(seed, (0.01, 0.1, 0.05), hidden=hidden, hidden_choices=(0.2, 0.02, 0.5))
    without_grad = int(seed) % len(shapes)       # which parameter got no gradient this step
    params = []
    for index, shape in enumerate(shapes):
        p = torch.randn(shape, generator=g).requires_grad_()
        p.grad = None if index == without_grad else torch.randn(shape, generator=g)
        params.append(p)
    # A tuple, like an optimizer's parameters: the step must change these tensors, not swap them.
    # The last argument is the grad mode the check calls the step in (labs/inplace.py, step_in_grad_mode):
    # off in one public and one hidden case, so a step that forces grad mode on at its end is seen.
    grad_enabled = choose(seed, (True, False, True), hidden=hidden, hidden_choices=(True, True, False))
    return tuple(params), lr, weight_decay, grad_enabled


def _sgd_rebinding(params, lr, weight_decay):
    for p in params:
        if p.grad is None:
            continue
        p = p - lr * (p.grad + weight_decay * p)   # a new tensor bound to a local name: nothing is updated
        p.grad = None


def _sgd_keeps_grad(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * (p.grad + weight_decay * p))   # .grad left in place: the next backward adds to it


def _sgd_recorded(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p.sub_(lr * (p.grad + weight_decay * p))   # in place on a leaf while recording: an error
            p.grad = None


def _sgd_ascent(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.add_(lr * (p.grad + weight_decay * p))
                p.grad = None


def _sgd_new_tensors(params, lr, weight_decay):
    for i, p in enumerate(params):
        if p.grad is not None:
            params[i] = (p - lr * (p.grad + weight_decay * p)).detach().requires_grad_()   # not the same objects


def _sgd_grad_zeroed(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * (p.grad + weight_decay * p))
                p.grad.zero_()         # zeros, not None


def _sgd_no_guard(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            p.sub_(lr * (p.grad + weight_decay * p))   # TypeError at the parameter that got no gradient
            p.grad = None


def _sgd_decays_without_grad(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            p.mul_(1 - lr * weight_decay)              # decays every parameter, with a gradient or not
            if p.grad is not None:
                p.sub_(lr * p.grad)
                p.grad = None


def _sgd_no_weight_decay(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * p.grad)
                p.grad = None


def _sgd_fixed_lr(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(0.1 * (p.grad + weight_decay * p))   # adversarial round 1: the learning rate ignored
                p.grad = None


def _sgd_by_optimizer(params, lr, weight_decay):
    optimizer = torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)   # adversarial round 1 (issue 20)
    optimizer.step()
    optimizer.zero_grad()


def _sgd_through_data(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p.data.sub_(lr * (p.grad + weight_decay * p.data))   # right numbers, but autograd never sees the write
            p.grad = None


def _sgd_assigns_data(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p.data = p.data - lr * (p.grad + weight_decay * p.data)   # swaps the storage behind autograd's back
            p.grad = None


def _sgd_swaps_storage(params, lr, weight_decay):
    """Adversarial round 6: `set_` under no_grad swaps p's memory for the new values' (aliases keep the old ones)."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.set_(p - lr * (p.grad + weight_decay * p))
                p.grad = None


def _sgd_swaps_storage_by_parts(params, lr, weight_decay):
    """The same swap, spelled with the new tensor's storage, offset, shape and strides."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                new = p - lr * (p.grad + weight_decay * p)
                p.set_(new.untyped_storage(), new.storage_offset(), new.shape, new.stride())
                p.grad = None


def _sgd_data_then_version_bump(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p.data.sub_(lr * (p.grad + weight_decay * p.data))   # adversarial round 1: the .data write ...
            with torch.no_grad():
                p.mul_(1.0)                                      # ... and a no-op to move the counter
            p.grad = None


def _sgd_numpy_then_version_bump(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            values = p.detach().numpy()                           # adversarial round 1: a NumPy write ...
            values -= lr * (p.grad.numpy() + weight_decay * values)
            p.detach().add_(0)                                    # ... and a no-op through detach()
            p.grad = None


def _sgd_forged_version(params, lr, weight_decay):
    for p in params:
        if p.grad is not None:
            p.data.sub_(lr * (p.grad + weight_decay * p.data))
            torch.autograd.graph.increment_version(p)             # the counter moved by hand
            p.grad = None


def _sgd_forged_out_of_sight(params, lr, weight_decay):
    bump = functools.partial(torch._C._increment_version)   # a call the tape's profile hook does not see
    for p in params:
        if p.grad is not None:
            p.data.sub_(lr * (p.grad + weight_decay * p.data))
            bump([p])
            p.grad = None


def _sgd_decay_after_step(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * p.grad)                           # adversarial round 4 (slip): the decay reads the
                p.sub_(lr * weight_decay * p)                 # parameter the gradient step already moved
                p.grad = None


def _sgd_fused_kernel(params, lr, weight_decay):
    stepped = [p for p in params if p.grad is not None]          # adversarial round 4 (A1): the kernel that
    torch._fused_sgd_(stepped, [p.grad for p in stepped], [],     # SGD(fused=True) runs, without torch.optim code
                      weight_decay=weight_decay, momentum=0.0, lr=lr, dampening=0.0, nesterov=False,
                      maximize=False, is_first_step=True)
    for p in params:
        p.grad = None


def _sgd_stops_requiring_grad(params, lr, weight_decay):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * (p.grad + weight_decay * p))
                p.grad = None
            p.requires_grad_(False)                               # adversarial round 1: no longer a parameter


def _sgd_grad_mode_forced_on(params, lr, weight_decay):
    torch.set_grad_enabled(False)                                 # adversarial round 2: switched on at the end,
    for p in params:                                              # not put back as found (called under no_grad,
        if p.grad is not None:                                    # it turns grad mode on for the caller)
            p.sub_(lr * (p.grad + weight_decay * p))
            p.grad = None
    torch.set_grad_enabled(True)


def _sgd_grad_mode_left_off(params, lr, weight_decay):
    torch.set_grad_enabled(False)                                 # adversarial round 1: never switched back on
    for p in params:
        if p.grad is not None:
            p.sub_(lr * (p.grad + weight_decay * p))
            p.grad = None


def _steps(args, student_run, reference_run):
    """(before, the student's after, the reference's after) per parameter."""
    return list(zip(args[0], student_run.args_after[0], reference_run.args_after[0]))


def _unchanged(student, reference, args, *, student_run):
    return all(torch.equal(after, before) for before, after in zip(args[0], student_run.args_after[0]))


def _stepped_uphill(student, reference, args, *, student_run, reference_run):
    return all(torch.allclose(ours - before, before - theirs, atol=1e-6)
               for before, ours, theirs in _steps(args, student_run, reference_run))


def _grad_left_in_place(student, reference, args, *, student_run, reference_run):
    pairs = list(zip(student_run.args_after[0], reference_run.args_after[0]))
    return (all(torch.allclose(ours, theirs) for ours, theirs in pairs)
            and any(ours.grad is not None and theirs.grad is None and bool(ours.grad.any()) for ours, theirs in pairs))


def _grad_zeroed(student, reference, args, *, student_run, reference_run):
    pairs = list(zip(student_run.args_after[0], reference_run.args_after[0]))
    return (all(torch.allclose(ours, theirs) for ours, theirs in pairs)
            and any(ours.grad is not None for ours, _ in pairs)
            and all(ours.grad is None or not bool(ours.grad.any()) for ours, _ in pairs))


def _decayed_without_grad(student, reference, args, *, student_run, reference_run):
    lr, weight_decay = args[1], args[2]
    steps = _steps(args, student_run, reference_run)
    left_alone = [(before, ours) for before, ours, theirs in steps if torch.equal(before, theirs)]
    return bool(left_alone) and all(torch.allclose(ours, before * (1 - lr * weight_decay)) for before, ours in left_alone)


def _without_weight_decay(student, reference, args, *, student_run, reference_run):
    lr, weight_decay = args[1], args[2]
    steps = [(b, o, t) for b, o, t in _steps(args, student_run, reference_run) if not torch.equal(b, t)]
    return bool(steps) and all(torch.allclose(ours - theirs, lr * weight_decay * before, atol=1e-6)
                               for before, ours, theirs in steps)


def _decay_after_step(student, reference, args, *, student_run, reference_run):
    """Each stepped parameter is (p - lr g)(1 - lr wd): the decay computed from the already-updated p."""
    lr, weight_decay = args[1], args[2]
    steps = [(b, o, t) for b, o, t in _steps(args, student_run, reference_run) if not torch.equal(b, t)]
    def slipped(before, theirs):
        grad = (before - theirs) / lr - weight_decay * before   # the reference stepped by lr (grad + wd before)
        return (before - lr * grad) * (1 - lr * weight_decay)
    return bool(steps) and all(torch.allclose(ours, slipped(before, theirs), atol=1e-5) for before, ours, theirs in steps)


def _grad_mode_forced_on(student, reference, args, *, student_run, reference_run):
    """Called with grad mode off (the last argument), the parameters right: what differs is the mode left on."""
    pairs = list(zip(student_run.args_after[0], reference_run.args_after[0]))
    return (args[3] is False and all(torch.allclose(ours, theirs) for ours, theirs in pairs)
            and all((ours.grad is None) == (theirs.grad is None) for ours, theirs in pairs))


def _step_scaled(student, reference, args, *, student_run, reference_run):
    """The step points the right way but has another size: (ours - before) = k (theirs - before), k != 1."""
    ours = torch.cat([(o - b).flatten() for b, o, _ in _steps(args, student_run, reference_run)])
    theirs = torch.cat([(t - b).flatten() for b, _, t in _steps(args, student_run, reference_run)])
    moved = theirs.abs() > 1e-6
    if not bool(moved.any()):
        return False
    ratios = ours[moved] / theirs[moved]
    k = ratios.mean()
    return bool(k > 0) and abs(float(k) - 1) > 1e-3 and torch.allclose(ratios, k.expand_as(ratios), rtol=1e-3)


register(Exercise(
    id="04.sgd_step",
    title="A manual SGD step with weight decay",
    answer_name="sgd_step",
    reference=sgd_step,
    inputs=_sgd_step_inputs,
    compare=("args", "state"),
    modifies=("params:values", "params:grad"),   # new values and a cleared .grad; requires_grad stays
    call="autograd_lab.labs.inplace:step_in_grad_mode",   # called with grad mode on, and off (the inputs' last item)
    method=(no_data_attribute(), no_optimizer()),
    hints=(
        "The step must change the tensors in `params` themselves: binding a new tensor to the loop's name "
        "changes nothing outside it, and the tuple's entries cannot be replaced.",
        "Autograd refuses an in-place operation on a leaf that requires grad while it records; the notebook's "
        "'A parameter update' section shows how to take the step outside recording, and its `.data` section why "
        "that attribute is not the way.",
        "The decay term joins the gradient before the step, and only for a parameter that has a gradient; the "
        "notebook's section 'A parameter that got no gradient' shows what to do with the others.",
    ),
    misconceptions=(
        Misconception(
            "rebinding",
            "The parameters did not change at all: the step never reached the tensors in `params`. A common cause "
            "is a new tensor bound to the loop's local name, which changes nothing outside the loop. Update each "
            "parameter in place, outside autograd's recording.",
            _unchanged),
        Misconception(
            "gradient_ascent",
            "Your step has the right size but goes up the gradient: gradient descent moves each parameter against "
            "its gradient (plus the decay term).",
            _stepped_uphill),
        Misconception(
            "decayed_without_grad",
            "A parameter whose `.grad` is `None` got no gradient this step, and the prompt (like `torch.optim`) "
            "leaves it exactly as it is; your step shrank it by the weight decay anyway.",
            _decayed_without_grad),
        Misconception(
            "no_weight_decay",
            "Your step has no weight decay: each parameter that has a gradient moves by `lr` times its gradient "
            "alone, where the prompt adds `weight_decay · p` to the gradient first.",
            _without_weight_decay),
        Misconception(
            "decay_after_step",
            "Your step applies the weight decay after the gradient step, to the parameter that step already moved: "
            "both terms of `lr · (p.grad + weight_decay · p)` read the parameter as it was before this step. "
            "Compute the whole update first, then write it once.",
            _decay_after_step),
        Misconception(
            "step_scaled",
            "Your step points the right way but has another size than `lr · (p.grad + weight_decay · p)`: is the "
            "learning rate taken from the argument, or fixed in the code?",
            _step_scaled),
        Misconception(
            "grad_not_cleared",
            "The update is right, but .grad is still set afterwards: the next backward() adds into it, so every "
            "later step would use the sum of all gradients so far. Set each .grad to None after the update.",
            _grad_left_in_place),
        Misconception(
            "grad_zeroed",
            "The update is right, but each `.grad` holds zeros instead of `None`. Training would still work (the "
            "next backward adds into zeros), but the prompt asks for `None`, which is also what "
            "`optimizer.zero_grad()` does by default.",
            _grad_zeroed),
        Misconception(
            "grad_mode_forced_on",
            "The update is right, but this case called your step with grad mode off, and your step left it on: "
            "'as you found it' means putting back the mode the caller had, not switching grad mode on. A "
            "grad-mode context manager puts back whatever mode it found when its block ends.",
            _grad_mode_forced_on),
    ),
    wrong_answers=(
        WrongAnswer(_sgd_no_guard, expect="error",
                    note="no check for a parameter without a gradient: the error's usual cause names it"),
        WrongAnswer(_sgd_rebinding, expect="rebinding", note="rebinding updates nothing"),
        WrongAnswer(_sgd_keeps_grad, expect="grad_not_cleared", note=".grad not cleared"),
        WrongAnswer(_sgd_recorded, expect="error", note="in place on a leaf while recording"),
        WrongAnswer(_sgd_ascent, expect="gradient_ascent", note="gradient ascent"),
        WrongAnswer(_sgd_decays_without_grad, expect="decayed_without_grad",
                    note="weight decay applied to a parameter that got no gradient"),
        WrongAnswer(_sgd_no_weight_decay, expect="no_weight_decay", note="the decay term forgotten"),
        WrongAnswer(_sgd_fixed_lr, expect="step_scaled", note="adversarial round 1: lr fixed at 0.1, round 1's only lr"),
        WrongAnswer(_sgd_by_optimizer, expect="used_optimizer", note="adversarial round 1 and issue 20: torch.optim.SGD"),
        WrongAnswer(_sgd_decay_after_step, expect="decay_after_step",
                    note="adversarial round 4 (slip): decay after the step; it was named a factor of '1 times'"),
        WrongAnswer(_sgd_fused_kernel, expect="used_optimizer",
                    note="adversarial round 4 (A1): torch._fused_sgd_, the fused optimizer kernel, called directly"),
        WrongAnswer(_sgd_through_data, expect="data_write", note="the silent .data update the lab warns about"),
        WrongAnswer(_sgd_assigns_data, expect="data_write", note="p.data = ...: the same silent write, by assignment"),
        WrongAnswer(_sgd_swaps_storage, expect="modified_input",
                    note="adversarial round 6: p.set_(new) swaps the memory (a tied weight, a state_dict keep the old)"),
        WrongAnswer(_sgd_swaps_storage_by_parts, expect="modified_input", note="set_(storage, offset, size, stride)"),
        WrongAnswer(_sgd_data_then_version_bump, expect="data_write",
                    note="adversarial round 1: .data, then a no-op in-place op to move the counter"),
        WrongAnswer(_sgd_numpy_then_version_bump, expect="data_write",
                    note="adversarial round 1: a NumPy write, then a no-op through detach()"),
        WrongAnswer(_sgd_forged_version, expect="data_write", note="the counter moved by hand"),
        WrongAnswer(_sgd_forged_out_of_sight, expect="data_write",
                    note="the counter moved by hand through functools.partial: the ledger judges the write itself"),
        WrongAnswer(_sgd_stops_requiring_grad, expect="modified_input",
                    note="adversarial round 1: the parameters stop requiring grad"),
        WrongAnswer(_sgd_grad_mode_left_off, expect="state", note="adversarial round 1: grad mode left off"),
        WrongAnswer(_sgd_grad_mode_forced_on, expect="grad_mode_forced_on",
                    note="adversarial round 2: grad mode switched on at the end, whatever it was on entry"),
        WrongAnswer(_sgd_new_tensors, expect="error", note="new tensors in place of the old ones: the tuple refuses"),
        WrongAnswer(_sgd_grad_zeroed, expect="grad_zeroed",
                    note=".grad zeroed: a near miss of grad_not_cleared, whose message would be false here"),
    ),
))
