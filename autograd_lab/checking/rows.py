"""Which rows of the data arguments flowed into each backward pass: micro-batches judged by what they computed on.

An exercise about micro-batches names its data arguments (``"rows:1"``: the flat tensor
argument 1, ``x``, along its first dimension).  The tape calls this ledger for every aten op,
and it follows rows as data flow:

* a tensor whose memory lies in a data argument's (a view: ``chunk``, ``split``, slicing,
  ``x[i::k]``, ``x.view(k, r, d)[i]``, ``from_numpy(x.numpy())``) holds exactly the rows its
  elements sit in, worked out from its storage offset and strides;
* a whole copy of a data argument (``x.double()``, ``x.clone()``, ``torch.tensor(x.tolist())``)
  becomes another copy of its rows, with the same geometry; ``x[index]`` and
  ``index_select(x, 0, index)`` hold the rows the index names;
* any other op's outputs hold every row its inputs held (``x.T @ x`` holds all of them), and a
  tensor built from Python numbers after rows went to Python (``tolist``, ``item``, ``numpy``)
  holds those rows.

When a backward pass starts, the rows of its roots (the losses) and of its ``gradient=`` are
the rows that flowed into what it differentiates (``facts["backward_rows"]``).  A pass through
one micro-batch's loss holds that micro-batch's rows: a pass through the whole batch, through
something computed from all of it (``x.T @ x`` folded once, whatever the sizes of the tensors
it then produces), or through nothing of the batch at all, does not.  So the size of what a
pass computes no longer matters (round 4 A2 forged it with a padding tensor), only what it
computed on.

What it cannot see is in ``docs/authoring-exercises.md`` ("What the tape cannot see").
"""

import torch

MAX_RUNS = 1024             # backward passes whose rows are kept
_MAX_INDEXED = 1 << 16      # a view larger than this is taken to hold every row of the memory it overlaps
_COPIES = frozenset(f"aten::{name}" for name in ("clone", "_to_copy", "to", "contiguous", "copy_", "_copy_from",
                                                  "_copy_from_and_resize", "lift_fresh_copy", "lift_fresh"))
_INDEXING = frozenset(("aten::index", "aten::index_select", "aten::_unsafe_index"))


def _quiet():
    """Our own bookkeeping, unseen by the recorders."""
    return _Both()


class _Both:
    def __enter__(self):
        self._a, self._b = torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction()
        self._a.__enter__()
        self._b.__enter__()

    def __exit__(self, *exc):
        self._b.__exit__(*exc)
        self._a.__exit__(*exc)
        return False


def _storage(tensor):
    try:
        storage = tensor.untyped_storage()
        return storage, storage.data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):   # sparse and other layouts without one
        return None, None


class _Region:
    """The memory of a data argument (or of a whole copy of it): which row an element address sits in."""

    def __init__(self, tensor, argument, first_bit):
        self.start = tensor.data_ptr()
        self.itemsize = tensor.element_size()
        self.row_bytes = max(1, tensor.stride(0)) * self.itemsize
        self.rows, self.argument, self.first_bit = tensor.shape[0], argument, first_bit
        self.end = self.start + self.rows * self.row_bytes
        self.shape, self._keep, self._cache = tuple(tensor.shape), tensor, {}

    def bits(self, tensor, storage_ptr):
        """The rows (as bits) of this region that ``tensor``'s elements sit in; 0 when none."""
        if tensor.numel() == 0:
            return 0
        key = (storage_ptr, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.element_size())
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._bits(tensor, storage_ptr)
        return found

    def _bits(self, tensor, storage_ptr):
        itemsize = tensor.element_size()
        first = storage_ptr + tensor.storage_offset() * itemsize
        last = first + sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride())) * itemsize
        if last < self.start or first >= self.end:
            return 0
        if tensor.numel() > _MAX_INDEXED:
            rows = range(max(0, (first - self.start) // self.row_bytes),
                         min(self.rows, (last - self.start) // self.row_bytes + 1))
        else:
            with _quiet():
                offsets = torch.zeros((), dtype=torch.int64).expand(tensor.shape).clone()
                for dim, (n, s) in enumerate(zip(tensor.shape, tensor.stride())):
                    shape = [1] * tensor.dim()
                    shape[dim] = n
                    offsets += torch.arange(n, dtype=torch.int64).reshape(shape) * s
                addresses = first + offsets.reshape(-1) * itemsize
                inside = addresses[(addresses >= self.start) & (addresses < self.end)]
                rows = ((inside - self.start) // self.row_bytes).unique().tolist()
        mask = 0
        for row in rows:
            mask |= 1 << (self.first_bit + int(row))
        return mask


class Rows:
    """The ledger; ``runs`` holds, per backward pass, the rows of each data argument it differentiated."""

    def __init__(self, arguments, every_argument=()):
        self.regions, self.totals, self.all_bits = [], [], []
        bit = 0
        for index, tensor in enumerate(arguments):
            rows = tensor.shape[0] if tensor.dim() else 0
            self.totals.append(rows)
            self.all_bits.append(((1 << rows) - 1) << bit)
            if rows:
                self.regions.append(_Region(tensor, index, bit))
            bit += rows
        self.masks = {}         # storage data_ptr -> (storage, bits): rows an op's output holds
        self.seen = {_storage(t)[1] for t in every_argument}    # storage pointers given to the call or an op produced
        self.exported = 0       # rows that went to Python numbers
        self.runs = []

    def mask(self, tensor):
        storage, pointer = _storage(tensor)
        if storage is None:
            return 0
        bits = 0
        for region in self.regions:
            bits |= region.bits(tensor, pointer)
        known = self.masks.get(pointer)
        if known is not None:
            bits |= known[1]
        elif not bits and pointer not in self.seen and tensor.is_floating_point() and tensor.numel() > 1:
            bits = self.exported    # made where no op could be seen: perhaps from numbers taken out of the data
        return bits

    def _whole(self, tensor):
        """The data argument (index) this tensor is a whole, ordered copy of the rows of, or ``None``."""
        if tensor.dim() == 0:
            return None
        storage, pointer = _storage(tensor)
        for region in self.regions:
            if (tuple(tensor.shape) == region.shape and storage is not None
                    and pointer + tensor.storage_offset() * tensor.element_size() == region.start
                    and tensor.stride(0) * tensor.element_size() == region.row_bytes):
                return region
        return None

    def forward(self, name, inputs, outputs, args=()):
        """Every op outside the engine's backward (a gradient carries no rows); ``args``: the op's own arguments."""
        for tensor in outputs:
            self.seen.add(_storage(tensor)[1])
        if name in _COPIES and inputs and outputs:
            region = self._whole(inputs[-1]) or (name == "aten::lift_fresh" and self._equal_argument(outputs[0]))
            if region and tuple(outputs[0].shape) == region.shape:
                self.regions.append(_Region(outputs[0], region.argument, region.first_bit))
                return
        if name in _INDEXING and inputs:
            bits = self._indexed(name, args)
            if bits is not None:
                self._hold(outputs, bits)
                return
        bits = 0
        for tensor in inputs:
            bits |= self.mask(tensor)
        if name == "aten::lift_fresh" and outputs and outputs[0].numel() > 1:
            bits |= self.exported   # Python numbers made into a tensor after rows went to Python
        if bits:
            self._hold(outputs, bits)

    def _hold(self, outputs, bits):
        for tensor in outputs:
            storage, pointer = _storage(tensor)
            if storage is None or any(region.bits(tensor, pointer) for region in self.regions):
                continue        # a data argument's own memory: its rows come from where its elements sit
            known = self.masks.get(pointer)
            self.masks[pointer] = (storage, bits | (known[1] if known is not None else 0))

    def _indexed(self, name, args):
        """``x[index]`` / ``index_select(x, 0, index)`` on a whole data argument: the rows the index names."""
        if len(args) < 2 or not torch.is_tensor(args[0]):
            return None
        if name == "aten::index_select":
            index = args[2] if len(args) > 2 and args[1] == 0 else None
        else:                   # aten::index(self, indices): one index, on the first dimension only
            indices = list(args[1]) if isinstance(args[1], (list, tuple)) else []
            index = indices[0] if len(indices) == 1 else None
        region = self._whole(args[0])
        if region is None or not torch.is_tensor(index) or index.dim() != 1:
            return None
        with _quiet():
            if index.dtype == torch.bool:
                if index.numel() != region.rows:
                    return None
                rows = index.nonzero().reshape(-1).tolist()
            elif index.dtype in (torch.int64, torch.int32):
                rows = (index.remainder(region.rows)).tolist()
            else:
                return None
        bits = 0
        for row in rows:
            bits |= 1 << (region.first_bit + int(row))
        return bits | self.mask(index)

    def _equal_argument(self, tensor):
        for region in self.regions:
            kept = region._keep
            if tuple(tensor.shape) == region.shape and tensor.is_floating_point() == kept.is_floating_point():
                with _quiet():
                    if torch.equal(tensor.detach().to(kept.dtype), kept.detach()):
                        return region
        return None

    def exporting(self, tensor):
        """``tolist``, ``item``, ``numpy``, ``float(...)`` of a tensor: its rows went to Python."""
        self.exported |= self.mask(tensor)

    def start_run(self, tensors):
        """A backward pass starts from ``tensors`` (its roots and their ``gradient=``)."""
        if len(self.runs) >= MAX_RUNS:
            return
        bits = 0
        for tensor in tensors:
            bits |= self.mask(tensor)
        self.runs.append([[row for row in range(total) if bits >> (first + row) & 1]
                          for total, first in zip(self.totals, self._firsts())])

    def _firsts(self):
        firsts, bit = [], 0
        for total in self.totals:
            firsts.append(bit)
            bit += total
        return firsts

    def facts(self):
        return {"totals": list(self.totals), "runs": [list(run) for run in self.runs]}
