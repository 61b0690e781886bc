"""Is every parameter being trained?  Per-parameter gradient reports and a training-step audit.

Lab 07 builds these by hand first; the package offers them so that students can
point them at their own models::

    grad_report(model)                       # rows: name, shape, grad set?, norm, finite?
    with track_update(model) as update:      # |delta theta| / |theta| across one step
        optimizer.step()
    update.ratios
    optimizer_coverage(model, optimizer)     # trainable but not optimised / frozen but optimised
    audit_step(model, optimizer, train_step) # runs your step twice and lists what is wrong
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GradRow:
    """One parameter's gradient: ``norm`` is None when ``.grad`` is None."""

    name: str
    shape: tuple
    requires_grad: bool
    has_grad: bool
    norm: float | None
    finite: bool | None


def grad_report(model):
    """One ``GradRow`` per named parameter of ``model``, in ``named_parameters()`` order."""
    _require_module(model)
    rows = []
    for name, p in model.named_parameters():
        grad = p.grad
        rows.append(GradRow(
            name=name, shape=tuple(p.shape), requires_grad=p.requires_grad, has_grad=grad is not None,
            norm=None if grad is None else float(grad.detach().norm()),
            finite=None if grad is None else bool(torch.isfinite(grad).all()),
        ))
    return rows


def format_report(rows):
    """The rows as a fixed-width text table (deterministic, for printing in a notebook)."""
    lines = [f"{'parameter':<24}{'shape':<14}{'grad':<7}{'norm':>12}  finite"]
    for row in rows:
        norm = "-" if row.norm is None else f"{row.norm:.4g}"
        finite = "-" if row.finite is None else str(row.finite)
        lines.append(f"{row.name:<24}{str(row.shape):<14}{'set' if row.has_grad else 'None':<7}{norm:>12}  {finite}")
    return "\n".join(lines)


class track_update:
    """Context manager: ``ratios[name] = |theta_after - theta_before| / |theta_before|`` for one step.

    A healthy SGD/Adam step moves weights by roughly 1e-4 to 1e-2 of their size;
    0 means the parameter was not updated, near 1 means the step is far too large.
    """

    def __init__(self, model):
        _require_module(model)
        self.model = model
        self.ratios = {}

    def __enter__(self):
        self._before = {name: p.detach().clone() for name, p in self.model.named_parameters()}
        return self

    def __exit__(self, *exc_info):
        for name, p in self.model.named_parameters():
            before = self._before[name]
            size = float(before.norm())
            change = float((p.detach() - before).norm())
            self.ratios[name] = change / size if size > 0 else change
        return False


def optimizer_coverage(model, optimizer):
    """Which parameters the optimizer gets wrong, by name.

    ``missing``: trainable (``requires_grad``) parameters in no param group: they get
    gradients and are never updated.  ``frozen``: parameters in a group that do not
    require grad: harmless for SGD, but usually a sign the freeze was meant elsewhere.
    """
    _require_module(model)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer_coverage() needs a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    # Identity, not ==: `p in list_of_tensors` compares values elementwise and raises.
    optimised = {id(p) for group in optimizer.param_groups for p in group["params"]}
    named = list(model.named_parameters())
    return {
        "missing": [name for name, p in named if p.requires_grad and id(p) not in optimised],
        "frozen": [name for name, p in named if not p.requires_grad and id(p) in optimised],
    }


def _require_module(model):
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"Expected an nn.Module (your model), got {type(model).__name__}.")


class _StepRecorder:
    """Hooks that watch one training step: gradients arriving, being cleared, and the optimizer step."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.events = []          # "backward", "step" in the order they happened
        self.stale_grad = False   # a backward added onto a gradient left over from before
        self.no_grad_at_step = False
        self.eval_at_step = False
        self.grads_changed_before_step = False  # something (clip, unscale) rescaled .grad in place
        self._incoming = {}
        self._versions = {}

    def __enter__(self):
        self._handles = [self.optimizer.register_step_pre_hook(self._on_step)]
        for p in self.params:
            self._handles.append(p.register_hook(self._remember_incoming(p)))
            self._handles.append(p.register_post_accumulate_grad_hook(self._on_accumulated))
        return self

    def __exit__(self, *exc_info):
        for handle in self._handles:
            handle.remove()
        return False

    def _remember_incoming(self, p):
        def hook(grad):
            self._incoming[id(p)] = grad.detach().clone()
        return hook

    def _on_accumulated(self, p):
        if not self.events or self.events[-1] != "backward":
            self.events.append("backward")
        incoming = self._incoming.pop(id(p), None)
        if incoming is not None and not torch.equal(p.grad, incoming):
            self.stale_grad = True
        self._versions[id(p)] = p.grad._version

    def _on_step(self, optimizer, args, kwargs):
        self.events.append("step")
        self.eval_at_step |= not self.model.training
        self.no_grad_at_step |= all(p.grad is None for p in self.params)
        self.grads_changed_before_step |= any(
            p.grad is not None and id(p) in self._versions and p.grad._version != self._versions[id(p)]
            for p in self.params)


def audit_step(model, optimizer, train_step, *, steps=2):
    """Run ``train_step()`` ``steps`` times under hooks; return the list of problems found (empty: clean).

    ``train_step`` is a zero-argument function doing one iteration of your loop
    (forward, loss, backward, step).  Checks: the order of zero_grad / backward /
    step, gradients accumulating across steps, the model's mode at the step, and
    optimizer coverage.  Notes (not problems) go to the returned list prefixed "note:".
    """
    if not callable(train_step):
        raise TypeError("audit_step() needs train_step, a zero-argument function that runs one iteration.")
    problems = []
    coverage = optimizer_coverage(model, optimizer)
    if coverage["missing"]:
        problems.append(f"trainable parameters missing from the optimizer: {coverage['missing']}")
    if coverage["frozen"]:
        problems.append(f"frozen parameters (requires_grad=False) in the optimizer: {coverage['frozen']}")
    with _StepRecorder(model, optimizer) as recorder:
        for _ in range(steps):
            train_step()
    return problems + _order_problems(recorder, steps)


def _order_problems(recorder, steps):
    problems = []
    if "step" not in recorder.events:
        problems.append("optimizer.step() was never called")
    if "backward" not in recorder.events:
        problems.append("no gradient reached a trainable parameter: backward() missing or the graph is cut")
    elif recorder.events[:2] == ["step", "backward"]:
        problems.append("optimizer.step() ran before backward(): each step used the previous iteration's gradient")
    if recorder.stale_grad:
        problems.append("gradients accumulated across iterations: call optimizer.zero_grad() before backward()")
    if recorder.no_grad_at_step:
        problems.append("every .grad was None at optimizer.step(): zero_grad() runs between backward() and step()")
    if recorder.eval_at_step:
        problems.append("the model was in eval mode during training: call model.train() before the loop")
    if not recorder.grads_changed_before_step:
        problems.append("note: no gradient clipping (or unscaling) seen between backward() and step()")
    return problems
