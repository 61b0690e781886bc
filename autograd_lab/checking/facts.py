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
  and ``largest_input_numel``: of a tensor argument; ``backward_largest``: per backward pass
  (in the order they ended, the first ``tape.MAX_RUNS``), the most elements of a tensor produced
  inside it: a pass through a micro-batch's graph works on that micro-batch's rows, a pass
  through the whole batch's graph on all of them;
* ``output_from_engine``: ``True`` when every floating-point tensor the answer returned
  was computed from what the engine produced (``None``: it returned none);
* ``ran``, ``copied``, ``instances``: per watched spec (``tape.py``), the calls of that
  code, the ``copy``/``deepcopy`` of its objects, and the objects of its classes that the
  call left alive, however they were made (``object.__new__``, unpickling); ``recompiled``:
  of those calls, the ones of a copy compiled again from the code's source text (renamed, or
  edited and ``exec``'d from a string);
* ``escapes``: threads and processes the answer started (the tape cannot follow them);
  ``other_threads``: threads started before the call that may work for it (one running the notebook's
  code at the call's start or end, an idle pool worker, a timer), or the answer waiting for another
  thread (``tape._threads_at_work``, ``tape._WAITS``); ``complex_code``: the answer's functions that make
  Python complex numbers (``complex``, ``1j``, ``.imag``: ``tape._makes_complex``; profiled methods only);
  ``exact_arithmetic``: for a method that names ``held:exact``, the packages of exact or extra-precision
  arithmetic (``decimal``, ``fractions``, ``mpmath``, ``sympy``, ``gmpy2``) whose Python code ran or whose numbers,
  modules, classes or functions the answer's own functions held when they returned (``tape._EXACT_ROOTS``);
  ``complex_values`` and ``own_arithmetic``, for a method that names a ``held:`` spec: complex numbers (Python,
  NumPy, torch) the answer's own functions held or received, or a watched function evaluated at (a complex step, a
  contour integral), and the classes of the answer's own whose arithmetic its code used (dual numbers: forward-mode
  AD written by hand) (``tape._complex_kind``, ``tape._own_arithmetic``; adversarial round 10);
  ``escapes`` also holds child processes that ran during the call however they were started, and ctypes looking
  up a C function (``tape._Processes``, ``tape._LIBRARY_LOOKUPS``);
  ``tape_intact``: no recorder was switched off by the answer;
* ``answer_kind``: ``"autograd.Function"`` for a ``torch.autograd.Function`` subclass, else
  ``"function"``; with ``own_backward_ops`` (ops run by that Function's own backward),
  ``small_steps`` (ops of its forward or backward whose output is an input moved by a small
  step, a difference quotient's point: ``tape._small_steps``) and, in ``grad_phase``,
  ``ctx_tensors`` (tensors kept as attributes of ``ctx`` rather than ``save_for_backward``);
* ``silent_writes``: tensor arguments (a module's parameters included) written behind
  their version counter's back: their values changed while the counter did not move (a
  write through ``.data``); and, for a method that asks for the write ledger
  (``WRITES_SPEC`` in its watch list: ``no_data_attribute``), any write into an
  argument's memory through a tensor that does not share its counter, judged when the op
  runs, so a later no-op in-place op (``p.data.sub_(...)`` then ``p.mul_(1.0)``) or a
  counter set by hand cannot hide it, or a change no dispatched op made (a NumPy view)
  (``_WriteLedger``);
* ``samplers_built`` / ``scalers_built``: ``DistributedSampler`` / ``GradScaler`` objects
  constructed through ``__init__``;
* ``tiny_engine_runs``: calls of the course's tiny engine's ``Value.backward``;
  ``tiny_backwards``: ``{label: n}`` distinct nodes whose ``_backward`` it ran;
  ``tiny_own_backwards``: of those, the nodes whose ``_backward`` is the answer's own
  closure (not one of the engine's own ops); ``tiny_missing_backwards``: nodes with
  parents whose ``_backward`` was still the do-nothing default (a forgotten
  ``out._backward = _backward``); ``tiny_orphans``: nodes whose own closure ran but that list no
  parent (``Value(t, (), "tanh")``); ``tiny_off_input``: calls of a function named by an
  ``args:`` spec (``args:math:tanh``), or of torch's op of the same name (``aten::tanh``,
  ``aten::exp_`` ...: ``_Points.dispatched``), at a point that is not the number held by an
  input of a node (or its negative or double: ``exp(-2u)``), such as a difference quotient's
  ``u + h`` or a complex step's ``u + ih``, and
  ``tiny_unseen``: calls of such a builtin that the profile hook counted but whose points were not
  recorded (a reference the recorder could not replace, ``_Points``);
* ``stepped_points``: calls of those functions (or ops) at points a small step from another call's
  point or from an argument's or output's values, ``u + h`` next to ``u - h`` or ``u``: a difference
  quotient, however its points were made (``_Points.stepped``);
* ``complex_outputs``: tensors with a complex dtype that ops produced (a complex step);
  ``work``: the elements of all the tensors ops produced, backward included, plus the multiply-adds of
  matrix products and convolutions (a numerical derivative's work grows with the parameters' count);
  ``input_shapes``: the shape of each tensor argument, in order;
* ``optimizer_moves``: ``{"steps", "still", "outside", "output"}``: optimizer steps seen, steps that
  left a parameter holding a ``.grad`` where it was, parameter changes made where no step ran, and
  whether the returned values are what a step left in a parameter (``tape._OptimizerMoves``);
* ``backward_rows``: ``{"totals", "runs"}``, for a method that names ``rows:`` specs: each data
  argument's row count, and per backward pass the rows of each that flowed into what it
  differentiated (``rows.py``).

With a method that names ``wrt:`` specs (``autograd_derivative``), the provenance ledger
(``provenance.py``) adds ``laundered``: ``{"gradient" | "weight" | "output": n}``, derivatives
worked out from the input's values outside autograd that reached a backward pass or the
output, and ``passes_linear_in_input``: backward passes that read nothing autograd recorded
from the input, counted only after its values went to Python (``tolist``, ``item``).

A method that needs the backward an answer's output gets (a custom ``Function``)
also reads ``facts["grad_phase"]``: the same facts, recorded while the checker
backpropagated through the output.
"""

import bisect
import collections
import contextlib
import importlib
import threading
import types

import torch
import torch.utils.data
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from .tape import Tape, Watchlist, _storage_key, _tensors

# A method whose watch list holds this spec asks for the write ledger (``_WriteLedger``); watching
# it also catches the answer setting a version counter by hand, which would hide a silent write.
WRITES_SPEC = "code:torch._C._autograd:_unsafe_set_version_counter"
VERSION_FORGERS = (WRITES_SPEC, "code:torch._C:_increment_version")

FACTS = ("engine_runs", "nested_engine_runs", "backward_ops", "backward_op_names", "forward_ad", "ops",
         "library_derivatives", "largest_numel", "largest_input_numel", "backward_largest", "output_from_engine", "ran", "copied",
         "recompiled", "instances", "escapes", "other_threads", "complex_code", "exact_arithmetic", "complex_values", "own_arithmetic", "tape_intact", "answer_kind", "own_backward_ops", "own_library_derivatives",
         "silent_writes", "samplers_built", "scalers_built", "tiny_engine_runs", "tiny_backwards",
         "tiny_own_backwards", "tiny_missing_backwards", "tiny_orphans", "tiny_off_input", "tiny_unseen", "complex_outputs",
         "small_steps", "stepped_points", "work", "input_shapes", "optimizer_moves", "backward_rows")


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

    def orphans(self):
        """Nodes whose own closure ran but that list no parent (``Value(t, (), "tanh")``): the engine
        reached them as the root's descendants, never the input their closure writes into."""
        return sum(own and not getattr(node, "parents", ()) for node, own in self._ran.values())

    def inputs(self):
        """The numbers held by the inputs (parents) of the nodes whose ``_backward`` ran (the engine's own too:
        its ``exp`` node evaluates ``math.exp`` at its input)."""
        found = set()
        for node, own in self._ran.values():
            for parent in getattr(node, "parents", ()):
                data = getattr(parent, "data", None)
                if isinstance(data, (int, float)):
                    found.add(float(data))
        return found


class _Points:
    """The points at which the watched functions (``args:math:tanh`` specs) were evaluated during the call.

    Each function is replaced, while installed, by a recorder that calls it unchanged: in its
    module, and where the answer holds it itself (its globals, defaults and closure cells: a
    ``from math import tanh`` made before the check).  A reference kept elsewhere (a lambda's
    default made at import time) is not replaced: its calls are not recorded here, but a builtin's
    calls are still counted by the tape's profile hook, and ``unseen`` tells them apart.
    """

    MAX_CALLS, MAX_VALUES = 4096, 64      # the record stays small whatever the answer does

    def __init__(self, targets, answer):
        self.calls, self.seen = [], collections.Counter()   # [(number, ...)], "module:name" -> recorded calls
        self.rounding = []                  # per call: its numbers' machine epsilon (float32 tensors round coarser)
        self.partners = []                  # [(numbers, epsilon)]: the call's arguments and outputs (``partner``)
        self._patched, self._functions = [], {}
        # torch's ops of the same names (``aten::tanh``, ``aten::tanh_``) are recorded where they are dispatched
        # (``tape._Ops``); an ``args:aten:sigmoid`` spec names an op alone
        self.ops = frozenset(f"aten::{name.partition(':')[2]}{tail}" for name in targets for tail in ("", "_"))
        if self.ops:        # any of them written as a power, ``torch.e ** u`` (adv-00-04-r8 F4, F5): its exponent too
            self.ops |= _POWERS
        for target in targets:
            module_name, _, name = target.partition(":")
            if module_name == "aten":
                continue
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue                    # not installed: the answer cannot call it either
            function = vars(module).get(name)  # only what the module holds itself can be replaced there
            if function is not None:
                self._functions[id(function)] = (target, function, module, name)
        self._answer = answer
        self.own = collections.defaultdict(list)    # id(code) -> the numbers the answer's own function was called at

    def own_call(self, key, value):
        """The answer's own function ``key`` was called at the number ``value`` (``tape.Tape._saw_point``)."""
        if key in self.own or len(self.own) < self.MAX_CALLS:
            calls = self.own[key]
            if len(calls) < self.MAX_CALLS:
                calls.append(value)

    def stencils(self, inputs):
        """Calls of one of the answer's own functions at ``u + k h`` for a node input ``u`` and two or more steps
        in the ratio of small whole numbers (``u + h`` and ``u - h``, ``u + h`` and ``u + 2h``): a difference
        quotient's stencil, whatever the function computes and however it was written.  A formula's helper is
        called at the input, or at a value such as ``tanh(u)`` whose distance from ``u`` is in no such ratio to
        another's."""
        found = 0
        for calls in self.own.values():
            points = sorted(set(calls))[:self.MAX_VALUES]
            for u in inputs:
                steps = [p - u for p in points if _ROUNDING * 2.0 ** -52 * (1 + abs(u)) < abs(p - u) <= _SHIFT]
                if any(_commensurate(a, b) for i, a in enumerate(steps) for b in steps[i + 1:]):
                    found += 1
                    break
        return found

    def _recorder(self, target, function):
        owner = threading.get_ident()           # another thread's calls (a kernel's own) are not the answer's

        def recorded(*args, **kwargs):
            if threading.get_ident() != owner:
                return function(*args, **kwargs)
            if len(self.calls) < self.MAX_CALLS:
                point = _point(args)        # logaddexp(0, a + h): the argument that holds the point
                self.calls.append(_numbers(point) if args else (complex("nan"),))
                self.rounding.append(_EPSILON[getattr(getattr(point, "dtype", None), "name", None)] if args else 0.0)
            self.seen[target] += 1
            return function(*args, **kwargs)
        return recorded

    def __enter__(self):
        recorders = {key: self._recorder(target, function) for key, (target, function, _, _) in self._functions.items()}
        for key, (_, _, module, name) in self._functions.items():
            self._replace(vars(module), name, recorders[key])
        for function in _functions_of(self._answer):
            if not recorders:
                break
            for name, value in list(function.__globals__.items()):
                if id(value) in recorders and value is self._functions[id(value)][1]:
                    self._replace(function.__globals__, name, recorders[id(value)])
            for cell in function.__closure__ or ():
                value = _cell_value(cell)
                if id(value) in recorders and value is self._functions[id(value)][1]:
                    self._patched.append((cell, "cell_contents", value, True))
                    cell.cell_contents = recorders[id(value)]
            if function.__defaults__ and any(id(v) in recorders for v in function.__defaults__):
                self._patched.append((function, "__defaults__", function.__defaults__, True))
                function.__defaults__ = tuple(recorders.get(id(v), v) if v is self._functions.get(id(v), (0, None))[1]
                                              else v for v in function.__defaults__)
        return self

    def _replace(self, namespace, name, recorder):
        self._patched.append((namespace, name, namespace[name], False))
        namespace[name] = recorder

    def __exit__(self, *exc_info):
        for owner, name, value, attribute in reversed(self._patched):
            if attribute:
                setattr(owner, name, value)
            else:
                owner[name] = value
        self._patched = []
        return False

    def dispatched(self, tensor):
        """A torch op of the watched functions (``aten::tanh`` ...) ran on ``tensor``: its point, as a call's."""
        if torch.is_tensor(tensor) and len(self.calls) < self.MAX_CALLS:
            with torch._C._DisableTorchDispatch():
                self.calls.append(_numbers(tensor))
                self.rounding.append(torch.finfo(tensor.dtype).eps if tensor.is_floating_point() else 0.0)

    def partner(self, tensors):
        """Values a difference quotient may step away from, whatever took them out of torch (``tolist``, ``float``,
        NumPy): the call's tensor arguments and what it returned (a Function's saved input or output)."""
        for tensor in tensors:
            if len(self.partners) < self.MAX_CALLS and torch.is_tensor(tensor) and tensor.is_floating_point():
                with torch._C._DisableTorchDispatch():
                    self.partners.append((_numbers(tensor.detach()), torch.finfo(tensor.dtype).eps))

    def complex_calls(self):
        """Recorded calls made at a complex point (``np.tanh(a + 1e-30j)``, a contour's points): no formula for a real
        function's derivative evaluates one, a complex step or a Cauchy integral does (adversarial round 10)."""
        return sum(any(number.imag != 0 for number in numbers) for numbers in self.calls)

    def stepped(self):
        """Recorded calls made at a point a small step away from another call's point: a difference quotient.

        A numerical derivative evaluates its function at two points a step ``h`` apart (``u + h`` and ``u - h``,
        or ``u + h`` and the ``u`` of the value), however the points were made (torch, NumPy, Python floats).
        Two calls of several numbers are a step apart when every entry moved by at most 0.1 % of ``1 + |u|`` and
        some entry by more than rounding (64 machine epsilons: a value computed twice in two orders, ``addmm``
        against ``mm`` then ``add``, differs by a few); a formula's points (``u``, ``-u``, ``2u``) never all lie
        that close.  One-number calls (a loop over ``tolist()``) are compared with every recorded number, and
        count only when at least half of them have such a neighbour: two different entries of a random tensor
        lie that close by chance now and then, a quotient's points always do.
        """
        vectors = [(i, numbers) for i, numbers in enumerate(self.calls) if len(numbers) > 1]
        found = set()
        for a, (i, first) in enumerate(vectors):
            for j, second in vectors[a + 1:]:
                epsilon = max(self.rounding[i], self.rounding[j])
                if len(first) == len(second) and (_a_step_apart(first, second, epsilon)
                                                  or _translated(first, second, epsilon)):
                    found.update((i, j))
            # a value taken out of torch (``x.numpy()``, ``tolist()``) and evaluated a small step away
            if any(len(first) == len(numbers) and _a_step_apart(first, numbers, max(self.rounding[i], epsilon))
                   for numbers, epsilon in self.partners):
                found.add(i)
        singles = [i for i, numbers in enumerate(self.calls) if len(numbers) == 1 and numbers[0].imag == 0]
        recorded = [(numbers, self.rounding[i]) for i, numbers in enumerate(self.calls)] + self.partners
        pool = sorted((n.real, epsilon) for numbers, epsilon in recorded for n in numbers
                      if n.imag == 0 and n.real == n.real)
        keys = [value for value, _ in pool]
        near = [i for i in singles if _has_neighbour(self.calls[i][0].real, self.rounding[i], pool, keys)]
        if len(near) >= 2 and 2 * len(near) >= len(singles):
            found.update(near)
        return len(found)

    def off(self, inputs):
        """Recorded calls at a point that is not one of ``inputs``, or its negative or double (``exp(-2u)`` in a
        formula for ``tanh(u)``): a real number equal to one of those, or to its float32 rounding (a torch
        tensor made from a Python float is float32)."""
        points = {k * u for u in inputs for k in (1.0, -1.0, 2.0, -2.0)}
        points |= {float(torch.tensor(p, dtype=torch.float32)) for p in points}
        return sum(1 for numbers in self.calls if not all(n.imag == 0 and n.real in points for n in numbers))


_EPSILON = collections.defaultdict(lambda: 2.0 ** -52, {"float32": 2.0 ** -23, "float16": 2.0 ** -10,
                                                       "bfloat16": 2.0 ** -7})   # NumPy's and torch's dtype names
_SHIFT = 1.0         # the largest step ``_translated`` judges (tanh's poles lie 1.57 from the real line)
_POWERS = frozenset(f"aten::{name}{tail}" for name in ("pow", "exp2", "float_power") for tail in ("", "_"))
_STEP, _ROUNDING = 1e-3, 64      # a step: at most 0.1 % of 1 + |u|, more than 64 epsilons (``tape._small_steps``)


def _a_step_apart(first, second, epsilon):
    """Every entry within a small step of its partner, and some beyond rounding."""
    moved = False
    for a, b in zip(first, second):
        if a.imag != b.imag or a.real != a.real or b.real != b.real:
            return False
        scale, step = 1 + abs(b.real), abs(a.real - b.real)
        if step > _STEP * scale:
            return False
        moved = moved or step > _ROUNDING * epsilon * scale
    return moved


def _translated(first, second, epsilon):
    """Every entry moved by the same amount ``c``, beyond rounding, with ``|c| <= 1``: ``f(u + h)`` next to ``f(u - h)``.

    A difference quotient extrapolated to step zero (Richardson: ``h`` = 1e-2, 5e-3, 2.5e-3, accurate to 1e-11,
    adv-00-04-r8 F3-F5) steps further than the 0.1 % of ``_a_step_apart``, but it still moves the whole point by one
    number.  A formula's points (``u``, ``-u``, ``2u``, ``tanh(u)``) differ by amounts that vary with the entry.
    """
    if len(first) < 2 or any(n.imag or m.imag or n.real != n.real or m.real != m.real
                             for n, m in zip(first, second)):
        return False
    shifts = [a.real - b.real for a, b in zip(first, second)]
    scale = 1 + max(abs(b.real) for b in second)
    spread = max(b.real for b in second) - min(b.real for b in second)
    rounding = _ROUNDING * epsilon * scale
    return (rounding < abs(shifts[0]) <= _SHIFT and spread > rounding
            and max(shifts) - min(shifts) <= rounding)


_STENCIL_RATIOS = sorted({a / b for a in range(-4, 5) for b in range(1, 5) if a})


def _commensurate(a, b):
    """``a / b`` is a ratio of small whole numbers (up to 4), to 1e-5: two steps of one stencil."""
    ratio = a / b
    return any(abs(ratio - r) <= 1e-5 * abs(r) for r in _STENCIL_RATIOS)


def _has_neighbour(value, epsilon, pool, keys):
    """Another recorded number within a small step of ``value``, beyond rounding."""
    scale = 1 + abs(value)
    for index in range(bisect.bisect_left(keys, value - _STEP * scale), len(pool)):
        other, other_epsilon = pool[index]
        step = abs(other - value)
        if other > value + _STEP * scale:
            return False
        if step > _ROUNDING * max(epsilon, other_epsilon) * scale:
            return True
    return False


def _point(args):
    """The positional argument a function was evaluated at: the first that holds several numbers, else the first."""
    for arg in args:
        if hasattr(arg, "__len__") and not isinstance(arg, (str, bytes)) and len(arg) > 1:
            return arg
    return args[0] if args else None


def _functions_of(answer):
    """The answer's own Python functions whose globals and closures may hold a watched function: the answer, or a
    ``Function`` subclass's ``forward``, ``backward`` and ``setup_context``."""
    if isinstance(answer, type):
        found = [getattr(vars(answer).get(name), "__func__", vars(answer).get(name))
                 for name in ("forward", "backward", "setup_context", "vjp")]
    else:
        found = [getattr(answer, "__func__", answer)]
    return [function for function in found if isinstance(function, types.FunctionType)]


def grad_phase_points(specs, answer):
    """A ``_Points`` for the backward the checker runs through a ``Function``'s output (``observe``), or ``None``."""
    targets = Watchlist.of(specs).points
    return _Points(targets, answer) if targets else None


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:                      # an empty cell
        return None


def _numbers(value):
    """The numbers ``value`` holds, as Python complex numbers (NaN for what is not a number)."""
    try:
        if hasattr(value, "tolist") and not isinstance(value, (int, float, complex)):
            value = value.tolist()
        flat = list(value) if isinstance(value, (list, tuple)) else [value]
        numbers = []
        while flat and len(numbers) < _Points.MAX_VALUES:
            item = flat.pop()
            if isinstance(item, (list, tuple)):
                flat += list(item)
            else:
                numbers.append(complex(item))
        return tuple(numbers) or (complex("nan"),)
    except (TypeError, ValueError, OverflowError):
        return (complex("nan"),)


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
    points = _Points(Watchlist.of(watchlist).points, answer)
    # the profile hook only for bans (a ``wrt:`` spec asks for the provenance ledger, not for it)
    tape = Tape(watchlist, own=function_class, profile=any(not s.startswith("wrt:") for s in watchlist),
                arguments=list(tensors))
    if Watchlist.of(watchlist).points:      # torch's tanh, exp, ... dispatched: their points too
        tape.points = points
    ledger = _WriteLedger(tensors) if WRITES_SPEC in watchlist else None
    try:
        # The ledger's mode goes on first: its entering and leaving happen outside the tape's profile hook.
        with samplers, scalers, tiny, points, (ledger if ledger is not None else contextlib.nullcontext()), tape:
            yield result
    finally:
        # With the ledger, its record replaces the counters' before and after: a dispatch mode
        # does not move the counters of ``_foreach_*_`` ops, which would read as silent writes.
        silent = ledger.silent_writes() if ledger is not None else _silent_writes(before)
        if tape.provenance is not None:
            tape.provenance.returned(_tensors(result.output))
        facts = tape.facts()
        if ledger is not None:
            facts["tape_intact"] = facts["tape_intact"] and ledger.intact
            _discount(facts["ran"], VERSION_FORGERS, ledger.own_counter_calls)
        result.facts = dict(facts,
                            output_from_engine=tape.output_from_engine(result.output),
                            largest_input_numel=max((t.numel() for t in tensors), default=0),
                            answer_kind="autograd.Function" if function_class else "function",
                            silent_writes=len(silent),
                            samplers_built=samplers.built, scalers_built=scalers.built,
                            tiny_engine_runs=tiny.runs, tiny_backwards=tiny.backwards(),
                            tiny_own_backwards=tiny.own(), tiny_missing_backwards=len(tiny._missing),
                            tiny_orphans=tiny.orphans(),
                            tiny_off_input=points.off(tiny.inputs()) + points.stencils(tiny.inputs()),
                            stepped_points=stepped(points, list(tensors) + _tensors(result.output)),
                            tiny_unseen=sum(max(0, facts["ran"].get(f"code:{target}", 0) - points.seen[target])
                                            for target in Watchlist.of(watchlist).points),
                            complex_values=with_complex_points(facts["complex_values"], points),
                            input_shapes=[list(t.shape) for t in tensors],
                            optimizer_moves=tape.moves.facts(result.output))


def with_complex_points(found, points):
    """``complex_values`` with, when a watched function (``args:`` specs) was called at a complex point, that too."""
    if points is not None and points.complex_calls():
        return sorted(set(found) | {"a complex point at which a watched function was evaluated"})[:8]
    return found


def stepped(points, partners):
    """``points.stepped()`` with ``partners`` (the call's tensor arguments and outputs) as values to step from."""
    if not points.calls:
        return 0
    points.partner(partners)
    return points.stepped()


def _discount(ran, specs, calls):
    """Take the ledger's own probes (one call of each of ``specs`` per probe) off what the answer ran."""
    for spec in specs:
        left = ran.get(spec, 0) - calls
        if left > 0:
            ran[spec] = left
        else:
            ran.pop(spec, None)


def _silent_writes(before):
    """Indices of the tensors whose values changed while their version counter did not move."""
    return {index for index, (tensor, version, value) in enumerate(before)
            if _changed(value, tensor) and tensor._version == version}


def _changed(value, tensor):
    return value.shape != tensor.shape or not _same_values(value, tensor.detach())


class _WriteLedger(TorchDispatchMode):
    """Every write into the arguments' memory, and whether each argument's version counter sees it.

    An op that writes a tensor in place (its schema marks the argument ``a!``: ``sub_``,
    ``copy_``, ``out=``, a ``_foreach_*_`` list) into an argument's storage is seen by
    autograd only if the tensor written shares the argument's version counter (the
    argument itself, a view, a ``detach()``); ``.data`` has a counter of its own.  That is
    decided when the op runs (``_shares_counter``), so no later move of the counter (a
    no-op in-place op, a counter set by hand) can hide it, and ``_foreach_*_`` ops, whose
    counters a dispatch mode does not move, are judged like any other.  A change that no
    dispatched op made (through a NumPy view, or ``p.data = ...``) shows as values that
    differ from those after the last seen write.  Either is a silent write.  The bookkeeping
    runs with no mode active, so the tape's op counts see only the answer's ops.
    """

    @classmethod
    def _should_skip_dynamo(cls):
        return False            # as the tape's mode: nothing compiles under it (tape._Ops)

    def __init__(self, tensors):
        super().__init__()
        self.tensors = list(tensors)
        self.values = [t.detach().clone() for t in self.tensors]
        self.silent = set()
        self.intact = True
        self.own_counter_calls = 0      # probes run: each calls both forgers' builtins once (``watch`` discounts them)
        self._writes = {}

    def __enter__(self):
        super().__enter__()
        return self

    def __exit__(self, *exc_info):
        stack = _get_current_dispatch_mode_stack()
        if self not in stack:           # the answer popped it: what it did next was not seen
            self.intact = False
            return False
        while _get_current_dispatch_mode_stack() and _get_current_dispatch_mode_stack()[-1] is not self:
            torch._C._pop_torch_dispatch_stack()   # a mode the answer left open
        return super().__exit__(*exc_info)

    def _written(self, func, args, kwargs):
        positions = self._writes.get(func)
        if positions is None:
            positions = self._writes[func] = tuple(
                (index, argument.name) for index, argument in enumerate(func._schema.arguments)
                if argument.alias_info is not None and argument.alias_info.is_write)
        found = []
        for index, name in positions:
            found += _tensors(args[index] if index < len(args) else kwargs.get(name))
        return found

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        written = self._written(func, args, kwargs)
        hits = []
        if written:
            with torch._C._DisableTorchDispatch():
                keyed = [(key[0], tensor) for key, tensor in zip(map(_storage_key, written), written) if key is not None]
                for index, argument in enumerate(self.tensors):
                    key = _storage_key(argument)
                    into = [tensor for storage, tensor in keyed if key is not None and storage == key[0]]
                    if into:
                        self._compare(index)
                        if not all(self._shares_counter(tensor, argument) for tensor in into):
                            self.silent.add(index)
                        hits.append(index)
        out = func(*args, **kwargs)
        if hits:
            with torch._C._DisableTorchDispatch():
                for index in hits:
                    self.values[index] = self.tensors[index].detach().clone()
        return out

    def _shares_counter(self, tensor, argument):
        """Whether a write through ``tensor`` moves ``argument``'s counter: move ``tensor``'s, look, put it back."""
        if tensor is argument:
            return True
        try:
            tensor_version, argument_version = tensor._version, argument._version
        except RuntimeError:            # an inference tensor has no counter to compare
            return True
        torch._C._increment_version([tensor])    # a list: a tensor itself would be iterated, row by row
        shared = argument._version != argument_version
        _set_version(tensor, tensor_version)
        self.own_counter_calls += 1
        return shared

    def _compare(self, index):
        if _changed(self.values[index], self.tensors[index]):   # changed since the last write we saw
            self.silent.add(index)

    def silent_writes(self):
        """Indices of the arguments written behind their counter's back."""
        for index in range(len(self.tensors)):
            self._compare(index)
        return set(self.silent)


def _setter_takes_sequences():
    try:
        torch._C._autograd._unsafe_set_version_counter((torch.zeros(()),), (0,))   # the signature from 2.6 on
        return True
    except TypeError:                                                           # 2.5: one tensor, one int
        return False


# Decided once, here: a failed try inside a check would be one more call the profile hook counts.
_SETTER_TAKES_SEQUENCES = _setter_takes_sequences()


def _set_version(tensor, version):
    if _SETTER_TAKES_SEQUENCES:
        torch._C._autograd._unsafe_set_version_counter((tensor,), (version,))
    else:
        torch._C._autograd._unsafe_set_version_counter(tensor, version)


def _same_values(a, b):
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same = same | (a.isnan() & b.isnan())
    return bool(same.all())
