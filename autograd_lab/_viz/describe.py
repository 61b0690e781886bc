"""Put tensors, ops and saved tensors into short, deterministic words."""

import re
from dataclasses import dataclass
from functools import lru_cache

import torch

SMALL = 6            # tensors with at most this many elements are shown by value
_SUFFIX = re.compile(r"Backward\d*$")
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")


def shape_text(shape):
    return _shape_text(tuple(shape))


@lru_cache(maxsize=4096)
def _shape_text(shape):
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def number(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def values_text(tensor):
    """Values of a small tensor, or its shape and norm; never raises."""
    try:
        t = tensor.detach()
        if t.is_complex() or t.layout != torch.strided or t.device.type == "meta":
            return shape_text(t.shape)
        if t.numel() <= SMALL:
            data = t.cpu().tolist()
            return _nested(data)
        return f"{shape_text(t.shape)} norm {number(t.float().norm().item())}"
    except RuntimeError:
        return shape_text(tensor.shape)


def _nested(data):
    if isinstance(data, list):
        return "[" + ", ".join(_nested(v) for v in data) + "]"
    return number(data)


def grad_text(tensor):
    grad = tensor.grad if tensor.is_leaf or tensor.retains_grad else None
    return "grad: None" if grad is None else "grad: " + values_text(grad)


def op_name(fn, strip_suffix=False):
    name = type(fn).__name__
    if not strip_suffix:
        return name
    return _SUFFIX.sub("", name) or name


def output_shapes(fn):
    """Shapes of the op's forward outputs; survives backward."""
    try:
        return [tuple(m.shape) for m in fn._input_metadata]
    except (AttributeError, RuntimeError):
        return []


@lru_cache(maxsize=None)
def _saved_names(fn_type):
    # dir() is slow; the saved attributes are fixed per grad_fn class.
    return tuple(a[len("_saved_"):] for a in dir(fn_type) if a.startswith("_saved_"))


@dataclass
class Saved:
    """One ``_saved_<name>`` entry of an op, read without ever raising."""

    name: str
    tensor: object          # the tensor, or None when freed/stale/not a tensor
    value: object           # non-tensor attribute value
    is_tensor: bool
    state: str              # "ok", "freed" or "stale"
    detail: str = ""        # for stale: "v0 -> v1"


def saved_entries(fn):
    """Every saved attribute of ``fn``: tensors with their state, and plain attributes."""
    if isinstance(fn, torch.autograd.function.BackwardCFunction):
        return _custom_function_entries(fn)
    return [_read_saved(fn, name) for name in _saved_names(type(fn))]


def _custom_function_entries(fn):
    """A custom ``autograd.Function`` keeps ``ctx.save_for_backward`` tensors in ``saved_tensors``."""
    try:
        tensors = fn.saved_tensors
    except RuntimeError as error:
        return [_unreadable("saved_tensors", error)]
    return [Saved(f"saved_tensors[{i}]", t, None, True, "ok") for i, t in enumerate(tensors)
            if isinstance(t, torch.Tensor)]


def _unreadable(name, error):
    """The getter raised: the version-mismatch message means stale, anything else freed."""
    match = _VERSIONS.search(str(error))
    if match:
        return Saved(name, None, None, True, "stale", f"v{match.group(2)} -> v{match.group(1)}")
    return Saved(name, None, None, True, "freed")


def _read_saved(fn, name):
    try:
        value = getattr(fn, "_saved_" + name)
    except RuntimeError as error:
        return _unreadable(name, error)
    if isinstance(value, torch.Tensor):
        return Saved(name, value, None, True, "ok")
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return Saved(name, value[0], None, True, "ok")
    return Saved(name, None, value, False, "ok")


def attr_text(value, width=40):
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def tensor_text(tensor):
    """Shape and dtype, the way a saved tensor is labelled."""
    dtype = str(tensor.dtype).replace("torch.", "")
    return f"{shape_text(tensor.shape)} {dtype}"
