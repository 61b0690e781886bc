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

A value *cut* from the graph is derived too: the output of a recorded op whose derivative
autograd defines as zero (``round``, ``floor``, ``sign``, ...: ``_ZERO_DERIVATIVE``), an op
autograd did not record that reads a tracked value (an integer cast's way back to floats,
the forward of a custom ``Function``), and, when a backward op reads it, a tensor holding
tracked values that does not require grad (``.detach()``, ``.data``).  Such a value is the
derivative typed by hand just as a detached one is: it reaches the leaf's values, yet
autograd differentiates the pass as if it were a constant.

A backward op that reads a derived or foreign tensor, or an input's memory through a
tensor autograd did not record (the raw argument as a weight), computes with a
derivative made outside autograd; so does a ``gradient=`` / ``grad_outputs`` that is
derived, foreign or the input's values; so does a returned tensor that is derived or
tracked (the engine's product changed afterwards with values computed from the input, even
inside autograd: ``xx.grad * 3 * xx * xx``), and a ``.grad`` an optimizer steps on that is
(``w.grad = w.grad + formula``: ``stepping``).  Forward-mode AD is autograd too: an op is
recorded there when the torch call that ran it was differentiated, an argument carrying a
tangent at the current level (inside a ``torch.func`` gradient transform, a wrapped argument
that requires grad), as the tape's function mode asks (``differentiating``); what a dual
level computes from tensors that carry none (the input, the dual's ``primal``, ``.detach()``,
a transform's closure) is derived, as a detached value is.  A tangent ``unpack_dual`` returns
is the engine's product (derived only when it read a derived value); a tangent seeded into
``make_dual`` is judged like a ``gradient=``; forward mode's own arithmetic on a tangent
(its formula for the op the answer called) that reads a derived value is a weight typed by
hand, and one that reads the primal values of a second dual of the input (``d * (3 * z * z)``,
z's tangent zero) is that dual's derivative taken for d's (``_forward_op``; adv-00-04-r8 F1).
The returned value must be linear in the engine's products (copies, views, sums of passes,
scales: ``_LINEAR``, ``_LINEAR_IN_ONE``): a product or a power of them, or any other function
of one, means autograd differentiated another function and the rest was worked out by hand
(``reworked``; adv-00-04-r8 F2: the gradient of ``x ** 2``, then ``0.75 * g * g``).
And every backward pass must read at least one tracked tensor: the function the
exercises name is nonlinear in the input, so its true derivative needs the input's
saved values, while a laundered one runs a pass that is linear in the leaf.

What it cannot see is in ``docs/authoring-exercises.md`` ("What the tape cannot see").
"""

import collections
import importlib

import torch

# Ops that alias their input without computing: a detached alias of a value keeps what the value is.
_ALIASES = frozenset(("aten::detach", "aten::alias"))
# Ops whose outputs depend on their inputs' shape, dtype and device, never on their values.
_METADATA = frozenset(f"aten::{name}" for name in (
    "ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
    "new_ones", "new_zeros", "new_empty", "new_full", "new_empty_strided", "size", "sym_size", "stride",
    "sym_stride", "numel", "sym_numel", "dim", "is_same_size", "_has_compatible_shallow_copy_type"))
# Ops that copy values without computing with them: their output holds what their input held.
_COPIES = frozenset(f"aten::{name}" for name in ("clone", "_to_copy", "to", "contiguous", "_copy_from",
                                                  "_copy_from_and_resize", "lift", "lift_fresh_copy"))
# Ops autograd records with a derivative of zero: their output is a constant to the backward pass.
_ZERO_DERIVATIVE = frozenset(f"aten::{name}" for name in (
    "round", "floor", "ceil", "trunc", "fix", "sign", "sgn", "signbit", "round_", "floor_", "ceil_", "trunc_",
    "fix_", "sign_", "sgn_", "floor_divide", "remainder", "fmod", "bucketize", "searchsorted", "argmax", "argmin",
    "argsort", "heaviside"))
# Ops linear in every tensor they read (views, copies, sums, concatenation, selection): what they make from the
# engine's products is still the engine's products, scaled, summed or rearranged.  Any op not listed here or
# in ``_LINEAR_IN_ONE`` that reads one reworks it (``Provenance._rework``).
_LINEAR = frozenset(f"aten::{name}" for name in (
    "alias", "detach", "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "select", "slice", "narrow",
    "t", "transpose", "permute", "squeeze", "unsqueeze", "as_strided", "unbind", "split", "split_with_sizes",
    "chunk", "unfold", "diagonal", "flip", "roll", "repeat", "movedim", "unflatten", "flatten", "view_as_real",
    "view_as_complex", "index_select", "gather", "index", "take", "masked_select", "clone", "_to_copy", "to",
    "contiguous", "copy_", "_copy_from", "_copy_from_and_resize", "lift", "lift_fresh", "lift_fresh_copy",
    "add", "add_", "sub", "sub_", "neg", "neg_", "sum", "mean", "cumsum", "cumsum_", "cat", "stack", "zero_",
    "fill_", "_foreach_add", "_foreach_add_", "_foreach_sub", "_foreach_sub_", "_foreach_neg", "_foreach_neg_",
    "_foreach_zero_", "_foreach_copy_", "_fused_sgd_", "trace", "tril", "triu", "diag", "diag_embed",
    "sum_to_size", "_reshape_copy", "squeeze_", "unsqueeze_", "t_", "transpose_", "resize_", "set_"))
# Ops linear in each tensor argument alone (``mul``: ``g * c``, not ``g * g``); ``div`` and ``_foreach_div``
# only in the dividend, their first argument.
_LINEAR_IN_ONE = frozenset(f"aten::{name}" for name in (
    "mul", "mul_", "div", "div_", "mm", "bmm", "mv", "dot", "vdot", "matmul", "outer", "addmm", "addmv",
    "addcmul", "addcmul_", "baddbmm", "_foreach_mul", "_foreach_mul_", "_foreach_div", "_foreach_div_", "lerp",
    "lerp_", "where"))
_MAX_COMPARED = 1 << 16     # a foreign tensor larger than this is judged foreign without comparing values
# Ops whose output memory is uninitialised: what it holds is no value until something writes into it.
_UNINITIALISED = frozenset(f"aten::{name}" for name in (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"))
# The float types a copy of the input is looked for in (a float32 round trip of a float64 input, and back).
_COPY_DTYPES = (torch.float64, torch.float32)


def _key(tensor):
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None, None
    return storage._cdata, storage


def _key_of(tensor):
    return _key(tensor)[0]


def _floating(tensor):
    return tensor.is_floating_point() or tensor.is_complex()


def _readable(storage):
    """Memory the ledger can read: not too large, and not one of the storages Python may not touch."""
    try:      # (a dual tensor's internals: reading them through ``set_`` crashes the process)
        return 0 < storage.nbytes() <= 8 * _MAX_COMPARED and storage.data_ptr() != 0
    except RuntimeError:
        return False


def _bytes_of(storage):
    """A storage's bytes as a uint8 tensor (call with the dispatch mode off)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _typed(storage, dtype):
    """A storage's bytes read as ``dtype`` values, or ``None`` where they do not divide into them."""
    size = torch.empty((), dtype=dtype).element_size()
    if storage.nbytes() % size:
        return None
    return torch.empty(0, dtype=dtype, device=storage.device).set_(storage, 0, (storage.nbytes() // size,))


def _distinctive(values):
    """Two or more distinct finite values that are not whole numbers: contents that can identify a copy."""
    values = values[torch.isfinite(values)]
    values = values[values != values.round()]
    return values.numel() >= 2 and bool((values != values[0]).any())


def _linear_in_engine(name, args, engine_valued):
    """Whether op ``name`` called on ``args`` is linear in the engine's products among them."""
    if name in _LINEAR:
        return True
    if name not in _LINEAR_IN_ONE or args is None:
        return False
    carriers = [any(engine_valued(t) for t in _flat(arg)) for arg in args]
    if name.startswith(("aten::div", "aten::_foreach_div")):
        return not any(carriers[1:])
    if name.startswith("aten::where"):          # the condition chooses: a choice made on the values is not linear
        return not carriers[:1] or not carriers[0]
    if name.startswith("aten::lerp"):           # start + weight * (end - start): linear in the ends, not the weight
        return not any(carriers[2:])
    if name.startswith(("aten::addmm", "aten::addmv", "aten::addcmul", "aten::baddbmm")):
        return sum(carriers[1:3]) <= 1          # bias + a @ b: linear in the bias and in a or b
    return sum(carriers) <= 1


def _flat(value):
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flat(item)]
    return []


def _forward_ad_level():
    """The dual level ``torch.autograd.forward_ad`` is in (-1: none)."""
    return _FORWARD_AD._current_level


_FORWARD_AD = importlib.import_module("torch.autograd.forward_ad")
_functorch_level = torch._C._functorch.maybe_current_level
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_unwrapped = torch._C._functorch.get_unwrapped


class Provenance:
    """The ledger; ``found`` counts laundered derivatives by where they entered."""

    def __init__(self, wrt, arguments):
        self.inputs, self.derived = {}, {}      # storage id -> storage (kept alive: ids stay theirs)
        self.tracked_ids = {}                   # tensor id (_cdata) -> tensor: used by an op autograd recorded
        self.tracked = {}                       # storage id -> storage: recorded ops' outputs (kept alive too)
        self.seen = set()                       # storage ids an op produced or the call was given
        self.arguments = [a for a in arguments if a.is_floating_point() or a.is_complex()]
        self.found = collections.Counter()
        self.runs = self.runs_unread = 0
        self.in_transform = 0                   # > 0 inside a ``torch.func`` transform (set by the tape)
        # Per torch function call the tape's function mode is in (innermost last): whether the call is differentiated
        # by the transform or dual level it runs in (``differentiating``; None: neither is active).
        self.calls = []
        # Forward mode: the duals made (tensor id -> dual), and per tangent's storage id the duals whose seeded
        # tangents it carries; a tangent op may read primal values of those duals only (``_forward_op``).
        self.duals = {}
        self.tangent_of = {}
        # Values computed from the engine's products (its gradients, forward mode's tangents): by ops linear in them
        # (a copy, a view, a sum over passes, a scale), or by a nonlinear step (``g * g``, ``g ** 2``, ``exp(g)``):
        # autograd then differentiated another function and the rest was worked out by hand (adv-00-04-r8 F2).
        self.engine_linear = set()
        self.reworked = set()
        # The engine's products as the last op that wrote them left them (storage id -> (storage, bytes view, bytes)):
        # one changed where no op runs (through ``numpy()``'s view, ``g.numpy()[:] = 0.75 * g.numpy() ** 2``) is reworked.
        self.engine_bytes = {}
        self.engine_tangents = set()            # storage ids of tangents ``unpack_dual`` returned
        self.engine_products = set()            # storage ids the engine's backward ops wrote
        self.cut = {}                           # tensor id -> tensor: aliases of recorded values autograd cut off
        self.exported = False                   # the input's values (or values from them) left for Python
        self.leaf_seen = False                  # a tensor holding the input's values was recorded as requiring grad
        self._read = []                         # per backward pass in progress: did it read a tracked tensor
        # Which leaves holding the input's values each value was computed from, through what autograd
        # records, forward and backward: a gradient must come from its own leaf's graph, not from a second
        # leaf's (``_other_leaves``).
        self.leaves = {}                        # tensor id -> tensor: leaves holding the input's values, recorded
        self.origins = {}                       # tensor id or storage id -> (frozenset of leaf ids, kept alive)
        self.gradient_of = {}                   # storage id of a gradient autograd.grad returned -> its leaf
        # Non-leaves holding the input's values (``x.clone()``, ``x * 1``, ``x.view_as(x)`` of an x that requires
        # grad): a pass may differentiate with respect to one, so each is an origin of its own, over its parents'.
        self.holders = {}                       # tensor id -> (tensor, frozenset of its parents' origins)
        # Memory of unknown origin as the ledger last saw it (storage id -> (storage, its bytes)): a copy of the
        # input made where no op runs (pickle, torch.save, a raw memory copy, a file) is judged by its contents.
        self.sighted = {}
        self.copies = 0                         # memory judged a copy of the input (or derived) by its contents
        self.reads_before_ops = False           # the tape calls ``reading`` before each op
        self.fingerprints = [t.detach().reshape(-1) for t in wrt if _floating(t) and t.numel() <= _MAX_COMPARED]
        self.tainted = set()                    # storage ids of engine products a laundered value went into
        for tensor in wrt:
            key, storage = _key(tensor)
            if key is not None:
                self.inputs[key] = storage
        for tensor in arguments:
            key, _ = _key(tensor)
            self.seen.add(key)

    # forward: called for every op outside the engine's backward
    def forward(self, name, inputs, outputs, grad_on, args=None):
        self._read_after(inputs, outputs)
        # An in-place op writes its first argument, whether or not it returns it (``_foreach_mul_`` returns nothing).
        written = outputs if outputs or not (name.endswith("_") and args) else _flat(args[0])
        self._rework(name, inputs, written, args)
        self._follow(name, inputs, outputs, grad_on)
        for tensor in written:                  # an op wrote it where the ledger sees: its new bytes are known
            if _key(tensor)[0] in self.engine_bytes:
                self._snapshot(tensor)
        if not self.in_transform:
            # What an op computed from a known value is that value's (the ledger followed it, or it is a copy of
            # the engine's product); what it made from nothing known is judged by its contents.
            made = name in _UNINITIALISED or any(self._known(key) or key in self.engine_products
                                                 or key in self.engine_tangents for key in map(_key_of, inputs))
            for tensor in outputs:
                self._sight(tensor, written_by_op=True, uninitialised=made)

    def _engine_valued(self, tensor):
        key = _key(tensor)[0]
        return key is not None and key not in self.derived and (
            key in self.engine_products or key in self.engine_tangents or key in self.engine_linear)

    def _rework(self, name, inputs, outputs, args):
        """Values computed from the engine's products: linear in them, or reworked by a nonlinear step."""
        keys = [_key(t)[0] for t in outputs]
        if any(_key(t)[0] in self.reworked for t in inputs):
            self.reworked.update(k for k in keys if k is not None)
            return
        engine = [t for t in inputs if self._engine_valued(t)]
        if not engine or name in _METADATA:
            return
        if _linear_in_engine(name, args, self._engine_valued):
            self.engine_linear.update(k for k in keys if k is not None and k not in self.engine_products)
        else:
            self.reworked.update(k for k in keys if k is not None)

    def _follow(self, name, inputs, outputs, grad_on):
        keys = [_key(t) for t in outputs]
        self.seen.update(key for key, _ in keys)
        if name in _METADATA:
            return
        if name == "aten::_local_scalar_dense" and inputs and self._known(_key(inputs[0])[0]):
            self.exported = True                # one number to Python (``bytes(x.untyped_storage())`` reads each byte so)
        if name in _ALIASES and inputs and self._engine_product(_key(inputs[0])[0]):
            return      # a detached alias of the engine's product is its product (create_graph=True, then .detach())
        if name == "aten::lift_fresh":
            self._lifted(outputs)
            return
        if name == "aten::copy_" and len(inputs) >= 2:      # the destination holds the source's values
            self._assign(keys[:1], _key(inputs[1])[0])
            return
        in_keys = [_key(t)[0] for t in inputs]
        from_derived = any(k in self.derived for k in in_keys) or any(t._cdata in self.cut for t in inputs)
        # Inside a torch.func transform the tensors seen here are unwrapped and never require grad, and forward
        # mode's duals share their primal's memory: whether the torch call that dispatched the op was
        # differentiated is asked where the answer made it (``differentiating``, the tape's function mode).
        recorded = (grad_on and any(t.requires_grad for t in inputs)) or (
            (self.in_transform or _forward_ad_level() >= 0) and bool(self.calls) and self.calls[-1] is True)
        self._forward_op(inputs, in_keys, keys, from_derived)
        if recorded:
            for tensor, key in zip(inputs, in_keys):
                if tensor.requires_grad or self.in_transform:
                    self.tracked_ids[tensor._cdata] = tensor
                    self.leaf_seen = self.leaf_seen or key in self.inputs
                    if key in self.inputs and tensor.requires_grad and tensor.grad_fn is None and name != "aten::detach":
                        self.leaves[tensor._cdata] = tensor
            if name != "aten::detach":      # a detached alias is out of the leaf's graph
                self._pass_origins(inputs, outputs)
                self._hold(inputs, outputs)
            for tensor, (key, storage) in zip(outputs, keys):
                if from_derived or name in _ZERO_DERIVATIVE or not _floating(tensor):
                    self._mark([(key, storage)], self.derived)   # cut from the graph: a constant to backward
                    continue
                if key is not None and key not in self.inputs:     # a view of the input stays the input
                    self.tracked[key] = storage
                self.tracked_ids[tensor._cdata] = tensor
            return
        if any(k in self.tracked for k in in_keys):     # a recorded value, read where autograd does not record
            self._mark(keys, self.derived)
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

    # memory written where no op runs: called by the tape before every op
    def reading(self, tensors):
        """Before an op runs (the tape calls it): what it reads that changed since the ledger last looked."""
        self.reads_before_ops = True
        for tensor in tensors:
            self._engine_unchanged(tensor)
        if not self.in_transform:
            for tensor in tensors:
                self._sight(tensor, written_by_op=False)

    def _read_after(self, inputs, outputs):
        """Where the tape does not call ``reading``: the op's inputs it did not write, judged after it ran."""
        if not self.reads_before_ops and not self.in_transform:
            written = {_key(tensor)[0] for tensor in outputs}
            for tensor in inputs:
                if _key(tensor)[0] not in written:
                    self._sight(tensor, written_by_op=False)

    def _sight(self, tensor, *, written_by_op, uninitialised=False):
        # ``uninitialised``: only take a snapshot (an ``empty``'s memory, or what an op computed from known values)
        """Judge memory of unknown origin by its contents when it is new to the ledger or changed behind its back.

        A copy of the input's (or of a value computed from it) made by a route no op runs on (pickle,
        ``torch.save``, ``ctypes.memmove``, ``frombuffer`` of its bytes, a file, shared memory) holds the same
        bytes, or the input's values in another float type or order: it is the input (or derived), as a
        ``clone`` is.  Memory an op wrote that changed before the next op read it was written outside torch
        (a raw copy, a NumPy view): values of its own there are a derivative computed elsewhere (foreign).
        """
        key, storage = _key(tensor)
        if (key is None or key in self.inputs or key in self.derived or key in self.tracked
                or key in self.engine_products or key in self.engine_tangents):
            return                              # (any dtype: a byte view of a copy is read as floats below)
        last = self.sighted.get(key)        # (storage, a uint8 view of it, its bytes when last seen)
        with torch._C._DisableTorchDispatch():
            if last is not None and last[1].numel() == storage.nbytes() and torch.equal(last[1], last[2]):
                return                          # as the ledger last saw it
            if not _readable(storage):
                return
            now = _bytes_of(storage)
            self.sighted[key] = (storage, now, now.clone())
            if uninitialised:
                return
            kind = self._copy_of(storage, now)
            behind_its_back = not written_by_op and (last is not None or key not in self.seen)
            if kind is None and behind_its_back and self._classify_foreign(tensor) == "foreign":
                kind = "derived"
        if kind is not None:                    # the input's values went where no op follows them
            self.copies += 1
            self.exported = True
        if kind == "input":
            self.inputs[key] = storage
        elif kind == "derived":
            self._mark([(key, storage)], self.derived)

    def _copy_of(self, storage, raw):
        """``"input"``/``"derived"``: memory holding a known value's bytes, or entries of the input's values."""
        typed = [(dtype, _typed(storage, dtype)) for dtype in _COPY_DTYPES]
        typed = [(dtype, values) for dtype, values in typed if values is not None and _distinctive(values)]
        if not typed:
            return None                         # zeros, ones, whole numbers: no fingerprint
        for table, kind in ((self.inputs, "input"), (self.derived, "derived"), (self.tracked, "derived")):
            for other in list(table.values()):
                if (other.nbytes() == raw.numel() and other.device == storage.device and _readable(other)
                        and torch.equal(_bytes_of(other), raw)):
                    return kind
        for values in self._current_inputs():
            for dtype, here in typed:
                if values.device != here.device:
                    continue
                wanted = values.to(dtype)
                wanted = wanted[torch.isfinite(wanted) & (wanted != wanted.round())]
                if torch.unique(here[torch.isin(here, wanted)]).numel() >= 2:
                    return "input"              # two or more of the input's own values: a copy, cast or cut
        return None

    def _current_inputs(self):
        """The input's values as given and as the leaves made from it hold them now (an optimizer moves them)."""
        return self.fingerprints + [leaf.detach().reshape(-1) for leaf in self.leaves.values()
                                    if _floating(leaf) and leaf.numel() <= _MAX_COMPARED]

    def _copies_input(self, tensor, inputs):
        if tensor.numel() > _MAX_COMPARED:
            return False
        with torch._C._DisableTorchDispatch():
            return any(_key(source)[0] in self.inputs and source.shape == tensor.shape and source.dtype == tensor.dtype
                       and torch.equal(source.detach(), tensor.detach()) for source in inputs)

    def cut_off(self, aliases):
        """``.detach()`` / ``.data`` of a recorded value: the same numbers, a constant to autograd.

        A recorded copy of the input cut off (``x.clone().detach()`` where ``x`` requires grad) holds the
        input's values, not a derivative: it is a fresh leaf made another way, as ``x.detach().clone()`` is.
        """
        for alias in aliases:
            key, storage = _key(alias)
            if key not in self.tracked and key not in self.derived:
                continue
            if self._equals_argument(alias):    # (torch 2.5 dispatches the detach as an op on an untracked value)
                self.tracked.pop(key, None)
                self.derived.pop(key, None)
                self.inputs[key] = storage
            elif key in self.tracked:
                self.cut[alias._cdata] = alias

    def _equals_argument(self, tensor):
        if tensor.numel() > _MAX_COMPARED:
            return False
        with torch._C._DisableTorchDispatch():
            return any(argument.shape == tensor.shape and argument.dtype == tensor.dtype
                       and torch.equal(argument.detach(), tensor.detach()) for argument in self.arguments)

    def exporting(self, tensor):
        """Called by the tape's function mode for ``tolist``, ``numpy``, ``item``, ``float(...)``, ``data_ptr``."""
        self._sight(tensor, written_by_op=False)     # a copy made where no op runs, on its way to Python
        key = _key(tensor)[0]
        if key in self.inputs or key in self.derived or key in self.tracked:
            self.exported = True

    def _mark(self, keys, table):
        for key, storage in keys:
            if key is not None:
                table[key] = storage
                if table is self.derived:
                    self.inputs.pop(key, None)
                    self.tracked.pop(key, None)

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
            if self._laundered(tensor, as_weight=False) or self._from_input(tensor):
                self.found["gradient"] += 1

    def end_run(self):
        if self._read and not self._read.pop():
            self.runs_unread += 1

    def backward(self, inputs, outputs):
        self._read_after(inputs, outputs)
        self._pass_origins(inputs, outputs)
        tainted = False
        for tensor in inputs:
            key = _key(tensor)[0]
            tainted = tainted or key in self.tainted
            if self._laundered(tensor, as_weight=True):
                self.found["weight"] += 1
                tainted = True
            elif tensor._cdata in self.cut:
                self.found["weight"] += 1       # a recorded value cut from the graph (.detach(), .data)
                tainted = True
            elif self._read and (key in self.tracked and key not in self.inputs
                                 or tensor._cdata in self.tracked_ids):
                self._read[-1] = True
        for tensor in outputs:                  # what the engine writes is its own product
            key = _key(tensor)[0]
            self.seen.add(key)
            self.tracked.pop(key, None)
            self.reworked.discard(key)
            self.engine_products.add(key)
            self._snapshot(tensor)
            if tainted:                         # ... computed with a laundered derivative (an optimizer may step on it)
                self.tainted.add(key)

    def _known(self, key):
        return key in self.inputs or key in self.derived or key in self.tracked

    def _engine_product(self, key):
        return key is not None and key in self.engine_products and key not in self.derived and key not in self.tracked

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

    def _snapshot(self, tensor):
        key, storage = _key(tensor)
        if key is None or not _readable(storage):
            return
        with torch._C._DisableTorchDispatch():
            view = _bytes_of(storage)
            self.engine_bytes[key] = (storage, view, view.clone())

    def _engine_unchanged(self, tensor):
        """An engine product whose bytes changed since the op that last wrote them: written outside torch."""
        key = _key(tensor)[0]
        known = self.engine_bytes.get(key)
        if known is None:
            return
        with torch._C._DisableTorchDispatch():
            if known[1].numel() == known[0].nbytes() and torch.equal(known[1], known[2]):
                return
        self.reworked.add(key)
        self._snapshot(tensor)

    def returned(self, tensors):
        for tensor in tensors:
            self._engine_unchanged(tensor)
            if self._from_input(tensor):
                self.found["output"] += 1
            elif self._other_leaves(tensor):
                self.found["other_leaf"] += 1
            elif _key(tensor)[0] in self.reworked:
                self.found["reworked"] += 1

    # origins: which leaves (and non-leaves) holding the input's values a value was computed from
    def _origins_of(self, tensor):
        if tensor._cdata in self.leaves or tensor._cdata in self.holders or tensor._cdata in self.duals:
            return frozenset((tensor._cdata,))
        found = self.origins.get(("tensor", tensor._cdata)) or self.origins.get(_key(tensor)[0])
        return found[0] if found else frozenset()

    def _pass_origins(self, inputs, outputs):
        origins = frozenset().union(*(self._origins_of(t) for t in inputs)) if inputs else frozenset()
        if not origins:
            return
        for tensor in outputs:
            key, storage = _key(tensor)
            self.origins[("tensor", tensor._cdata)] = (origins, tensor)
            if key is not None and key not in self.inputs:      # a view of the input: its own tensor only
                self.origins[key] = (origins, storage)

    def _hold(self, inputs, outputs):
        """A recorded op's output equal to a leaf or non-leaf holding the input's values becomes a holder.

        Where x requires grad, ``x.clone()`` (or ``x * 1``, ``x + 0``, ``x.view_as(x)``) is a non-leaf of x's
        graph, and ``torch.autograd.grad(f(xl), xl)`` (or ``xl.retain_grad()``) differentiates with respect to
        it: what is computed from it is its own graph, not a second copy of the input (``_other_leaves``).
        """
        sources = [t for t in inputs if t._cdata in self.leaves or t._cdata in self.holders]
        if self.in_transform or not sources:
            return
        parents = frozenset().union(*(self._origins_of(t) for t in inputs))
        for tensor in outputs:
            # (autograd records the op above the dispatch mode: the output's grad_fn is not set yet)
            if tensor._cdata in self.holders or not _floating(tensor) or tensor.numel() > _MAX_COMPARED:
                continue
            with torch._C._DisableTorchDispatch():
                if not any(s.shape == tensor.shape and s.dtype == tensor.dtype
                           and torch.equal(s.detach(), tensor.detach()) for s in sources):
                    continue
            self.holders[tensor._cdata] = (tensor, parents)
            key, storage = _key(tensor)
            if key is not None and key not in self.inputs:      # (a view of the input: its own tensor only)
                self.origins[key] = (frozenset((tensor._cdata,)), storage)

    def _roots(self, origins, target=None):
        """The leaves ``origins`` come down to through the holders' parents, a path stopping where it reaches ``target``."""
        roots, stack, visited = set(), list(origins), set()
        while stack:
            origin = stack.pop()
            if origin == target or origin in visited:
                continue
            visited.add(origin)
            holder = self.holders.get(origin)
            if holder is None:
                roots.add(origin)
            else:
                stack.extend(holder[1])
        return roots

    def gradients(self, inputs, results):
        """``torch.autograd.grad``'s results, each the gradient of the input at its place."""
        for leaf, result in zip(inputs, results):
            if torch.is_tensor(leaf) and torch.is_tensor(result):
                self.gradient_of[_key(result)[0]] = leaf

    def _other_leaves(self, tensor):
        """A derivative computed from a leaf holding the input's values other than the one it is the gradient of.

        ``y`` and ``z`` both fresh leaves of the input, ``(y * (3 * z * z)).sum().backward()``: ``y.grad``
        is the engine's product and every value it read was recorded, yet it is ``3 z^2`` typed by hand,
        taken from ``z``'s graph as a weight.  A gradient whose leaf is not known (a ``torch.func``
        transform's, a forward-mode tangent) may come from the arguments' own graph, never another's.
        The leaf may be a non-leaf holding the input's values (``autograd.grad`` with respect to
        ``x.clone()``, a retained ``.grad``): what is computed from it is its graph; what is computed from
        the tensor it was copied from, or from another copy, is not.
        """
        origins = self._origins_of(tensor)
        if not origins:
            return False
        key = _key(tensor)[0]
        leaf = self.gradient_of.get(key)
        if leaf is None:
            candidates = list(self.leaves.values()) + [holder for holder, _ in self.holders.values()
                                                       if holder.retains_grad]
            leaf = next((leaf for leaf in candidates if torch.is_tensor(leaf.grad) and _key(leaf.grad)[0] == key),
                        None)
        if leaf is not None:
            return bool(self._roots(origins, leaf._cdata))
        arguments = {argument._cdata for argument in self.arguments}
        if key in self.engine_tangents:     # a tangent's duals are judged op by op (``_forward_op``)
            arguments |= set(self.duals)
        return bool(self._roots(origins) - arguments)

    def _from_input(self, tensor):
        """Computed from the input's values by ops outside the engine, recorded or not (a tangent aside)."""
        key = _key(tensor)[0]
        return key in self.derived or (key in self.tracked and key not in self.engine_tangents)

    # forward-mode AD: called by the tape's function mode
    def seeded(self, tangent):
        """``make_dual(primal, tangent)``: a tangent computed from the input is the derivative typed by hand."""
        if torch.is_tensor(tangent) and (self._laundered(tangent, as_weight=False) or self._from_input(tangent)):
            self.found["gradient"] += 1

    def made_dual(self, dual, tangent):
        """``make_dual`` returned ``dual`` for ``tangent``: an origin of its own, as a leaf is for backward."""
        if not torch.is_tensor(dual) or not torch.is_tensor(tangent):
            return
        self.duals[dual._cdata] = dual
        own = frozenset((dual._cdata,))
        self._carry([_key(tangent)], own)
        with torch._C._DisableTorchDispatch():      # forward mode may hold a copy of it (a view of a larger tensor)
            held = _FORWARD_AD.unpack_dual(dual).tangent
        key, storage = _key(held) if torch.is_tensor(held) else (None, None)
        if key is not None:
            self.tangent_of[key] = (own, storage)   # that copy carries this dual's tangent alone

    def _carry(self, keys, duals):
        """Tangents' storages (kept alive, so that their ids stay theirs) and the duals each carries."""
        for key, storage in keys:
            if key is not None:
                self.tangent_of[key] = (self.tangent_of.get(key, (frozenset(),))[0] | duals, storage)

    def _forward_op(self, inputs, in_keys, keys, from_derived):
        """An op on a tangent is forward mode's own arithmetic (the tangent formula of the op the answer called).

        It may read the tangents and the primal values computed from their own duals; a value made from the input
        outside forward mode is a weight typed by hand (adv-00-04-r8 F1), and one computed from a second dual of
        the input (``d * (3 * z * z)``, z's tangent zero) is that dual's derivative taken for d's, as a second leaf
        is in backward.
        """
        carried = frozenset().union(*(self.tangent_of[k][0] for k in in_keys if k in self.tangent_of))
        if not carried:
            return
        if from_derived:
            self.found["forward_weight"] += 1
        for tensor, key in zip(inputs, in_keys):
            if key not in self.tangent_of and (set(self._roots(self._origins_of(tensor))) & set(self.duals)) - carried:
                self.found["other_dual"] += 1
        self._carry(keys, carried)

    def differentiating(self, arguments):
        """Whether a torch call's arguments (``arguments()``: its tensors) are differentiated where it runs.

        ``None`` outside a transform and a dual level.  In forward mode, an argument that carries a tangent at the current level (a
        dual); in a ``torch.func`` gradient transform, a wrapped argument that requires grad there, grad mode
        on.  A value computed in a dual level from tensors that carry none (``3 * x ** 2`` next to
        ``make_dual(x, ones)``, the dual's ``primal``, ``d.detach()``) is a constant to forward mode, as a
        detached value is to backward (adv-00-04-r8 F1).
        """
        transform = _functorch_level() is not None
        if not transform and _forward_ad_level() < 0:
            return None
        grad_on = torch.is_grad_enabled()
        with torch._C._DisableTorchDispatch():
            for tensor in arguments():
                if transform and grad_on and _is_wrapped(tensor) and tensor.requires_grad:
                    return True
                try:
                    if _FORWARD_AD.unpack_dual(tensor).tangent is not None:
                        return True
                except RuntimeError:    # below autograd (a custom Function's forward): nothing is differentiated
                    continue
        return False

    def hooked(self, tensor):
        """A gradient hook on a value computed from the input: it rewrites the derivative autograd computes."""
        key = _key(tensor)[0]
        if key in self.tracked or key in self.inputs or key in self.derived:
            self.found["hook"] += 1

    def unpacked(self, tangent):
        """The tangent ``unpack_dual`` returned: forward-mode AD's product, unless it read a cut value."""
        while torch.is_tensor(tangent) and _is_wrapped(tangent):     # torch.func.jvp unpacks inside its level
            tangent = _unwrapped(tangent)
        key = _key(tangent)[0] if torch.is_tensor(tangent) else None
        if key is not None and key not in self.derived:
            self.engine_tangents.add(key)
            self.tracked.pop(key, None)

    # optimizers: called by the tape when a watched ``step`` runs
    def stepping(self, parameters):
        """An optimizer is about to apply these parameters' ``.grad``: each must be the engine's product."""
        for parameter in parameters:
            grad = getattr(parameter, "grad", None)
            if torch.is_tensor(grad) and (self._from_input(grad) or _key(grad)[0] in self.tainted):
                self.found["step"] += 1

    def facts(self):
        # A pass that read nothing recorded from the input differentiated a function linear in it:
        # a wrong function (the values tell), unless the input's values went to Python first,
        # where a derivative can be computed number by number and typed back in.
        return {"laundered": dict(self.found), "passes_linear_in_input": self.runs_unread if self.exported else 0,
                "copied_outside": self.copies}
