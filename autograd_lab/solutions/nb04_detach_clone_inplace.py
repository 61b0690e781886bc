"""Exercises of notebook 04 (detach, clone, in-place): choose the copy, fix an in-place error, an SGD step."""

import torch

from autograd_lab.exercises import Exercise, Misconception, WrongAnswer, register


# --- 04.copy_choice -------------------------------------------------------------

_CHOICES = {"target": "detach", "edit_keep_grad": "clone", "snapshot": "detach().clone()"}


def copy_choice():
    return dict(_CHOICES)


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


def _squash_detached(x):
    y = torch.sigmoid(x).detach() * 2 - 1   # right values, but the path through sigmoid is cut
    return y * x


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
    wrong_answers=(
        WrongAnswer(_squash_in_place, expect="error", note="the function as given"),
        WrongAnswer(_squash_through_data, expect="wrong_value", note=".data hides the error"),
        WrongAnswer(_squash_detached, expect="wrong_value", note="detach cuts a path"),
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
    return params, 0.1


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


register(Exercise(
    id="04.sgd_step",
    title="A manual SGD step that respects the update boundary",
    answer_name="sgd_step",
    reference=sgd_step,
    inputs=_sgd_step_inputs,
    compare=("args",),
    hints=(
        "The update must change the tensors in the list themselves: p = p - ... only rebinds a "
        "local name.",
        "An in-place operation on a leaf that requires grad is refused while autograd records: "
        "wrap the loop in `with torch.no_grad():`.",
        "Inside no_grad: p.sub_(lr * p.grad), then p.grad = None.",
    ),
    wrong_answers=(
        WrongAnswer(_sgd_rebinding, expect="wrong_value", note="rebinding updates nothing"),
        WrongAnswer(_sgd_keeps_grad, expect="state", note=".grad not cleared"),
        WrongAnswer(_sgd_recorded, expect="error", note="in place on a leaf while recording"),
        WrongAnswer(_sgd_ascent, expect="wrong_value", note="gradient ascent"),
    ),
))
