"""Exercises of notebook 04 (detach, clone, in-place): choose the copy, fix an in-place error, an SGD step."""

import torch

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, no_data_attribute, register


# --- 04.copy_choice -------------------------------------------------------------

_CHOICES = {"target": "detach", "edit_keep_grad": "clone", "snapshot": "detach().clone()"}


def copy_choice():
    return dict(_CHOICES)


_COPIES = {"detach": lambda t: t.detach(), "clone": lambda t: t.clone(),
           "detach().clone()": lambda t: t.detach().clone()}


def _copy_choice_experiment():
    """Try each copy in each scenario and keep the one that does what the scenario needs."""
    return {scenario: next(name for name, copy in _COPIES.items() if works(copy))
            for scenario, works in (("target", _constant_without_a_copy), ("edit_keep_grad", _editable_in_graph),
                                    ("snapshot", _frozen_snapshot))}


def _net():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 3)


def _constant_without_a_copy(copy):
    """The loss treats the target as a constant (no gradient through it), and no memory is copied."""
    net, x = _net(), torch.ones(1, 3)
    target = net(x).max()
    kept = copy(target)
    ((net(x) - kept) ** 2).sum().backward()
    with_target = net.weight.grad.clone()
    net.zero_grad()
    ((net(x) - kept.detach()) ** 2).sum().backward()
    return torch.equal(with_target, net.weight.grad) and kept.data_ptr() == target.data_ptr()


def _editable_in_graph(copy):
    """Masking the copy in place leaves the activation intact, and gradients still reach the layer."""
    net, x = _net(), torch.ones(1, 3)
    activation = net(x)
    before = activation.detach().clone()
    edited = copy(activation)
    edited[0, 0] = 0.0
    if not edited.requires_grad:
        return False
    edited.sum().backward()
    return torch.equal(activation.detach(), before) and net.weight.grad is not None


def _frozen_snapshot(copy):
    """The snapshot keeps the old weights through optimizer.step() and holds no graph."""
    net = _net()
    snapshot = copy(net.weight)
    old = net.weight.detach().clone()
    net(torch.ones(1, 3)).sum().backward()
    torch.optim.SGD(net.parameters(), lr=0.1).step()
    return torch.equal(snapshot, old) and not snapshot.requires_grad


def _answered(scenario, *choices):
    """A detector: the student picked one of ``choices`` for ``scenario``."""
    return lambda student, reference, args: isinstance(student, dict) and student.get(scenario) in choices


def _with(**changes):
    return {**_CHOICES, **changes}


register(Exercise(
    id="04.copy_choice",
    title="detach, clone or detach().clone()?",
    answer_name="copy_choice",
    kind="value",
    reference=copy_choice,
    experiment=_copy_choice_experiment,
    solution_code=('copy_choice = {"target": "detach", "edit_keep_grad": "clone", '
                   '"snapshot": "detach().clone()"}'),
    hints=(
        "Ask two questions per scenario: must gradients flow through it? Will anything write "
        "into it (or into the original) later?",
        "detach() cuts the graph but shares the numbers; clone() copies the numbers and stays in "
        "the graph; detach().clone() copies and cuts.",
        "optimizer.step() updates the weights in place: a snapshot that shares their storage "
        "moves with them.",
    ),
    misconceptions=(
        Misconception(
            "detach_shares_storage",
            "detach() does not copy: the snapshot shares the weights' storage, so the in-place "
            "optimizer step changes it too and you would measure no movement.",
            _answered("snapshot", "detach")),
        Misconception(
            "clone_keeps_graph",
            "clone() stays in the graph: gradients would flow through the Q-learning target, which "
            "must be a constant.",
            _answered("target", "clone")),
        Misconception(
            "cuts_graph",
            "A detached tensor is outside the graph: gradients could not flow back through the "
            "edited copy. clone() copies and keeps the graph.",
            _answered("edit_keep_grad", "detach", "detach().clone()")),
        Misconception(
            "needless_copy",
            "detach().clone() works for the target but copies memory for nothing: the target is "
            "never modified, so detach() is enough.",
            _answered("target", "detach().clone()")),
        Misconception(
            "snapshot_in_graph",
            "clone() copies the numbers but keeps the snapshot in the graph (it requires grad and "
            "holds on to its history): use detach().clone() for a frozen copy.",
            _answered("snapshot", "clone")),
    ),
    wrong_answers=(
        WrongAnswer(_with(snapshot="detach"), expect="detach_shares_storage"),
        WrongAnswer(_with(target="clone"), expect="clone_keeps_graph"),
        WrongAnswer(_with(edit_keep_grad="detach"), expect="cuts_graph"),
        WrongAnswer(_with(target="detach().clone()"), expect="needless_copy"),
        WrongAnswer(_with(snapshot="clone"), expect="snapshot_in_graph"),
        WrongAnswer({"target": "detach", "snapshot": "detach().clone()"}, expect="structure",
                    note="a scenario left out"),
    ),
))


# --- 04.squash ------------------------------------------------------------------

def squash(x):
    y = torch.sigmoid(x) * 2 - 1       # out of place: sigmoid's saved output stays intact
    return y * x


def _squash_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    shape = (3, 5) if hidden else (6,)
    return (torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_(),)


def _squash_in_place(x):
    y = torch.sigmoid(x)
    y.mul_(2).sub_(1)                  # the original: overwrites what sigmoid saved
    return y * x


def _squash_through_data(x):
    y = torch.sigmoid(x)
    y.data.mul_(2).sub_(1)             # no error, but sigmoid's backward reads the new numbers
    return y * x


def _squash_through_numpy(x):
    y = torch.sigmoid(x)
    edited = y.detach().numpy()        # shares y's memory: the same invisible write, without .data
    edited *= 2
    edited -= 1
    return y * x


def _squash_detached(x):
    y = torch.sigmoid(x).detach() * 2 - 1   # right values, but the path through sigmoid is cut
    return y * x


def _squash_under_no_grad(x):
    with torch.no_grad():
        y = torch.sigmoid(x) * 2 - 1   # no detach() anywhere, but y is just as constant
    return y * x


def _grad_factors(x):
    """Per element of x, d(squash)/dx as the reference computes it and as two wrong answers do.

    squash is elementwise, so each input gradient is the cotangent times one of these
    factors: two answers agree with the cotangent cancelled out when
    student_grad * reference_factor == reference_grad * their_factor.
    """
    s = torch.sigmoid(x)
    y = 2 * s - 1
    return {
        "reference": y + 2 * s * (1 - s) * x,
        # .data: the factor 2 goes unrecorded and sigmoid's backward reads y as its output.
        "through_data": y + y * (1 - y) * x,
        "detached": y,                          # only the direct path through `* x`
    }


def _squash_grads_like(variant):
    """A detector: the student's input gradient is the one of the ``variant`` mistake."""
    def detect(student, reference, args, *, student_run, reference_run):
        factors = _grad_factors(args[0])
        ours, theirs = student_run.input_grads[0], reference_run.input_grads[0]
        return torch.allclose(ours * factors["reference"], theirs * factors[variant], rtol=1e-6, atol=1e-9)
    return detect


register(Exercise(
    id="04.squash",
    title="Fix the in-place error without changing the result",
    answer_name="squash",
    reference=squash,
    inputs=_squash_inputs,
    compare=("value", "grad"),
    hints=(
        "Read the error: which node saved the tensor that was modified in place?",
        "sigmoid saves its output for backward; y.mul_(2) overwrites that output.",
        "Compute the mapped values out of place (torch.sigmoid(x) * 2 - 1), or modify a clone().",
    ),
    misconceptions=(
        Misconception(
            "edited_through_data",
            "The values are right but the gradient is not: the in-place edit was hidden from autograd "
            "(a write through `.data`, or into a NumPy array, does not move the version counter), so the "
            "* 2 - 1 is missing from backward and sigmoid's backward reads the edited numbers as its "
            "output. Silencing the error is not fixing it: compute torch.sigmoid(x) * 2 - 1 out of place.",
            _squash_grads_like("through_data")),
        Misconception(
            "detached_path",
            "The values are right but the gradient only has the path through `* x`: y entered the "
            "product as a constant, cut from the graph (by `detach()`, `torch.no_grad()` or a copy made "
            "outside autograd), so the path through sigmoid is missing. Keep y in the graph and compute "
            "it out of place.",
            _squash_grads_like("detached")),
    ),
    wrong_answers=(
        WrongAnswer(_squash_in_place, expect="error", note="the function as given"),
        WrongAnswer(_squash_through_data, expect="edited_through_data", note=".data hides the error"),
        WrongAnswer(_squash_through_numpy, expect="edited_through_data",
                    note="a NumPy view hides it too: the message must not say .data only"),
        WrongAnswer(_squash_detached, expect="detached_path", note="detach cuts a path"),
        WrongAnswer(_squash_under_no_grad, expect="detached_path",
                    note="no_grad cuts the same path: the message must not say detach()"),
    ),
))


# --- 04.sgd_step ----------------------------------------------------------------

def sgd_step(params, lr):
    with torch.no_grad():              # an update is not part of the model: do not record it
        for p in params:
            p.sub_(lr * p.grad)        # in place: the same leaf objects get the new values
            p.grad = None


def _sgd_step_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (3,), (2, 2)] if hidden else [(3, 2), (2,)]
    params = []
    for shape in shapes:
        p = torch.randn(shape, generator=generator).requires_grad_()
        p.grad = torch.randn(shape, generator=generator)
        params.append(p)
    # A tuple, like a model's parameters: the step must change these tensors, not swap them.
    return tuple(params), 0.1


def _sgd_rebinding(params, lr):
    for p in params:
        p = p - lr * p.grad            # a new tensor bound to a local name: nothing is updated
        p.grad = None


def _sgd_keeps_grad(params, lr):
    with torch.no_grad():
        for p in params:
            p.sub_(lr * p.grad)        # .grad left in place: the next backward adds to it


def _sgd_recorded(params, lr):
    for p in params:
        p.sub_(lr * p.grad)            # in place on a leaf while recording: an error
        p.grad = None


def _sgd_ascent(params, lr):
    with torch.no_grad():
        for p in params:
            p.add_(lr * p.grad)
            p.grad = None


def _sgd_new_tensors(params, lr):
    for i, p in enumerate(params):
        params[i] = (p - lr * p.grad).detach().requires_grad_()   # new leaves, not the same objects


def _sgd_grad_zeroed(params, lr):
    with torch.no_grad():
        for p in params:
            p.sub_(lr * p.grad)
            p.grad.zero_()             # zeros, not None


def _sgd_assigns_data(params, lr):
    for p in params:
        p.data = p.data - lr * p.grad  # swaps the storage behind autograd's back
        p.grad = None


def _sgd_through_data(params, lr):
    for p in params:
        p.data.sub_(lr * p.grad)     # right numbers, but autograd never sees the write
        p.grad = None


def _unchanged(student, reference, args, *, student_run):
    return all(torch.equal(after, before) for before, after in zip(args[0], student_run.args_after[0]))


def _stepped_uphill(student, reference, args, *, student_run, reference_run):
    steps = zip(args[0], student_run.args_after[0], reference_run.args_after[0])
    return all(torch.allclose(ours - before, before - theirs, atol=1e-6) for before, ours, theirs in steps)


def _grad_left_in_place(student, reference, args, *, student_run, reference_run):
    pairs = list(zip(student_run.args_after[0], reference_run.args_after[0]))
    return (all(torch.allclose(ours, theirs) for ours, theirs in pairs)
            and any(ours.grad is not None and theirs.grad is None and bool(ours.grad.any())
                    for ours, theirs in pairs))


def _grad_zeroed(student, reference, args, *, student_run, reference_run):
    pairs = list(zip(student_run.args_after[0], reference_run.args_after[0]))
    return (all(torch.allclose(ours, theirs) for ours, theirs in pairs)
            and any(ours.grad is not None for ours, _ in pairs)
            and all(ours.grad is None or not bool(ours.grad.any()) for ours, _ in pairs))


register(Exercise(
    id="04.sgd_step",
    title="A manual SGD step that respects the update boundary",
    answer_name="sgd_step",
    reference=sgd_step,
    inputs=_sgd_step_inputs,
    compare=("args",),
    modifies=("params",),              # the step updates the parameters and clears their .grad in place
    method=no_data_attribute(),
    hints=(
        "The update must change the tensors in `params` themselves: p = p - ... only rebinds a "
        "local name, and the tuple's entries cannot be replaced.",
        "An in-place operation on a leaf that requires grad is refused while autograd records: "
        "wrap the loop in `with torch.no_grad():`.",
        "Inside no_grad: p.sub_(lr * p.grad), then p.grad = None.",
    ),
    misconceptions=(
        Misconception(
            "rebinding",
            "The parameters did not change at all: the step never reached the tensors in `params` (the "
            "model's parameters). A common cause is `p = p - lr * p.grad`, which only binds a new tensor "
            "to the loop's local name. Update them in place: p.sub_(lr * p.grad) inside torch.no_grad().",
            _unchanged),
        Misconception(
            "gradient_ascent",
            "Your step has the right size but goes up the gradient: the parameters moved by "
            "+lr * grad. Gradient descent subtracts: p.sub_(lr * p.grad).",
            _stepped_uphill),
        Misconception(
            "grad_not_cleared",
            "The update is right, but .grad is still set afterwards: the next backward() adds into "
            "it, so every later step would use the sum of all gradients so far. Set p.grad = None "
            "after the update.",
            _grad_left_in_place),
        Misconception(
            "grad_zeroed",
            "The update is right, but each `.grad` holds zeros instead of `None`. Training would still "
            "work (the next backward adds into zeros), but the prompt asks for `p.grad = None`, which is "
            "also what `optimizer.zero_grad()` does by default.",
            _grad_zeroed),
    ),
    wrong_answers=(
        WrongAnswer(_sgd_rebinding, expect="rebinding", note="rebinding updates nothing"),
        WrongAnswer(_sgd_keeps_grad, expect="grad_not_cleared", note=".grad not cleared"),
        WrongAnswer(_sgd_recorded, expect="error", note="in place on a leaf while recording"),
        WrongAnswer(_sgd_ascent, expect="gradient_ascent", note="gradient ascent"),
        WrongAnswer(_sgd_through_data, expect="data_write", note="the silent .data update the lab warns about"),
        WrongAnswer(_sgd_assigns_data, expect="data_write", note="p.data = ...: the same silent write, by assignment"),
        WrongAnswer(_sgd_new_tensors, expect="error", note="new tensors in place of the old ones: the tuple refuses"),
        WrongAnswer(_sgd_grad_zeroed, expect="grad_zeroed",
                    note=".grad zeroed: a near miss of grad_not_cleared, whose message would be false here"),
    ),
))
