"""Exercises of notebook 07 (debugging): diagnose broken loops, optimizer coverage, the NaN source."""

import re

import torch
import torch.nn as nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, claims, register
from autograd_lab_solutions._notebook import notebook_definitions

# --- 07.diagnose ------------------------------------------------------------------

DIAGNOSIS = {"A": "zero_grad_after_backward", "B": "graph_cut", "C": "missing_from_optimizer"}


def diagnosis():
    # A: zero_grad() sits between backward() and step(), so step() sees no gradient.
    # B: torch.tensor(pred) copies the prediction out of the graph: .grad stays None.
    # C: the optimizer was built over model[0] only: the last layer never moves.
    return dict(DIAGNOSIS)


def _diagnose_experiment():
    """Run the notebook's three loops with instruments and name each cause from what was observed."""
    loops = notebook_definitions("07_debugging")
    return {name: _observed_cause(loops, f"loop_{name.lower()}") for name in "ABC"}


def _observed_cause(namespace, loop_name):
    """Watch one loop: which gradients arrive, what step() sees, which weights move."""
    models, arrived, at_step = [], {}, []
    make_model = namespace["make_model"]

    def watched_model():
        model = make_model()
        for p in model.parameters():
            if p.requires_grad:
                p.register_hook(lambda grad, p=p: arrived.__setitem__(p, grad.clone()))
        models.append(model)
        return model

    def before_step(optimizer, args, kwargs):
        held = {p for group in optimizer.param_groups for p in group["params"]}
        at_step.append({p: (p.grad.clone() if p.grad is not None else None) for p in held})

    namespace["make_model"] = watched_model
    hook = register_optimizer_step_pre_hook(before_step)
    try:
        namespace[loop_name]()
    finally:
        hook.remove()
        namespace["make_model"] = make_model
    return _cause(list(models[0].parameters()), make_model(), arrived, at_step[-1])


def _cause(params, initial, arrived, seen_by_step):
    if any(not p.requires_grad for p in params):
        return "frozen_parameter"
    if not arrived:
        return "graph_cut"                      # backward never reached a weight
    if any(p not in seen_by_step for p in params):
        return "missing_from_optimizer"
    grads = list(seen_by_step.values())
    if all(g is None or not g.any() for g in grads):
        return "zero_grad_after_backward"       # gradients arrived, step() saw none
    if any(not torch.equal(seen_by_step[p], arrived[p]) for p in params):
        return "no_zero_grad"                   # step() saw more than the last backward gave
    moved = max(((p - q).abs().max() / q.abs().max()).item() for p, q in zip(params, initial.parameters()))
    return "learning_rate_too_small" if moved < 1e-4 else "healthy"


register(Exercise(
    id="07.diagnose",
    title="Diagnose three broken training loops",
    kind="value",
    answer_name="diagnosis",
    reference=diagnosis,
    experiment=_diagnose_experiment,
    solution_code=f"diagnosis = {DIAGNOSIS!r}",
    hints=(
        "Run the triage checks of this notebook on each loop: is .grad None, is it zero at step(), "
        "which parameters does the optimizer hold?",
        "Loop A calls zero_grad() every step: look at where. Loop B builds its loss from torch.tensor(...). "
        "Loop C builds its optimizer from part of the model.",
    ),
    misconceptions=(
        Misconception("missing_zero_grad",
                      "Loop A does call zero_grad(): the bug is where. Between backward() and step() it "
                      "clears the gradient that step() needed, so the weights never move.",
                      claims("A", "no_zero_grad")),
        Misconception("frozen_not_cut",
                      "Loop B freezes nothing: torch.tensor(pred) copies the prediction into a new leaf "
                      "with no history, so backward never reaches the model (.grad stays None).",
                      claims("B", "frozen_parameter")),
        Misconception("learning_rate",
                      "Loop C's learning rate is fine for the first layer, which moves; the last layer is "
                      "not in the optimizer's param groups, so step() never touches it.",
                      claims("C", "learning_rate_too_small")),
    ),
    wrong_answers=(
        WrongAnswer(dict(DIAGNOSIS, A="no_zero_grad"), expect="missing_zero_grad"),
        WrongAnswer(dict(DIAGNOSIS, B="frozen_parameter"), expect="frozen_not_cut"),
        WrongAnswer(dict(DIAGNOSIS, C="learning_rate_too_small"), expect="learning_rate"),
        WrongAnswer({"A": DIAGNOSIS["A"], "B": DIAGNOSIS["B"]}, expect="structure", note="loop C missing"),
    ),
))


# --- 07.coverage --------------------------------------------------------------------

def coverage(model, optimizer):
    held = [p for group in optimizer.param_groups for p in group["params"]]
    optimised = {id(p) for p in held}                        # identity, not ==
    named = list(model.named_parameters())
    in_model = {id(p) for _, p in named}
    return {
        "missing": [name for name, p in named if p.requires_grad and id(p) not in optimised],
        "frozen": [name for name, p in named if not p.requires_grad and id(p) in optimised],
        "stale": sum(1 for p in held if id(p) not in in_model),
    }


def _coverage_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    sizes = [3, 5, 4, 2, 1] if hidden else [3, 4, 2, 1]
    model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])
    left_out, frozen_inside = torch.randperm(len(model), generator=generator)[:2].tolist()
    model[left_out].bias.requires_grad_(False)       # frozen and not optimised: fine
    model[frozen_inside].weight.requires_grad_(False)  # frozen but optimised: reported
    params = [p for i, layer in enumerate(model) if i != left_out for p in layer.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.1)
    if seed % 3 != 2:                                # a layer replaced after the optimizer was built
        replaced = next(i for i in torch.randperm(len(model), generator=generator).tolist() if i != left_out)
        model[replaced] = nn.Linear(model[replaced].in_features, model[replaced].out_features)
    return model, optimizer


def _stale_count(model, optimizer):
    in_model = {id(p) for p in model.parameters()}
    return sum(1 for group in optimizer.param_groups for p in group["params"] if id(p) not in in_model)


def _package_only(model, optimizer):
    # optimizer_coverage answers missing and frozen; it never looks for tensors outside the model.
    from autograd_lab.labs.grad_report import optimizer_coverage
    return dict(optimizer_coverage(model, optimizer), stale=0)


def _package_without_stale(model, optimizer):
    from autograd_lab.labs.grad_report import optimizer_coverage
    return optimizer_coverage(model, optimizer)


def _stale_layers(model, optimizer):
    # Near miss: counts the replaced layers, not their tensors (1, not 2). Not "stale ignored".
    from autograd_lab.labs.grad_report import optimizer_coverage
    return dict(optimizer_coverage(model, optimizer), stale=_stale_count(model, optimizer) // 2)


def _by_requires_grad_only(model, optimizer):
    return {"missing": [], "frozen": [name for name, p in model.named_parameters() if not p.requires_grad],
            "stale": _stale_count(model, optimizer)}


def _frozen_counted_missing(model, optimizer):
    optimised = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return {"missing": [name for name, p in model.named_parameters() if id(p) not in optimised],
            "frozen": [name for name, p in model.named_parameters() if not p.requires_grad and id(p) in optimised],
            "stale": _stale_count(model, optimizer)}


def _membership_by_value(model, optimizer):
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {"missing": [name for name, p in model.named_parameters() if p.requires_grad and p not in params],
            "frozen": [name for name, p in model.named_parameters() if not p.requires_grad and p in params],
            "stale": _stale_count(model, optimizer)}


def _lists(student):
    return isinstance(student, dict) and set(student) == {"missing", "frozen", "stale"}


def _ignores_groups(student, reference, args):
    return _lists(student) and student["missing"] == [] and reference["missing"] != []


def _frozen_as_missing(student, reference, args):
    return (_lists(student) and student["frozen"] == reference["frozen"]
            and set(student["missing"]) > set(reference["missing"]))


def _stale_ignored(student, reference, args):
    return (_lists(student) and student["missing"] == reference["missing"]
            and student["frozen"] == reference["frozen"] and student["stale"] == 0 and reference["stale"] > 0)


register(Exercise(
    id="07.coverage",
    title="Which parameters does the optimizer miss, and what does it hold that the model lost?",
    answer_name="coverage",
    reference=coverage,
    inputs=_coverage_inputs,
    hints=(
        "Collect the tensors of every group: [p for group in optimizer.param_groups for p in group['params']].",
        "Compare tensors by identity (id(p)); `p in some_list` compares values, and raises or is silently "
        "wrong for tensors.",
        "missing: requires_grad and not in the optimizer. frozen: not requires_grad and in the optimizer. "
        "stale: tensors of the optimizer whose id is not the id of any parameter of the model.",
    ),
    misconceptions=(
        Misconception("ignores_param_groups",
                      "Your 'missing' list is empty, but some trainable parameters are in no param group: "
                      "look at optimizer.param_groups, not only at requires_grad.",
                      _ignores_groups),
        Misconception("frozen_counted_missing",
                      "A frozen parameter (requires_grad=False) that the optimizer does not hold is not "
                      "missing: it is not meant to train. Only trainable parameters can be missing.",
                      _frozen_as_missing),
        Misconception("stale_ignored",
                      "Your 'missing' and 'frozen' lists are right, but 'stale' is 0 while the optimizer holds "
                      "tensors that are no longer parameters of the model (a layer was replaced after the "
                      "optimizer was built). Count the tensors of the param groups whose id is not the id of "
                      "a parameter of the model.",
                      _stale_ignored),
    ),
    wrong_answers=(
        WrongAnswer(_by_requires_grad_only, expect="ignores_param_groups"),
        WrongAnswer(_frozen_counted_missing, expect="frozen_counted_missing"),
        WrongAnswer(_membership_by_value, expect="error", note="`p in list` compares values"),
        WrongAnswer(_package_only, expect="stale_ignored", note="optimizer_coverage, stale left at 0"),
        WrongAnswer(_package_without_stale, expect="structure", note="optimizer_coverage alone: no 'stale'"),
        WrongAnswer(_stale_layers, expect="wrong_value", note="near miss: layers counted, not tensors"),
    ),
))


# --- 07.nan_source ------------------------------------------------------------------

def nan_source(f, x):
    x = x.detach().clone().requires_grad_()
    try:
        with torch.autograd.detect_anomaly(check_nan=True):
            f(x).backward()
    except RuntimeError as error:
        # "Function 'DivBackward0' returned nan values in its 1th output."
        return str(error).split("'")[1]
    return None


def _norm_of(x):
    return torch.sqrt((x ** 2).sum())


def _ratio_of(x):
    return (x / x).sum()


_CASES = (_norm_of, _ratio_of, _norm_of, _ratio_of)


def _nan_source_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    f = _CASES[seed % len(_CASES)]
    x = torch.randn(5 if hidden else 3, generator=generator)
    if f is _norm_of:
        x = torch.zeros_like(x)          # the norm of a zero vector: sqrt at 0
    else:
        x[0] = 0.0                       # one 0 / 0
    return f, x


def _forward_check(f, x):
    # Wrong: looks only at the forward value, which is finite for sqrt at 0.
    return "forward" if not torch.isfinite(f(x)).all() else None


def _last_op_of_forward(f, x):
    x = x.detach().clone().requires_grad_()
    return type(f(x).grad_fn).__name__


def _always_none(f, x):
    return None


def _blames_forward(student, reference, args):
    return student is None or student == "forward"


def _names_another_node(student, reference, args):
    return isinstance(student, str) and re.fullmatch(r"\w+Backward\d*", student) is not None


register(Exercise(
    id="07.nan_source",
    title="Locate the op whose backward produced NaN",
    answer_name="nan_source",
    reference=nan_source,
    inputs=_nan_source_inputs,
    public_seeds=(0, 1, 2),
    hidden_seeds=(101, 102, 103),
    hints=(
        "Run f(x).backward() inside `with torch.autograd.detect_anomaly():` on a leaf copy of x.",
        "Anomaly mode raises RuntimeError: \"Function 'XBackward0' returned nan values in its ...th output.\" "
        "Catch it and return the name between the first pair of quotes.",
    ),
    misconceptions=(
        Misconception("forward_only",
                      "Backward does produce NaN in this case, and a look at the forward value cannot "
                      "tell where: it can be finite while backward makes NaN (sqrt at 0 has an infinite "
                      "slope; 0 * inf is NaN). Run backward under torch.autograd.detect_anomaly() and "
                      "return the name it raises with.",
                      _blames_forward),
        Misconception("wrong_node",
                      "You named a backward node, but not the one that produced the NaN. The last op of the "
                      "forward is where backward starts, and the node that makes an inf is not always the one "
                      "that makes the NaN (sqrt at 0 gives inf; a later node's 0 * inf gives NaN). Let "
                      "detect_anomaly(check_nan=True) name it: return the name from its error message.",
                      _names_another_node),
    ),
    wrong_answers=(
        WrongAnswer(_forward_check, expect="forward_only"),
        WrongAnswer(_always_none, expect="forward_only"),
        WrongAnswer(_last_op_of_forward, expect="wrong_node", note="the last op of forward, not the culprit"),
    ),
))
