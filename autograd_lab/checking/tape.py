"""The tape: what actually ran while an answer was called, recorded by the checker around the call.

Three recorders, each seeing what the others cannot:

* a ``TorchDispatchMode`` sees every aten op that ran, however it was reached (an
  alias, a copy of a function, ``torch.ops.aten...`` or a private kernel all dispatch
  the same op); ``torch._C._current_autograd_node()`` tells which ran inside the
  autograd engine's backward, and of which node; it follows where the engine's
  results went (a tensor computed from one is an *engine product*), the largest
  tensor any op produced, the *work* done (elements produced, plus the multiply-adds of
  matrix products and convolutions) and how many complex tensors ops produced (a complex step);
* a stand-in for the engine object that ``Tensor.backward``, ``torch.autograd.backward``
  and ``torch.autograd.grad`` call (and ``torch.func``'s ``grad``, ``vjp`` and ``jacrev``,
  which are built on them) counts backward passes and the passes started inside one;
* a profile hook (``sys.setprofile``, only when a method names code to watch: the bans;
  otherwise a ``TorchFunctionMode`` looks for dual tensors alone, which is cheaper while
  an answer imports a large module) sees every Python function and C builtin called in
  this thread.  A function is recognised by its code object, so an alias, a copy
  (``types.FunctionType(f.__code__, ...)``) or a recompiled copy of its source (under
  any name) is the same function, and so is code compiled from text that no file or
  notebook cell holds (``exec`` of ``inspect.getsource``, edited) when it keeps most
  of the function's names, variables and constants (``_recompiled``); a method that runs on an object made by ``object.__new__`` or
  ``copy.deepcopy`` is still that method.  It also sees forward-mode AD levels entered
  (``torch._C._enter_dual_level``: ``jvp``, ``jacfwd`` and dual tensors all need one),
  threads and processes started, and the recorders being switched off; where a method names a ``held:`` spec,
  the values the answer's own functions hold and receive (exact arithmetic, complex numbers, objects whose
  arithmetic is a class of the answer's own: ``Tape._saw_values``).

What it cannot see is listed in ``docs/authoring-exercises.md`` ("What the tape cannot
see"): code run in another thread or process (recorded as an *escape*), and code written
on purpose to rewrite the recorders inside the same process.

A *watch spec* is plain text, so that it travels in a student build:
``"op:aten::softplus_backward"`` (an aten op), ``"code:torch.optim"`` (every function
and method defined in a package), ``"code:torch.amp.grad_scaler:GradScaler"`` (a class:
all its methods), ``"code:torch.utils.checkpoint:checkpoint"`` (one function, or a
nested one by its qualified name), ``"code:torch._C:_enter_dual_level"`` (a builtin); ``"args:math:tanh"`` asks for the points a
function was evaluated at (``facts._Points``), not a count.
"""

import ast
import collections
import copy
import ctypes           # imported here so that its loader's builtins and code are known before an answer runs
import dis
import gc
import importlib
import linecache
import os
import re
import site
import sys
import sysconfig
import threading
import types

try:
    import resource     # POSIX: the counters of the child processes waited for (``_Processes``)
except ImportError:     # Windows
    resource = None

import torch
from torch.autograd.variable import Variable
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from .provenance import Provenance
from .rows import Rows

MAX_NAMES = 64          # distinct op names kept per table: a record stays small whatever ran
MAX_RUNS = 1024         # backward passes whose largest tensor is kept (``backward_largest``)
_COPY_MIN_NAMES = 8     # a recompiled copy is matched by its names only when they say something
# Code compiled from text that no file or cell holds (``exec``) is the watched function when at least this share
# of their names, variables and constants (Jaccard) agree.  Measured (round 5): the exec'd copies of
# DistributedSampler.__iter__ (renamed) and of optimizer_coverage (a line removed) share 1.0 and 0.94; the
# references and eleven hand-written answers of 07.coverage and 08.shard at most 0.29 (the tests keep both).
_RECOMPILED_SHARE = 0.6


# --- what to watch: specs resolved to live objects ------------------------------------------

def spec_of(thing):
    """The watch spec of a module, class, function, builtin, aten op or spec text."""
    if isinstance(thing, str):
        if thing.startswith(("op:", "code:")):
            return thing
        if "::" in thing:
            return f"op:{thing}"
        return f"code:{thing}"
    if isinstance(thing, torch._ops.OpOverloadPacket):
        return f"op:{thing._qualified_op_name}"
    if isinstance(thing, torch._ops.OpOverload):
        return f"op:{thing._schema.name}"
    if isinstance(thing, types.ModuleType):
        return f"code:{thing.__name__}"
    if isinstance(thing, types.BuiltinFunctionType):
        module = getattr(thing, "__module__", None) or getattr(getattr(thing, "__self__", None), "__name__", None)
        if module is None or not isinstance(module, str):
            raise ValueError(f"cannot name the builtin {thing!r}: give its spec as 'code:module:name'")
        return f"code:{module}:{thing.__name__}"
    thing = _innermost(thing)
    if isinstance(thing, (type, types.FunctionType)):
        return f"code:{thing.__module__}:{thing.__qualname__}"
    raise TypeError(f"cannot watch {thing!r}: give a module, class, function, builtin, aten op or spec text")


def _innermost(function):
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return function


class Watchlist:
    """Specs resolved once per process: code objects, builtins, classes and op names to count."""

    _cache = {}

    def __init__(self, specs):
        self.specs = tuple(sorted(set(specs)))
        self.code = {}          # id(code) -> [spec]
        self.copies = {}        # signature -> [spec]: copies recompiled from the source, under any name
        self.tokens = []        # [(tokens, spec)]: to recognise an edited copy compiled from text (``_recompiled``)
        self.files = set()      # the watched code's files: code compiled under one of their names is looked at
        self.builtins = {}      # id(builtin) -> [spec]
        self.classes = {}       # class -> spec
        self.ops = {}           # "aten::name" -> spec
        self.wrt = ()           # "wrt:0": the flat tensor arguments whose derivative must come from autograd
        self.rows = ()          # "rows:1": the flat tensor arguments (data) whose rows each backward pass reads
        self.points = ()        # "args:math:tanh": functions whose arguments are recorded (``facts._Points``)
        self.held = False       # "held:exact": the values the answer's code holds are looked at (``_exact_kind``)
        self._keep = []         # the watched objects stay alive, so their ids stay theirs
        for spec in self.specs:
            self._add(spec)

    @classmethod
    def of(cls, specs):
        key = tuple(sorted(set(specs)))
        if key not in cls._cache:
            cls._cache[key] = cls(key)
        return cls._cache[key]

    def _add(self, spec):
        kind, _, target = spec.partition(":")
        if kind == "wrt":       # not code to watch: asks for the provenance ledger (``provenance.py``)
            self.wrt = tuple(sorted(set(self.wrt) | {int(target)}))
            return
        if kind == "rows":      # not code to watch: the data arguments whose rows each backward pass reads (``rows.py``)
            self.rows = tuple(sorted(set(self.rows) | {int(target)}))
            return
        if kind == "op":
            self.ops[target] = spec
            return
        if kind == "held":      # not code to watch: exact or extra-precision numbers held (``Tape._saw_values``)
            self.held = True
            return
        if kind == "args":      # not counted: the points it is evaluated at are recorded (``facts._Points``)
            self.points = tuple(sorted(set(self.points) | {target}))
            return
        if kind != "code":
            raise ValueError(f"unknown watch spec {spec!r}: it starts with 'op:' or 'code:'")
        module_name, _, qualname = target.partition(":")
        for thing in _resolve(module_name, qualname):
            if isinstance(thing, types.BuiltinFunctionType):
                self.builtins.setdefault(id(thing), []).append(spec)
                self._keep.append(thing)
                continue
            if isinstance(thing, type) and qualname:   # a class named by the spec: its objects are watched too
                self.classes[thing] = spec
            for code in _code_objects(thing):
                self.code.setdefault(id(code), []).append(spec)
                self._keep.append(code)
                if len(code.co_names) + len(code.co_varnames) >= _COPY_MIN_NAMES:
                    self.copies.setdefault(_signature(code), []).append(spec)
                    self.tokens.append((_tokens(code), spec))
                    self.files.add(code.co_filename)


def _resolve(module_name, qualname):
    """The live objects a spec names (a package: every module of it that is imported or importable)."""
    try:
        module = importlib.import_module(module_name)
    except Exception:                   # ImportError, or a build without torch.distributed that raises otherwise
        return []                       # not in this torch: nothing of it can run either
    if qualname:
        return _by_qualname(module, qualname)
    modules = [m for name, m in list(sys.modules.items())
               if m is not None and (name == module_name or name.startswith(module_name + "."))]
    found = []
    for each in modules:
        found += [value for value in list(vars(each).values())
                  if isinstance(value, (type, types.FunctionType)) and getattr(value, "__module__", None) == each.__name__]
    return found


def _by_qualname(module, qualname):
    thing = module
    for part in qualname.split("."):
        if part == "<locals>":          # a nested function: found by its code's qualified name
            return _nested(module, qualname)
        thing = getattr(thing, part, None)
        if thing is None:
            return []
    return [_innermost(thing)]


def _nested(module, qualname):
    outer = qualname.split(".<locals>.")[0]
    found = [code for thing in _by_qualname(module, outer) for code in _code_objects(thing)
             if getattr(code, "co_qualname", code.co_name) == qualname or
             (not hasattr(code, "co_qualname") and code.co_name == qualname.rsplit(".", 1)[-1])]
    return found


def _signature(code):
    """What a copy recompiled from a function's source keeps (its bytecode may differ between compilers)."""
    consts = tuple(c for c in code.co_consts if not isinstance(c, types.CodeType))
    return code.co_argcount, code.co_varnames, code.co_names, consts


def _tokens(code):
    """The names, variables and constants of a code object, as a set (an edited copy keeps most of them)."""
    consts = (repr(c) for c in code.co_consts if not isinstance(c, types.CodeType) and c is not None)
    return frozenset(code.co_names) | frozenset(code.co_varnames) | frozenset(consts)


_ON_DISK = {}


def _text_unseen(filename):
    """True for code compiled from text that no file or notebook cell holds (``exec`` of a string)."""
    if filename in linecache.cache:     # a notebook cell (IPython registers each), a shipped function
        return False
    on_disk = _ON_DISK.get(filename)
    if on_disk is None:
        on_disk = _ON_DISK[filename] = os.path.isfile(filename)
    return not on_disk


def _recompiled(watchlist, code):
    """The specs whose function ``code`` is a copy of: the same signature under any name, or, for code
    compiled from text no file holds (or under a watched file's name), most of the same names."""
    if len(code.co_names) + len(code.co_varnames) < _COPY_MIN_NAMES:
        return ()
    specs = watchlist.copies.get(_signature(code))
    if specs:
        return specs
    if not watchlist.tokens or not (code.co_filename in watchlist.files or _text_unseen(code.co_filename)):
        return ()
    mine = _tokens(code)
    return tuple({spec for tokens, spec in watchlist.tokens
                  if len(mine & tokens) >= _RECOMPILED_SHARE * len(mine | tokens)})


def _code_objects(thing):
    """Every code object of a function or class (methods, properties, nested functions)."""
    if isinstance(thing, types.CodeType):
        roots = [thing]
    elif isinstance(thing, types.FunctionType):
        roots = [_innermost(thing).__code__]
    elif isinstance(thing, type):
        roots = []
        for value in vars(thing).values():
            value = getattr(value, "__func__", value)                 # staticmethod, classmethod
            if getattr(value, "__module__", thing.__module__) != thing.__module__:
                continue        # put there from elsewhere (an Enum's __new__ is enum.py's, run by every Enum)
            if isinstance(value, property):
                roots += [f.__code__ for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
            elif isinstance(value, types.FunctionType):
                inner = _innermost(value)
                if inner.__code__.co_filename == value.__code__.co_filename or inner is value:
                    roots.append(inner.__code__)
    else:
        return []
    found, stack = [], list(roots)
    while stack:
        code = stack.pop()
        found.append(code)
        stack += [const for const in code.co_consts if isinstance(const, types.CodeType)]
    return found


# --- the dispatch mode ------------------------------------------------------------------

class _Ops(TorchDispatchMode):
    """Counts the aten ops that ran, inside or outside the engine, and follows the engine's products."""

    @classmethod
    def _should_skip_dynamo(cls):
        # torch >= 2.13 wraps a mode's __torch_dispatch__ to keep torch.compile out of it, and the
        # wrapper imports torch._dynamo on first use (2 to 6 s): nothing compiles under this mode.
        return False

    def __init__(self, tape):
        super().__init__()
        self.tape = tape

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        node = torch._C._current_autograd_node()
        grad_on = torch.is_grad_enabled()
        tape = self.tape
        if tape.provenance is not None:     # memory written outside torch since the last op is judged before it is read
            tape.provenance.reading(_tensors((args, kwargs)))
        out = func(*args, **kwargs)
        name = tape.op_name(func)
        outputs = _tensors(out)
        if tape.provenance is not None:
            if node is not None:
                tape.provenance.backward(_tensors((args, kwargs)), outputs)
            else:
                tape.provenance.forward(name, _tensors((args, kwargs)), outputs, grad_on, args)
        if tape.rows is not None and node is None:    # a gradient is judged by the ledger, not as data
            tape.rows.forward(name, _tensors((args, kwargs)), outputs, args)
        if tape.points is not None and name in tape.points.ops and args and (
                node is None or (tape.own is not None and getattr(node, "_forward_cls", None) is tape.own)):
            point = _evaluated_at(name, args)
            if point is not None:
                tape.points.dispatched(point)     # the answer's own backward evaluates there too
        if node is not None:
            tape.count(tape.backward_ops, name)
            tape.taint(outputs)
            if tape.own is not None and getattr(node, "_forward_cls", None) is tape.own:
                tape.own_backward_ops += 1
                tape.own_library_derivatives += name.endswith("_backward")
                tape.small_steps += _small_steps(name, _tensors((args, kwargs)), outputs)
        else:
            tape.count(tape.ops, name)
            if tape.own is not None:        # the Function's forward: a point saved for a difference quotient
                tape.small_steps += _small_steps(name, _tensors((args, kwargs)), outputs)
            if tape.tainted and any(tape.is_tainted(t) for t in _tensors((args, kwargs))):
                tape.taint(outputs)
        spec = tape.watchlist.ops.get(name)
        if spec is not None:
            tape.ran[spec] += 1
        contracted = _CONTRACTIONS.get(name)
        if contracted is not None and outputs:
            tape.work += outputs[0].numel() * _contracted(contracted, args)
        if name.endswith("_backward") and not name.startswith("aten::_amp"):
            tape.library_derivatives += 1
        for tensor in outputs:
            tape.largest = max(tape.largest, tensor.numel())
            tape.complex_outputs += tensor.is_complex()
            tape.work += tensor.numel()
            if node is not None:
                tape.run_largest = max(tape.run_largest, tensor.numel())
        return out


# Ops that contract a dimension: each output element costs that dimension's length in multiply-adds
# (``work``). ``(argument, dimension)`` of the contracted length; a convolution's is its weight's numel per output
# channel.
_CONTRACTIONS = {"aten::mm": (0, -1), "aten::addmm": (1, -1), "aten::bmm": (0, -1), "aten::baddbmm": (1, -1),
                 "aten::mv": (0, -1), "aten::addmv": (1, -1), "aten::dot": (0, -1), "aten::vdot": (0, -1),
                 "aten::convolution": (1, None), "aten::_convolution": (1, None)}


def _contracted(where, args):
    index, dim = where
    try:
        tensor = args[index]
        if dim is None:
            return max(1, tensor.numel() // max(1, tensor.shape[0]))
        return max(1, tensor.shape[dim])
    except (IndexError, AttributeError, TypeError, RuntimeError):
        return 1


class _DualTensors(TorchFunctionMode):
    """Counts dual tensors made (``_make_dual``: every forward-mode AD makes one), when no profile hook runs.

    For the provenance ledger it also tells which ops run inside a ``torch.func`` transform:
    there the dispatch mode sees the unwrapped tensors, whose ``requires_grad`` says nothing.
    """

    def __init__(self, tape, count_duals=True):
        super().__init__()
        self.tape, self.count_duals = tape, count_duals

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        if self.count_duals and getattr(func, "__name__", "") == "_make_dual":
            self.tape.dual_levels += 1
        ledger = self.tape.provenance
        name = getattr(func, "__name__", "")
        if self.tape.rows is not None and name in _EXPORTS and args and torch.is_tensor(args[0]):
            self.tape.rows.exporting(args[0])
        if ledger is not None and name in _EXPORTS and args and torch.is_tensor(args[0]):
            ledger.exporting(args[0])
        if (ledger is not None and name in _ADDRESSES and args and torch.is_tensor(args[0])
                and not _is_libraries(sys._getframe(1))):
            ledger.exporting(args[0])       # the answer's own code takes the memory's address: its values can leave
        if ledger is not None and name == "_make_dual":
            tangent = args[1] if len(args) > 1 else (kwargs or {}).get("tangent")
            ledger.seeded(tangent)
            dual = self._call(ledger, func, args, kwargs)
            ledger.made_dual(dual, tangent)
            return dual
        # .detach() and .data seen where the answer calls them (autograd's own detaches, when it
        # saves a result for backward, dispatch the same aten op and must not count)
        if ledger is not None and (name == "detach" or name == "__get__" and getattr(func, "__self__", None) is _DATA):
            result = self._call(ledger, func, args, kwargs)
            ledger.cut_off([result])
            return result
        if ledger is not None and name == "register_hook" and args and torch.is_tensor(args[0]):
            ledger.hooked(args[0])
        if ledger is not None and name == "_unpack_dual":
            result = self._call(ledger, func, args, kwargs)
            ledger.unpacked(result[1])
            return result
        return self._call(ledger, func, args, kwargs)

    @staticmethod
    def _call(ledger, func, args, kwargs):
        if ledger is None:
            return func(*args, **(kwargs or {}))
        # Inside a transform or a dual level, whether this call is differentiated there: the ops it dispatches
        # are recorded only then (adv-00-04-r8 F1: `3 * x ** 2` computed in a dual level from a tensor that
        # carries no tangent is a constant to forward mode, as a detached value is to backward).
        ledger.calls.append(ledger.differentiating(lambda: _tensors((args, kwargs))))
        transform = _functorch_level() is not None
        ledger.in_transform += transform
        try:
            return func(*args, **(kwargs or {}))
        finally:
            ledger.in_transform -= transform
            ledger.calls.pop()


_functorch_level = torch._C._functorch.maybe_current_level
_DATA = torch.Tensor.data               # its ``__get__`` is what ``.data`` calls
_EXPORTS = frozenset(("tolist", "numpy", "item", "__float__", "__int__", "__index__", "__complex__", "__array__"))
# Where the answer's own code reaches a tensor's memory (``ctypes.string_at(x.data_ptr(), n)``, the storage's bytes).
_ADDRESSES = frozenset(("data_ptr", "untyped_storage", "storage", "_typed_storage", "__dlpack__"))


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _storage_key(tensor):
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):   # sparse and other layouts without one
        return None
    return storage._cdata, storage


def _evaluated_at(name, args):
    """The tensor a watched op evaluates its function at: its only tensor, or for ``e ** u`` (``pow`` with a
    number or a one-number tensor as the base) the exponent, the larger of the two.  ``None`` for a power with a
    plain number as its exponent (``s ** 2``): a polynomial of a formula, no exponential stepped through (a
    correct ``4 / (exp(u) + exp(-u)) ** 2`` was refused as a difference quotient)."""
    if "pow" in name and len(args) > 1 and not torch.is_tensor(args[1]):
        return None
    tensors = [arg for arg in args[:2] if torch.is_tensor(arg)]
    if not tensors:
        return args[0]
    return max(reversed(tensors), key=lambda tensor: tensor.numel())


# Ops that copy or convert without choosing a point: a float32 round trip moves values by its rounding.
_CONVERSIONS = frozenset(f"aten::{name}" for name in ("_to_copy", "to", "clone", "copy_", "_copy_from", "lift_fresh",
                                                      "lift_fresh_copy", "detach", "alias", "contiguous"))
_SMALL_STEP = 1e-3      # relative to 1 + |x|: a difference quotient's step is far smaller, a formula's changes far larger


def _small_steps(name, inputs, outputs):
    """How many outputs are one of the op's inputs moved by a small step: x + h, x * (1 + h), e^x * e^h.

    The point a difference quotient evaluates at, next to the point it was given; no formula for a
    derivative moves every entry of a value by less than 0.1 % and some by more than rounding.
    """
    if name in _CONVERSIONS:
        return 0
    found = 0
    with torch._C._DisableTorchDispatch():
        for out in outputs:
            if not out.is_floating_point() or out.numel() < 2:
                continue
            for source in inputs:
                if source is out or source.shape != out.shape or source.dtype != out.dtype:
                    continue
                scale = 1 + source.detach().abs()
                step = (out.detach() - source.detach()).abs()
                # beyond rounding (two equal formulas, ``where`` picking one, differ by a few ulps)
                if bool((step <= _SMALL_STEP * scale).all()) and bool((step > 64 * torch.finfo(out.dtype).eps * scale).any()):
                    found += 1
                    break
    return found


# --- the engine stand-in ----------------------------------------------------------------

class _CountingEngine:
    """Stands in for ``Variable._execution_engine``: counts backward passes, delegates the rest."""

    def __init__(self, engine, tape):
        self._engine, self._tape = engine, tape

    def run_backward(self, *args, **kwargs):
        tape = self._tape
        tape.engine_runs += 1
        if tape.engine_depth:
            tape.nested_engine_runs += 1
        tape.engine_depth += 1
        outer, tape.run_largest = tape.run_largest, 0     # this pass's own largest tensor (a nested pass has its own)
        if tape.provenance is not None:
            tape.provenance.start_run(_tensors(args[1] if len(args) > 1 else kwargs.get("grad_tensors")))
        if tape.rows is not None:       # the losses (roots) and their gradient=: what this pass differentiates
            tape.rows.start_run(_tensors(args[0] if args else kwargs.get("tensors"))
                                + _tensors(args[1] if len(args) > 1 else kwargs.get("grad_tensors")))
        try:
            result = self._engine.run_backward(*args, **kwargs)
        finally:
            tape.engine_depth -= 1
            if tape.provenance is not None:
                tape.provenance.end_run()
            if len(tape.run_sizes) < MAX_RUNS:
                tape.run_sizes.append(tape.run_largest)
            tape.run_largest = max(outer, tape.run_largest)
        tape.taint(_tensors(result))            # torch.autograd.grad's results
        if tape.provenance is not None:         # each the gradient of the input at its place
            tape.provenance.gradients(_tensors(args[4] if len(args) > 4 else kwargs.get("inputs")), _tensors(result))
        return result

    def __getattr__(self, name):
        return getattr(self._engine, name)


# --- the profile hook -------------------------------------------------------------------

def _builtins(names):
    found = {}
    for dotted in names:
        module_name, _, attribute = dotted.rpartition(".")
        module = sys.modules.get(module_name)
        thing = getattr(module, attribute, None) if module is not None else None
        if thing is not None:
            found[id(thing)] = (dotted, thing)
    return found


_ESCAPES = _builtins(["_thread.start_new_thread", "_thread.start_joinable_thread", "os.fork", "os.forkpty",
                      "os.posix_spawn", "os.posix_spawnp", "os.system", "os.execv", "os.execve",
                      "_posixsubprocess.fork_exec", "_ctypes.dlopen", "_ctypes.dlsym"])
# A C function looked up by ctypes (``ctypes.CDLL(None).system``: libc's ``system()`` starts a shell, adversarial
# round 8, 05n_ctypes); the lookup itself is C, its Python entry points are these.
_LIBRARY_LOOKUPS = {id(ctypes.CDLL.__getattr__.__code__): "ctypes (a C library's function looked up)",
                    id(ctypes.CDLL.__getitem__.__code__): "ctypes (a C library's function looked up)"}
_SWITCH_OFFS = _builtins(["sys.setprofile", "torch._C._unset_dispatch_mode", "torch._C._set_dispatch_mode"])
# A dispatch mode of the answer's own (FlopCounterMode, selective checkpointing's context_fn, checkpoint's
# debug=True) pushes itself and pops itself: only a pop beyond the answer's own pushes takes off a recorder.
_MODE_PUSHES = _builtins(["torch._C._push_on_torch_dispatch_stack"])
_MODE_POPS = _builtins(["torch._C._pop_torch_dispatch_stack"])
_GC_CALLS = _builtins(["gc.collect", "gc.enable", "gc.freeze"])   # would hide the objects the call made
_DUAL_LEVELS = _builtins(["torch._C._enter_dual_level"])
_COPIES = {id(copy.deepcopy.__code__), id(copy.copy.__code__)}
# Guards that switch the recorders off around a block (Python dispatch, torch-function modes, any
# dispatch key).  Entering one constructs a C type, which no profile event reports, so what the tape can
# see is the answer's own code naming one (as an attribute or a string); torch's code and the course's
# use them for their own bookkeeping and are not looked at.
_GUARDS = frozenset({"_DisableTorchDispatch", "DisableTorchFunction", "_ExcludeDispatchKeyGuard",
                     "_dispatch_tls_set_dispatch_key_excluded", "_dispatch_tls_set_dispatch_key_included"})
# Installed packages live in the interpreter's own folders and the site folders (Debian's and Colab's
# dist-packages).  Not the user's site folder (`pip install --user`): the grader's sandbox lets a
# submission write there, so code it put there would pass for a library's.
_LIBRARY_FOLDERS = tuple(sorted({os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                                 os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
                                 *(sysconfig.get_paths()[key] + os.sep for key in ("stdlib", "purelib", "platlib")),
                                 *(folder + os.sep for folder in site.getsitepackages())}))


def _is_library(code):
    return os.path.abspath(code.co_filename).startswith(_LIBRARY_FOLDERS)


def is_library_file(path):
    """Whether the tape counts code from file ``path`` as an installed library's (``_LIBRARY_FOLDERS``).

    ``autograd-lab doctor`` asks it where the kernel's own packages are: installed elsewhere (``pip install
    --user``, ``--target``, ``PYTHONPATH``), the kernel's threads look like the notebook's (``_threads_at_work``)."""
    return os.path.abspath(path).startswith(_LIBRARY_FOLDERS)


def _is_namedtuple_new(frame):
    """A ``collections.namedtuple``'s ``__new__`` (compiled from text, so it has no file: torch's printing
    makes ``UnpackedDualTensor``s)."""
    return frame.f_code.co_filename == "<string>" and frame.f_globals.get("__name__", "").startswith("namedtuple_")


_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_PRINTING = (os.path.join(_TORCH, "utils", "_python_dispatch.py"), "_disable_current_modes")
_TENSOR_STR = os.path.join(_TORCH, "_tensor_str.py")
_TENSOR_STR_FILE = torch._tensor_str.__file__     # as code objects spell it (no abspath per profile event)


def _inside_printing(frame, depth=4):
    """Whether ``frame`` is torch's tensor printing (``torch/_tensor_str.py``) or code it called."""
    while frame is not None and depth:
        if frame.f_code.co_filename == _TENSOR_STR_FILE:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _from_tensor_printing(frame, depth=6):
    """Whether a dispatch-stack pop or push is torch's tensor printing taking the modes off and putting them
    back (``Tensor.__repr__`` formats the values inside ``_disable_current_modes()``): a student's debugging
    ``print`` is not a recorder switched off.  Both frames are torch's own files, which an answer cannot edit."""
    seen_helper = False
    while frame is not None and depth:
        where = (os.path.abspath(frame.f_code.co_filename), frame.f_code.co_name)
        seen_helper = seen_helper or where == _PRINTING
        if seen_helper and where[0] == _TENSOR_STR:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


# Another thread can do the answer's work out of sight: the dispatch mode, the profile hook and the engine's
# stand-in belong to the answer's thread (or were bypassed by a reference taken before), so a worker the notebook
# started before check() can run autograd for an answer that only talks to a queue (adversarial round 7, 02-2).
# Deterministic, never timed: at the call's start and end, another thread whose stack holds code that is no
# library's (the notebook's), an idle pool worker or a timer (they run what they are given), and, during the
# call, the answer itself waiting for another thread (Condition.wait under queue.get, Event.wait, Future.result;
# Thread.join) are facts.  The kernel's threads (IOPub, heartbeat, control, history, tqdm's monitor) run only
# library code; ipykernel's own Event.wait when a print is flushed is library code waiting, not the answer.
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_POOL_WORKERS = {(os.path.join(_STDLIB, "concurrent", "futures", "thread.py"), "_worker"),
                 (os.path.join(_STDLIB, "multiprocessing", "pool.py"), "worker")}
_WAITS = {id(threading.Condition.wait.__code__): "waited for another thread (queue.get, Event.wait, Future.result)",
          id(threading.Thread.join.__code__): "waited for another thread (Thread.join)"}
_WAIT_HELPERS = tuple(os.path.join(_STDLIB, name) for name in (
    "threading.py", "queue.py", os.path.join("concurrent", "futures", ""), os.path.join("multiprocessing", "")))


def _is_libraries(frame):
    code = frame.f_code
    return code.co_filename.startswith("<frozen") or _is_library(code) or _is_namedtuple_new(frame)


def _threads_at_work():
    """Other live threads that may run the notebook's code while the answer runs (``_WAITS``' comment)."""
    found, me = [], threading.get_ident()
    threads = {thread.ident: thread for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        thread = threads.get(ident)
        label = f"thread {thread.name!r}" if thread is not None else f"thread {ident}"
        if isinstance(thread, threading.Timer):
            found.append(f"{label} (a timer)")
            continue
        while frame is not None:
            where = (os.path.abspath(frame.f_code.co_filename), frame.f_code.co_name)
            if where in _POOL_WORKERS:
                found.append(f"{label} (a pool worker)")
                break
            if not _is_libraries(frame):
                found.append(f"{label} (running {frame.f_code.co_name})")
                break
            frame = frame.f_back
    return found


def _waiter(frame):
    """Whether the frame that called a wait (``_WAITS``), past the thread and queue helpers, is the answer's."""
    frame = frame.f_back
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_WAIT_HELPERS):
        frame = frame.f_back
    return frame is not None and not _is_libraries(frame)


def _makes_complex(code, frame):
    """Whether the answer's own ``code`` makes Python complex numbers (``complex(...)``, ``1j``, ``.imag``): a
    complex step through the builtin ``**`` or arithmetic is an operator no recorder sees (round 7, 01-2).
    Code compiled from text (``<string>``) that a library calls is the library's (mpmath generates functions)."""
    if _is_libraries(frame):
        return False
    if code.co_filename.startswith("<") and frame.f_back is not None and _is_libraries(frame.f_back):
        return False
    return bool({"complex", "imag"}.intersection(code.co_names)) or any(isinstance(c, complex) for c in code.co_consts)


def _names_a_guard(code):
    """The guard the answer's own ``code`` names, or None (library code is not looked at)."""
    if _is_library(code):
        return None
    named = _GUARDS.intersection(code.co_names) or _GUARDS.intersection(
        c for c in code.co_consts if isinstance(c, str))
    return f"torch._C.{min(named)}" if named else None


# Exact or extra-precision arithmetic: a difference quotient in 50-digit ``decimal`` (or ``fractions``, mpmath) is
# as accurate as a formula, so no tolerance tells it apart (adversarial round 8: full marks in 01.tiny_tanh,
# 02.softplus, 02.mlp_backward); a tanh', sigmoid or chain rule never needs it.  Seen where a method asks
# (``held:exact``): the Python code of these packages running, and numbers of theirs (or the modules, classes and
# functions themselves) held by the answer's own code, in its locals or return values (``Tape._saw_values``):
# ``decimal`` is C, its arithmetic and ``Decimal(x)`` make no call a profile hook reports.
_EXACT_ROOTS = frozenset({"decimal", "_decimal", "_pydecimal", "fractions", "mpmath", "sympy", "gmpy2"})
_EXACT_LABELS = {"_decimal": "decimal", "_pydecimal": "decimal"}


def _exact_kind(value):
    """The package (``decimal``, ``fractions``, ``mpmath``...) of a number, module, class or function of exact or
    extra-precision arithmetic, else ``None``."""
    kind = type(value)
    if kind is types.ModuleType:
        name = value.__name__
    elif isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        name = getattr(value, "__module__", None)
    else:
        name = kind.__module__
    return _exact_package(name)


def _exact_package(module_name):
    root = module_name.partition(".")[0] if isinstance(module_name, str) else None
    return _EXACT_LABELS.get(root, root) if root in _EXACT_ROOTS else None


def _with_items(value, most=8):
    """``value`` and, for a list, tuple, set or dict, its first few items (values)."""
    yield value
    if isinstance(value, dict):
        value = value.values()
    if isinstance(value, (list, tuple, set, frozenset, type({}.values()))):
        for index, item in enumerate(value):
            if index >= most:
                break
            yield item


# Complex numbers and the arithmetic of the answer's own classes (adversarial round 10, adv-00-04-r9 F1-F8: a
# complex step or a Cauchy contour integral through a home-made Taylor ``exp`` on Python complex numbers, the unit
# from ``np.emath.sqrt(-1.0)`` and ``.imag`` read with ``getattr``; the same in NumPy complex arrays; dual numbers in
# a 12-line class of the answer's own: full marks in 01.tiny_tanh, 02.mlp_backward and 02.softplus).  A derivative
# worked out as a formula needs neither, so where a method asks (``held:``) the tape looks at the *values*, not at
# the names that made them: what the answer's own functions hold when they return (locals, closure cells, the globals
# their code names, the value returned) and what any Python function returns into the answer's code.  Complex: a
# Python ``complex``, a NumPy complex scalar or array, a complex tensor.  Arithmetic of its own: an object whose class
# takes its arithmetic (``__add__``, ``__mul__``, ``__truediv__``..., NumPy's and torch's overloading protocols) from
# code of the answer's own (forward-mode AD written by hand: the quotient rule in ``__truediv__`` differentiates).
# Only types are read (``type(value)``, the class dictionaries, C getters): no code of the answer's runs in the hook.
_ARITHMETIC = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
               "__pow__", "__rpow__", "__neg__", "__matmul__", "__rmatmul__", "__array_ufunc__", "__array_function__",
               "__torch_function__", "__torch_dispatch__")
_MRO = type.__dict__["__mro__"].__get__
_CLASS_DICT = type.__dict__["__dict__"].__get__
_QUALNAME = type.__dict__["__qualname__"].__get__


_GLOBALS_READ = {}


def _globals_read(code):
    """The global names ``code`` loads (not its attribute names, which ``co_names`` also holds), once per code."""
    found = _GLOBALS_READ.get(code)
    if found is None:
        found = _GLOBALS_READ[code] = tuple({instruction.argval for instruction in dis.get_instructions(code)
                                             if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME")})
    return found


def _complex_kind(value):
    """What kind of complex number ``value`` is (``"a Python complex number"``, ``"a NumPy complex array"``...), or
    ``None``.  Read from its type and C getters only."""
    kind = type(value)
    if kind is complex:
        return "a Python complex number"
    numpy = sys.modules.get("numpy")
    if numpy is not None and issubclass(kind, (numpy.ndarray, numpy.generic)):
        array = issubclass(kind, numpy.ndarray)
        dtype = (numpy.ndarray if array else numpy.generic).__dict__["dtype"].__get__(value)
        if dtype.kind == "c":
            return "a NumPy complex array" if array else "a NumPy complex number"
        return None
    if issubclass(kind, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return "a complex tensor" if torch._C.TensorBase.dtype.__get__(value).is_complex else None
    return None


def _own_arithmetic(kind):
    """The name of ``kind`` when it takes some of its arithmetic from code of the answer's own, else ``None``."""
    for name in _ARITHMETIC:
        for base in _MRO(kind):
            found = _CLASS_DICT(base).get(name)
            if found is None:
                continue
            if type(found) in (staticmethod, classmethod):
                found = found.__func__
            if type(found) is types.FunctionType and not _is_library(found.__code__):
                return _QUALNAME(kind)
            break
    return None


def _children_usage():
    """What the child processes waited for so far used (page faults, context switches; never time)."""
    if resource is None:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_minflt, usage.ru_majflt, usage.ru_nvcsw, usage.ru_nivcsw)


def _live_children():
    """The process ids of this process's children (any thread's), alive or not yet waited for (Linux)."""
    return {pid for pid in _children_of("self") if not _symbolizer(pid)}


def _symbolizer(pid):
    """Whether the child is an ``addr2line`` that torch started to name C++ frames (``checkpoint(debug=True)``
    spawns one per library and keeps them for the process): it reads symbols and runs nothing of the answer's."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            program = cmdline.read().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(program) == b"addr2line"


# A process the notebook started before check() can run a banned library for an answer that only writes to a pipe
# and reads a line (adversarial round 9, adv-05-08-r8 finding 1: GradScaler, optimizer_coverage, DistributedSampler
# in a worker started when the cell ran, full marks).  The rule of ``_threads_at_work``, for processes, never
# timed: a live descendant of the answer's process at the call's start fails every method.  Excepted: torch's
# ``addr2line`` symbolizers (``_symbolizer``), and the helpers notebook 08's lab cells leave for the kernel's life,
# which run nothing of the notebook's: Python's multiprocessing resource tracker and forkserver, and the course's
# folder watcher (``labs.distributed``).  A helper is known by the exact command it was started with, and only as
# a direct child: never by a process id read from a module, which the notebook can write (round 10, adv-05-08-r9
# finding 1a: a worker's pid put in ``resource_tracker._resource_tracker._pid``), and never for a process a helper
# forked (a worker the forkserver forks keeps its command line).  What the helpers started is judged like any child.
# A double-forked worker (round 10, finding 1b) leaves the notebook's tree; ``_adopt_orphans`` keeps it in.
def _processes_at_work():
    """Live child processes (and their descendants) at the call's start that may work for the answer."""
    found = [] if _adopting_orphans() else [_ORPHANS_RELEASED]
    direct = _children_of("self")
    pending, seen = sorted(direct), set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if pid in direct and _started_as_helper(pid):
            pending.extend(_children_of(pid))
        elif not _symbolizer(pid) and not _ended(pid):
            found.append(f"process {pid} ({_command_of(pid)}), a child of the notebook's")
    return found


def _children_of(pid):
    """The process ids of ``pid``'s children, any thread's (``"self"``: this process's); empty outside Linux."""
    found = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                found.update(listing.read().split())
        except OSError:
            continue
    return found


# The commands multiprocessing (Python 3.10-3.14) and labs.distributed start their helpers with, whole.  The
# forkserver imports its preload modules when it starts: only the course's own (``labs.distributed._PRELOAD``) and
# ``__main__`` without a script path (a notebook's) are a helper's; any other module could run work at import.
_TRACKER = re.compile(r"from multiprocessing\.resource_tracker import main; ?main\(\d+\)")
_FORKSERVER = re.compile(r"from multiprocessing\.forkserver import main; ?main\(\d+, \d+, (\[[^\]]*\]), \*\*(\{.*\})\)")
_FORKSERVER_PRELOADS = {"__main__", "autograd_lab.labs.ddp_scenarios", "torch._dynamo"}
_WATCHER = "import os, shutil, sys; os.read(0, 1); shutil.rmtree(sys.argv[1], ignore_errors=True)"


def _started_as_helper(pid):
    """Whether the process is this Python running, whole, the command of multiprocessing's resource tracker or
    forkserver, or of the course's folder watcher (``python [flags] -c COMMAND [folder]``), with nothing that
    could run other code first: the interpreter's flags only, no ``-c`` glued to code, no module of the same name
    in its folder, the environment the checker was imported with (round 11, adv-05-08-r10 finding 1)."""
    words = _command_words(pid)
    at = _helper_command_at(words)
    if at is None or not _started_like_this_process(pid):
        return False
    command, rest = words[at + 1], words[at + 2:]
    if command == _WATCHER:
        return len(rest) == 1
    return not rest and (_TRACKER.fullmatch(command) is not None or _a_course_forkserver(command))


def _command_words(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return [w.decode(errors="replace") for w in cmdline.read().split(b"\0")[:-1]]
    except OSError:
        return []


# The flags multiprocessing passes on (``subprocess._args_from_interpreter_flags``): letters, or -W/-X and a value.
_FLAG = re.compile(r"-[bBdEIOqsSuvR]+")


def _helper_command_at(words):
    """The index of ``-c`` in ``[this python, flags..., -c, command, ...]``, else None."""
    if not words or os.path.realpath(words[0]) != os.path.realpath(sys.executable):
        return None
    at = 1
    while at < len(words) and words[at] != "-c":
        if _FLAG.fullmatch(words[at]):
            at += 1
        elif words[at] in ("-W", "-X") and at + 1 < len(words):
            at += 2
        else:
            return None
    return at if at + 1 < len(words) else None


# What could make a helper's command run other code before it: a startup path, or a module named like the
# command's own in the folder ``-c`` puts first on ``sys.path``.
_STARTUP_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPLATLIBDIR")
_STARTUP_AT_IMPORT = {name: os.environ.get(name) for name in _STARTUP_VARIABLES}


def _started_like_this_process(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            pairs = dict(item.split(b"=", 1) for item in environ.read().split(b"\0") if b"=" in item)
        folder = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    for name in _STARTUP_VARIABLES:
        value = pairs.get(name.encode())
        if (value.decode(errors="replace") if value is not None else None) != _STARTUP_AT_IMPORT[name]:
            return False
    return not any(os.path.exists(os.path.join(folder, name)) for name in ("multiprocessing", "multiprocessing.py"))


def _a_course_forkserver(command):
    match = _FORKSERVER.fullmatch(command)
    if not match:
        return False
    try:
        preload, options = ast.literal_eval(match.group(1)), ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError):
        return False
    return (isinstance(preload, list) and set(preload) <= _FORKSERVER_PRELOADS and isinstance(options, dict)
            and "main_path" not in options)


# Linux keeps a double-forked daemon in the notebook's tree when the kernel is a child subreaper: its orphans
# become the kernel's children instead of init's.  Set when the checker is imported (the grader imports it before
# the first cell); an answer that clears it is told so, since orphans could leave the tree unseen.
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
_ORPHANS_RELEASED = ("the kernel no longer adopts orphaned processes (prctl PR_SET_CHILD_SUBREAPER was cleared), "
                     "so a process started from the notebook could run outside its view")


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _adopt_orphans():
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _adopting_orphans():
    """Whether the kernel is still a child subreaper (True off Linux: nothing to check there)."""
    prctl = _prctl()
    if prctl is None:
        return True
    flag = ctypes.c_int(0)
    if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return True
    return bool(flag.value)


_adopt_orphans()


def _ended(pid):
    """Whether the process has exited and waits to be reaped (a zombie runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _command_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = cmdline.read().split(b"\0")
    except OSError:
        return "?"
    return " ".join(os.path.basename(w.decode(errors="replace")) if i == 0 else w.decode(errors="replace")
                    for i, w in enumerate(words[:3]) if w)[:60]


class _Processes:
    """Child processes that ran during the call, however they were started (adversarial round 8: libc's
    ``system()`` called through ctypes, or through a function pointer fetched before the call, which no Python
    frame and no profile event shows).  A child that ran and was waited for always faulted pages, which the
    counters of ``getrusage(RUSAGE_CHILDREN)`` add up when it is waited for; one still running (or not waited
    for) at the end is a new entry in ``/proc/self/task/*/children``.  Judged in the process where the answer
    runs, around its call only: processes the course starts elsewhere (08's ranks) are not its children here."""

    def __init__(self):
        self.usage, self.live = _children_usage(), _live_children()

    def started(self):
        found = []
        if _children_usage() != self.usage:
            found.append("a child process that ran and ended during the call")
        if _live_children() - self.live:
            found.append("a child process still there at the call's end")
        return found


class Tape:
    """One call's recorders; ``facts()`` is the plain record.  Use as a context manager."""

    def __init__(self, watch=(), *, own=None, profile=True, arguments=()):
        self.watchlist = Watchlist.of(watch)
        # The provenance ledger, only where a method asks for it (``wrt:`` specs): a few lookups per op.
        self.provenance = (Provenance([arguments[i] for i in self.watchlist.wrt if i < len(arguments)], arguments)
                           if self.watchlist.wrt else None)
        self.rows = (Rows([arguments[i] for i in self.watchlist.rows if i < len(arguments)], arguments)
                     if self.watchlist.rows else None)
        self.profile = profile or bool(self.watchlist.specs)
        self.own = own                          # an autograd.Function subclass: its backward is "own"
        self.ops, self.backward_ops = collections.Counter(), collections.Counter()
        self.ran, self.copied, self.recompiled = collections.Counter(), collections.Counter(), collections.Counter()
        self._plain, self._copies = {}, {}   # id(code) -> code: seen, nothing watched; id(code) -> (code, the specs it copies)
        self.engine_runs = self.nested_engine_runs = self.engine_depth = 0
        self.own_backward_ops = self.own_library_derivatives = self.library_derivatives = self.largest = 0
        self.dual_levels = self.complex_outputs = self.work = self.small_steps = 0
        self.run_largest, self.run_sizes = 0, []    # per backward pass: the most elements of a tensor it produced
        self.escapes, self.switched_off, self.threads, self.complex_code = [], [], [], []
        self.exact, self._answers = [], set()    # ``held:exact``: what was seen; the answer's own code objects
        self.complex_values, self.own_arithmetic = [], []    # ``held:``: complex numbers, arithmetic of its own
        self._kinds = {}                    # type -> the class's name when its arithmetic is the answer's (``_own_arithmetic``)
        self.tainted, self._names = {}, {}
        self.intact, self.new_instances, self._young, self._chained = True, collections.Counter(), None, None
        self.moves, self._returns = _OptimizerMoves(), {}     # who moved an optimizer's parameters; frames to see return
        self.points = None                  # facts._Points, where a method records where tanh & co. were evaluated
        self._own_code = {}                 # id(code) -> (code, whether it is the answer's own): ``_saw_point``

    # dispatch-mode helpers (called per op: kept short)
    def op_name(self, func):
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = func._schema.name
        return name

    @staticmethod
    def count(table, name):
        if name in table or len(table) < MAX_NAMES:
            table[name] += 1

    def taint(self, tensors):
        for tensor in tensors:
            key = _storage_key(tensor)
            if key is not None:
                self.tainted[key[0]] = key[1]   # the storage is kept alive: its address stays its own

    def is_tainted(self, tensor):
        key = _storage_key(tensor)
        return key is not None and key[0] in self.tainted

    # the profile hook (called per Python call and C call in this thread: the common path is two lookups)
    def _profile(self, frame, event, arg):
        if event == "c_call":
            if id(arg) in self._builtins:
                self._safely(self._saw_builtin, id(arg), frame)
        elif event == "call":
            code = frame.f_code
            if self.points is not None and code.co_argcount:
                self._safely(self._saw_point, frame, code)
            if self._printing and not _is_libraries(frame):
                self.switched_off.append("answer code run while torch's tensor printing had the recorders off")
            if id(code) in self._codes or id(code) not in self._plain:
                self._safely(self._saw_code, frame, code)
        elif event == "return":
            if self._returns and frame in self._returns:
                self._safely(self.moves.returned, self._returns.pop(frame), frame.f_locals.get("self"))
            if self._answers:
                if id(frame.f_code) in self._answers:
                    self._safely(self._saw_values, frame, arg)
                elif frame.f_back is not None and id(frame.f_back.f_code) in self._answers:
                    self._safely(self._saw_number, arg, frame.f_back.f_code.co_name)    # a library's value, received
        if self._chained is not None:
            self._chained(frame, event, arg)

    def _safely(self, see, *args):
        try:
            see(*args)
        except Exception:       # a profile hook that raises would break the answer: record and go on
            self.switched_off.append("the tape's profile hook failed")

    def _saw_point(self, frame, code):
        """A function of the answer's own called at one number (``f = lambda s: ...`` at ``u + h``): its point, for
        ``facts._Points.stencils`` (Python's ``**`` on floats is no call the recorders see: adv-00-04-r8 F3)."""
        own = self._own_code.get(id(code))
        if own is None:
            own = self._own_code[id(code)] = (code, not _is_libraries(frame))   # the code kept: its id stays its own
        value = frame.f_locals.get(code.co_varnames[0]) if own[1] else None
        if type(value) in (float, int):
            self.points.own_call(id(code), float(value))

    def _saw_values(self, frame, returned):
        """What the answer's own function held when it returned (its locals and closure cells, the globals its code
        names, the value returned): exact or extra-precision numbers (``_EXACT_ROOTS``), complex numbers, objects
        whose arithmetic is its own (``_complex_kind``, ``_own_arithmetic``)."""
        code, names = frame.f_code, frame.f_globals
        named = [names[name] for name in _globals_read(code) if name in names]
        for value in (returned, *frame.f_locals.values(), *named):
            for each in _with_items(value):
                found = _exact_kind(each)
                if found is not None and found not in self.exact:
                    self.exact.append(found)
                self._saw_number(each, code.co_name)

    def _saw_number(self, value, where):
        """A complex number, or an object whose arithmetic is the answer's own, held or received by ``where``."""
        found = _complex_kind(value)
        if found is not None:
            entry = f"{found} in `{where}`"
            if entry not in self.complex_values:
                self.complex_values.append(entry)
            return
        kind = type(value)
        if kind not in self._kinds:
            self._kinds[kind] = _own_arithmetic(kind)
        found = self._kinds[kind]
        if found is not None and found not in self.own_arithmetic:
            self.own_arithmetic.append(found)

    def _saw_code(self, frame, code):
        key = id(code)
        if key in _LIBRARY_LOOKUPS:
            self.escapes.append(_LIBRARY_LOOKUPS[key])
            return
        if key in _WAITS:
            if _waiter(frame):
                self.threads.append(f"your answer {_WAITS[key]}")
            return
        specs = self.watchlist.code.get(key)
        if specs is None:
            specs = self._copies.get(key, (None, None))[1]
            if specs is None:       # first call of this code: a copy of watched code, or nothing to watch?
                guard = _names_a_guard(code)
                if guard is not None:
                    self.switched_off.append(guard)
                if _makes_complex(code, frame):
                    self.complex_code.append(code.co_name)
                if self.watchlist.held:
                    self._saw_first_call(frame, code)
                specs = _recompiled(self.watchlist, code)
                self._copies[key] = (code, specs)
                if not specs and key not in self._codes and not (self.provenance is not None
                                                                 and code.co_name == "step"):
                    self._plain[key] = code     # kept alive: its id is not given to another code object
            for spec in specs:
                self.recompiled[spec] += 1
        if specs and _inside_printing(frame):
            return                  # print(tensor) enters no_grad(): torch's printing, not the answer's method
        for spec in specs or ():
            self.ran[spec] += 1
        if code.co_name in ("step", "__init__") and specs:     # an optimizer's own code (``_OptimizerMoves``)
            self._returns[frame] = code.co_name
            if code.co_name == "step":
                self.moves.stepping(frame.f_locals.get("self"))
        if self.provenance is not None and code.co_name == "step":    # an optimizer about to apply .grad
            groups = getattr(frame.f_locals.get("self"), "param_groups", None) or ()
            self.provenance.stepping([p for group in groups for p in group.get("params", ())])
        if key in _COPIES and self.watchlist.classes:
            original = frame.f_locals.get("x")
            for cls, spec in self.watchlist.classes.items():
                if isinstance(original, cls):
                    self.copied[spec] += 1

    def _saw_first_call(self, frame, code):
        """``held:exact``: the answer's own code is remembered (its values are looked at when it returns); the
        Python code of an exact-arithmetic package called by the answer's own code (``Fraction`` arithmetic) is
        recorded at once (not when a library calls it: torch imports sympy on first use)."""
        caller = frame.f_back
        if not _is_libraries(frame) and not (         # code a library compiled from text (dataclasses) is its own
                caller is not None and _is_libraries(caller) and _text_unseen(code.co_filename)):
            self._answers.add(id(code))     # kept alive with the codes seen (``_plain``, ``_copies``)
            return
        if caller is None or id(caller.f_code) not in self._answers:
            return
        found = _exact_package(frame.f_globals.get("__name__"))
        if found is not None and found not in self.exact:
            self.exact.append(found)

    def _saw_builtin(self, key, frame=None):
        if key not in _MODE_PUSHES and key not in _MODE_POPS and _inside_printing(frame):
            return
        for spec in self.watchlist.builtins.get(key, ()):
            self.ran[spec] += 1
        if key in _DUAL_LEVELS:
            self.dual_levels += 1
        elif key in _ESCAPES:
            self.escapes.append(_ESCAPES[key][0])
        elif key in _SWITCH_OFFS:
            self.switched_off.append(_SWITCH_OFFS[key][0])
        elif key in _MODE_PUSHES:
            if self._printing and _from_tensor_printing(frame):
                self._printing -= 1             # torch's printing puts back what it took off
            else:
                self._own_modes += 1
        elif key in _MODE_POPS:
            if self._own_modes:
                self._own_modes -= 1
            elif _from_tensor_printing(frame):  # print(tensor): the modes are off while it formats the values
                self._printing += 1
            else:
                self.switched_off.append(_MODE_POPS[key][0])
        elif key in _GC_CALLS and self._young is not None:
            self.switched_off.append(_GC_CALLS[key][0])

    # entering and leaving
    def __enter__(self):
        self._young = None
        if self.watchlist.classes:
            # Objects made during the call stay in the collector's youngest generation while it is
            # paused: a scan of that generation, not of every object, finds them (``_new_instances``).
            gc.collect(0)
            self._young = gc.isenabled()
            gc.disable()
        self._engine = Variable._execution_engine
        self._counter = _CountingEngine(self._engine, self)
        Variable._execution_engine = self._counter
        self._previous_profile = sys.getprofile()
        # A profiler in C (cProfile) is not callable from Python: it is restored afterwards, not chained.
        self._chained = self._previous_profile if isinstance(self._previous_profile, types.FunctionType) else None
        self._previous_thread_profile = threading.getprofile() if hasattr(threading, "getprofile") else None
        self._codes = set(self.watchlist.code) | set(_WAITS) | set(_LIBRARY_LOOKUPS) | (
            _COPIES if self.watchlist.classes else set())
        self._processes = _Processes()
        self._own_modes = self._printing = 0
        self._builtins = set(self.watchlist.builtins) | set(_DUAL_LEVELS) | set(_ESCAPES) | set(_SWITCH_OFFS) | \
            set(_MODE_PUSHES) | set(_MODE_POPS) | (
            set(_GC_CALLS) if self._young is not None else set())
        self.threads = _threads_at_work() + _processes_at_work()
        self._mode = _Ops(self)
        self._mode.__enter__()
        self._duals = None
        self._transforms = None
        if self.profile:
            sys.setprofile(self._profile)
            threading.setprofile(self._profile)     # threads started with `threading` are seen too
            if self.provenance is not None or self.rows is not None:
                self._transforms = _DualTensors(self, count_duals=False)
                self._transforms.__enter__()
        else:                                       # cheaper: only forward-mode AD is looked for
            self._duals = _DualTensors(self)
            self._duals.__enter__()
        return self

    def __exit__(self, *exc_info):
        if self._transforms is not None:
            self._transforms.__exit__(None, None, None)
        if self._duals is not None:
            self._duals.__exit__(None, None, None)
            intact = True
        else:
            intact = sys.getprofile() == self._profile and not self.switched_off and not self._printing   # before our own setprofile call
            if self._previous_profile is None or self._chained is not None:
                sys.setprofile(self._previous_profile)
            else:                                   # a profiler written in C (cProfile) puts itself back
                sys.setprofile(None)
                getattr(self._previous_profile, "enable", lambda: None)()
            threading.setprofile(self._previous_thread_profile)
        stack = _get_current_dispatch_mode_stack()
        intact = intact and bool(stack) and stack[-1] is self._mode
        if self._mode in stack:
            while _get_current_dispatch_mode_stack() and _get_current_dispatch_mode_stack()[-1] is not self._mode:
                torch._C._pop_torch_dispatch_stack()   # a mode the answer left open
            self._mode.__exit__(None, None, None)
        intact = intact and Variable._execution_engine is self._counter
        Variable._execution_engine = self._engine
        self.intact = intact
        self.new_instances = self._new_instances()
        self.threads.extend(_threads_at_work())
        self.escapes.extend(self._processes.started())
        return False

    def _new_instances(self):
        """Objects of the watched classes (and subclasses) made during the call, however they were made."""
        counts = collections.Counter()
        if self._young is None:
            return counts
        # By exact type in a set: `isinstance` against a tuple of every subclass (hundreds for
        # `autograd.Function`) took 63 s over the 233 000 young objects that
        # `allow_mutation_on_saved_tensors()` leaves, and the case timed out (adversarial round 7, 04-3).
        classes = set(_with_subclasses(self.watchlist.classes))
        for instance in gc.get_objects(0):
            kind = type(instance)
            if kind in classes:
                for cls, spec in self.watchlist.classes.items():
                    if issubclass(kind, cls):
                        counts[spec] += 1
        if self._young:
            gc.enable()
        return counts

    def output_from_engine(self, output):
        """Whether every floating-point tensor returned was computed from what the engine produced.

        ``None`` when the output holds no floating-point tensor.
        """
        tensors = [t for t in _tensors(output) if t.is_floating_point() or t.is_complex()]
        if not tensors:
            return None
        return all(self.is_tainted(t) for t in tensors)

    def facts(self):
        """The plain record of what ran (see ``facts.FACTS``)."""
        return {
            "engine_runs": self.engine_runs,
            "nested_engine_runs": self.nested_engine_runs,
            "backward_ops": sum(self.backward_ops.values()),
            "forward_ad": self.dual_levels,
            "ops": dict(self.ops),
            "backward_op_names": dict(self.backward_ops),
            "library_derivatives": self.library_derivatives,
            "own_backward_ops": self.own_backward_ops,
            "own_library_derivatives": self.own_library_derivatives,
            "largest_numel": self.largest,
            "complex_outputs": self.complex_outputs,
            "small_steps": self.small_steps,
            "work": self.work,
            "backward_largest": list(self.run_sizes),
            "backward_rows": self.rows.facts() if self.rows is not None else {"totals": [], "runs": []},
            "ran": {spec: self.ran[spec] for spec in self.watchlist.specs if self.ran[spec]},
            "copied": dict(self.copied),
            "recompiled": dict(self.recompiled),
            "instances": dict(self.new_instances),
            "escapes": sorted(set(self.escapes)),
            "other_threads": sorted(set(self.threads))[:8],
            "complex_code": sorted(set(self.complex_code))[:8],
            "exact_arithmetic": sorted(self.exact)[:8],
            "complex_values": sorted(self.complex_values)[:8],
            "own_arithmetic": sorted(self.own_arithmetic)[:8],
            "tape_intact": self.intact,
            **(self.provenance.facts() if self.provenance is not None else {}),
        }


class _OptimizerMoves:
    """Whether an optimizer's ``step`` made every change of its parameters (03.train; adversarial round 5).

    A parameter's value is taken when its optimizer is built (``__init__`` returns), or when a
    ``step`` first sees it; each ``step`` must find it as the last ``step`` (or the build) left it,
    and must move it; at the end it must still be so, and every floating-point tensor returned must
    hold the values a ``step`` left in a parameter.  So an update written by hand next to a
    ``step`` that moves nothing (lr 0, zeroed gradients) or undone afterwards is seen by what
    happened to the values, however it was spelled.  Fact ``optimizer_moves``: ``steps``,
    ``still`` (steps that left a parameter where it was), ``outside`` (parameters changed where no
    ``step`` ran), ``output`` (the returned values are a parameter's; ``None``: no step ran).
    """

    def __init__(self):
        self.last, self.before = {}, {}       # id(parameter) -> (parameter, values): after the last step; at a step's start
        self.steps = self.still = self.outside = 0

    @staticmethod
    def _parameters(optimizer):
        groups = getattr(optimizer, "param_groups", None) or ()
        return [p for group in groups for p in group.get("params", ()) if torch.is_tensor(p)]

    @staticmethod
    def _values(tensor):
        with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():   # unseen by the recorders
            return tensor.detach().clone()

    @staticmethod
    def _same(a, b):
        with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():
            return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b.detach()))

    @classmethod
    def _cast(cls, values, returned):
        """``returned`` holds ``values``, or ``values`` cast to its floating dtype: a loop trained on a float64
        copy and cast back to ``w0``'s dtype returns what its steps made (adversarial round 10, adv-00-04-r9 F11)."""
        if values.dtype == returned.dtype or not values.is_floating_point():
            return cls._same(values, returned)
        with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():
            return cls._same(values.to(returned.dtype), returned)

    def stepping(self, optimizer):
        for p in self._parameters(optimizer):
            known = self.last.get(id(p))
            if known is not None and not self._same(known[1], p):
                self.outside += 1
            self.before[id(p)] = (p, self._values(p))

    def returned(self, kind, optimizer):
        parameters = self._parameters(optimizer)
        if kind == "step":
            self.steps += 1
            self.still += any(id(p) in self.before and p.grad is not None and self._same(self.before[id(p)][1], p)
                              for p in parameters)
        for p in parameters:
            if kind == "step" or id(p) not in self.last:
                self.last[id(p)] = (p, self._values(p))

    def facts(self, output):
        """The plain record, once the call is over; ``output`` is what the answer returned."""
        self.outside += sum(not self._same(values, p) for p, values in self.last.values())
        returned = [t for t in _tensors(output) if t.is_floating_point()]
        from_steps = None
        if self.steps:      # compared flat: `model.weight.detach()[0]` is the (1, n) parameter's values
            from_steps = all(any(values.numel() == t.numel() and self._cast(values.reshape(-1), t.reshape(-1))
                                 for _, values in self.last.values()) for t in returned)
        return {"steps": self.steps, "still": self.still, "outside": self.outside, "output": from_steps}


def _with_subclasses(classes):
    found, stack = [], list(classes)
    while stack:
        cls = stack.pop()
        if cls not in found:
            found.append(cls)
            stack += cls.__subclasses__()
    return found

