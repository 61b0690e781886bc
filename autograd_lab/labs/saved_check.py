"""Call a training-step answer and see how it measured, checkpointed and counted (06.checkpointed_step).

The exercise asks for a count *measured* with the course's ``saved_tensors`` and
``activations_kept``, of a step whose blocks are checkpointed.  The value alone cannot tell a
measured count from a typed one, nor a checkpoint that carries the loss from one computed
for show beside an ordinary forward pass, so the check calls the answer through
``step_with_unmeasured_saves``, which adds what it saw to the answer's output:

* saved-tensor hooks of its own, outermost: hooks form a stack and only the innermost sees a
  save, so a tensor that reaches them was saved outside every measurement the answer made
  (and, when every ``saved_tensors`` measurement had ended, after it: the loss left out);
* the ``saved_tensors`` measurements the step opened, and which of them it read: the
  returned count must be what one of them counted (``activations_kept``, ``count`` or
  ``saves``), read from it, and that measurement must have been open while the model's
  blocks ran forward (adversarial round 8: a count read from a second measurement around
  ``len(model) + 1`` ops on a tensor of the answer's own got full marks), not a number typed beside it (or beside the answer's own
  identity hooks, which hide every save from the hooks above).  A typed count is right
  whenever it equals the measurement's, so each measurement opened during the call also
  holds a few hundred entries of the check's (``CANARY``, a number drawn afresh for each
  measurement): a count that flowed from this call's measurement carries them, and the
  check takes them off again before comparing; a number typed beside a measurement, even
  one that was read and thrown away, does not (it is data flow, not a call, that is judged);
* saved-tensor hooks the step pushed that are neither a ``saved_tensors`` measurement nor a
  checkpoint's own: identity hooks of the answer's hide every save beneath them, from the
  course's measurement and from the hooks above;
* the activations made inside the model's blocks during the forward pass that were still
  alive when the backward began, judged by their storages (a dispatch mode of the check's
  sees every op the blocks' layers run): a checkpoint keeps none of them (it keeps only its
  input and recomputes the rest), while an ordinary ``block(h)`` keeps every one that a node
  saved, whichever hooks it ran under, and a selective checkpoint (``context_fn=``) keeps the
  outputs of the ops its policy saves, in a cache of its own that saved-tensor hooks never
  see (adversarial round 6: a policy that saves every op recomputes nothing and got full
  marks).  This is the memory checkpointing exists to save;
* a count that included the empty entries of the measurement: each measurement also holds a
  drawn number of zero-byte entries (and saves) of the check's, like the ``(0,)`` placeholder
  some releases' checkpoints save, which ``activations_kept`` leaves out and
  ``len(saved.tensors)``, ``saved.count`` or ``saved.saves`` do not (adversarial round 6:
  ``len(saved.tensors)`` was right on 2.13.0, where checkpoints save no placeholder, and one
  more on 2.5.1).
"""

import secrets
import sys
import weakref
from contextlib import contextmanager

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_leaves

from autograd_lab.labs.memory import SavedTensor, saved_tensors

OUTSIDE = "saved outside your measurement"
AFTER = "saved after your measurement ended"
KEPT_INSIDE_BLOCKS = "block activations kept until backward"
KEPT_BY_POLICY = "block activations a selective checkpoint kept until backward"
PLACEHOLDERS = "count included empty saved tensors"
FROM_MEASUREMENT = "count read from your saved_tensors measurement"
OWN_HOOKS = "saved-tensor hooks of your own"
CANARY = (100, 1000)   # entries the check adds to each measurement, drawn in this range: more than any real count
EMPTY = (1, 100)       # zero-byte entries it adds too, drawn in this range: only a count of every entry carries them


class BlocksRanWithoutGrad(RuntimeError):
    """The step raised, and its blocks had run with grad mode off in the forward pass (a reentrant checkpoint)."""


def step_with_unmeasured_saves(answer, model, x):
    """``answer(model, x)``, and after what it returned, a dict of what the check saw (the module's docstring).

    Returns ``(*result, {OUTSIDE: n, AFTER: m, KEPT_INSIDE_BLOCKS: k, KEPT_BY_POLICY: p, FROM_MEASUREMENT: bool,
    PLACEHOLDERS: bool, OWN_HOOKS: h})``; the reference's is ``{0, 0, 0, 0, True, False, 0}``.
    """
    parameters = {_storage(p) for p in model.parameters()}
    missed, after = set(), set()

    def pack(tensor):
        if tensor.untyped_storage().nbytes() > 0 and _storage(tensor) not in parameters:
            missed.add(_storage(tensor))
            if opened.all and all(m in opened.ended for m in opened.all):
                after.add(_storage(tensor))
        return tensor

    with _measurements() as opened, _block_activations(model, opened.model_ran) as blocks, \
            _hooks_pushed(pack) as own_hooks:
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
                result = answer(model, x)
        except RuntimeError as error:
            if blocks.ran_without_grad and "does not require grad" in str(error):
                raise BlocksRanWithoutGrad(
                    "your loss has no grad_fn: your blocks ran with grad mode off in the forward pass, which is what "
                    "the reentrant checkpoint (`use_reentrant=True`) does when no input of the block requires grad "
                    "(x comes from a frozen embedding), so nothing was recorded for backward. Use "
                    "`checkpoint(block, h, use_reentrant=False)`; x itself must stay as it is.") from None
            raise
    result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    place = 1 if len(result) > 1 else 0    # a bare count (no pair) carries the canary too: shown without it
    count = result[place]
    seen = {OUTSIDE: len(missed), AFTER: len(after), KEPT_INSIDE_BLOCKS: blocks.kept_at_backward,
            KEPT_BY_POLICY: blocks.kept_by_policy, FROM_MEASUREMENT: opened.counted(count),
            PLACEHOLDERS: opened.counted_empty(count), OWN_HOOKS: len(own_hooks)}
    result = (*result[:place], opened.without_canary(count), *result[place + 1:])
    return (*result, seen)


@contextmanager
def _hooks_pushed(checkers_pack):
    """The pack hooks of the saved-tensor hooks the step pushed, other than a measurement's, a checkpoint's or ours.

    Every push goes through ``torch._C._autograd._push_saved_tensors_default_hooks`` (what
    ``saved_tensors_hooks`` calls when entered), replaced for the call only. A checkpoint's
    hooks are functions of ``torch.utils.checkpoint`` (on some releases wrapped by dynamo,
    which keeps their module). Not seen: the builtin called through a reference taken before
    the check ran.
    """
    module = torch._C._autograd
    original = module._push_saved_tensors_default_hooks
    own = []

    def push(pack_hook, unpack_hook):
        measurement = getattr(pack_hook, "__self__", None)
        if not (pack_hook is checkers_pack or isinstance(measurement, saved_tensors)
                or getattr(pack_hook, "__module__", None) == "torch.utils.checkpoint"):
            own.append(pack_hook)
        return original(pack_hook, unpack_hook)

    module._push_saved_tensors_default_hooks = push
    try:
        yield own
    finally:
        module._push_saved_tensors_default_hooks = original


class _Opened:
    """The ``saved_tensors`` measurements a step entered, those that ended, and those it read a number from."""

    def __init__(self):
        self.all, self.ended, self.read = [], [], []
        self.saw_model = set()   # id(measurement) of those open while a layer of the model ran forward
        self.canary = {}   # id(measurement) -> the entries the check added to it
        self.empty = {}    # id(measurement) -> the zero-byte entries among them

    def add_canary(self, measurement):
        """Entries of the check's in ``measurement``, as many as a number drawn for it: every count of it carries them."""
        low, high = CANARY
        drawn = set(self.canary.values())
        size = next(n for n in iter(lambda: low + secrets.randbelow(high - low), None) if n not in drawn)
        self.canary[id(measurement)] = size
        for index in range(size):
            measurement._seen[("check", id(self), index)] = _CANARY_ENTRY
        measurement.__dict__["saves"] = measurement.__dict__.get("saves", 0) + size
        empty = EMPTY[0] + secrets.randbelow(EMPTY[1] - EMPTY[0])
        self.empty[id(measurement)] = empty
        for index in range(empty):
            measurement._seen[("check", "empty", id(self), index)] = _EMPTY_ENTRY
        measurement.__dict__["saves"] += empty     # as many saves of them: ``saves`` counts every pack call

    def model_ran(self):
        """A layer of the model runs forward: every measurement open now measures the step."""
        self.saw_model.update(id(m) for m in self.all if m not in self.ended)

    def counted(self, count):
        """Whether ``count`` is what a measurement of the step (open while the model ran) counted and the step read."""
        if isinstance(count, bool) or not isinstance(count, int):
            return False
        return any(count in self._counts(m) for m in self.read if id(m) in self.saw_model)

    def counted_empty(self, count):
        """Whether ``count`` counted every entry (or save) of a measurement the step read, the empty ones included."""
        return any(self._empty_counted(count, m) for m in self.read)

    @staticmethod
    def _empty_counted(count, m):
        return not isinstance(count, bool) and isinstance(count, int) and count in (len(m._seen), m.__dict__.get("saves"))

    @staticmethod
    def _counts(m):
        return sum(1 for t in m.tensors if t.nbytes > 0), len(m._seen), m.__dict__.get("saves")

    def without_canary(self, count):
        """``count`` less the canary it carries: a count computed from a measurement's is compared as the step's.

        A count that carries no canary (a typed one, smaller than any canary) is returned as it is.
        """
        if isinstance(count, bool) or not isinstance(count, int):
            return count
        for m in self.read:
            if count in self._counts(m):
                return count - self.canary[id(m)] - (self.empty[id(m)] if self._empty_counted(count, m) else 0)
        carried = [size for size in self.canary.values() if size <= count < size + CANARY[0]]
        return count - max(carried) if carried else count


@contextmanager
def _measurements():
    """While the step runs, ``saved_tensors`` notes each measurement entered, ended and read (its count).

    The class is the course's, so the notes are kept on it for the call only and put back after.
    A read is any of ``tensors`` (what ``activations_kept`` reads), ``count``, ``nbytes`` or
    ``saves`` asked for by code other than the measurement's own pack hook.
    """
    opened = _Opened()
    originals = {name: saved_tensors.__dict__[name] for name in ("__enter__", "__exit__", "tensors", "count", "nbytes")}
    pack_code = saved_tensors._pack.__code__

    def note_read(measurement):
        if measurement in opened.all and measurement not in opened.read:
            opened.read.append(measurement)

    def enter(self):
        opened.all.append(self)
        opened.add_canary(self)
        return originals["__enter__"](self)

    def exit_(self, *exc_info):
        opened.ended.append(self)
        return originals["__exit__"](self, *exc_info)

    def reading(prop):
        return property(lambda self: (note_read(self), prop.fget(self))[1])

    class Saves:
        """``saves`` as a plain number, noting a read unless the pack hook counts."""

        def __get__(self, measurement, owner=None):
            if measurement is None:
                return self
            if sys._getframe(1).f_code is not pack_code:
                note_read(measurement)
            return measurement.__dict__.get("saves", 0)

        def __set__(self, measurement, value):
            measurement.__dict__["saves"] = value

    patched = {"__enter__": enter, "__exit__": exit_, "saves": Saves(),
               **{name: reading(originals[name]) for name in ("tensors", "count", "nbytes")}}
    for name, value in patched.items():
        setattr(saved_tensors, name, value)
    try:
        yield opened
    finally:
        for name in patched:
            if name in originals:
                setattr(saved_tensors, name, originals[name])
            else:
                delattr(saved_tensors, name)


class _Blocks:
    """What the blocks' layers made in the forward pass, by storage, and what of it was alive when backward began."""

    def __init__(self, parameters):
        self.made = {}            # storage -> (weak reference, made under a selective checkpoint's policy)
        self.outputs = set()      # the blocks' outputs' storages: a checkpoint keeps its input, the previous output
        self.parameters = parameters
        self.entered = []         # per layer running, whether a selective checkpoint's caching mode was on
        self.kept_at_backward = self.kept_by_policy = 0
        self.ran_without_grad = False

    def note(self, tensor):
        if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().nbytes() > 0:
            ref = StorageWeakRef(tensor.untyped_storage())
            earlier = self.made.get(ref.cdata)
            if ref.cdata not in self.parameters and (earlier is None or earlier[0].expired()):
                self.made[ref.cdata] = (ref, any(self.entered))

    def count_alive(self):
        alive = [selective for key, (ref, selective) in self.made.items()
                 if key not in self.outputs and not ref.expired()]
        self.kept_at_backward, self.kept_by_policy = alive.count(False), alive.count(True)


class _MadeInBlocks(TorchDispatchMode):
    """Every tensor an op makes while a layer of a block runs its forward pass (not a recomputation)."""

    @classmethod
    def _should_skip_dynamo(cls):
        # torch >= 2.13 otherwise imports torch._dynamo (seconds) the first time the mode runs.
        return False

    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.blocks.entered and torch._C._current_autograd_node() is None:
            for tensor in tree_leaves(out):
                self.blocks.note(tensor)
        return out


def _under_selective_policy():
    """Whether a selective checkpoint's caching mode (``context_fn=create_selective_checkpoint_contexts``) is on."""
    return any(type(mode).__name__ == "_CachingTorchDispatchMode" for mode in _get_current_dispatch_mode_stack())


@contextmanager
def _block_activations(model, on_forward=lambda: None):
    """Storages made by the layers inside each block in the forward pass; those alive when backward begins.

    A dispatch mode notes (weakly) the storage of every tensor an op makes while a layer of a
    block runs forward (forward pre-hook to forward hook, outside the backward), but for the
    parameters' (a weight's transpose is a view).  A hook on each layer's output fires when the
    backward computes its gradient; the first time, only the nodes after it have run: the
    storages still alive then (the blocks' own outputs left out, since a checkpoint keeps its
    input) are what the forward pass kept for backward, but for those the node just run has
    released.  Storages, not tensor objects: a selective checkpoint keeps a detached alias of
    an op's output, and an ordinary node a saved variable, while the layer's output object dies.
    Those made while a selective checkpoint's caching mode was on are counted apart.  Not seen:
    a layer called as ``layer.forward`` (no module hook runs).  ``on_forward()`` is called each
    time a layer starts its forward pass (not a recomputation).
    """
    blocks = _Blocks({StorageWeakRef(p.untyped_storage()).cdata for p in model.parameters()})
    started = []

    def on_grad(_):
        if not started:
            started.append(True)
            blocks.count_alive()

    def entered(module, inputs):
        if torch._C._current_autograd_node() is None:
            blocks.entered.append(_under_selective_policy())
            on_forward()

    def layer_made(module, inputs, output):
        if torch._C._current_autograd_node() is not None:
            return
        if blocks.entered:
            blocks.entered.pop()
        if not isinstance(output, torch.Tensor):
            return
        if not torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters()):
            blocks.ran_without_grad = True
        if id(module) in ends:
            blocks.outputs.add(StorageWeakRef(output.untyped_storage()).cdata)
        elif output.requires_grad:
            output.register_hook(on_grad)

    def block_made(module, inputs, output):
        if isinstance(output, torch.Tensor) and torch._C._current_autograd_node() is None:
            blocks.outputs.add(StorageWeakRef(output.untyped_storage()).cdata)

    children = list(model.children())
    handles = [child.register_forward_hook(block_made) for child in children]
    # A Sequential block's last layer makes the block's output (a checkpoint keeps it as the next one's input), even
    # when the block is called as `block.forward`, which skips the block's own hook.
    ends = {id(_last_layer(child)) for child in children}
    layers = [layer for child in children for layer in child.modules() if not list(layer.children())]
    handles += [layer.register_forward_pre_hook(entered) for layer in layers]
    handles += [layer.register_forward_hook(layer_made) for layer in layers]
    try:
        with _MadeInBlocks(blocks):
            yield blocks
    finally:
        for handle in handles:
            handle.remove()


def _last_layer(block):
    """The layer whose output is a Sequential block's output (the block itself for anything else)."""
    while isinstance(block, torch.nn.Sequential) and len(block):
        block = block[-1]
    return block


_CANARY_ENTRY = SavedTensor(shape=(1,), dtype=torch.float32, device="cpu", nbytes=4)
_EMPTY_ENTRY = SavedTensor(shape=(0,), dtype=torch.float32, device="cpu", nbytes=0)   # like a checkpoint's placeholder


def _storage(tensor):
    storage = tensor.untyped_storage()
    return (tensor.device.type, storage.data_ptr(), storage.nbytes())
