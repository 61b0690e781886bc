"""Measure what the autograd graph keeps alive.

Training memory is roughly ``params + grads + optimizer state + saved
activations``.  The first three are easy to add up; the last one is what
autograd stores for backward, and ``saved_tensors`` measures it exactly with
``torch.autograd.graph.saved_tensors_hooks`` on any device::

    with saved_tensors(exclude=model.parameters()) as saved:
        loss = model(x).sum()
    saved.count, saved.nbytes

``tensors_made`` records instead every tensor a pass creates, saved or not.

A tensor saved by several ops (or twice by one op) is counted once, keyed by
its storage, because that is what it costs in memory.
"""

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode


@dataclass(frozen=True)
class SavedTensor:
    """One tensor that autograd kept for backward."""

    shape: tuple
    dtype: torch.dtype
    device: str
    nbytes: int


def _storage_key(tensor):
    # Views of one storage cost memory once; data_ptr of the storage identifies it.
    storage = tensor.untyped_storage()
    return (tensor.device.type, storage.data_ptr(), storage.nbytes())


class saved_tensors:
    """Context manager that records every tensor saved for backward inside it.

    ``exclude``: tensors (typically ``model.parameters()``) not to count, so the
    result is the activations alone.  After the block: ``count`` and ``nbytes``
    of unique saved storages, ``tensors`` (one ``SavedTensor`` each), and
    ``saves``, the number of pack calls including repeats.
    """

    def __init__(self, exclude=()):
        self._excluded = {_storage_key(t) for t in exclude}
        self._seen = {}
        self.saves = 0

    def _pack(self, tensor):
        self.saves += 1
        key = _storage_key(tensor)
        if key not in self._excluded and key not in self._seen:
            self._seen[key] = SavedTensor(
                shape=tuple(tensor.shape),
                dtype=tensor.dtype,
                device=tensor.device.type,
                nbytes=tensor.untyped_storage().nbytes(),
            )
        # A detached alias (same storage, same values), not the tensor itself: a saved *output* returned
        # as is holds its own grad_fn, a reference cycle through C++ that Python's gc cannot break, so a
        # forward measured and dropped without a backward pass would never free its activations
        # (measured on a GPU: +0.9 GiB per measured step).  Autograd re-attaches the node on unpack.
        return tensor.detach()

    @staticmethod
    def _unpack(tensor):
        return tensor

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._hooks.__exit__(*exc_info)
        return False

    @property
    def tensors(self):
        return list(self._seen.values())

    @property
    def count(self):
        return len(self._seen)

    @property
    def nbytes(self):
        return sum(t.nbytes for t in self._seen.values())


class tensors_made(TorchDispatchMode):
    """Context manager that records the shape of every tensor an op makes inside it, backward included.

    Where ``saved_tensors`` sees what autograd keeps, this sees what a pass creates, even
    briefly (a Jacobian built and thrown away would show here). ``exclude``: tensors whose
    views are not counted (a model's own weight, and its transpose made on the way).
    After the block: ``shapes``, one tuple per tensor made, in order.
    """

    @classmethod
    def _should_skip_dynamo(cls):
        # torch >= 2.13 otherwise imports torch._dynamo (seconds) the first time the mode runs.
        return False

    def __init__(self, exclude=()):
        super().__init__()
        self._excluded = {_storage_key(t) for t in exclude}
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor) and _storage_key(tensor) not in self._excluded:
                self.shapes.append(tuple(tensor.shape))
        return out


def tensor_bytes(tensors):
    """Bytes held by an iterable of tensors (``None`` entries count as zero)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def optimizer_state_bytes(optimizer):
    """Bytes of every tensor in the optimizer's per-parameter state (Adam: two moments and a step)."""
    return sum(tensor_bytes(v for v in state.values() if torch.is_tensor(v))
               for state in optimizer.state.values())


def memory_breakdown(model, optimizer=None, saved=None):
    """The four terms of training memory, in bytes, as a dict.

    ``saved`` is a finished ``saved_tensors`` measurement of the forward pass.
    Gradients count only where ``.grad`` is set, which is why ``zero_grad()``
    (``set_to_none=True``) actually frees memory.
    """
    params = list(model.parameters())
    return {
        "params": tensor_bytes(params),
        "grads": tensor_bytes(p.grad for p in params),
        "optimizer_state": optimizer_state_bytes(optimizer) if optimizer is not None else 0,
        "saved_activations": saved.nbytes if saved is not None else 0,
    }
