"""Exercises of notebook 07 (debugging): diagnose broken loops, optimizer coverage, where a gradient goes non-finite."""

import warnings

import torch
import torch.nn as nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, backward_calls, claims, no_library, register
from autograd_lab.checking.variation import choose, generator, renamed_sequential
from autograd_lab.labs.nonfinite import OUTSIDE_BACKWARD, SECOND_BACKWARD, Expression
from autograd_lab_solutions._notebook import notebook_definitions

# --- 07.diagnose ------------------------------------------------------------------

DIAGNOSIS = {"A": "missing_from_optimizer", "B": "graph_cut", "C": "no_zero_grad"}
CAUSES = ("no_zero_grad", "zero_grad_after_backward", "graph_cut", "frozen_parameter", "missing_from_optimizer",
          "learning_rate_too_small")


def diagnosis():
    # A: a layer is added after the optimizer was built: its parameters are in no param group.
    # B: the head reads hidden.data, which has no history: backward never reaches the first layer (.grad None).
    # C: zero_grad() runs only when step % 10 == 0: from the third step on, step() sees two steps' gradients.
    return dict(DIAGNOSIS)


def _diagnose_experiment():
    """Run the notebook's three loops with instruments and name each cause from what was observed."""
    loops = notebook_definitions("07_debugging")
    return {name: _observed_cause(loops, f"loop_{name.lower()}") for name in "ABC"}


class _Watch:
    """What one loop did at each optimizer step: the parameters, what the optimizer held, what backward sent."""

    def __init__(self):
        self.models, self.steps, self.incoming, self.hooked = [], [], {}, set()

    def model_made(self, model):
        self.models.append(model)
        return model

    def before_step(self, optimizer, args, kwargs):
        model = self.models[-1]
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.steps.append([(p, id(p) in held, None if p.grad is None else p.grad.clone(), self.incoming.pop(id(p), None))
                           for p in model.parameters()])
        for p in model.parameters():          # a layer added since the last step gets its hook now
            if p.requires_grad and id(p) not in self.hooked:
                self.hooked.add(id(p))
                p.register_hook(lambda grad, key=id(p): self._arrived(key, grad))

    def _arrived(self, key, grad):
        self.incoming[key] = self.incoming.get(key, 0) + grad.detach().clone()


def _observed_cause(namespace, loop_name):
    watch, make_model = _Watch(), namespace["make_model"]
    namespace["make_model"] = lambda: watch.model_made(make_model())
    hook = register_optimizer_step_pre_hook(watch.before_step)
    try:
        namespace[loop_name]()
    finally:
        hook.remove()
        namespace["make_model"] = make_model
    found = _causes(watch.steps, list(watch.models[0].parameters()), make_model())
    # The prompt says each loop has one bug: a loop that shows two of the table's causes (audit 07-r15 item 1)
    # or none has no single answer, so the key is not made from it.
    if len(found) != 1:
        raise AssertionError(f"07.diagnose: {loop_name} shows {found or 'none'} of the table's causes, not one")
    return found[0]


def _causes(steps, params, initial):
    """Every cause of the table that the steps show, in the table's order."""
    found = set()
    if any(not p.requires_grad for p in params):
        found.add("frozen_parameter")
    if any(not held for p, held, _, _ in steps[-1]):
        found.add("missing_from_optimizer")
    if any(all(grad is None for _, grad, _ in _column(steps, p)) for p in params):
        found.add("graph_cut")                              # backward never reached this parameter
    for step in steps[1:]:                                  # the first step's gradients arrived before any hook
        for p, held, grad, arrived in step:
            if arrived is not None and (grad is None or not grad.any()):
                found.add("zero_grad_after_backward")       # gradients arrived, step() saw none
            elif arrived is not None and not torch.allclose(grad, arrived):
                found.add("no_zero_grad")                   # step() saw more than this step's backward sent
    moved = [((p - q).abs().max() / q.abs().max()).item() for p, q in zip(params, initial.parameters())]
    if all(0 < ratio < 1e-4 for ratio in moved):
        found.add("learning_rate_too_small")                # every parameter moves, by a tiny fraction
    return [cause for cause in CAUSES if cause in found]


def _column(steps, p):
    return [(held, grad, arrived) for step in steps for q, held, grad, arrived in step if q is p]


register(Exercise(
    id="07.diagnose",
    title="Diagnose three broken training loops",
    kind="value",
    answer_name="diagnosis",
    reference=diagnosis,
    experiment=_diagnose_experiment,
    solution_code=f"diagnosis = {DIAGNOSIS!r}",
    choices=CAUSES,         # the prompt's table of six causes: a label outside it is told in check() (round 7, dg_case)
    hints=(
        "Run each loop, then apply this lab's checks to it: requires_grad of every parameter, which .grad are "
        "None after backward, which tensors the optimizer holds, what step() sees, and how far each parameter moved.",
        "To see what step() sees, register `optimizer.register_step_pre_hook` or print the gradients just before "
        "step(), and compare the tensors the optimizer holds with `model.named_parameters()` by identity. "
        "`audit_step` needs a loop's body rewritten as a step function on a model and an optimizer you build, and "
        "it does not report every cause in the table, so read which .grad are None after backward "
        "(`grad_report`) too. The loops differ from the ones shown above: measure, do not match the code by eye.",
    ),
    misconceptions=(
        Misconception("learning_rate",
                      "Loop A's learning rate is the healthy loop's. A learning rate that is too small moves every "
                      "parameter a little: measure each parameter's update ratio over one step; a ratio of exactly 0 "
                      "has another cause.",
                      claims("A", "learning_rate_too_small")),
        Misconception("frozen_not_cut",
                      "Frozen means requires_grad=False: print requires_grad for every parameter of loop B's model. "
                      "Then look at which .grad are None after its backward.",
                      claims("B", "frozen_parameter")),
        Misconception("gradients_present",
                      "In loop C, step() does receive non-zero gradients: print them just before step(). Then compare "
                      "them with the gradient of that step's loss alone (torch.autograd.grad gives it without "
                      "touching .grad).",
                      claims("C", "zero_grad_after_backward")),
    ),
    wrong_answers=(
        WrongAnswer(dict(DIAGNOSIS, A="learning_rate_too_small"), expect="learning_rate"),
        WrongAnswer(dict(DIAGNOSIS, B="frozen_parameter"), expect="frozen_not_cut"),
        WrongAnswer(dict(DIAGNOSIS, C="zero_grad_after_backward"), expect="gradients_present"),
        WrongAnswer(dict(DIAGNOSIS, C="graph_cut"), expect="wrong_value", note="a plain wrong entry: no diagnosis"),
        WrongAnswer({"A": DIAGNOSIS["A"], "B": DIAGNOSIS["B"]}, expect="structure", note="loop C missing"),
        WrongAnswer({key.lower(): value for key, value in DIAGNOSIS.items()}, expect="structure", note="keys a, b, c"),
        WrongAnswer(list(DIAGNOSIS.values()), expect="structure", note="a list, not a dict"),
        WrongAnswer(dict(DIAGNOSIS, A=DIAGNOSIS["A"].title(), B=DIAGNOSIS["B"] + " "), expect="structure",
                    note="adversarial round 7 (dg_case): the right causes with a case and a space slip"),
        WrongAnswer({key: value.replace("_", " ") for key, value in DIAGNOSIS.items()}, expect="structure",
                    note="adversarial round 7 (dg_spaces): spaces for underscores"),
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
    g = generator(seed)
    sizes = choose(seed, ([3, 4, 2, 1], [2, 5, 3], [4, 3, 3, 2, 1]), hidden=hidden,
                   hidden_choices=([3, 5, 4, 2, 1], [5, 2, 4], [2, 3, 4, 5, 1, 2]))
    model = renamed_sequential(seed, [nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])
    left_out, frozen_inside = torch.randperm(len(model), generator=g)[:2].tolist()
    model[left_out].bias.requires_grad_(False)         # frozen and not optimised: fine
    model[frozen_inside].weight.requires_grad_(False)  # frozen but optimised: reported
    params = [p for i, layer in enumerate(model) if i != left_out for p in layer.parameters()]
    groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.01}]     # two param groups
    optimizer = torch.optim.SGD(groups, lr=0.1)
    if seed % 3 != 2:                                # a layer replaced after the optimizer was built
        replaced = next(i for i in torch.randperm(len(model), generator=g).tolist() if i != left_out)
        name, old = list(model._modules)[replaced], model[replaced]
        new = nn.Linear(old.in_features, old.out_features)
        if seed % 3 == 0:                            # re-created with the same numbers: equal values, other tensors
            new.load_state_dict(old.state_dict())
        setattr(model, name, new)
    if seed in _REWRAPPED_SEEDS:    # and a parameter re-wrapped over its own memory (adversarial round 8, 07c_dataptr)
        kept = [i for i in range(len(model)) if i not in (left_out, replaced)]
        layer = model[kept[int(torch.randint(len(kept), (1,), generator=g))]]
        layer.bias = nn.Parameter(layer.bias.detach())   # another tensor, same data_ptr() and values: not held
    return model, optimizer


# The fourth public and hidden case also re-wraps one parameter after the optimizer was built: only identity tells
# the two tensors apart (data_ptr() and the values are the same), so comparing memory fails publicly.
_REWRAPPED_SEEDS = (3, 105)              # 3 % 3 and 105 % 3 replace a layer too (3 and 4 layers)


def _stale_count(model, optimizer):
    in_model = {id(p) for p in model.parameters()}
    return sum(1 for group in optimizer.param_groups for p in group["params"] if id(p) not in in_model)


def _missing_and_frozen(model, optimizer):
    """What the lab's ``optimizer_coverage`` answers, written out (the bank's near misses start from it)."""
    found = coverage(model, optimizer)
    return {"missing": found["missing"], "frozen": found["frozen"]}


def _package_plus_stale(model, optimizer):
    # Adversarial round 4 (v_lib): the lab's optimizer_coverage for missing and frozen, one line for stale.
    from autograd_lab.labs.grad_report import optimizer_coverage
    return dict(optimizer_coverage(model, optimizer), stale=_stale_count(model, optimizer))


def _optimizer_coverage_text():
    """The lab's optimizer_coverage from its source, renamed, one line removed, exec'd (adversarial round 5, s07f)."""
    import inspect
    from autograd_lab.labs import grad_report
    source = inspect.getsource(grad_report.optimizer_coverage).replace("def optimizer_coverage", "def _mine")
    namespace = {"torch": torch}
    exec(source.replace("_require_module(model)", ""), namespace)
    return namespace["_mine"]


_coverage_text = _optimizer_coverage_text()


def _package_source_execd(model, optimizer):
    return dict(_coverage_text(model, optimizer), stale=_stale_count(model, optimizer))


def _package_only(model, optimizer):
    # Missing and frozen right; it never looks for tensors outside the model.
    return dict(_missing_and_frozen(model, optimizer), stale=0)


def _package_without_stale(model, optimizer):
    return _missing_and_frozen(model, optimizer)


def _stale_layers(model, optimizer):
    # Near miss: counts the replaced layers, not their tensors (1, not 2). Not "stale ignored".
    return dict(_missing_and_frozen(model, optimizer), stale=_stale_count(model, optimizer) // 2)


def _stale_by_lengths(model, optimizer):
    # Adversarial round 4 (v_stalecount): stale as a difference of list lengths, negative when parameters are missing.
    held = [p for group in optimizer.param_groups for p in group["params"]]
    return dict(_missing_and_frozen(model, optimizer), stale=len(held) - len(list(model.parameters())))


def _every_frozen(model, optimizer):
    # Adversarial round 4 (v_frozenall): every frozen parameter, in a param group or not.
    return dict(coverage(model, optimizer), frozen=[name for name, p in model.named_parameters() if not p.requires_grad])


def _by_requires_grad_only(model, optimizer):
    return {"missing": [], "frozen": [name for name, p in model.named_parameters() if not p.requires_grad],
            "stale": _stale_count(model, optimizer)}


def _frozen_counted_missing(model, optimizer):
    optimised = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return {"missing": [name for name, p in model.named_parameters() if id(p) not in optimised],
            "frozen": [name for name, p in model.named_parameters() if not p.requires_grad and id(p) in optimised],
            "stale": _stale_count(model, optimizer)}


def _compared_by_memory(model, optimizer):
    # Adversarial round 8 (07c_dataptr, full marks): data_ptr() for identity; a parameter re-wrapped over the same
    # memory (nn.Parameter(p.detach())) looks held.
    held = {p.data_ptr() for group in optimizer.param_groups for p in group["params"]}
    named = list(model.named_parameters())
    mine = {p.data_ptr() for _, p in named}
    return {"missing": [name for name, p in named if p.requires_grad and p.data_ptr() not in held],
            "frozen": [name for name, p in named if not p.requires_grad and p.data_ptr() in held],
            "stale": sum(1 for group in optimizer.param_groups for p in group["params"] if p.data_ptr() not in mine)}


def _membership_by_value(model, optimizer):
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {"missing": [name for name, p in model.named_parameters() if p.requires_grad and p not in params],
            "frozen": [name for name, p in model.named_parameters() if not p.requires_grad and p in params],
            "stale": _stale_count(model, optimizer)}


def _equal_values(model, optimizer):
    # Compares values instead of identity: a layer re-created with the same numbers looks held.
    held = [p for group in optimizer.param_groups for p in group["params"]]
    named = list(model.named_parameters())
    in_optimizer = lambda p: any(torch.equal(p, q) for q in held)
    return {"missing": [name for name, p in named if p.requires_grad and not in_optimizer(p)],
            "frozen": [name for name, p in named if not p.requires_grad and in_optimizer(p)],
            "stale": sum(1 for q in held if not any(torch.equal(p, q) for _, p in named))}


def _first_group_only(model, optimizer):
    optimised = {id(p) for p in optimizer.param_groups[0]["params"]}
    named = list(model.named_parameters())
    return {"missing": [name for name, p in named if p.requires_grad and id(p) not in optimised],
            "frozen": [name for name, p in named if not p.requires_grad and id(p) in optimised],
            "stale": _stale_count(model, optimizer)}


def _sorted_names(model, optimizer):
    found = coverage(model, optimizer)
    return dict(found, missing=sorted(found["missing"], reverse=True), frozen=sorted(found["frozen"], reverse=True))


def _optimizer_state(model, optimizer):
    # optimizer.state is empty until the first step(): every trainable parameter looks missing.
    optimised = {id(p) for p in optimizer.state}
    named = list(model.named_parameters())
    return {"missing": [name for name, p in named if p.requires_grad and id(p) not in optimised],
            "frozen": [name for name, p in named if not p.requires_grad and id(p) in optimised], "stale": 0}


def _repairs_the_model(model, optimizer):
    found = coverage(model, optimizer)
    for p in model.parameters():                  # "helpfully" unfreezes what it reported
        p.requires_grad_(True)
    return found


def _repairs_the_optimizer(model, optimizer):
    found = coverage(model, optimizer)
    optimizer.param_groups[0]["params"] = [p for p in model.parameters() if p.requires_grad]
    return found


def _lists(student):
    return isinstance(student, dict) and set(student) == {"missing", "frozen", "stale"}


def _ignores_groups(student, reference, args):
    return _lists(student) and student["missing"] == [] and reference["missing"] != []


def _too_many_missing(student, reference, args):
    return _lists(student) and set(student["missing"]) > set(reference["missing"])


def _negative_stale(student, reference, args):
    return _lists(student) and isinstance(student["stale"], int) and student["stale"] < 0


def _frozen_outside_groups(student, reference, args):
    return (_lists(student) and isinstance(student["frozen"], list)
            and set(student["frozen"]) > set(reference["frozen"]) and student["missing"] == reference["missing"])


def _stale_ignored(student, reference, args):
    return (_lists(student) and student["missing"] == reference["missing"]
            and student["frozen"] == reference["frozen"] and student["stale"] == 0 and reference["stale"] > 0)


def _other_order(student, reference, args):
    return (_lists(student) and all(isinstance(student[key], list) for key in ("missing", "frozen"))
            and (student["missing"], student["frozen"]) != (reference["missing"], reference["frozen"])
            and sorted(student["missing"]) == sorted(reference["missing"])
            and sorted(student["frozen"]) == sorted(reference["frozen"]))


def _one_held_too_many(student, reference):
    """One missing parameter reported held and not stale: where a single parameter was re-wrapped, as comparing
    memory or values does (a re-created layer has two, its weight and bias)."""
    return (_lists(student) and set(student["missing"]) < set(reference["missing"])
            and len(set(reference["missing"]) - set(student["missing"])) == 1
            and student["stale"] == reference["stale"] - 1)


def _compared_by_value(student, reference, args, *, student_run):
    error = student_run.error or ""
    if "Boolean value of Tensor with more than one value" in error or "The size of tensor a" in error:
        return True                                   # `p in list` raised
    return (_lists(student) and set(student["missing"]) < set(reference["missing"])
            and student["stale"] < reference["stale"]     # a re-created layer with equal values looked held
            and not _one_held_too_many(student, reference))


def _memory_or_values(student, reference, args):
    return _one_held_too_many(student, reference)


register(Exercise(
    id="07.coverage",
    title="Which parameters does the optimizer miss, and what does it hold that the model lost?",
    answer_name="coverage",
    reference=coverage,
    inputs=_coverage_inputs,
    public_seeds=(0, 1, 2, 3),
    hidden_seeds=(101, 102, 103, 105),
    method=no_library("code:autograd_lab.labs.grad_report:optimizer_coverage",
                      name="your own comparison of the param groups with the model's parameters (no optimizer_coverage)"),
    hints=(
        "The tensors an optimizer updates are listed in `optimizer.param_groups`, a list of dicts; each dict's "
        "'params' entry is a list of tensors. Every group counts.",
        "Two tensors can hold the same numbers and still be different parameters: compare them by identity. "
        "`p in some_list` compares values, and raises or is silently wrong for tensors.",
        "Report, do not repair: the caller's model and optimizer must come back unchanged.",
    ),
    misconceptions=(
        Misconception("same_memory",
                      "Your function takes a parameter re-wrapped after the optimizer was built (`nn.Parameter(p."
                      "detach())`: a new tensor over the same memory, with the same values) for the one the optimizer "
                      "holds. Comparing memory (`data_ptr()`) or values cannot tell the two apart, but the optimizer "
                      "holds the old tensor object, not the model's parameter. Compare parameters by identity: "
                      "`id(p)`, or `p is q`.",
                      _memory_or_values),
        Misconception("compared_by_value",
                      "Your function compares tensors by their values. `p in some_list` and `p == q` compare "
                      "element by element, which raises for several elements or different shapes, and "
                      "`torch.equal` calls a layer re-created with the same numbers the same parameter, though "
                      "the optimizer does not hold it. Compare parameters by identity: `id(p)`, or `p is q`.",
                      _compared_by_value),
        Misconception("ignores_param_groups",
                      "Your 'missing' list is empty, but some trainable parameters are in no param group: "
                      "look at optimizer.param_groups, not only at requires_grad.",
                      _ignores_groups),
        Misconception("too_many_missing",
                      "Your 'missing' list names parameters that are not missing. A parameter is missing when it "
                      "requires grad and no param group holds it: a frozen parameter (requires_grad=False) outside "
                      "the optimizer is not meant to train; an optimizer can have several param groups (read every "
                      "one); and optimizer.state stays empty until the first step(), so it does not say which "
                      "tensors are optimised.",
                      _too_many_missing),
        Misconception("stale_ignored",
                      "Your 'missing' and 'frozen' lists are right, but 'stale' is 0 while the optimizer holds "
                      "tensors that are no longer parameters of the model (a layer was replaced after the "
                      "optimizer was built). Count the tensors of the param groups that are not parameters of the "
                      "model.",
                      _stale_ignored),
        Misconception("negative_stale",
                      "Your 'stale' is negative: it must count tensors, the ones the param groups hold that are not "
                      "parameters of the model. A difference of two list lengths mixes them with the parameters "
                      "missing from the optimizer; count each held tensor that is not (by identity) a parameter.",
                      _negative_stale),
        Misconception("frozen_outside_groups",
                      "Your 'frozen' list names frozen parameters that no param group holds. Those are fine (a frozen "
                      "parameter outside the optimizer is simply not trained); report only the frozen ones that the "
                      "optimizer holds.",
                      _frozen_outside_groups),
        Misconception("name_order",
                      "Your lists name the right parameters in another order: list them in the order of "
                      "model.named_parameters().",
                      _other_order),
    ),
    wrong_answers=(
        WrongAnswer(_by_requires_grad_only, expect="ignores_param_groups"),
        WrongAnswer(_frozen_counted_missing, expect="too_many_missing", note="frozen counted as missing"),
        WrongAnswer(_membership_by_value, expect="error", note="`p in list` compares values: the error names it (compared_by_value)"),
        WrongAnswer(_equal_values, expect="compared_by_value", note="torch.equal: values, not identity"),
        WrongAnswer(_compared_by_memory, expect="same_memory", note="data_ptr() for identity (adversarial round 8, "
                    "07c_dataptr, full marks): a parameter re-wrapped over the same memory looks held"),
        WrongAnswer(_package_plus_stale, expect="used_library", note="the lab's optimizer_coverage plus one line "
                    "for stale (adversarial round 4, v_lib)"),
        WrongAnswer(_package_source_execd, expect="used_library", note="optimizer_coverage's source, renamed, "
                    "edited and exec'd (adversarial round 5, s07f)"),
        WrongAnswer(_package_only, expect="stale_ignored", note="missing and frozen right, stale left at 0"),
        WrongAnswer(_package_without_stale, expect="structure", note="missing and frozen only: no 'stale'"),
        WrongAnswer(_stale_by_lengths, expect="negative_stale", note="stale as a difference of lengths (v_stalecount)"),
        WrongAnswer(_every_frozen, expect="frozen_outside_groups", note="every frozen parameter (v_frozenall)"),
        WrongAnswer(_stale_layers, expect="wrong_value", note="near miss: layers counted, not tensors"),
        WrongAnswer(_sorted_names, expect="name_order"),
        WrongAnswer(_first_group_only, expect="too_many_missing", note="only param_groups[0]"),
        WrongAnswer(_optimizer_state, expect="too_many_missing", note="optimizer.state before any step"),
        WrongAnswer(_repairs_the_model, expect="modified_input", note="unfreezes the caller's parameters"),
        WrongAnswer(_repairs_the_optimizer, expect="modified_input", note="rewrites the caller's param groups"),
    ),
))


# --- 07.nan_source ------------------------------------------------------------------

def nan_source(f, x):
    x = x.detach().clone().requires_grad_()
    out = f(x)
    found = []

    def watch(node):
        def hook(grad_inputs, grad_outputs):        # what the node computed, in the order backward runs them
            if not found and any(g is not None and not torch.isfinite(g).all() for g in grad_inputs):
                found.append(type(node).__name__)
        return hook

    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        node.register_hook(watch(node))
        stack.extend(child for child, _ in node.next_functions)
    out.backward()
    return found[0] if found else None


# Public cases catch every shortcut below; hidden cases use other traps and other shapes.
_PUBLIC = (
    (("scale", "square", "sum", "sqrt", "tanh"), "zeros"),     # sqrt's inf comes before the NaN anomaly mode names
    (("x_log_x", "sum"), "some zeros"),                         # the product's inf comes before log's NaN
    (("sqrt", "mean", "exp"), "some zeros"),                    # only an inf: anomaly mode names nothing
    (("scale", "tanh", "sum"), "any"),                          # finite: None
    (("two_branches", "sum"), "some zeros"),                    # a depth-first walk's order is not the engine's,
    (("two_branches_late", "sum"), "some zeros"),               # whichever input it takes first
    (("sqrt", "mean", "shift"), "some negative"),               # a NaN with no inf before it (an isinf test misses it)
    (("log_ratio", "sum"), "some zeros"),                       # the inf is the quotient's second output (round 7)
)
_HIDDEN = (
    (("square", "log", "sum"), "zeros"),
    (("safe_sqrt", "sum", "scale"), "some negative"),
    (("scale", "ratio", "mean"), "some zeros"),
    (("square", "mean", "sqrt", "exp"), "zeros"),
    (("shift", "log", "mean", "exp"), "some below -0.5"),
    (("shift", "exp", "sum"), "any"),
    (("two_branches", "mean", "exp"), "zeros"),
    (("two_branches_late", "mean", "exp"), "zeros"),
    (("log_ratio", "mean"), "zeros"),
)


def _nan_source_inputs(seed, hidden):
    g = generator(seed)
    steps, values = choose(seed, _PUBLIC, hidden=hidden, hidden_choices=_HIDDEN)
    size = choose(seed, (3, 5, 4, 6), hidden=hidden, hidden_choices=(7, 2, 8))
    x = torch.randn(size, generator=g)
    position = int(torch.randint(size, (), generator=g))
    if values == "zeros":
        x = torch.zeros(size)
    elif values == "some zeros":
        x = x.abs()
        x[position] = 0.0
    elif values == "some negative":
        x[position] = -x[position].abs() - 0.1
    elif values == "some below -0.5":
        x = x.abs()
        x[position] = -0.5                              # log(0) after the shift
    return Expression(*steps), x


def _leaf(x):
    return x.detach().clone().requires_grad_()


def _anomaly_names(f, x):
    """The node anomaly mode names: the first whose output holds a NaN (an inf passes)."""
    x = _leaf(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autograd.detect_anomaly():
                f(x).backward()
        except RuntimeError as error:
            return str(error).split("'")[1]
    return None


def _nodes(out):
    """Every node of ``out``'s graph once, depth first from the output (the bank's walks share it)."""
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(child for child, _ in node.next_functions)


def _walk(out, *, reverse):
    """Every node once, in a depth-first topological order of the answer's own (inputs first, or last)."""
    order, seen = [], set()

    def visit(node):
        if node is None or node in seen:
            return
        seen.add(node)
        children = [child for child, _ in node.next_functions]
        for child in (reversed(children) if reverse else children):
            visit(child)
        order.append(node)

    visit(out.grad_fn)
    return order[::-1]


def _by_hand(f, x, reverse=False):
    # Adversarial round 4 (n_walk2): the nodes called by hand in a depth-first order, then one backward for show.
    x = _leaf(x)
    out = f(x)
    grads, found = {out.grad_fn: [torch.ones_like(out)]}, None
    for node in _walk(out, reverse=reverse):
        if found is not None or node not in grads or type(node).__name__ == "AccumulateGrad":
            continue
        computed = node(sum(grads[node]))
        computed = computed if isinstance(computed, tuple) else (computed,)
        if any(g is not None and not torch.isfinite(g).all() for g in computed):
            found = type(node).__name__
        for (child, _), g in zip(node.next_functions, computed):
            if child is not None and g is not None:
                grads.setdefault(child, []).append(g)
    out.backward()
    return found


def _replayed_by_hand(f, x):
    # Adversarial round 5 (s07e): f's ops recorded with a TorchFunctionMode and replayed on a leaf of the answer's own
    # (outside f, whose graph only the engine may read), the replay's nodes called by hand in the engine's order (a
    # max-heap on the sequence number), and one backward through f(x) for show.
    import heapq

    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    class Recorder(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.log = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.log.append((func, args, kwargs or {}, out))
            return out

    leaf, recorder = _leaf(x), Recorder()
    with recorder:
        out = f(leaf)
    mine = _leaf(x)
    replayed = {id(leaf): mine}
    swap = lambda a: replayed.get(id(a), a) if isinstance(a, torch.Tensor) else a
    for func, args, kwargs, made in recorder.log:
        if isinstance(made, torch.Tensor) and made.grad_fn is not None:
            replayed[id(made)] = func(*tree_map(swap, args), **tree_map(swap, kwargs))
    root = replayed[id(out)].grad_fn
    waiting = {}
    for node in _nodes(replayed[id(out)]):
        for child, _ in node.next_functions:
            if child is not None:
                waiting[child] = waiting.get(child, 0) + 1
    grads, ready, found = {root: [torch.ones(())]}, [(-root._sequence_nr(), 0, root)], None
    while ready and found is None:
        node = heapq.heappop(ready)[2]
        if type(node).__name__ == "AccumulateGrad":
            continue
        computed = node(sum(grads[node]))
        computed = computed if isinstance(computed, tuple) else (computed,)
        if any(g is not None and not torch.isfinite(g).all() for g in computed):
            found = node.name()
        for (child, _), g in zip(node.next_functions, computed):
            if child is not None:
                grads.setdefault(child, []).extend([] if g is None else [g])
                waiting[child] -= 1
                if not waiting[child]:
                    heapq.heappush(ready, (-child._sequence_nr(), len(grads), child))
    out.backward()
    return found


def _inf_only(f, x):
    # Adversarial round 5 (n07k): hooks on every node that test isinf only; a NaN with no inf before it goes unseen.
    x = _leaf(x)
    out = f(x)
    found = []
    for node in _nodes(out):
        node.register_hook(lambda grads, _, node=node: found.append(node.name())
                           if any(g is not None and torch.isinf(g).any() for g in grads) else None)
    out.backward()
    return found[0] if found else None


def _own_order(f, x, reverse=False):
    # Hooks on every node record which computed a non-finite gradient; the first is picked in a walk's order.
    x = _leaf(x)
    out = f(x)
    bad, order = set(), _walk(out, reverse=reverse)
    for node in order:
        node.register_hook(lambda grads, _, node=node: bad.add(node)
                           if any(g is not None and not torch.isfinite(g).all() for g in grads) else None)
    out.backward()
    return next((type(node).__name__ for node in order if node in bad), None)


def _own_order_reversed(f, x):
    return _own_order(f, x, reverse=True)


def _first_slot_only(f, x):
    # Adversarial round 7 (ns_first_slot, full marks): hooks on every node that test grad_inputs[0] only; a
    # product's inf that goes to its second input is missed.
    x = _leaf(x)
    out = f(x)
    found = []
    for node in _nodes(out):
        node.register_hook(lambda grads, _, node=node: found.append(type(node).__name__)
                           if grads and grads[0] is not None and not torch.isfinite(grads[0]).all() else None)
    out.backward()
    return found[0] if found else None


def _first_inputs_only(f, x):
    # Adversarial round 7 (ns_chain): hooks only on the nodes reached through next_functions[0]; the other
    # branches' nodes have none.
    x = _leaf(x)
    out = f(x)
    found, node = [], out.grad_fn
    while node is not None:
        node.register_hook(lambda grads, _, node=node: found.append(type(node).__name__)
                           if any(g is not None and not torch.isfinite(g).all() for g in grads) else None)
        node = node.next_functions[0][0] if node.next_functions else None
    out.backward()
    return found[0] if found else None


def _explained_by(variants):
    """A wrong name that one of ``variants`` (answers with one slip each) also returns on this case."""
    def explained(student, reference, args):
        f, x = _case(args)
        return student is not None and student != reference and any(student == v(f, x) for v in variants)
    return explained


_OWN_ORDERS, _SOME_UNHOOKED = (_own_order, _own_order_reversed), (_first_inputs_only,)


def _called_by_hand(student, reference, args, *, student_run):
    return OUTSIDE_BACKWARD in (student_run.error or "")


def _second_backward(student, reference, args, *, student_run):
    return SECOND_BACKWARD in (student_run.error or "")


def _backward_then_hooks(f, x):
    # Adversarial round 8 (07n_twice): a backward with retain_graph=True to look at x.grad, then hooks on every node
    # and a second backward through the same graph.  The prompt asks for one pass; it was told "called by hand".
    x = _leaf(x)
    out = f(x)
    out.backward(retain_graph=True)
    found = []
    for node in _nodes(out):
        node.register_hook(lambda grads, _, node=node: found.append(type(node).__name__)
                           if any(g is not None and not torch.isfinite(g).all() for g in grads) else None)
    out.backward()
    return found[0] if found else None


def _nan_only(f, x):
    # Hooks on every node, but looking for NaN only: the same node as anomaly mode.
    x = _leaf(x)
    out = f(x)
    found = []
    for node in _nodes(out):
        node.register_hook(lambda grads, _, node=node: found.append(type(node).__name__)
                           if any(g is not None and torch.isnan(g).any() for g in grads) else None)
    out.backward()
    return found[0] if found else None


def _pre_hooks(f, x):
    # A pre-hook sees the gradient a node receives: it names the node after the one that made it.
    x = _leaf(x)
    out = f(x)
    found = []
    for node in _nodes(out):
        node.register_prehook(lambda grads, node=node: found.append(type(node).__name__)
                              if any(g is not None and not torch.isfinite(g).all() for g in grads) else None)
    out.backward()
    return found[0] if found else None


def _received_in_hook(f, x):
    # Adversarial round 4 (n_gout): a node's hook, but testing grad_outputs (what it received); node.name().
    x = _leaf(x)
    out = f(x)
    found = []
    for node in _nodes(out):
        node.register_hook(lambda grads_in, grads_out, node=node: found.append(node.name())
                           if any(g is not None and not torch.isfinite(g).all() for g in grads_out) else None)
    out.backward()
    return found[0] if found else None


def _last_op(f, x):
    # One backward; when x.grad is not finite, blames the output's own node.
    x = _leaf(x)
    out = f(x)
    out.backward()
    return None if torch.isfinite(x.grad).all() else type(out.grad_fn).__name__


def _first_op(f, x):
    # One backward; when x.grad is not finite, blames the node that consumed x.
    x = _leaf(x)
    out = f(x)
    out.backward()
    if torch.isfinite(x.grad).all():
        return None
    return next((type(node).__name__ for node in _nodes(out)
                 if any(type(child).__name__ == "AccumulateGrad" for child, _ in node.next_functions)), None)


def _forward_check(f, x):
    return "forward" if not torch.isfinite(f(x)).all() else None


def _known_answers(f, x):
    # A name looked up from the public cases, no backward: what a hard-coded answer does.
    return {"Expression('scale', 'square', 'sum', 'sqrt', 'tanh')": "SqrtBackward0",
            "Expression('x_log_x', 'sum')": "MulBackward0",
            "Expression('sqrt', 'mean', 'exp')": "SqrtBackward0"}.get(repr(f))


def _caller_x(f, x):
    x.requires_grad_()                          # no leaf of its own: the caller's x now requires grad
    return nan_source(f, x)


def _two_passes(f, x):
    # One backward to see whether x.grad is finite, a second with hooks: the prompt asks for one pass.
    leaf = _leaf(x)
    f(leaf).backward()
    return nan_source(f, x) if not torch.isfinite(leaf.grad).all() else None


def _no_leaf(f, x):
    try:
        f(x).backward()
    except RuntimeError:
        return None
    return None


def _case(args):
    f, x = args
    return Expression.parse(f) if isinstance(f, str) else f, x


def _same_as(variant):
    def detect(student, reference, args):
        f, x = _case(args)
        return student is not None and student != reference and student == variant(f, x)
    return detect


def _named_nothing(student, reference, args):
    return student is None and reference is not None


register(Exercise(
    id="07.nan_source",
    title="Find the backward node where a gradient first goes non-finite",
    answer_name="nan_source",
    reference=nan_source,
    inputs=_nan_source_inputs,
    public_seeds=(0, 1, 2, 3, 4, 5, 6, 7),
    hidden_seeds=(101, 102, 103, 104, 105, 106, 107, 108, 109),
    method=backward_calls(1, name="one backward pass through f(x)"),
    # Every graph the answer builds keeps its saves for the engine, as f's own do (a replay's nodes called by hand).
    call="autograd_lab.labs.nonfinite:with_saves_kept",
    hints=(
        "Backward runs the nodes of the graph one after another. A hook on a node (`node.register_hook`) is "
        "called with what that node just computed; reach every node from the output's `grad_fn` through "
        "`next_functions`.",
        "Non-finite means NaN or inf. The first node in backward's order is the one whose hook fires first.",
        "The caller's x must come back untouched.",
    ),
    misconceptions=(
        Misconception("named_nothing",
                      "Your function returned None, but backward does produce a non-finite gradient here (a NaN "
                      "or an inf): whatever it watched did not see it. Hook every node of the graph and look at "
                      "what each one computed.",
                      _named_nothing),
        Misconception("first_slot_only",
                      "A node computes one gradient per input, and here the non-finite one is not the first: look "
                      "at every entry of what the hook receives, not only the first.",
                      _explained_by((_first_slot_only,))),
        Misconception("nan_only",
                      "You named the first node that produced a NaN, as anomaly mode does. Here a gradient became "
                      "infinite earlier (an inf turns into NaN a node or two later, as 0 * inf), and anomaly mode "
                      "does not report an inf: look for any non-finite value.",
                      _same_as(_anomaly_names)),
        Misconception("received_not_produced",
                      "You named a node that received a non-finite gradient: the node before it in backward's "
                      "order produced it. A pre-hook sees what a node receives; a hook sees what it computed.",
                      lambda student, reference, args: _same_as(_pre_hooks)(student, reference, args)
                      or _same_as(_received_in_hook)(student, reference, args)),
        Misconception("called_by_hand",
                      "Your function computed the gradients itself, calling the graph's nodes by hand (or reading "
                      "what they saved), instead of watching the backward the engine runs. The checks' functions "
                      "let only the engine read what their graph saved. Register a hook on each node and let "
                      "f(x).backward() call them.",
                      _called_by_hand),
        Misconception("second_backward",
                      "Your function ran backward twice through f's graph (retain_graph=True kept it for a second "
                      "pass): the prompt asks for one backward pass. Register the hooks on the graph's nodes first, "
                      "then run backward once; the hooks see every gradient of that pass.",
                      _second_backward),
        # Adversarial round 7 (ns_chain): hooks on one branch only were told their order was wrong.  The name
        # returned cannot tell the two slips apart (on the check's cases a one-branch hook returns what a reversed
        # walk returns, and the student build matches a mistake by the name returned and the name expected, across
        # cases), so the message names both.
        Misconception("own_order",
                      "Another node went non-finite before the one you named, in the engine's order. Two slips give "
                      "such a name: picking the first in an order of your own (a walk of the graph, which is not the "
                      "engine's order), or a node without a hook (each entry of next_functions leads to a node to "
                      "hook, not only the first). Hook every node and name the one whose hook fired first.",
                      _explained_by(_OWN_ORDERS + _SOME_UNHOOKED)),
        Misconception("last_op",
                      "You named the node where backward starts (the output's grad_fn). Backward goes on through "
                      "the whole graph, and the gradient goes non-finite further down.",
                      _same_as(_last_op)),
        Misconception("first_op",
                      "You named the node next to x, where backward ends. The gradient went non-finite earlier in "
                      "backward's order, deeper in the expression.",
                      _same_as(_first_op)),
    ),
    wrong_answers=(
        WrongAnswer(_anomaly_names, expect="nan_only", note="anomaly mode: NaN only"),
        WrongAnswer(_nan_only, expect="nan_only", note="node hooks that test isnan"),
        WrongAnswer(_pre_hooks, expect="received_not_produced"),
        WrongAnswer(_received_in_hook, expect="received_not_produced", note="a hook that tests grad_outputs (n_gout)"),
        WrongAnswer(_last_op, expect="last_op"),
        WrongAnswer(_first_op, expect="first_op"),
        WrongAnswer(_forward_check, expect="backward_calls", note="looks at the forward value, runs no backward"),
        WrongAnswer(_known_answers, expect="backward_calls", note="the public cases' names typed, no backward"),
        WrongAnswer(_two_passes, expect="backward_calls", note="two backward passes"),
        WrongAnswer(_caller_x, expect="modified_input"),
        WrongAnswer(_by_hand, expect="error", note="nodes called by hand in a walk's order, one backward for show "
                    "(adversarial round 4, n_walk2): the error names it (called_by_hand)"),
        WrongAnswer(_replayed_by_hand, expect="error", note="adversarial round 5 (s07e, full marks): f's ops replayed on "
                    "a leaf of its own, the replay's nodes called by hand in the engine's order, a backward for show: "
                    "the check keeps every graph's saves for the engine (labs/nonfinite.with_saves_kept)"),
        WrongAnswer(_backward_then_hooks, expect="error", note="adversarial round 8 (07n_twice): backward with "
                    "retain_graph=True, then hooks and a second backward through the same graph: the error names it "
                    "(second_backward), not 'called by hand'"),
        WrongAnswer(_inf_only, expect="named_nothing", note="adversarial round 5 (n07k): hooks testing isinf only "
                    "(check() passed it: no public case had a NaN without an inf before it)"),
        WrongAnswer(_own_order, expect="own_order", note="hooks, but the first in a depth-first walk's order"),
        WrongAnswer(_own_order_reversed, expect="own_order", note="the same, the walk taking inputs last first"),
        WrongAnswer(_no_leaf, expect="named_nothing", note="no leaf that requires grad; the error swallowed"),
        WrongAnswer(_first_slot_only, expect="first_slot_only",
                    note="adversarial round 7 (ns_first_slot, full marks): grad_inputs[0] only; log(x) / (exp(x) + 1) at a zero"),
        WrongAnswer(_first_inputs_only, expect="own_order",
                    note="adversarial round 7 (ns_chain): one branch hooked; the message names both slips"),
    ),
))
