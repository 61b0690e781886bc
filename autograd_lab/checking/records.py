"""Plain records of Python values, safe to send between processes.

``encode`` turns whatever an answer returned into nested dicts and lists of
detached CPU tensors, ``str``, ``int``, ``float``, ``bool`` and ``None``: nothing
that can run code when loaded, so a record survives
``torch.save`` + ``torch.load(weights_only=True)``.  Tensors keep their autograd
state (``requires_grad``, ``is_leaf``, ``grad_fn`` name, ``.grad``, ``_version``)
as plain fields, because the checker compares that state too.
"""

import math
import re

import torch

KIND = "__kind__"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_MAX_TEXT = 300


def clean_text(text, limit=_MAX_TEXT):
    """Text for feedback: no memory addresses, one short paragraph."""
    text = _ADDRESS.sub("0x...", str(text)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def grad_fn_name(tensor):
    fn = tensor.grad_fn
    return None if fn is None else type(fn).__name__


def readable_grad(tensor):
    """``.grad`` without the non-leaf warning: only leaves and retain_grad() tensors have one."""
    if tensor.is_leaf or tensor.retains_grad:
        return tensor.grad
    return None


def _tensor_data(tensor):
    data = tensor.detach()
    if data.layout != torch.strided:
        data = data.to_dense()
    return data.resolve_conj().resolve_neg().to("cpu", copy=True)


def encode_tensor(tensor):
    grad = readable_grad(tensor)
    return {
        KIND: "tensor",
        "value": _tensor_data(tensor),
        "device": tensor.device.type,
        "requires_grad": bool(tensor.requires_grad),
        "is_leaf": bool(tensor.is_leaf),
        "grad_fn": grad_fn_name(tensor),
        "grad": None if grad is None else _tensor_data(grad),
        "version": int(tensor._version),
    }


def _encode_module(module):
    return {
        KIND: "module",
        "type": type(module).__name__,
        "parameters": {name: encode_tensor(p) for name, p in module.named_parameters()},
        "buffers": {name: encode_tensor(b) for name, b in module.named_buffers()},
    }


def encode(value, _depth=0):
    """The plain record of ``value`` (see the module docstring)."""
    if _depth > 20:
        return {KIND: "object", "type": type(value).__name__, "repr": "(nested too deeply)"}
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):      # ``numpy.str_`` and other subclasses, as plain text: the grader loads
        return str.__str__(value)   # records with ``weights_only=True``, which refuses them (adv-05-08-r8 4)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, torch.Tensor):
        return encode_tensor(value)
    if isinstance(value, torch.nn.Module):
        return _encode_module(value)
    if isinstance(value, torch.Size):
        return {KIND: "tuple", "items": [int(n) for n in value]}
    if isinstance(value, (tuple, list)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {KIND: kind, "items": [encode(item, _depth + 1) for item in value]}
    if isinstance(value, dict):
        return {KIND: "dict", "items": {_key(k): encode(v, _depth + 1) for k, v in value.items()}}
    if isinstance(value, (torch.dtype, torch.device)):
        return {KIND: "object", "type": type(value).__name__, "repr": str(value)}
    number = _as_python_number(value)
    if number is not None:
        return number
    return {KIND: "object", "type": type(value).__name__, "repr": clean_text(_safe_repr(value))}


def _key(key):
    return str.__str__(key) if isinstance(key, str) else repr(key)


def _as_python_number(value):
    """NumPy scalars and the like, as Python numbers."""
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        try:
            number = item()
        except Exception:
            return None
        return number if isinstance(number, (int, float, bool)) else None
    return None


def _safe_repr(value):
    try:
        return repr(value)
    except Exception as error:  # a student's broken __repr__ must not break the check
        return f"<{type(value).__name__}: repr failed with {type(error).__name__}>"


def decode(record, *, grads=False):
    """A plain Python value from a record, for exercise-specific detectors.

    Tensors come back as detached CPU tensors, tuples and lists as themselves,
    modules as a dict of their parameters.  ``grads=True``: tensors also carry
    their recorded ``.grad`` (``None`` when there was none), for arguments that
    an answer changed by side effect.
    """
    if not isinstance(record, dict) or KIND not in record:
        return record
    kind = record[KIND]
    if kind == "tensor":
        return _decode_tensor(record, grads)
    if kind == "tuple":
        return tuple(decode(item, grads=grads) for item in record["items"])
    if kind == "list":
        return [decode(item, grads=grads) for item in record["items"]]
    if kind == "dict":
        return {key: decode(item, grads=grads) for key, item in record["items"].items()}
    if kind == "module":
        return {name: _decode_tensor(p, grads) for name, p in record["parameters"].items()}
    return record["repr"]


def _decode_tensor(record, grads):
    if not grads:
        return record["value"]
    # A new tensor object, so that setting .grad never touches the record (the
    # reference's records are cached and shared between checks).
    value = record["value"].detach()
    value.grad = record["grad"]
    return value


def describe(record):
    """A short, input-free description of a recorded value: ``tensor of shape (4,), float64``."""
    if isinstance(record, dict) and KIND in record:
        kind = record[KIND]
        if kind == "tensor":
            value = record["value"]
            return f"tensor of shape {tuple(value.shape)}, {str(value.dtype).replace('torch.', '')}"
        if kind in ("tuple", "list"):
            return f"{kind} of length {len(record['items'])}"
        if kind == "dict":
            return f"dict with keys {sorted(record['items'])}"
        if kind == "module":
            return f"{record['type']} module"
        return record["type"]
    if isinstance(record, float) and not math.isfinite(record):
        return "float"
    return type(record).__name__


MAX_WARNINGS = 20


def unique_capped(texts, limit=MAX_WARNINGS):
    """The first ``limit`` distinct texts, in order, in linear time (40k warnings cost one pass)."""
    unique = {}
    for text in texts:
        if len(unique) >= limit:
            break
        unique.setdefault(text, None)
    return list(unique)


class TooLarge(ValueError):
    """A decoded record is deeper or larger than any record an answer can honestly make."""


def check_bounded(value, max_nodes=200_000, max_depth=40, max_elements=50_000_000):
    """Walk ``value`` once, counting every visit (shared references too), and raise ``TooLarge``.

    A self-referencing pickle decodes to a small object that is exponentially large
    when walked; the judge walks it, so this walk, with a budget, comes first.
    """
    nodes, elements, stack = 0, 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise TooLarge(f"more than {max_nodes} values")
        if depth > max_depth:
            raise TooLarge(f"nested deeper than {max_depth}")
        if isinstance(item, torch.Tensor):
            elements += item.numel()
            if elements > max_elements:
                raise TooLarge(f"more than {max_elements} tensor elements")
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, (str, int)):
                    raise TooLarge(f"a key of type {type(key).__name__}")
                stack.append((child, depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str) and len(item) > 100_000:
            raise TooLarge("a text longer than 100000 characters")
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > 1 << 63:
            raise TooLarge("an integer out of range")
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            raise TooLarge(f"a value of type {type(item).__name__}")
