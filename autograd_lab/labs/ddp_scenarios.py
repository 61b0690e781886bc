"""The DDP experiments of lab 08, one module-level function per experiment.

Each runs inside one rank started by ``autograd_lab.labs.distributed.launch`` (the
process group is already initialised) and returns a dict of plain values and
CPU tensors for the notebook to compare.  Every rank builds the same data from
the same seed and keeps its own slice, so the notebook can rebuild the whole
batch in one process and check DDP against it.
"""

import os
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

IN_FEATURES = 4
OUT_FEATURES = 2


def make_model(seed=0):
    """The small model every experiment trains: the notebook builds the same one."""
    torch.manual_seed(seed)
    return nn.Linear(IN_FEATURES, OUT_FEATURES)


def make_data(n, seed=1):
    """``n`` (input, target) rows, identical on every rank and in the notebook."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n, IN_FEATURES, generator=generator),
            torch.randn(n, OUT_FEATURES, generator=generator))


def rank_slice(tensor, rank, world_size):
    """Rank ``rank``'s contiguous share of a batch: what a sampler without shuffling gives it."""
    share = tensor.shape[0] // world_size
    return tensor[rank * share:(rank + 1) * share]


@contextmanager
def stderr_captured():
    """Capture what this process writes to file descriptor 2 (torch's C++ code logs there) as ``text[0]``."""
    text = [""]
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            yield text
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text[0] = captured.read().decode(errors="replace")


def grads_of(module):
    return {name: p.grad.detach().clone() for name, p in module.named_parameters() if p.grad is not None}


def counting_allreduce(on_call):
    """A DDP communication hook: the default averaging all-reduce, calling ``on_call(bucket)`` each time."""
    def hook(state, bucket):
        on_call(bucket)
        tensor = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])
    return hook


def ddp_step(rank, world_size, batch_per_rank=4, reduction="mean"):
    """One DDP backward on this rank's share of the batch; returns the synchronised gradients."""
    model = DDP(make_model())
    inputs, targets = make_data(batch_per_rank * world_size)
    x, y = rank_slice(inputs, rank, world_size), rank_slice(targets, rank, world_size)
    F.mse_loss(model(x), y, reduction=reduction).backward()
    return {"grads": grads_of(model.module)}


def accumulate(rank, world_size, micro_batches=4, micro_batch_size=2, use_no_sync=True, forward_in_no_sync=True):
    """Gradient accumulation over micro-batches, with or without ``no_sync``; counts all-reduces.

    ``forward_in_no_sync=False``: only the backward of the first micro-batches runs inside ``no_sync()``.
    """
    allreduces = []
    model = DDP(make_model())
    model.register_comm_hook(None, counting_allreduce(lambda bucket: allreduces.append(1)))
    inputs, targets = make_data(micro_batches * micro_batch_size * world_size)
    x, y = rank_slice(inputs, rank, world_size), rank_slice(targets, rank, world_size)
    for step, (xb, yb) in enumerate(zip(x.split(micro_batch_size), y.split(micro_batch_size))):
        skip_sync = use_no_sync and step < micro_batches - 1
        with model.no_sync() if skip_sync and forward_in_no_sync else nullcontext():
            loss = F.mse_loss(model(xb), yb) / micro_batches  # each micro-batch is 1/K of the big batch
        with model.no_sync() if skip_sync else nullcontext():
            loss.backward()
    return {"grads": grads_of(model.module), "allreduces": len(allreduces)}


def sampler_indices(rank, world_size, dataset_size=10, epochs=2, shuffle=True, call_set_epoch=True):
    """The dataset indices ``DistributedSampler`` hands this rank in each epoch."""
    sampler = DistributedSampler(range(dataset_size), shuffle=shuffle, seed=0)
    per_epoch = []
    for epoch in range(epochs):
        if call_set_epoch:
            sampler.set_epoch(epoch)
        per_epoch.append(list(sampler))
    return {"indices": per_epoch, "num_replicas": sampler.num_replicas, "rank": sampler.rank}


class TwoHeads(nn.Module):
    """A model whose second head is used only when asked: the classic unused-parameter case."""

    def __init__(self):
        super().__init__()
        self.body = make_model()
        self.aux = nn.Linear(OUT_FEATURES, 1)

    def forward(self, x, use_aux=False):
        h = self.body(x)
        return self.aux(h) if use_aux else h


def unused_parameters(rank, world_size, find_unused_parameters=False, steps=2, freeze_aux=False,
                      last_backward=True):
    """Train ``TwoHeads`` without its aux head for ``steps`` steps; report the gradients of the last step.

    ``freeze_aux``: the aux head's parameters do not require grad.  ``last_backward=False``:
    the last step runs its forward only.
    """
    net = TwoHeads()
    net.aux.requires_grad_(not freeze_aux)
    model = DDP(net, find_unused_parameters=find_unused_parameters)
    reduced = []   # the number of elements of each bucket DDP all-reduced, over all steps
    model.register_comm_hook(None, counting_allreduce(lambda bucket: reduced.append(bucket.buffer().numel())))
    inputs, targets = make_data(4 * world_size)
    x, y = rank_slice(inputs, rank, world_size), rank_slice(targets, rank, world_size)
    for step in range(steps):
        model.zero_grad()
        loss = F.mse_loss(model(x), y)
        if step < steps - 1 or last_backward:
            loss.backward()
    return {"aux_grad_is_none": model.module.aux.weight.grad is None, "steps": steps,
            "body_grads": grads_of(model.module.body), "allreduced_sizes": reduced}


def skip_backward(rank, world_size, skipping_rank=1, wait_seconds=2.0, stall_seconds=30.0):
    """Every rank but ``skipping_rank`` calls backward; the skipping rank stalls (a data-loader stall, say).

    DDP runs on a group made with ``timeout=wait_seconds``.
    """
    dist.barrier()  # line the ranks up, so only the skipped backward can time out
    impatient = dist.new_group(timeout=timedelta(seconds=wait_seconds))
    model = DDP(make_model(), process_group=impatient)
    inputs, targets = make_data(4 * world_size)
    x, y = rank_slice(inputs, rank, world_size), rank_slice(targets, rank, world_size)
    loss = F.mse_loss(model(x), y)
    if rank == skipping_rank:
        time.sleep(stall_seconds)
        return {"skipped": True}
    loss.backward()
    return {"skipped": False}


def make_batchnorm_model():
    """A linear layer followed by BatchNorm: the model of the BatchNorm pitfall."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN_FEATURES, 3), nn.BatchNorm1d(3))


def shifted_shard(inputs, rank, world_size):
    """Rank ``rank``'s rows, shifted by ``rank``, so that the ranks' data differ."""
    return rank_slice(inputs, rank, world_size) + rank


def batchnorm_statistics(rank, world_size, batch_per_rank=8, sync=False):
    """BatchNorm running statistics after one training forward, per rank (``sync``: SyncBatchNorm).

    Then six more forwards: an evaluation forward under ``no_grad``; two training forwards
    under ``no_grad``; a training forward and backward inside ``no_sync()``, one outside it;
    a training forward under ``no_grad``.  ``starts`` holds the ``running_mean`` each of the
    seven forwards found when it began (a forward pre-hook on the BatchNorm layer).
    """
    model = make_batchnorm_model()
    if sync:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model)
    norm = model.module[1]
    starts = []
    norm.register_forward_pre_hook(lambda module, args: starts.append(module.running_mean.clone()))
    inputs, _ = make_data(batch_per_rank * world_size)
    shard = shifted_shard(inputs, rank, world_size)
    model(shard)
    statistics = {"running_mean": norm.running_mean.clone(), "running_var": norm.running_var.clone()}
    model.eval()  # an evaluation forward: uses the running statistics, does not update them
    with torch.no_grad():
        model(shard)
    statistics["running_mean_after_eval_forward"] = norm.running_mean.clone()
    model.train()
    with torch.no_grad():
        model(shard)
        model(shard)
    with model.no_sync():
        model(shard).sum().backward()   # forward 5: grad-enabled, inside no_sync()
    model(shard).sum().backward()       # forward 6: grad-enabled, outside no_sync()
    with torch.no_grad():
        model(shard)                    # forward 7
    statistics["starts"] = starts
    return statistics


def initial_weights(rank, world_size):
    """Each rank builds its model from a different seed; returns the weights DDP leaves it with."""
    model = DDP(make_model(seed=rank))
    return {"weights": {name: p.detach().clone() for name, p in model.module.named_parameters()}}


def accumulated_scale(rank, world_size, micro_batches=4, micro_batch_size=3, loss="mean"):
    """Accumulate ``micro_batches`` DDP backwards on this rank; return the gradients after the last one.

    ``loss``: ``"mean"`` (each micro-batch loss is ``F.mse_loss(out, y)``), ``"mean/K"``
    (divided by the number of micro-batches) or ``"sum/K"`` (``reduction="sum"``, divided
    by K).  Every backward all-reduces (no ``no_sync``), which changes nothing in the result.
    """
    model = DDP(make_model())
    inputs, targets = make_data(micro_batches * micro_batch_size * world_size)
    x, y = rank_slice(inputs, rank, world_size), rank_slice(targets, rank, world_size)
    reduction, divide = {"mean": ("mean", 1), "mean/K": ("mean", micro_batches),
                         "sum/K": ("sum", micro_batches)}[loss]
    for xb, yb in zip(x.split(micro_batch_size), y.split(micro_batch_size)):
        (F.mse_loss(model(xb), yb, reduction=reduction) / divide).backward()
    return {"grads": grads_of(model.module)}


def make_checkpointed_model(seed=0):
    """Two Linear -> Tanh blocks, the second used twice per forward (weight sharing, as in many models)."""
    torch.manual_seed(seed)
    return nn.ModuleList([nn.Sequential(nn.Linear(IN_FEATURES, IN_FEATURES), nn.Tanh()) for _ in range(2)])


def checkpointed_ddp(rank, world_size, use_reentrant=True, reuse=True, static_graph=False):
    """DDP (``static_graph`` as given) over a model whose second block is checkpointed twice in one forward."""
    from torch.utils.checkpoint import checkpoint

    blocks = make_checkpointed_model()

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = blocks

        def forward(self, x):
            h = self.blocks[0](x)
            for _ in range(2 if reuse else 1):
                h = checkpoint(self.blocks[1], h, use_reentrant=use_reentrant)
            return h

    model = DDP(Shared(), static_graph=static_graph)
    inputs, _ = make_data(4 * world_size)
    model(rank_slice(inputs, rank, world_size)).pow(2).mean().backward()
    return {"grads": grads_of(model.module)}


class TwoBranches(nn.Module):
    """Two linear branches added together; ``first`` says which one the forward computes first."""

    def __init__(self, width=64, right_first=False):
        super().__init__()
        for name in ("right", "left") if right_first else ("left", "right"):   # registration order
            setattr(self, name, nn.Linear(width, width))

    def forward(self, x, first="left"):
        if first == "left":
            left = self.left(x)
            right = self.right(x)
        else:
            right = self.right(x)
            left = self.left(x)
        return left + right


def bucket_events(rank, world_size, firsts=("left", "left", "right"), right_first=False, **ddp_options):
    """One backward per entry of ``firsts``; per iteration, the order of gradient and all-reduce events.

    Buckets are capped at a little less than one branch's parameters, so each branch
    can get a bucket of its own; a communication hook notes each all-reduce DDP starts
    (and which parameters its bucket holds), a post-accumulate hook each gradient that lands.
    ``ddp_options`` (``find_unused_parameters``, ``static_graph``) go to DDP; ``right_first``
    registers the ``right`` branch before ``left`` (the forward still follows ``first``).
    """
    torch.manual_seed(0)
    model = TwoBranches(right_first=right_first)
    events = []
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _, name=name: events.append(f"{name} landed"))
    branch_bytes = sum(p.numel() * p.element_size() for p in model.left.parameters())
    ddp = DDP(model, bucket_cap_mb=0.99 * branch_bytes / 2**20, **ddp_options)
    names = {id(p): name for name, p in ddp.module.named_parameters()}

    def hook(state, bucket):
        held = sorted({names[id(p)].split(".")[0] for p in bucket.parameters()})
        events.append(f"all-reduce of bucket {bucket.index()} ({' + '.join(held)})")
        tensor = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])
    ddp.register_comm_hook(None, hook)
    x = make_data(4, seed=rank + 1)[0].repeat(1, 16)
    per_iteration, rebuilt = [], []   # rebuilt: had DDP rebuilt its buckets by this iteration's forward?
    with stderr_captured():   # find_unused_parameters=True logs that it found nothing unused
        for first in firsts:
            events.clear()
            ddp(x, first=first).pow(2).mean().backward()
            per_iteration.append(list(events))
            # Set by the forward that rebuilds (DDP's logging data only reports it one forward later).
            rebuilt.append(ddp._has_rebuilt_buckets)
    return {"events": per_iteration, "rebuilt": rebuilt}


def bucket_layout(rank, world_size, layers=3):
    """Which parameters each bucket holds, when buckets are never rebuilt (``find_unused_parameters=True``).

    ``layers`` bias-free ``Linear(10, 10)`` in a row, 400 bytes of weight each, buckets capped at
    500 bytes: room for one weight, and a second only if DDP lets a bucket run over its cap.
    """
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(10, 10, bias=False) for _ in range(layers)])
    ddp = DDP(model, bucket_cap_mb=500 / 2**20, find_unused_parameters=True)
    names = {id(p): name for name, p in ddp.module.named_parameters()}
    layout = []

    def hook(state, bucket):
        layout.append((bucket.index(), [names[id(p)] for p in bucket.parameters()]))
        tensor = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])
    ddp.register_comm_hook(None, hook)
    with stderr_captured():   # find_unused_parameters=True logs that it found nothing unused
        ddp(torch.ones(2, 10)).sum().backward()
    return {"layout": sorted(layout), "order": [name for name, _ in ddp.module.named_parameters()]}


def spawned_rank(rank, world_size, port, folder):
    """One rank started by ``torch.multiprocessing.spawn``: join a gloo group, all-reduce, write what it got."""
    import json
    import os

    from .distributed import LOOPBACK, loopback_interface
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=30))
    try:
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as file:
            json.dump({"rank": rank, "process": os.getpid(), "all_reduced": float(total)}, file)
    finally:
        dist.destroy_process_group()


def find_unused_notice(rank, world_size):
    """Two steps with ``find_unused_parameters=True`` on a model that uses every parameter.

    Returns what the rank wrote to its standard error (where torch's C++ code logs) and the
    Python warnings raised, during those steps.
    """
    model = DDP(make_model(), find_unused_parameters=True)
    inputs, targets = make_data(4 * world_size)
    x, y = rank_slice(inputs, rank, world_size), rank_slice(targets, rank, world_size)
    with stderr_captured() as stderr, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
    return {"stderr": stderr[0], "warnings": [str(w.message) for w in caught]}


def failing_rank(rank, fail_rank=1, seconds=30.0):
    """A function for ``torch.multiprocessing``: rank ``fail_rank`` raises, the others sleep."""
    if rank == fail_rank:
        raise ValueError(f"rank {rank} failed")
    time.sleep(seconds)
