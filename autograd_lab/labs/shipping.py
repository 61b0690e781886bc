"""Send a function written in a notebook to another process: its code, and what it reads, by value.

``pickle`` sends a function by name (``__main__.train``), and a process started with
``spawn`` or ``forkserver`` cannot find a name defined in a notebook.  ``dumps``
sends such a function by value instead: its compiled code (``marshal``, which the
same Python reads back), its defaults and closure, the globals it reads (modules by
name; functions of the same notebook by value, in turn; anything else pickled), and
its source lines, so an error in the other process names the line::

    data = dumps(train)          # in the notebook
    train = loads(data)          # in a rank: the same function, ready to call

A function that ``pickle`` can find by name where it is loaded (defined in an
importable module) travels by name.  A global that cannot be pickled (an open
file, a lock) is refused with ``NotShippable``, which names it.
"""

import builtins
import importlib
import linecache
import marshal
import pickle
import sys
import types

FORMAT = 1


class NotShippable(TypeError):
    """A function that cannot be sent to another process; the message says which name is the problem."""


def dumps(function):
    """Bytes from which ``loads`` rebuilds ``function`` in another process of the same Python."""
    if not callable(function):
        raise NotShippable(f"expected a function, got {type(function).__name__}")
    if not isinstance(function, types.FunctionType) or findable(function):
        return pickle.dumps((FORMAT, "by name", _pickled(function, getattr(function, "__name__", "function"))))
    namespace, sources = {}, {}
    spec = _function_spec(function, namespace, sources, function.__globals__, busy=set())
    return pickle.dumps((FORMAT, "by value", (spec, namespace, sources)))


def loads(data):
    """The function ``dumps`` sent (bytes made by this course's own ``dumps``: trusted)."""
    version, how, payload = pickle.loads(data)
    if version != FORMAT:
        raise NotShippable(f"a function shipped in format {version}; this build reads {FORMAT}")
    if how == "by name":
        return pickle.loads(payload)
    spec, namespace, sources = payload
    for filename, lines in sources.items():   # so a traceback in this process shows the notebook's lines
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    shared = {"__builtins__": builtins, "__name__": "__shipped__"}
    for name, entry in namespace.items():
        shared[name] = _rebuilt(entry, shared)
    return _rebuilt(("function", spec), shared)


def findable(function):
    """True when unpickling by name would find this very function in a fresh process (or it is no plain function)."""
    if not isinstance(function, types.FunctionType):
        return True      # a builtin, a class, a partial: pickle decides
    module_name = getattr(function, "__module__", None)
    if module_name in (None, "__main__", "builtins") or "<locals>" in function.__qualname__:
        return False
    module = sys.modules.get(module_name)
    if module is None or getattr(module, "__spec__", None) is None:
        return False
    found = module
    for part in function.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is function


def _function_spec(function, namespace, sources, shared, busy):
    code = function.__code__
    busy.add(code)
    lines = linecache.getlines(code.co_filename)
    if lines:
        sources[code.co_filename] = lines
    for name in _global_names(code):
        if name in namespace or name not in function.__globals__:
            continue   # a builtin, or a name the notebook never defined: the same NameError there as here
        namespace[name] = ("pending", None)   # a function that calls itself meets its own name again
        namespace[name] = _entry(function.__globals__[name], name, namespace, sources, shared, busy)
    closure = tuple(_entry(cell.cell_contents, f"{function.__name__}'s closure", namespace, sources, shared, busy,
                           in_closure=True) for cell in function.__closure__ or ())
    busy.discard(code)
    return {"code": marshal.dumps(code), "name": function.__name__, "qualname": function.__qualname__,
            "defaults": _pickled(function.__defaults__, f"{function.__name__}'s defaults"),
            "kwdefaults": _pickled(function.__kwdefaults__, f"{function.__name__}'s defaults"),
            "closure": closure}


def _entry(value, name, namespace, sources, shared, busy, in_closure=False):
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if isinstance(value, types.FunctionType) and not findable(value):
        if in_closure and value.__code__ in busy:   # (through globals, recursion ends at the name's marker)
            raise NotShippable(f"{name} refers to itself through a closure; define it at the notebook's top level")
        if value.__globals__ is not shared:
            raise NotShippable(f"{name} is a function defined inside another module's code; define it in the notebook")
        return ("function", _function_spec(value, namespace, sources, shared, busy))
    return ("value", _pickled(value, name))


def _pickled(value, name):
    try:
        return pickle.dumps(value)
    except Exception as error:
        raise NotShippable(f"{name} ({type(value).__name__}) cannot be sent to another process: "
                           f"{type(error).__name__}: {error}") from None


def _rebuilt(entry, shared):
    kind, value = entry
    if kind == "module":
        return importlib.import_module(value)
    if kind == "value":
        return pickle.loads(value)
    spec = value
    function = types.FunctionType(marshal.loads(spec["code"]), shared, spec["name"],
                                  pickle.loads(spec["defaults"]),
                                  tuple(types.CellType(_rebuilt(item, shared)) for item in spec["closure"]))
    function.__kwdefaults__ = pickle.loads(spec["kwdefaults"])
    function.__qualname__ = spec["qualname"]
    return function


def _global_names(code):
    """Names the code, and the code nested in it, reads as globals."""
    import dis

    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= set(_global_names(constant))
    return sorted(names)
