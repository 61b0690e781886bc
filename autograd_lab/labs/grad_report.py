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
    """Hooks that watch a training loop: gradients arriving, clipping and unscaling, and each optimizer step.

    ``events`` lists, per call of the step function, what happened in order: ``backward`` (a backward pass
    reached the parameters), ``clip`` (a ``torch.nn.utils.clip_grad_*`` call), ``unscale``
    (``GradScaler.unscale_``), ``rescaled`` (gradients changed in place between backward and step by
    something else) and ``step``.
    """

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.events = []          # [[event, ...] per call of the step function]
        self.stale_grad = False   # a gradient from before a step() was still there at the next backward
        self.cleared_at_step = False
        self.eval_modules = set()
        self._since_step = set()  # ids of the parameters a backward reached since the last step()
        self._since_event = set()
        self._versions = {}
        self._patches = []

    def __enter__(self):
        self._handles = [self.optimizer.register_step_pre_hook(self._on_step)]
        for p in self.params:
            self._handles.append(p.register_hook(self._before_accumulate(p)))
            self._handles.append(p.register_post_accumulate_grad_hook(self._on_accumulated))
        self._patch_clippers()
        return self

    def __exit__(self, *exc_info):
        for handle in self._handles:
            handle.remove()
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        return False

    def start_call(self):
        self.events.append([])

    def _record(self, event):
        self.events[-1].append(event)

    def _patch_clippers(self):
        # Clipping before backward() or after step() changes nothing a hook can see: watch the calls.
        import torch.nn.utils as utils
        from torch.nn.utils import clip_grad

        for owner in (utils, clip_grad):
            for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_"):
                if hasattr(owner, name):
                    self._patch(owner, name, "clip")
        self._patch(torch.amp.GradScaler, "unscale_", "unscale")

    def _patch(self, owner, name, event):
        original = getattr(owner, name)

        def watched(*args, **kwargs):
            self._record(event)
            return original(*args, **kwargs)
        self._patches.append((owner, name, original))
        setattr(owner, name, watched)

    def _before_accumulate(self, p):
        def hook(grad):
            if id(p) not in self._since_step and p.grad is not None and bool(p.grad.detach().ne(0).any()):
                self.stale_grad = True       # the gradient of an earlier step is still there
            return None
        return hook

    def _on_accumulated(self, p):
        calls = self.events[-1]
        if not calls or calls[-1] != "backward" or id(p) in self._since_event:
            self._record("backward")
            self._since_event = set()
        self._since_event.add(id(p))
        self._since_step.add(id(p))
        self._versions[id(p)] = (id(p.grad), p.grad._version)

    def _on_step(self, optimizer, args, kwargs):
        reached = [p for p in self.params if id(p) in self._since_step]
        calls = self.events[-1]
        seen = next((e for e in reversed(calls) if e != "step"), None)
        if seen == "backward" and any(p.grad is not None and self._versions.get(id(p)) != (id(p.grad), p.grad._version)
                                      for p in reached):
            self._record("rescaled")          # clipped or unscaled by code the audit does not watch
        self._record("step")
        self.eval_modules |= {name or "the model" for name, m in self.model.named_modules() if not m.training}
        if reached and all(p.grad is None or not bool(p.grad.detach().ne(0).any()) for p in reached):
            self.cleared_at_step = True       # zero_grad() (to None or to zeros) between backward() and step()
        self._since_step = set()
        self._since_event = set()


def audit_step(model, optimizer, train_step, *, steps=2):
    """Run ``train_step()`` ``steps`` times under hooks; return the list of problems found (empty: clean).

    ``train_step`` is a zero-argument function doing one iteration of your loop (forward, loss,
    backward, step; several backward passes per step, gradient accumulation, are fine).  Checks:
    optimizer coverage; the order of backward and step; gradients of one step left over at the
    next (a missing ``zero_grad``); gradients cleared between backward and step; modules in eval
    mode at the step; clipping (``torch.nn.utils.clip_grad_*``) or ``GradScaler.unscale_`` before
    backward or after step, and clipping before unscaling.  A loop without clipping is not a
    problem.  Clipping is seen through the names in ``torch.nn.utils``, looked up when the step
    calls them: a name bound before the audit (``from torch.nn.utils import clip_grad_norm_`` at
    the top of a file) escapes it.

    The audit starts from cleared gradients, as a training run does, and puts back what it ran
    over: the model's and the optimizer's ``state_dict``, the modules' modes and the gradients.
    Anything else your step changes (a scheduler, a scaler, a data iterator) keeps its changes: a
    scheduler's count moves on while the optimizer's learning rate is put back.
    """
    if not callable(train_step):
        raise TypeError("audit_step() needs train_step, a zero-argument function that runs one iteration.")
    problems = []
    coverage = optimizer_coverage(model, optimizer)
    if coverage["missing"]:
        problems.append(f"trainable parameters missing from the optimizer: {coverage['missing']}")
    if coverage["frozen"]:
        problems.append(f"frozen parameters (requires_grad=False) in the optimizer: {coverage['frozen']}")
    saved = _saved_state(model, optimizer)
    try:
        for p in model.parameters():
            p.grad = None
        with _StepRecorder(model, optimizer) as recorder:
            for _ in range(steps):
                recorder.start_call()
                train_step()
    finally:
        _restore(model, optimizer, saved)
    return problems + _order_problems(recorder)


def _saved_state(model, optimizer):
    import copy

    return (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()),
            [m.training for m in model.modules()],
            [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()])


def _restore(model, optimizer, saved):
    model_state, optimizer_state, modes, grads = saved
    model.load_state_dict(model_state)
    optimizer.load_state_dict(optimizer_state)
    for module, training in zip(model.modules(), modes):
        module.training = training
    for p, grad in zip(model.parameters(), grads):
        p.grad = grad


def _order_problems(recorder):
    problems = []
    events = [event for call in recorder.events for event in call]
    if "step" not in events:
        problems.append("optimizer.step() was never called")
    if "backward" not in events:
        problems.append("no gradient reached a trainable parameter: backward() missing or the graph is cut")
    step_first = "backward" in events and events[0] == "step"
    if step_first:
        problems.append("optimizer.step() ran before backward(): each step used the previous iteration's gradient")
    if recorder.stale_grad:
        problems.append("gradients accumulated across iterations: call optimizer.zero_grad() before backward()")
    if recorder.cleared_at_step and not step_first:   # zero_grad(); step(); backward() clears at every step too
        problems.append("every gradient was cleared (None or zero) at optimizer.step(): zero_grad() runs between "
                        "backward() and step()")
    if recorder.eval_modules:
        problems.append(f"modules in eval mode during training: {sorted(recorder.eval_modules)}: call model.train() "
                        "before the loop")
    return problems + _clip_problems(recorder.events)


def _clip_problems(calls):
    """Clipping and unscaling belong after the last backward() of a step and before its step()."""
    found = []
    for call in calls:
        for number, event in enumerate(call):
            if event not in ("clip", "unscale"):
                continue
            before = [e for e in call[:number] if e in ("backward", "step")]
            after = [e for e in call[number + 1:] if e in ("backward", "step")]
            if before and before[-1] == "step":
                found.append(f"{_CALLS[event]} ran after optimizer.step(): that step used the gradients as they were")
            elif after and after[0] == "backward" or not before:
                found.append(f"{_CALLS[event]} ran before backward(): it changed the previous gradients (or none), "
                             "not the ones the step uses")
            if event == "clip" and "unscale" in call[number + 1:]:
                found.append("clipping ran before scaler.unscale_(): it clipped the scaled gradients")
    return list(dict.fromkeys(found))


_CALLS = {"clip": "gradient clipping", "unscale": "scaler.unscale_()"}
