"""Observable facts about HOW an answer computed its result, recorded around the call.

An exercise whose prompt requires or forbids a method ("by autograd, not by typing
the formula", "no ``.data``", "no Jacobian", "no ``GradScaler``") is judged on these
facts (``methods.py``).  They are plain data in the record, so the batch grader judges
them in its own process, like the values.  Most come from the tape (``tape.py``): what
actually ran, not what the answer's names say.

* ``engine_runs``: backward passes the autograd engine ran (``Tensor.backward``,
  ``torch.autograd.backward`` / ``grad``, ``torch.func.grad`` / ``vjp`` / ``jacrev``, however
  they were imported), and ``nested_engine_runs``: those started inside another one;
  ``backward_ops``: aten ops run inside the engine's backward, by any path (an aliased
  engine object included), and ``backward_op_names``: ``{op: count}`` of them;
* ``forward_ad``: forward-mode AD levels entered (dual tensors, ``jvp``, ``jacfwd``);
* ``ops``: ``{op: count}`` of the aten ops run outside the backward (at most 64 names);
  ``library_derivatives``: ops named ``*_backward`` (PyTorch's own derivative kernels);
  ``largest_numel``: the most elements of any tensor an op produced, backward included,
  and ``largest_input_numel``: of a tensor argument;
* ``output_from_engine``: ``True`` when every floating-point tensor the answer returned
  was computed from what the engine produced (``None``: it returned none);
* ``ran``, ``copied``, ``instances``: per watched spec (``tape.py``), the calls of that
  code, the ``copy``/``deepcopy`` of its objects, and the objects of its classes that the
  call left alive, however they were made (``object.__new__``, unpickling);
* ``escapes``: threads and processes the answer started (the tape cannot follow them);
  ``tape_intact``: no recorder was switched off by the answer;
* ``answer_kind``: ``"autograd.Function"`` for a ``torch.autograd.Function`` subclass, else
  ``"function"``; with ``own_backward_ops`` (ops run by that Function's own backward);
* ``silent_writes``: tensor arguments (a module's parameters included) whose values
  changed while their version counter did not move: a write through ``.data``;
* ``samplers_built`` / ``scalers_built``: ``DistributedSampler`` / ``GradScaler`` objects
  constructed through ``__init__``;
* ``tiny_engine_runs``: calls of the course's tiny engine's ``Value.backward``;
  ``tiny_backwards``: ``{label: n}`` distinct nodes whose ``_backward`` it ran;
  ``tiny_own_backwards``: of those, the nodes whose ``_backward`` is the answer's own
  closure (not one of the engine's own ops); ``tiny_missing_backwards``: nodes with
  parents whose ``_backward`` was still the do-nothing default (a forgotten
  ``out._backward = _backward``).

A method that needs the backward an answer's output gets (a custom ``Function``)
also reads ``facts["grad_phase"]``: the same facts, recorded while the checker
backpropagated through the output.
"""

import contextlib

import torch
import torch.utils.data

from .tape import Tape

FACTS = ("engine_runs", "nested_engine_runs", "backward_ops", "backward_op_names", "forward_ad", "ops",
         "library_derivatives", "largest_numel", "largest_input_numel", "output_from_engine", "ran", "copied",
         "instances", "escapes", "tape_intact", "answer_kind", "own_backward_ops", "own_library_derivatives",
         "silent_writes", "samplers_built", "scalers_built", "tiny_engine_runs", "tiny_backwards",
         "tiny_own_backwards", "tiny_missing_backwards")


class _CountingConstructions:
    """Counts constructions of ``cls`` (subclasses included) through ``__init__`` while installed."""

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
    A node's closure is the engine's own when its code is in the engine's file, and the
    answer's otherwise: that, not the label a node was given, tells a node the answer made.
    """

    MAX_OPS = 20   # distinct labels kept: the facts stay small whatever the answer names its nodes

    def __init__(self):
        from autograd_lab.labs import tiny_engine
        self._engine, self._backward = tiny_engine, tiny_engine.Value.backward
        self._file = tiny_engine.__file__
        self.runs, self._ran, self._missing = 0, {}, {}   # id -> node: kept, so their ids stay unique

    def __enter__(self):
        watcher, original, engine = self, self._backward, self._engine

        def backward(root):
            watcher.runs += 1
            own = [(node, getattr(node, "__dict__", {}).get("_backward")) for node in engine.topological_order(root)]
            wrapped = [(node, inner) for node, inner in own if callable(inner)]
            for node, inner in wrapped:
                if watcher._is_default(inner) and getattr(node, "parents", ()):
                    watcher._missing.setdefault(id(node), node)
                node._backward = watcher._counting(node, inner)
            try:
                return original(root)
            finally:
                for node, inner in wrapped:
                    node._backward = inner

        engine.Value.backward = backward
        return self

    def _is_default(self, closure):
        code = getattr(closure, "__code__", None)
        return code is not None and code.co_filename == self._file and code.co_name == "<lambda>"

    def _is_own(self, closure):
        code = getattr(closure, "__code__", None)
        return code is not None and code.co_filename != self._file

    def _counting(self, node, inner):
        def run():
            self._ran.setdefault(id(node), (node, self._is_own(inner)))
            return inner()
        return run

    def __exit__(self, *exc_info):
        self._engine.Value.backward = self._backward
        return False

    def backwards(self):
        """``{op: number of distinct nodes with that label whose _backward ran}``."""
        counts = {}
        for node, _ in self._ran.values():
            op = getattr(node, "op", "")
            op = (op if isinstance(op, str) else repr(op))[:40]
            if op in counts or len(counts) < self.MAX_OPS:
                counts[op] = counts.get(op, 0) + 1
        return counts

    def own(self):
        return sum(own for _, own in self._ran.values())


class Watch:
    """The facts of one call; filled in when the ``watch`` block ends.

    Inside the block, ``returned(output)`` hands over what the answer returned, so the
    facts can say whether it came from the engine.
    """

    def __init__(self):
        self.facts = {}
        self.output = None

    def returned(self, output):
        self.output = output


@contextlib.contextmanager
def watch(tensors, *, watchlist=(), answer=None, sizes=True):
    """Record the facts (``FACTS``) of the code run inside; ``tensors`` are the call's tensor arguments.

    ``watchlist``: watch specs of the code and ops to count (``tape.py``); ``answer``: the
    answer object (a ``torch.autograd.Function`` subclass is recognised in the backward).
    ``sizes`` is accepted for older callers: sizes are always recorded.
    """
    before = [(t, t._version, t.detach().clone()) for t in tensors]
    result = Watch()
    function_class = answer if isinstance(answer, type) and issubclass(answer, torch.autograd.Function) else None
    samplers = _CountingConstructions(torch.utils.data.DistributedSampler)
    scalers = _CountingConstructions(torch.amp.GradScaler)
    tiny = _TinyEngineRuns()
    tape = Tape(watchlist, own=function_class, profile=bool(watchlist))   # the profile hook only for bans
    try:
        with samplers, scalers, tiny, tape:
            yield result
    finally:
        result.facts = dict(tape.facts(),
                            output_from_engine=tape.output_from_engine(result.output),
                            largest_input_numel=max((t.numel() for t in tensors), default=0),
                            answer_kind="autograd.Function" if function_class else "function",
                            silent_writes=_silent_writes(before),
                            samplers_built=samplers.built, scalers_built=scalers.built,
                            tiny_engine_runs=tiny.runs, tiny_backwards=tiny.backwards(),
                            tiny_own_backwards=tiny.own(), tiny_missing_backwards=len(tiny._missing))


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
