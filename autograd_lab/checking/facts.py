"""Observable facts about HOW an answer computed its result, recorded while it runs.

An exercise whose prompt requires or forbids a method ("by autograd, not by
typing the formula", "no ``.data``", "no Jacobian") is judged on these facts
(see ``methods.py``).  They are plain data in the record, so the batch grader
judges them in its own process, like the values.

* ``engine_runs``: how many times the autograd engine ran a backward pass
  (``.backward()``, ``torch.autograd.backward``, ``torch.autograd.grad`` and
  everything built on them).  Counted by wrapping the engine object that all of
  them call, so ``from torch.autograd import grad`` done earlier is counted too.
  ``torch.func`` transforms do not run this engine and are not counted.
* ``silent_writes``: how many tensor arguments (a module's parameters included)
  changed value while their version counter did not move: the mark of a write
  through ``.data``, which autograd cannot see (``.data`` is a new tensor with
  its own counter).  An in-place op on the tensor itself, even under
  ``torch.no_grad()``, or on its ``.detach()`` (which shares the counter), bumps it.
* ``samplers_built``: how many ``torch.utils.data.DistributedSampler`` objects the
  answer built, for a prompt that asks to write the sharding by hand.
* ``scalers_built``: how many ``torch.amp.GradScaler`` objects (the older
  ``torch.cuda.amp.GradScaler`` is a subclass) the answer built, for a prompt that
  asks to write the scaler's rule by hand.
* ``tiny_engine_runs``: how many times the course's tiny engine
  (``autograd_lab.labs.tiny_engine``) ran ``Value.backward``, and ``tiny_backwards``:
  ``{op: n}``, how many distinct ``Value`` nodes labelled ``op`` had their
  ``_backward`` closure run by it (a node's ``op`` is the label its maker gave it:
  ``Value(t, (a,), "tanh")``).  For a prompt that asks to extend the tiny engine:
  a derivative typed as a formula, or taken by PyTorch's autograd, runs no such node.
* ``largest_numel``: the most elements of any tensor an op produced, backward
  included, and ``largest_input_numel``, the most elements of a tensor argument
  (only when a method asks for them: the first needs a dispatch mode, which
  costs a Python call per op).
"""

import contextlib

import torch
import torch.utils.data
from torch.autograd.variable import Variable
from torch.utils._python_dispatch import TorchDispatchMode

FACTS = ("engine_runs", "silent_writes", "samplers_built", "scalers_built", "tiny_engine_runs", "tiny_backwards",
         "largest_numel", "largest_input_numel")


class _CountingEngine:
    """Stands in for ``Variable._execution_engine``: counts backward passes, delegates the rest."""

    def __init__(self, engine):
        self._engine = engine
        self.runs = 0

    def run_backward(self, *args, **kwargs):
        self.runs += 1
        return self._engine.run_backward(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


class _LargestOutput(TorchDispatchMode):
    """Records the largest ``numel`` among the outputs of every op run under it."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in _tensors(out):
            self.largest = max(self.largest, tensor.numel())
        return out


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


class _CountingConstructions:
    """Counts constructions of ``cls`` (subclasses included) while installed."""

    def __init__(self, cls):
        self._class, self._init, self.built = cls, cls.__init__, 0

    def __enter__(self):
        original = self._init

        def counting_init(instance, *args, **kwargs):
            self.built += 1
            original(instance, *args, **kwargs)

        self._class.__init__ = counting_init
        return self

    def __exit__(self, *exc_info):
        self._class.__init__ = self._init
        return False


class _TinyEngineRuns:
    """Counts the tiny engine's ``Value.backward`` calls and the nodes whose ``_backward`` they ran.

    While installed, ``Value.backward`` wraps the ``_backward`` of every node of its graph
    in a counter, runs the engine's own ``backward`` unchanged, and puts the closures back.
    """

    MAX_OPS = 20   # distinct labels kept: the facts stay small whatever the answer names its nodes

    def __init__(self):
        from autograd_lab.labs import tiny_engine
        self._engine, self._backward = tiny_engine, tiny_engine.Value.backward
        self.runs, self._ran = 0, {}   # id -> node: the nodes are kept, so their ids stay unique

    def __enter__(self):
        watcher, original, engine = self, self._backward, self._engine

        def backward(root):
            watcher.runs += 1
            own = [(node, getattr(node, "__dict__", {}).get("_backward")) for node in engine.topological_order(root)]
            wrapped = [(node, inner) for node, inner in own if callable(inner)]
            for node, inner in wrapped:
                node._backward = watcher._counting(node, inner)
            try:
                return original(root)
            finally:
                for node, inner in wrapped:
                    node._backward = inner

        engine.Value.backward = backward
        return self

    def _counting(self, node, inner):
        def run():
            self._ran.setdefault(id(node), node)
            return inner()
        return run

    def __exit__(self, *exc_info):
        self._engine.Value.backward = self._backward
        return False

    def backwards(self):
        """``{op: number of distinct nodes with that label whose _backward ran}``."""
        counts = {}
        for node in self._ran.values():
            op = getattr(node, "op", "")
            op = (op if isinstance(op, str) else repr(op))[:40]
            if op in counts or len(counts) < self.MAX_OPS:
                counts[op] = counts.get(op, 0) + 1
        return counts


class Watch:
    """The facts of one call; filled in when the ``watch`` block ends."""

    def __init__(self):
        self.facts = {}


@contextlib.contextmanager
def watch(tensors, *, sizes=False):
    """Record the facts (``FACTS``) of the code run inside; ``tensors`` are the call's tensor arguments.

    ``sizes``: also record ``largest_numel`` (slower: a dispatch mode sees every op).
    """
    before = [(t, t._version, t.detach().clone()) for t in tensors]
    result = Watch()
    engine = Variable._execution_engine
    counter = _CountingEngine(engine)
    Variable._execution_engine = counter
    mode = _LargestOutput() if sizes else contextlib.nullcontext()
    samplers = _CountingConstructions(torch.utils.data.DistributedSampler)
    scalers = _CountingConstructions(torch.amp.GradScaler)
    tiny = _TinyEngineRuns()
    try:
        with mode, samplers, scalers, tiny:
            yield result
    finally:
        Variable._execution_engine = engine
        result.facts = {"engine_runs": counter.runs, "silent_writes": _silent_writes(before),
                        "samplers_built": samplers.built, "scalers_built": scalers.built,
                        "tiny_engine_runs": tiny.runs,
                        "tiny_backwards": tiny.backwards()}
        if sizes:
            result.facts["largest_numel"] = mode.largest
            result.facts["largest_input_numel"] = max((t.numel() for t in tensors), default=0)


def _silent_writes(before):
    count = 0
    for tensor, version, value in before:
        changed = value.shape != tensor.shape or not _same_values(value, tensor.detach())
        if changed and tensor._version == version:
            count += 1
    return count


def _same_values(a, b):
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same = same | (a.isnan() & b.isnan())
    return bool(same.all())
