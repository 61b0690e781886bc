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


def shape_of(tensor):
    """The shape as a tuple; never raises.

    A nested tensor in the strided layout has no ``.shape`` (torch raises an internal
    error): its dimensions are the number of tensors, then each dimension's size where
    all of them agree, or ``ragged``.
    """
    try:
        return tuple(tensor.shape)
    except RuntimeError:
        pass
    try:
        sizes = tensor._nested_tensor_size().tolist()
    except Exception:  # noqa: BLE001 - any other tensor subclass without sizes: say so, never crash
        return ("?",)
    columns = zip(*sizes) if sizes else ()
    return (len(sizes),) + tuple(col[0] if len(set(col)) == 1 else "ragged" for col in columns)


@lru_cache(maxsize=4096)
def _shape_text(shape):
    return "(" + ", ".join(_dim(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _dim(d):
    # A jagged nested tensor has a nested int (j1) and torch.compile a SymInt (s0):
    # int() of either raises, while str() names them the way PyTorch prints them.
    return str(d) if type(d) is int else _symbolic(d)


def _symbolic(d):
    try:
        return str(int(d))
    except Exception:  # noqa: BLE001 - any symbolic size is shown by name, never crashes draw
        return str(d)


def is_batched(tensor):
    """A tensor seen inside ``torch.func.vmap`` (its batch dimension is hidden)."""
    try:
        return bool(torch._C._functorch.is_batchedtensor(tensor))
    except (AttributeError, RuntimeError):
        return False


def plural(count, word):
    """``1 node``, ``2 nodes``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def number(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def values_text(tensor):
    """Values of a small tensor, or its shape and norm; never raises."""
    try:
        t = tensor.detach()
        if t.is_complex() or t.layout != torch.strided or t.device.type == "meta":
            return shape_text(shape_of(t))
        if t.numel() <= SMALL:
            data = t.cpu().tolist()
            return _nested(data)
        return f"{shape_text(t.shape)} norm {number(t.float().norm().item())}"
    except Exception:  # noqa: BLE001 - nested, batched or fake tensors: say the shape only
        return shape_text(shape_of(tensor))


def norm_text(tensor):
    """Shape and norm (a gradient in the trace's table); never raises."""
    try:
        return f"{shape_text(tensor.shape)} norm {number(tensor.detach().float().norm().item())}"
    except Exception:  # noqa: BLE001 - nested tensors have no norm kernel: the shape only
        return shape_text(shape_of(tensor))


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
    except (AttributeError, RuntimeError, TypeError):
        return []


@lru_cache(maxsize=None)
def _saved_names(fn_type):
    """(tensor attributes, plain attributes) a grad_fn class saves; fixed per class, and dir() is slow.

    A saved tensor (or list of tensors) also has a ``_raw_saved_<name>``; a plain
    attribute (a size, a dim, a scalar) has not.
    """
    names = [a[len("_saved_"):] for a in dir(fn_type) if a.startswith("_saved_")]
    raw = {a[len("_raw_saved_"):] for a in dir(fn_type) if a.startswith("_raw_saved_")}
    return tuple(n for n in names if n in raw), tuple(n for n in names if n not in raw)


@dataclass
class Saved:
    """One ``_saved_<name>`` entry of an op, read without ever raising."""

    name: str
    tensor: object          # the tensor, or None when freed/stale/not a tensor
    value: object           # non-tensor attribute value
    is_tensor: bool
    state: str              # "ok", "freed", "stale", "hooked" (not read), "checkpointed" (never read) or "unreadable"
    detail: str = ""        # stale: "v0 -> v1"; unreadable: why
    segment: object = None  # checkpointed: the checkpoint call that saved it (only while drawing)


def saved_entries(fn, read_hooked=False, attrs=True):
    """Every saved attribute of ``fn``: tensors with their state, and plain attributes
    (``attrs=False``: tensors only; reading the plain ones was a fifth of ``draw``'s walk).

    A saved tensor with an unpack hook (activation checkpointing, offloading) is read
    only when ``read_hooked``: reading it runs the hook, which may rerun the forward
    (BatchNorm statistics, RNG state, call counts all change).  Otherwise it is
    reported as ``"hooked"``, unread.  One saved by activation checkpointing is never
    read (``"checkpointed"``): its hook reruns the whole segment, once per tensor.
    """
    if isinstance(fn, torch.autograd.function.BackwardCFunction):
        return _custom_function_entries(fn, read_hooked)
    tensors, plain = _saved_names(type(fn))
    return [_read_saved(fn, name, read_hooked) for name in (tensors + plain if attrs else tensors)]


def has_unpack_hook(raw):
    """True when a raw saved tensor (``fn._raw_saved_x``) has an unpack hook.

    ``SavedTensor.unpack_hook`` tells without unpacking; releases without that
    attribute (torch 2.5, for example) cannot tell, and then the tensor is read as
    before: there a checkpointed graph is only safe to draw with ``show_saved=False``
    and no stale check.
    """
    if isinstance(raw, (list, tuple)):
        return any(getattr(r, "unpack_hook", None) is not None for r in raw)
    return getattr(raw, "unpack_hook", None) is not None   # the common case, without a generator


def can_tell_hooks():
    """Whether this torch tells if a saved tensor has an unpack hook without running it."""
    return hasattr(torch._C._autograd.SavedTensor, "unpack_hook")


def _hooked(fn, attr):
    return _hook_kind(fn, attr)[0]


def _hook_kind(fn, attr):
    """(has an unpack hook, the checkpoint call it belongs to or None) of ``fn._saved_<attr>``."""
    try:
        raw = getattr(fn, "_raw_saved_" + attr)
    except Exception:  # noqa: BLE001 - not a saved tensor (a plain attribute), or freed
        return False, None
    if not has_unpack_hook(raw):
        return False, None
    return True, checkpoint_call(raw)


def checkpoint_call(raw):
    """The ``_CheckpointFrame`` of non-reentrant checkpointing whose hook holds ``raw``, else None.

    ``torch.utils.checkpoint`` saves through ``_checkpoint_hook``, whose unpack hook (a
    closure over the call's frame) recomputes the whole segment: reading it reruns the
    segment's forward (BatchNorm's counter moves).  Same hook in torch 2.13 and 2.15;
    torch 2.5 has no ``SavedTensor.unpack_hook`` to look at.
    """
    for r in raw if isinstance(raw, (list, tuple)) else [raw]:
        hook = getattr(r, "unpack_hook", None)
        if hook is None or getattr(hook, "__module__", "") != "torch.utils.checkpoint":
            continue
        for cell in hook.__closure__ or ():
            if type(cell.cell_contents).__name__ == "_CheckpointFrame":
                return cell.cell_contents
    return None


def _custom_function_entries(fn, read_hooked):
    """A custom ``autograd.Function`` keeps ``ctx.save_for_backward`` tensors in ``saved_tensors``."""
    hooked, segment = _hook_kind(fn, "tensors")
    if segment is not None:
        return [Saved("saved_tensors", None, None, True, "checkpointed", segment=segment)]
    if not read_hooked and hooked:
        return [Saved("saved_tensors", None, None, True, "hooked")]
    try:
        tensors = fn.saved_tensors
    except Exception as error:  # noqa: BLE001 - any hook error: unreadable, never a crash
        return [_unreadable("saved_tensors", error)]
    return [Saved(f"saved_tensors[{i}]", t, None, True, "ok") for i, t in enumerate(tensors)
            if isinstance(t, torch.Tensor)]


def _unreadable(name, error):
    """The getter raised: a version mismatch means stale, a freed buffer freed; any other
    error (an unpack hook that raised) makes the tensor unreadable, with the reason."""
    text = str(error)
    match = _VERSIONS.search(text)
    if match:
        return Saved(name, None, None, True, "stale", f"v{match.group(2)} -> v{match.group(1)}")
    if isinstance(error, RuntimeError) and "freed" in text:
        return Saved(name, None, None, True, "freed")
    why = f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".strip().rstrip(":")
    return Saved(name, None, None, True, "unreadable", attr_text(why, 80))


def _read_saved(fn, name, read_hooked=False):
    # The common case inline (a raw saved tensor without an unpack hook): _hook_kind's
    # calls were a third of the walk's time on GPT-2 (issue 24's benchmark).
    try:
        raw = getattr(fn, "_raw_saved_" + name)
    except Exception:  # noqa: BLE001 - freed or unreadable: _hook_kind and the getter below say which
        raw = None
    if raw is not None and not isinstance(raw, (list, tuple)) and getattr(raw, "unpack_hook", None) is None:
        hooked, segment = False, None
    else:
        hooked, segment = _hook_kind(fn, name)
    if segment is not None:   # never read, not even for show_saved: it would rerun the segment
        return Saved(name, None, None, True, "checkpointed", segment=segment)
    if not read_hooked and hooked:
        return Saved(name, None, None, True, "hooked")
    try:
        value = getattr(fn, "_saved_" + name)
    except Exception as error:  # noqa: BLE001 - any hook error: unreadable, never a crash
        return _unreadable(name, error)
    if isinstance(value, torch.Tensor):
        return Saved(name, value, None, True, "ok")
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return Saved(name, value[0], None, True, "ok")
    return Saved(name, None, value, False, "ok")


# Optional inputs (a conv's bias, a norm's weight and bias) that the forward got as
# None: their slot in next_functions is empty, like a constant's, and the op's saved
# attributes tell the two apart.  input number -> (saved attribute, values meaning absent).
_OPTIONAL_INPUTS = {
    "ConvolutionBackward0": {2: ("bias_sym_sizes_opt", (None, (0,)))},
    "NativeBatchNormBackward0": {1: ("weight", (None,)), 2: ("weight", (None,))},
    "NativeLayerNormBackward0": {1: ("weight", (None,)), 2: ("bias", (None,))},
    "NativeGroupNormBackward0": {1: ("weight", (None,)), 2: ("weight", (None,))},
}


def absent_inputs(fn):
    """Input numbers of ``fn`` whose optional tensor was None in the forward (nothing to draw)."""
    absent = set()
    for i, (attr, empty) in _OPTIONAL_INPUTS.get(type(fn).__name__, {}).items():
        if fn.next_functions[i][0] is not None or _hooked(fn, attr):
            continue
        try:
            value = getattr(fn, "_saved_" + attr)
        except Exception:  # noqa: BLE001 - unreadable: draw the input as before
            continue
        if value is None or (not isinstance(value, torch.Tensor) and tuple(value) in empty):
            absent.add(i)
    return absent


def attr_text(value, width=40):
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def tensor_text(tensor):
    """Shape and dtype, the way a saved tensor is labelled."""
    dtype = str(tensor.dtype).replace("torch.", "")
    return f"{shape_text(shape_of(tensor))} {dtype}"
