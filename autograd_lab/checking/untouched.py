"""Did an answer change its arguments?  A snapshot before the call, compared after it.

A function exercise hands the answer the caller's own objects; unless the exercise
declares that the answer must change them (``Exercise(modifies=...)``: an SGD step
updates parameters in place), an answer that changes them fails, with feedback
that names the argument and what changed.

What counts as a change, per tensor inside an argument (a module's parameters and
buffers, an optimizer's state, tensors in lists and dicts):

* ``values``: its version counter moved (an in-place op, even one that writes the
  same numbers: the caller's autograd would refuse a tensor saved for backward), or
  its values or shape changed without it moving (a write through ``.data``);
* ``grad``: its ``.grad`` was set, cleared, replaced, or changed in place;
* ``requires_grad``: switched on or off;
* ``storage``: its memory swapped for other memory (``p.set_(new)``, ``p.data = new``): the
  tensor object is the same and its counter may move, but what shared the old memory (a view,
  a tied weight, a ``state_dict()`` or ``detach()`` taken before) keeps the old values, so it was
  not written in place.  The old storage is held by the snapshot, so its address cannot be reused;

and per container: ``items`` (a list or dict argument gained, lost or replaced an
item), ``training`` (a module switched between ``train()`` and ``eval()``), ``state``
(an optimizer's hyperparameters or the set of its state entries).
"""

import torch

ASPECTS = ("values", "grad", "requires_grad", "items", "training", "state", "storage")
MAX_REPORTED = 20


def snapshot(args):
    """What each argument holds before the call: ``[(argument index, path, kind, object, state)]``."""
    entries = []
    for index, arg in enumerate(args):
        _walk(arg, f"#{index}", index, entries, depth=0, seen=set())
    return entries


def changes(before):
    """What changed since ``snapshot``: a list of ``{"argument", "path", "what"}`` (plain data)."""
    found = []
    for index, path, kind, thing, state in before:
        for what in _compare(kind, thing, state):
            found.append({"argument": index, "path": path, "what": what})
            if len(found) >= MAX_REPORTED:
                return found
    return found


def _walk(value, path, index, entries, depth, seen):
    if depth > 6 or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        entries.append((index, path, "tensor", value, _tensor_state(value)))
    elif isinstance(value, torch.nn.Module):
        entries.append((index, path, "module", value, [m.training for m in value.modules()]))
        for name, tensor in list(value.named_parameters()) + list(value.named_buffers()):
            _walk(tensor, f"{path}.{name}", index, entries, depth + 1, seen)
    elif isinstance(value, torch.optim.Optimizer):
        entries.append((index, path, "optimizer", value, _optimizer_state(value)))
        for number, state in enumerate(value.state.values()):
            for key, item in state.items():
                _walk(item, f"{path}.state[{number}][{key!r}]", index, entries, depth + 1, seen)
    elif isinstance(value, (list, dict)):
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        entries.append((index, path, "container", value, [(key, id(item)) for key, item in items]))
        for key, item in items:
            _walk(item, f"{path}[{key!r}]", index, entries, depth + 1, seen)
    elif isinstance(value, tuple):
        for number, item in enumerate(value):
            _walk(item, f"{path}[{number}]", index, entries, depth + 1, seen)


def _tensor_state(tensor):
    grad = tensor.grad if (tensor.is_leaf or tensor.retains_grad) else None
    return {
        "version": tensor._version, "requires_grad": tensor.requires_grad, "shape": tuple(tensor.shape),
        "values": _copy(tensor),
        "grad": None if grad is None else (grad, grad._version, _copy(grad)),
        "storage": _storage(tensor),
    }


def _storage(tensor):
    """The tensor's storage object (kept alive, so no other storage gets its address) and its offset in it."""
    try:
        return tensor.untyped_storage(), tensor.storage_offset()
    except (RuntimeError, NotImplementedError, TypeError):   # sparse and other layouts without one
        return None


def _swapped(tensor, before):
    now = _storage(tensor)
    if before is None or now is None:
        return False
    return now[0].data_ptr() != before[0].data_ptr() or now[0]._cdata != before[0]._cdata or now[1] != before[1]


def _copy(tensor):
    data = tensor.detach()
    if data.layout != torch.strided:
        data = data.to_dense()
    return data.clone()


def _optimizer_state(optimizer):
    groups = [{key: [id(p) for p in value] if key == "params" else value for key, value in group.items()
               if key == "params" or isinstance(value, (int, float, bool, str))} for group in optimizer.param_groups]
    return groups, len(optimizer.state)


def _compare(kind, thing, state):
    if kind == "tensor":
        return _tensor_changes(thing, state)
    if kind == "module":
        return ["training"] if [m.training for m in thing.modules()] != state else []
    if kind == "optimizer":
        return ["state"] if _optimizer_state(thing) != state else []
    items = list(thing.items()) if isinstance(thing, dict) else list(enumerate(thing))
    return ["items"] if [(key, id(item)) for key, item in items] != state else []


def _tensor_changes(tensor, state):
    found = []
    if tensor._version != state["version"] or tuple(tensor.shape) != state["shape"] or not _same(tensor, state["values"]):
        found.append("values")
    if tensor.requires_grad != state["requires_grad"]:
        found.append("requires_grad")
    if _swapped(tensor, state["storage"]):
        found.append("storage")
    grad = tensor.grad if (tensor.is_leaf or tensor.retains_grad) else None
    before = state["grad"]
    if (grad is None) != (before is None) or (grad is not None and (
            grad is not before[0] or grad._version != before[1] or not _same(grad, before[2]))):
        found.append("grad")
    return found


def _same(tensor, copy):
    data = tensor.detach()
    if data.layout != torch.strided:
        data = data.to_dense()
    if data.shape != copy.shape or data.dtype != copy.dtype:
        return False
    same = data == copy
    if data.is_floating_point() or data.is_complex():
        same = same | (data.isnan() & copy.isnan())
    return bool(same.all())


class Elsewhere:
    """What an answer changed in copies of its arguments that it got in another process.

    An exercise whose ``call`` runs the answer there (``08.no_sync_loop``: one process per
    DDP rank, each with its own copy of the model and of its micro-batches) declares a
    keyword parameter ``watch_arguments``: ``observe`` passes one of these, the caller sends
    it along (it pickles by name), takes ``snapshot`` of what the answer gets before the
    call and ``changes`` after it, where the answer ran, and hands the entries back to
    ``report`` in the caller's terms (the argument's index and path in the original
    arguments).  ``observe`` adds them to ``record["touched"]``.
    """

    snapshot = staticmethod(snapshot)
    changes = staticmethod(changes)

    def __init__(self):
        self.found = []

    def report(self, entries):
        for entry in entries:
            entry = {"argument": int(entry["argument"]), "path": str(entry["path"]), "what": str(entry["what"])}
            if entry not in self.found and len(self.found) < MAX_REPORTED:
                self.found.append(entry)


# --- what the exercise allows ---------------------------------------------------------------

def normalise(modifies, parameter_names):
    """``Exercise.modifies`` as a tuple of ``"index"`` / ``"index:aspect"`` strings.

    Accepts ``"all"``, argument names or indices (everything of that argument may
    change), and ``"name:aspect"`` (only that aspect, one of ``ASPECTS``).
    """
    if modifies in ("all", ("all",)):
        return ("*",)
    if isinstance(modifies, (str, int)):
        modifies = (modifies,)
    result = []
    for item in modifies:
        argument, _, aspect = str(item).partition(":")
        if argument.isdigit():
            index = int(argument)
        elif argument in parameter_names:
            index = parameter_names.index(argument)
        elif argument == "*":
            result.append("*")
            continue
        else:
            raise ValueError(f"modifies names {argument!r}, which is not an argument of the reference "
                             f"({', '.join(parameter_names) or 'none'})")
        if aspect and aspect not in ASPECTS:
            raise ValueError(f"modifies: unknown aspect {aspect!r}; one of {ASPECTS}")
        result.append(f"{index}:{aspect}" if aspect else str(index))
    return tuple(result)


def forbidden(touched, allowed):
    """The entries of ``touched`` that ``allowed`` (normalised ``modifies``) does not permit."""
    if "*" in allowed:
        return []
    return [entry for entry in touched
            if str(entry["argument"]) not in allowed and f"{entry['argument']}:{entry['what']}" not in allowed]


_WHAT = {"values": "its values (in place)", "grad": "its `.grad`", "requires_grad": "its `requires_grad`",
         "items": "its items", "training": "its train/eval mode", "state": "its state",
         "storage": "its memory, swapped for new memory"}


def describe(entries, names, what=True):
    """``the argument `x` (its values (in place))``, for feedback; ``names`` are the reference's parameter names.
    ``what=False``: the paths alone (`` `x` ``)."""
    parts = []
    for entry in entries[:3]:
        index = entry["argument"]
        name = names[index] if index < len(names) else f"argument {index + 1}"
        inside = entry["path"][len(f"#{index}"):]     # ".0.weight", "[1]"
        where = f"`{name}{inside}`"
        parts.append(f"{where} ({_WHAT.get(entry['what'], entry['what'])})" if what else where)
    more = f" and {len(entries) - 3} more" if len(entries) > 3 else ""
    return ", ".join(parts) + more
