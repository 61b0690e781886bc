"""Which forward argument each input of an op is, so a constant is named by its saved attribute.

An op's inputs (``grad_fn.next_functions``) are its differentiable tensor arguments in
the order of the aten schema, and the tensors it saves are ``_saved_<argument name>``.
So input 1 of ``MmBackward0`` is ``mat2``, and a constant there is the saved ``mat2``,
whatever else the op saved or left unsaved.  Matching by count (the n inputs that need
no grad against the n saved tensors that need none) left ``x`` unnamed as soon as the
op saved one tensor fewer than it had constants (``addmm(bias, x, W)``).

Nothing here reads a saved tensor: it uses the entries ``describe.saved_entries``
already read (or left unread, for hooked ones), so ``draw`` stays free of side effects.
"""

import re
from dataclasses import dataclass
from functools import lru_cache

import torch

_SUFFIX = re.compile(r"Backward\d*$")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


@dataclass
class Input:
    """A constant input of an op: the argument it fills and, when read, the saved tensor."""

    arg: str | None          # "self", "mat2"... or None when the op's schema is unknown
    tensor: object = None    # the saved tensor; None when not saved, hooked or unreadable


def constant_inputs(fn, saved, absent=()):
    """input number -> ``Input`` for each input of ``fn`` that has no grad_fn (a constant).

    ``saved``: ``describe.saved_entries(fn)``; ``absent``: optional inputs given as None.
    """
    missing = [i for i, (nf, _) in enumerate(fn.next_functions) if nf is None and i not in absent]
    if not missing:
        return {}
    names = argument_names(fn)
    by_name = _by_argument(fn, names, saved) if names else None
    if by_name is None:
        return _by_count(missing, saved)
    return {i: Input(names[i], by_name.get(names[i])) for i in missing}


def _by_argument(fn, names, saved):
    """argument name -> saved tensor, or None when the saved tensors contradict the schema.

    A readable saved argument must need grad exactly when its input has a grad_fn,
    and a bool (a ``where`` mask) is never a differentiable input: a schema guessed
    wrong (an overload with a non-differentiable tensor) is caught here.
    """
    slots = {name: i for i, name in enumerate(names)}
    found = {}
    for s in saved:
        if s.name not in slots or s.tensor is None:
            continue
        has_fn = fn.next_functions[slots[s.name]][0] is not None
        if s.tensor.dtype == torch.bool or s.tensor.requires_grad != has_fn:
            return None
        found[s.name] = s.tensor
    return found


def _by_count(missing, saved):
    """Without a schema (custom Functions, ops without an aten name): pair one constant
    with one saved tensor that needs no grad, and leave anything less clear unnamed."""
    plain = [s for s in saved if s.tensor is not None and not s.tensor.requires_grad
             and s.tensor.dtype != torch.bool]   # a bool mask (torch.where) is never an input
    if len(missing) == 1 and len(plain) == 1:
        return {missing[0]: Input(plain[0].name, plain[0].tensor)}
    return {i: Input(None) for i in missing}


def argument_names(fn):
    """Names of the forward arguments behind ``fn.next_functions``, or None when unknown."""
    if isinstance(fn, torch.autograd.function.BackwardCFunction):
        return None
    return _argument_names(type(fn), len(fn.next_functions))


@lru_cache(maxsize=None)
def _argument_names(fn_type, n_inputs):
    # The schema lookup is slow and fixed per grad_fn class: once per class and arity.
    saved = {a[len("_saved_"):] for a in dir(fn_type) if a.startswith("_saved_")}
    fits = {names for names in _schema_tensor_arguments(fn_type.__name__) if len(names) == n_inputs}
    if len(fits) > 1:   # several overloads fit: keep those that name every saved argument
        wanted = saved & {name for names in fits for name in names}
        fits = {names for names in fits if wanted <= set(names)}
    return fits.pop() if len(fits) == 1 else None


def _schema_tensor_arguments(class_name):
    """Tensor argument names of each functional overload of the aten op behind a grad_fn class.

    ``MmBackward0`` -> ``aten.mm``, ``SoftmaxBackward0`` -> ``aten._softmax``.  An
    overload with a list of tensors (``cat``, ``index``) has no fixed slots: skipped.
    """
    op = _CAMEL.sub("_", _SUFFIX.sub("", class_name)).lower()
    found = []
    for name in (op, "_" + op):
        packet = _packet(name) if op else None
        if packet is None:
            continue
        for overload in packet.overloads():
            names = _tensor_arguments(getattr(packet, overload)._schema)
            if names is not None:
                found.append(names)
    return found


def _tensor_arguments(schema):
    """Names of a functional schema's tensor arguments, in order; None for out=, in-place or list ones."""
    if getattr(schema, "is_mutable", False) or any(getattr(a, "is_out", False) for a in schema.arguments):
        return None
    types = [str(a.type) for a in schema.arguments]
    if any("Tensor" in t and "[]" in t for t in types):
        return None
    return tuple(a.name for a, t in zip(schema.arguments, types) if "Tensor" in t)


def _packet(name):
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):   # no aten op of that name
        return None
