"""Inputs that cross from the grader into the kernel intact: graphs replayed, functions rebuilt from source.

The grader makes every input (public and hidden) in its own process, because the
kernel imports a student build with no input code.  ``pickle`` alone keeps a
tensor's values but drops the graph behind it, and cannot carry a function
defined beside the references or a DDP model.  ``pack`` carries each as a
recipe the kernel rebuilds (``unpack``):

* **graphs**: ``Recorder`` records the torch operations that make the inputs
  (a ``TorchFunctionMode``), and a tensor with a ``grad_fn`` travels as the
  recorded operations that produce it, from snapshots of its leaves: the
  kernel replays them and gets the same nodes, in the same shape, with the same
  values (``01.count_nodes``);
* **functions** made beside the references or inside a function (lambdas,
  closures): their source text, checked to compile to the very same bytecode,
  with the modules and values they use (``07.nan_source``'s ``f``; a DDP
  communication hook);
* **DDP models**: their module and communication hooks, wrapped again in a
  single-process group (``08.no_sync_loop``).

A function whose source is a registered reference is refused: the kernel never
gets a solution.  ``fingerprint`` describes inputs as plain data (values,
shapes, ``grad_fn`` structure, parameters, function names); the kernel sends the
fingerprint of what it rebuilt, and the grader compares it with its own
(``same``), so an input that did not arrive as meant is an error, never a grade.
"""

import builtins
import importlib
import inspect
import io
import pickle
import textwrap
import types

import torch
from torch.overrides import TorchFunctionMode

_SPACES = (("torch.Tensor", lambda: torch.Tensor), ("torch", lambda: torch),
           ("torch.nn.functional", lambda: torch.nn.functional), ("torch.linalg", lambda: torch.linalg),
           ("torch.special", lambda: torch.special), ("torch.fft", lambda: torch.fft))
_MODULE_PREFIXES = ("torch", "math", "numpy", "autograd_lab.labs", "autograd_lab.versions", "operator", "functools")
_VALUES_KEPT = 256   # tensor elements a fingerprint keeps (plus their sum)
_GRAPH_NODES = 10_000
FORMAT = 1


class NotPortable(Exception):
    """An input that cannot be rebuilt in the kernel; the message says which."""


# --- the grader's side ---------------------------------------------------------------------

def pack(make):
    """``(args, data)``: call ``make()`` (the inputs of one case) and the bytes that rebuild them."""
    with Recorder() as recorder:
        args = make()
    return args, dumps(args, recorder)


def dumps(value, recorder=None):
    """Bytes for ``unpack``; ``recorder`` holds the operations that made ``value``'s graphs, if any."""
    try:
        replay = None
        if recorder is not None:
            # First pass: which graphs the value holds; the replay carries exactly what they need.
            probe = _Pickler(io.BytesIO(), None, collect=recorder)
            probe.dump((FORMAT, value))
            if probe.graphs:
                replay = recorder.replay_of(probe.graphs)
        buffer = io.BytesIO()
        _Pickler(buffer, replay).dump((FORMAT, value))
    except NotPortable:
        raise
    except Exception as error:   # pickle's own refusals (a lock, a socket, a generator)
        raise NotPortable(f"{type(error).__name__}: {str(error)[:200]}") from None
    return buffer.getvalue()


class Recorder(TorchFunctionMode):
    """The torch operations that touch tensors requiring grad, with snapshots of the tensors they start from."""

    def __init__(self):
        super().__init__()
        self.index = {}        # id(tensor) -> position in self.tensors
        self.tensors = []      # the live tensors (kept alive, so ids stay unique)
        self.constants = {}    # position -> snapshot taken when first used
        self.steps = []        # ("call", name, template, result) or ("assign", position, snapshot)

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in _tensors_in((args, kwargs))]
        graphed = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
        if not graphed:
            versions = {id(t): t._version for t in inputs if id(t) in self.index}
            result = func(*args, **kwargs)
            # An in-place change (a no_grad update) of a tensor already recorded: keep its new value.
            for tensor in inputs:
                if id(tensor) in versions and tensor._version != versions[id(tensor)]:
                    self.steps.append(("assign", self.index[id(tensor)], _snapshot(tensor)))
            return result
        template = self._template((args, kwargs))
        result = func(*args, **kwargs)
        self.steps.append(("call", _name_of(func) or repr(func)[:120], template, self._result(result)))
        return result

    def replay_of(self, tensors):
        """A ``_Replay`` of the steps ``tensors`` (with a grad_fn) need, and of every tensor those touch."""
        needed = {self.index[id(t)] for t in tensors if id(t) in self.index}
        if len(needed) < len(tensors):
            raise NotPortable("an input is a tensor whose graph was made outside its recipe")
        chosen, changed = set(), True
        while changed:   # steps that make or change a needed tensor, and the tensors they use
            changed = False
            for number, step in enumerate(self.steps):
                refs = {step[1]} if step[0] == "assign" else _refs(step[2]) | _refs(step[3])
                if number not in chosen and refs & needed:
                    chosen.add(number)
                    needed |= refs
                    changed = True
        steps = [self.steps[number] for number in sorted(chosen)]
        unnamed = next((step[1] for step in steps if step[0] == "call" and not _is_name(step[1])), None)
        if unnamed:
            raise NotPortable(f"an input's graph uses an operation with no public name ({unnamed})")
        constants = {p: v for p, v in self.constants.items() if p in needed}
        return _Replay(constants, steps, {id(self.tensors[p]): p for p in needed})

    def position(self, tensor):
        return self.index.get(id(tensor))

    def _add(self, tensor, snapshot):
        self.index[id(tensor)] = len(self.tensors)
        self.tensors.append(tensor)
        if snapshot:
            self.constants[len(self.tensors) - 1] = _snapshot(tensor)
        return len(self.tensors) - 1

    def _template(self, value):
        if isinstance(value, torch.Tensor):
            if id(value) not in self.index:
                if value.grad_fn is not None:
                    raise NotPortable("an input's graph starts from a tensor made outside its recipe")
                self._add(value, snapshot=True)
            return _Ref(self.index[id(value)])
        if isinstance(value, (list, tuple)):
            items = [self._template(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            return {k: self._template(v) for k, v in value.items()}
        return value

    def _result(self, value):
        if isinstance(value, torch.Tensor):
            if id(value) not in self.index:
                self._add(value, snapshot=False)
            return _Ref(self.index[id(value)])
        if isinstance(value, (list, tuple)):
            return tuple(self._result(v) for v in value)
        return None


class _Ref:
    __slots__ = ("position",)

    def __init__(self, position):
        self.position = position

    def __reduce__(self):
        return (_Ref, (self.position,))


class _Replay:
    """The recorded steps some graphs need, pickled once; replayed on first use in the kernel."""

    def __init__(self, constants, steps, positions=None):
        self.constants, self.steps, self.table = constants, steps, None
        self.positions = positions or {}   # grader's side: id(tensor) -> position

    def __reduce__(self):
        return (_Replay, (self.constants, self.steps))

    def value(self, position):
        if self.table is None:
            self.table = _replay(self.constants, self.steps)
        if position not in self.table:
            raise NotPortable(f"the recipe does not make tensor {position}")
        return self.table[position]


def _replayed(replay, position):
    return replay.value(position)


class _Pickler(pickle.Pickler):
    """Tensors of a replay as references into it; functions by source; DDP models rebuilt."""

    def __init__(self, file, replay, collect=None):
        super().__init__(file, protocol=4)
        self.replay = replay
        self.collect = collect      # first pass: a Recorder, and the graph tensors met go in self.graphs
        self.graphs = []

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor):
            if self.collect is not None:
                if obj.grad_fn is not None:
                    self.graphs.append(obj)
                    return (int, ())
                return NotImplemented
            position = self.replay.positions.get(id(obj)) if self.replay else None
            if position is not None:
                return (_replayed, (self.replay, position))
            if obj.grad_fn is not None:
                raise NotPortable("an input is a tensor whose graph was made outside its recipe")
            return NotImplemented
        if isinstance(obj, types.FunctionType) and _needs_source(obj):
            return _reduce_function(obj)
        if isinstance(obj, torch.nn.parallel.DistributedDataParallel):
            return _reduce_ddp(obj)
        return NotImplemented


def _refs(template):
    if isinstance(template, _Ref):
        return {template.position}
    if isinstance(template, (list, tuple)):
        return set().union(*map(_refs, template)) if template else set()
    if isinstance(template, dict):
        return set().union(*map(_refs, template.values())) if template else set()
    return set()


def _is_name(name):
    return name.startswith(("get:", "set:")) or name.rpartition(".")[0] in dict(_SPACES)


def _snapshot(tensor):
    copy = tensor.detach().clone()
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(copy, requires_grad=tensor.requires_grad)
    return copy.requires_grad_(tensor.requires_grad and tensor.is_leaf)


def _tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def _name_of(func):
    """``"torch.Tensor.mul"``, ``"torch.tanh"``, ``"get:grad_fn"``: a name the kernel can look up, or None."""
    owner = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor" and func.__name__ in ("__get__", "__set__"):
        return f"{func.__name__[2:5]}:{owner.__name__}"
    name = getattr(func, "__name__", None)
    for prefix, space in _SPACES:
        if name and getattr(space(), name, None) is func:
            return f"{prefix}.{name}"
    return None


def _needs_source(function):
    """True for a function pickle cannot name: a lambda, a closure, or one made beside the references."""
    return ("<locals>" in function.__qualname__ or function.__name__ == "<lambda>"
            or function.__module__.startswith("autograd_lab_solutions") or function.__module__ == "__main__")


def _reduce_function(function):
    if _is_a_reference(function):
        raise NotPortable(f"an input is the reference {function.__qualname__}")
    code = function.__code__
    source = _source_of(function)
    globals_ = {}
    for name in _global_names(code):
        if name in function.__globals__:
            value = function.__globals__[name]
            if isinstance(value, types.ModuleType):
                if not value.__name__.startswith(_MODULE_PREFIXES):
                    raise NotPortable(f"{function.__qualname__} uses the module {value.__name__}")
                globals_[name] = ("module", value.__name__)
            else:
                globals_[name] = ("value", value)   # pickled in turn: a function is refused if it is a reference
        elif not hasattr(builtins, name):
            raise NotPortable(f"{function.__qualname__} uses {name}, which it does not define")
    closure = tuple(cell.cell_contents for cell in function.__closure__ or ())
    return (_rebuild_function, (source, function.__name__, code.co_freevars, closure, globals_,
                                function.__defaults__, function.__qualname__))


def _is_a_reference(function):
    from autograd_lab import checking

    return any(function is exercise.reference for exercise in checking.all_exercises())


def _source_of(function):
    """The function's source text, checked to compile to exactly its own bytecode."""
    try:
        lines = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        raise NotPortable(f"the source of {function.__qualname__} is not available") from None
    candidates = [lines]
    if function.__name__ == "<lambda>":   # the lambda among the line's text whose code is this one
        starts = [i for i in range(len(lines)) if lines.startswith("lambda", i)]
        candidates = [lines[start:end].strip() for start in starts for end in range(len(lines), start, -1)]
    for text in candidates:
        inner = _inner_code(text, function.__name__, function.__code__.co_freevars)
        if inner is not None and _same_code(inner, function.__code__):
            return text
    raise NotPortable(f"the source of {function.__qualname__} could not be read back exactly")


def _maker(source, name, freevars):
    """The text of ``_make(freevars)``, which defines the function and returns it with its closure."""
    parameters = ", ".join(freevars)
    if name == "<lambda>":
        return f"def _make({parameters}):\n    return ({source})\n"
    return f"def _make({parameters}):\n{textwrap.indent(source, '    ')}\n    return {name}\n"


def _inner_code(source, name, freevars):
    try:
        module = compile(_maker(source, name, freevars), "<input>", "exec")
    except (SyntaxError, ValueError):
        return None
    make = next((c for c in module.co_consts if isinstance(c, types.CodeType)), None)
    return next((c for c in make.co_consts if isinstance(c, types.CodeType) and c.co_name == name), None)


def _global_names(code):
    """Names the code (and the functions inside it) reads or writes as globals, not attribute names."""
    import dis

    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL")}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= set(_global_names(constant))
    return sorted(names)


def _same_code(one, other):
    """Same instructions on the same names and constants (how a call is spelt aside: the compiler
    picks ``LOAD_ATTR`` or ``LOAD_METHOD`` depending on the module around the function)."""
    if _instructions(one) != _instructions(other) or one.co_varnames != other.co_varnames:
        return False
    nested = [(a, b) for a, b in zip(one.co_consts, other.co_consts) if isinstance(a, types.CodeType)]
    return (len(one.co_consts) == len(other.co_consts)
            and all(isinstance(b, types.CodeType) and _same_code(a, b) for a, b in nested))


_SPELLING = {"LOAD_METHOD": "LOAD_ATTR", "CALL_METHOD": "CALL"}
_NOISE = {"PRECALL", "CACHE", "NOP", "RESUME", "COPY_FREE_VARS", "MAKE_CELL", "PUSH_NULL", "KW_NAMES"}


def _instructions(code):
    import dis

    found = []
    for instruction in dis.get_instructions(code):
        name = _SPELLING.get(instruction.opname, instruction.opname)
        if name in _NOISE:
            continue
        jump = instruction.opcode in dis.hasjrel or instruction.opcode in dis.hasjabs
        value = None if jump or isinstance(instruction.argval, types.CodeType) else repr(instruction.argval)
        found.append((name, value))
    return found


def _reduce_ddp(model):
    if model.process_group.size() != 1:
        raise NotPortable("a DDP model of more than one process")
    options = {name: getattr(model, name) for name in ("broadcast_buffers", "find_unused_parameters",
                                                       "gradient_as_bucket_view", "static_graph")
               if isinstance(getattr(model, name, None), bool)}
    return (_rebuild_ddp, (model.module, list(getattr(model, "_comm_hooks", [])), options))


# --- the kernel's side ---------------------------------------------------------------------

def unpack(data):
    """The value ``dumps`` packed (our own bytes, from the grader: trusted)."""
    version, value = pickle.loads(data)
    if version != FORMAT:
        raise NotPortable(f"inputs of format {version}, this build reads {FORMAT}")
    return value


def _replay(constants, steps):
    table = dict(constants)
    for step in steps:
        if step[0] == "assign":
            with torch.no_grad():
                table[step[1]].copy_(step[2])
            continue
        _, name, template, result = step
        args, kwargs = _fill(template, table)
        value = _lookup(name)(*args, **kwargs)
        _bind(result, value, table)
    return table


def _lookup(name):
    if name.startswith(("get:", "set:")):
        kind, attribute = name.split(":", 1)
        if kind == "get":
            return lambda tensor: getattr(tensor, attribute)
        return lambda tensor, value: setattr(tensor, attribute, value)
    space, _, attribute = name.rpartition(".")
    return getattr(dict((p, s) for p, s in _SPACES)[space](), attribute)


def _fill(template, table):
    if isinstance(template, _Ref):
        return table[template.position]
    if isinstance(template, list):
        return [_fill(item, table) for item in template]
    if isinstance(template, tuple):
        return tuple(_fill(item, table) for item in template)
    if isinstance(template, dict):
        return {k: _fill(v, table) for k, v in template.items()}
    return template


def _bind(template, value, table):
    if isinstance(template, _Ref):
        table.setdefault(template.position, value)
    elif isinstance(template, tuple) and isinstance(value, (list, tuple)):
        for item, produced in zip(template, value):
            _bind(item, produced, table)


def _rebuild_function(source, name, freevars, closure, globals_, defaults, qualname=None):
    namespace = {"__builtins__": builtins}
    for key, (kind, value) in globals_.items():
        namespace[key] = importlib.import_module(value) if kind == "module" else value
    exec(compile(_maker(source, name, freevars), f"<input {name}>", "exec"), namespace)   # the grader's recipe
    function = namespace["_make"](*closure)
    function.__defaults__ = defaults
    function.__qualname__ = qualname or name
    return function


def _rebuild_ddp(module, hooks, options):
    from torch.nn.parallel import DistributedDataParallel

    from autograd_lab.labs.distributed import single_process_group

    single_process_group()
    model = DistributedDataParallel(module, **options)
    for hook, state in hooks:
        model.register_comm_hook(state, hook)
    return model


# --- what arrived is what was meant ------------------------------------------------------------

def fingerprint(value):
    """Plain data that says what ``value`` is: tensors (values, graph), modules, functions, containers."""
    return _describe(value, depth=0)


def _describe(value, depth):
    if depth > 20:
        return "deep"
    if isinstance(value, torch.Tensor):
        return _tensor(value, depth)
    if isinstance(value, torch.nn.parallel.DistributedDataParallel):
        return {"ddp": _describe(value.module, depth + 1), "hooks": len(getattr(value, "_comm_hooks", []))}
    if isinstance(value, torch.nn.Module):
        state = {name: _tensor(t, depth) for name, t in [*value.named_parameters(), *value.named_buffers()]}
        return {"module": type(value).__name__, "training": value.training, "state": state}
    if isinstance(value, torch.optim.Optimizer):
        groups = [{k: v for k, v in group.items() if isinstance(v, (int, float, bool, str))}
                  for group in value.param_groups]
        return {"optimizer": type(value).__name__, "groups": groups,
                "params": [len(group["params"]) for group in value.param_groups]}
    if callable(value) and hasattr(value, "__name__"):
        return {"function": getattr(value, "__qualname__", value.__name__)}
    if isinstance(value, (list, tuple)):
        return [_describe(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {str(k): _describe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    return {"type": f"{type(value).__module__}.{type(value).__qualname__}"}


def _tensor(tensor, depth):
    data = tensor.detach()
    described = {"shape": list(data.shape), "dtype": str(data.dtype), "requires_grad": tensor.requires_grad,
                 "leaf": tensor.is_leaf, "graph": graph_signature(tensor.grad_fn)}
    if data.is_floating_point() or data.is_complex() or data.dtype in (torch.int64, torch.int32, torch.bool,
                                                                      torch.uint8, torch.int16, torch.int8):
        flat = data.reshape(-1).to("cpu", torch.complex128 if data.is_complex() else torch.float64)
        described["values"] = flat[:_VALUES_KEPT].clone()
        described["sum"] = flat.sum().reshape(1).clone() if flat.numel() else torch.zeros(1, dtype=flat.dtype)
    grad = tensor.grad if tensor.is_leaf else None
    if grad is not None and depth < 20:
        described["grad"] = _tensor(grad, depth + 1)
    return described


def graph_signature(node):
    """The graph behind a tensor as text: each node's class and, in order, where its edges go.

    ``MulBackward0(AccumulateGrad,#1)``: ``#1`` is the node numbered 1 in the
    order first met, reached again along another path.
    """
    if node is None:
        return ""
    numbers, parts, stack = {}, [], [node]
    # Iterative, in the order a depth-first walk would print it.
    order = []
    while stack and len(order) < _GRAPH_NODES:
        current = stack.pop()
        if current is None or current in numbers:
            continue
        numbers[current] = len(order)
        order.append(current)
        stack.extend(reversed([child for child, _ in current.next_functions]))
    for current in order:
        edges = ",".join("-" if child is None else f"#{numbers.get(child, '?')}" for child, _ in current.next_functions)
        parts.append(f"{type(current).__name__}({edges})")
    return ";".join(parts)


def same(meant, arrived, path="inputs"):
    """None when ``arrived`` describes what ``meant`` does (values within float tolerance), else where it differs."""
    if isinstance(meant, torch.Tensor) or isinstance(arrived, torch.Tensor):
        if not (isinstance(meant, torch.Tensor) and isinstance(arrived, torch.Tensor)) or meant.shape != arrived.shape:
            return path
        close = torch.allclose(meant, arrived, rtol=1e-5, atol=1e-7, equal_nan=True)
        return None if close else path
    if isinstance(meant, dict):
        if not isinstance(arrived, dict) or sorted(meant) != sorted(arrived):
            return path
        return next((d for d in (same(meant[k], arrived[k], f"{path}.{k}") for k in sorted(meant)) if d), None)
    if isinstance(meant, list):
        if not isinstance(arrived, list) or len(meant) != len(arrived):
            return path
        return next((d for d in (same(a, b, f"{path}[{i}]") for i, (a, b) in enumerate(zip(meant, arrived))) if d),
                    None)
    return None if meant == arrived and type(meant) is type(arrived) else path
