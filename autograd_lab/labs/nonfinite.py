"""Small expressions whose backward pass may turn a gradient into inf or NaN, kept as plain data.

``Expression("scale", "square", "sum", "sqrt")`` is ``f(x) = sqrt(sum((3 x)^2))``: a
callable made of named steps.  Being data (a tuple of names), it pickles by value, so
notebook 07's exercise can ship such functions as public inputs in a student build,
and a checker can rebuild one from its ``repr``.  Each step is one ordinary torch op,
so the backward nodes are the ones a student meets in real models.

What the graph saved for backward may be read only by the autograd engine, once, while
it runs the node that saved it: a node called by hand (``node(grad)``) or a saved tensor
read from Python (``node._saved_self``) raises ``ReadOutsideBackward``.  So an answer
that must watch the engine's own backward cannot compute the gradients itself, node by
node in an order of its own, and run one backward for show.  ``with_saves_kept`` extends
the rule to every graph the answer builds while it is checked (a replay of f's ops on a
leaf of its own, whose nodes it calls by hand): the check calls the answer through it.
"""

import re

import torch


class ReadOutsideBackward(RuntimeError):
    """A tensor an ``Expression`` saved for backward was read outside the engine's backward, or twice."""


OUTSIDE_BACKWARD = ("a node of f's graph (or of a graph built while the check ran) ran outside the autograd engine's "
                    "backward (called by hand, or its saved tensors read from Python): this exercise watches the "
                    "backward the engine runs, with hooks")
SECOND_BACKWARD = ("f's graph was run backward a second time (a backward with retain_graph=True, then another "
                   "backward through the same graph): this exercise watches one backward pass, so register the "
                   "hooks on its nodes first and then run backward once")


def _two_branches(t):
    """``log(3 t) + 2 sqrt(exp(t) - 1)``, the two branches' ops made in turn (the engine runs them in turn too)."""
    a = t * 3.0                       # MulBackward0, made first
    b = torch.sqrt(t.exp() - 1.0)     # ExpBackward0, SubBackward0, SqrtBackward0: inf slope at 0
    a = torch.log(a)                  # LogBackward0: made after SqrtBackward0, so the engine runs it first
    b = b * 2.0                       # MulBackward0
    return a + b


def _two_branches_late(t):
    """``3 sqrt(t) + 2 log(t)``: both branches' risky ops made first, their products after."""
    a = torch.sqrt(t)                 # SqrtBackward0
    b = torch.log(t)                  # LogBackward0: runs before SqrtBackward0
    return a * 3.0 + b * 2.0

def _log_ratio(t):
    """``log(t) / (exp(t) + 1)``: at 0 the quotient's inf is its second output, the gradient of the denominator's branch."""
    b = t.exp() + 1.0                 # ExpBackward0, AddBackward0, made first
    a = torch.log(t)                  # LogBackward0: made after, so the engine runs it first
    return a / b                      # DivBackward0: d/db = -a/b^2, inf at 0; d/da = 1/b, finite


STEPS = {
    "scale": lambda t: t * 3.0,                                          # MulBackward0
    "shift": lambda t: t + 0.5,                                          # AddBackward0
    "square": lambda t: t ** 2,                                          # PowBackward0
    "sum": lambda t: t.sum(),                                            # SumBackward0
    "mean": lambda t: t.mean(),                                          # MeanBackward0
    "sqrt": torch.sqrt,                                                  # SqrtBackward0: inf slope at 0
    "log": torch.log,                                                    # LogBackward0: 1/x at 0
    "tanh": torch.tanh,                                                  # TanhBackward0
    "exp": torch.exp,                                                    # ExpBackward0
    "ratio": lambda t: t / t,                                            # DivBackward0: 0/0
    "x_log_x": lambda t: t * torch.log(t),                               # MulBackward0 and LogBackward0
    "log_ratio": _log_ratio,
    "safe_sqrt": lambda t: torch.where(t > 0, torch.sqrt(t), torch.zeros_like(t)),   # WhereBackward0
    "two_branches": _two_branches,          # the engine's order interleaves the branches: no depth-first walk's
    "two_branches_late": _two_branches_late,
}


class _Saved:
    """What the graph keeps for one saved tensor; the engine may unpack it once, while it runs a node."""

    __slots__ = ("tensor", "read", "task")

    def __init__(self, tensor):
        self.tensor, self.read, self.task = tensor, False, None


def _unpack(saved):
    if torch._C._current_autograd_node() is None:
        raise ReadOutsideBackward(OUTSIDE_BACKWARD)
    task = torch._C._current_graph_task_id()     # one id per engine run (backward, autograd.grad)
    if saved.read:
        # Read before by another engine run: the graph was run backward twice (adversarial round 8, 07n_twice, was
        # told "called by hand").  Read before in this same run: a node called by hand inside a hook.
        raise ReadOutsideBackward(SECOND_BACKWARD if task != saved.task else OUTSIDE_BACKWARD)
    saved.read, saved.task = True, task
    return saved.tensor


def with_saves_kept(answer, f, x):
    """``answer(f, x)``, every tensor saved for backward in the call kept as an ``Expression`` keeps its own.

    Saved-tensor hooks of the check's, outermost: a graph the answer builds outside f (f's ops
    replayed on a leaf of its own, adversarial round 5) may be read only by the engine too.
    Hooks the answer pushes are wrapped in the same rule, so they neither hide a save from it
    nor stop working; a pop beyond the answer's own pushes (the check's hooks taken off) raises.
    """
    module = torch._C._autograd
    push, pop = module._push_saved_tensors_default_hooks, module._pop_saved_tensors_default_hooks
    pushed = []

    def guarded_push(pack_hook, unpack_hook):
        if pack_hook is not _Saved:        # an Expression's own hooks already keep the rule
            pack_hook, unpack_hook = _kept(pack_hook, unpack_hook)
        pushed.append(True)
        return push(pack_hook, unpack_hook)

    def counted_pop():
        if not pushed:
            raise ReadOutsideBackward(OUTSIDE_BACKWARD + " (your answer took the check's saved-tensor hooks off)")
        pushed.pop()
        return pop()

    with torch.autograd.graph.saved_tensors_hooks(_Saved, _unpack):   # pushed before the count of the answer's
        module._push_saved_tensors_default_hooks, module._pop_saved_tensors_default_hooks = guarded_push, counted_pop
        try:
            return answer(f, x)
        finally:
            module._push_saved_tensors_default_hooks, module._pop_saved_tensors_default_hooks = push, pop
            for _ in pushed:               # hooks the answer left on (it raised inside a `with`, or never popped)
                pop()


def _kept(pack_hook, unpack_hook):
    """An answer's own saved-tensor hooks, with the engine-only, read-once rule around what they keep."""
    return (lambda tensor: _Saved(pack_hook(tensor))), (lambda saved: unpack_hook(_unpack(saved)))


class Expression:
    """``f(x)``: the named ``STEPS`` applied in order; its ``repr`` names them, and ``parse`` reads it back."""

    def __init__(self, *steps):
        unknown = [step for step in steps if step not in STEPS]
        if unknown or not steps:
            raise ValueError(f"unknown steps {unknown}; known: {sorted(STEPS)}")
        self.steps = tuple(steps)

    def __call__(self, x):
        with torch.autograd.graph.saved_tensors_hooks(_Saved, _unpack):
            for step in self.steps:
                x = STEPS[step](x)
        return x

    def __repr__(self):
        return f"Expression({', '.join(map(repr, self.steps))})"

    def __eq__(self, other):
        return isinstance(other, Expression) and other.steps == self.steps

    def __hash__(self):
        return hash(self.steps)

    @classmethod
    def parse(cls, text):
        """The expression a ``repr`` describes (``None`` for any other text)."""
        match = re.fullmatch(r"Expression\(((?:'\w+'(?:, )?)+)\)", str(text))
        return cls(*re.findall(r"'(\w+)'", match.group(1))) if match else None
