"""Where the numbers a backward pass reads came from: autograd's records, or a derivative worked out by hand.

A derivative typed by hand can be *laundered* through a trivial backward pass: fed in as
its cotangent (``(t * 1).backward(gradient=3 * x.detach() ** 2)``), as a constant weight
of the graph (``(t * (3 * x.detach() ** 2)).sum().backward()``), or multiplied into
``.grad`` afterwards.  The returned tensor then is the engine's product, yet autograd
differentiated nothing.  The tape (``tape.py``) calls this ledger for every aten op
while an exercise asks for it (``methods.autograd_derivative``), and it sorts storages:

* *input*: the memory of the differentiated arguments (``wrt``) and of value copies of
  them (``clone``, ``to``, ``copy_``, a tensor rebuilt from their ``tolist()`` or NumPy
  array with the same values): a fresh leaf made from the argument is one;
* *derived*: computed from input values by an op autograd did not record (detached,
  under ``no_grad``, ``.data``), by any op from a derived tensor, or an engine product
  changed by input values afterwards; and *foreign*: a floating-point tensor built from
  Python or NumPy data (``torch.tensor(list)``, ``from_numpy``) whose entries differ from
  each other and from every argument (a derivative computed element by element in Python);
* *tracked*: outputs of ops autograd recorded from tensors that require grad.

A backward op that reads a derived or foreign tensor, or an input's memory through a
tensor autograd did not record (the raw argument as a weight), computes with a
derivative made outside autograd; so does a ``gradient=`` / ``grad_outputs`` that is
derived, foreign or the input's values; so does a returned tensor that is derived.
And every backward pass must read at least one tracked tensor: the function the
exercises name is nonlinear in the input, so its true derivative needs the input's
saved values, while a laundered one runs a pass that is linear in the leaf.

What it cannot see is in ``docs/authoring-exercises.md`` ("What the tape cannot see").
"""

import collections

import torch

# Ops whose outputs depend on their inputs' shape, dtype and device, never on their values.
_METADATA = frozenset(f"aten::{name}" for name in (
    "ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
    "new_ones", "new_zeros", "new_empty", "new_full", "new_empty_strided", "size", "sym_size", "stride",
    "sym_stride", "numel", "sym_numel", "dim", "is_same_size", "_has_compatible_shallow_copy_type"))
# Ops that copy values without computing with them: their output holds what their input held.
_COPIES = frozenset(f"aten::{name}" for name in ("clone", "_to_copy", "to", "contiguous", "_copy_from",
                                                  "_copy_from_and_resize", "lift", "lift_fresh_copy"))
_MAX_COMPARED = 1 << 16     # a foreign tensor larger than this is judged foreign without comparing values


def _key(tensor):
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None, None
    return storage._cdata, storage


class Provenance:
    """The ledger; ``found`` counts laundered derivatives by where they entered."""

    def __init__(self, wrt, arguments):
        self.inputs, self.derived = {}, {}      # storage id -> storage (kept alive: ids stay theirs)
        self.tracked_ids = {}                   # tensor id (_cdata) -> tensor: used by an op autograd recorded
        self.tracked = set()                    # storage ids of recorded ops' outputs
        self.seen = set()                       # storage ids an op produced or the call was given
        self.arguments = [a for a in arguments if a.is_floating_point() or a.is_complex()]
        self.found = collections.Counter()
        self.runs = self.runs_unread = 0
        self.in_transform = 0                   # > 0 inside a ``torch.func`` transform (set by the tape)
        self.exported = False                   # the input's values (or values from them) left for Python
        self.leaf_seen = False                  # a tensor holding the input's values was recorded as requiring grad
        self._read = []                         # per backward pass in progress: did it read a tracked tensor
        for tensor in wrt:
            key, storage = _key(tensor)
            if key is not None:
                self.inputs[key] = storage
        for tensor in arguments:
            key, _ = _key(tensor)
            self.seen.add(key)

    # forward: called for every op outside the engine's backward
    def forward(self, name, inputs, outputs, grad_on):
        keys = [_key(t) for t in outputs]
        self.seen.update(key for key, _ in keys)
        if name in _METADATA:
            return
        if name == "aten::lift_fresh":
            self._lifted(outputs)
            return
        if name == "aten::copy_" and len(inputs) >= 2:      # the destination holds the source's values
            self._assign(keys[:1], _key(inputs[1])[0])
            return
        in_keys = [_key(t)[0] for t in inputs]
        from_derived = any(k in self.derived for k in in_keys)
        # Inside a torch.func transform the tensors seen here are unwrapped and never require
        # grad: what the transform records cannot be told apart, so all of it counts as recorded.
        recorded = self.in_transform or (grad_on and any(t.requires_grad for t in inputs))
        if recorded:
            for tensor, key in zip(inputs, in_keys):
                if tensor.requires_grad or self.in_transform:
                    self.tracked_ids[tensor._cdata] = tensor
                    self.leaf_seen = self.leaf_seen or key in self.inputs
            if from_derived:
                self._mark(keys, self.derived)
            else:
                for tensor, (key, _) in zip(outputs, keys):
                    self.tracked.add(key)
                    self.tracked_ids[tensor._cdata] = tensor
            return
        from_inputs = any(k in self.inputs for k in in_keys)
        if not (from_derived or from_inputs):
            return
        if from_derived:
            self._mark(keys, self.derived)
        elif name in _COPIES:
            self._mark(keys, self.inputs)
        else:
            # arithmetic on the input's values that autograd did not record; a view of the input is
            # still the input (its storage is the input's, nothing is computed), and so is a result
            # equal to an input (``x * 1.0``, ``x + 0``: a fresh leaf made another way)
            for tensor, (key, storage) in zip(outputs, keys):
                if key is None or (key in self.inputs and not name.endswith("_")):
                    continue
                table = self.inputs if self._copies_input(tensor, inputs) else self.derived
                self._mark([(key, storage)], table)

    def _copies_input(self, tensor, inputs):
        if tensor.numel() > _MAX_COMPARED:
            return False
        with torch._C._DisableTorchDispatch():
            return any(_key(source)[0] in self.inputs and source.shape == tensor.shape and source.dtype == tensor.dtype
                       and torch.equal(source.detach(), tensor.detach()) for source in inputs)

    def exporting(self, tensor):
        """Called by the tape's function mode for ``tolist``, ``numpy``, ``item``, ``float(...)``."""
        key = _key(tensor)[0]
        if key in self.inputs or key in self.derived or key in self.tracked:
            self.exported = True

    def _mark(self, keys, table):
        for key, storage in keys:
            if key is not None:
                table[key] = storage
                if table is self.derived:
                    self.inputs.pop(key, None)

    def _assign(self, keys, source):
        for key, storage in keys:
            self.inputs.pop(key, None)
            self.derived.pop(key, None)
            if source in self.derived:
                self.derived[key] = storage
            elif source in self.inputs:
                self.inputs[key] = storage

    def _lifted(self, outputs):
        """A tensor built from Python or NumPy data: a copy of an argument, a constant, or foreign."""
        for tensor in outputs:
            kind = self._classify_foreign(tensor)
            key, storage = _key(tensor)
            if kind == "input":
                self.inputs[key] = storage
            elif kind == "foreign":
                self.derived[key] = storage

    def _classify_foreign(self, tensor):
        if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() <= 1:
            return None
        if tensor.numel() > _MAX_COMPARED:
            return "foreign"
        with torch._C._DisableTorchDispatch():
            flat = tensor.detach().reshape(-1)
            if bool((flat == flat[0]).all()):
                return None                     # a constant: it carries no per-entry derivative
            for argument in self.arguments:
                if argument.shape == tensor.shape and torch.equal(argument.detach().to(tensor.dtype), tensor.detach()):
                    return "input" if _key(argument)[0] in self.inputs else None
        return "foreign"

    # backward: called for every op the engine runs
    def start_run(self, grad_tensors):
        self.runs += 1
        self._read.append(False)
        for tensor in grad_tensors:
            if self._laundered(tensor, as_weight=False):
                self.found["gradient"] += 1

    def end_run(self):
        if self._read and not self._read.pop():
            self.runs_unread += 1

    def backward(self, inputs, outputs):
        for tensor in inputs:
            key = _key(tensor)[0]
            if self._laundered(tensor, as_weight=True):
                self.found["weight"] += 1
            elif self._read and (key in self.tracked and key not in self.inputs
                                 or tensor._cdata in self.tracked_ids):
                self._read[-1] = True
        self.seen.update(_key(t)[0] for t in outputs)

    def _laundered(self, tensor, *, as_weight):
        key = _key(tensor)[0]
        if key is None:
            return False
        if key in self.derived:
            return True
        if key in self.inputs:          # the input's values, through a tensor autograd never recorded
            # (judged only where a leaf holding them was differentiated: with none, the answer
            # differentiated with respect to something else, which the values tell)
            return self.leaf_seen and (not as_weight or tensor._cdata not in self.tracked_ids)
        if key not in self.seen:        # made where no op could be seen: judged by its values
            self.seen.add(key)
            if self._classify_foreign(tensor) == "foreign":
                self.derived[key] = tensor.untyped_storage()
                return True
        return False

    def returned(self, tensors):
        for tensor in tensors:
            if _key(tensor)[0] in self.derived:
                self.found["output"] += 1

    def facts(self):
        # A pass that read nothing recorded from the input differentiated a function linear in it:
        # a wrong function (the values tell), unless the input's values went to Python first,
        # where a derivative can be computed number by number and typed back in.
        return {"laundered": dict(self.found), "passes_linear_in_input": self.runs_unread if self.exported else 0}
