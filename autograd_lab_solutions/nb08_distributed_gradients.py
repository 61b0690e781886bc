"""Exercises of notebook 08 (distributed gradients): gradient scale, rank shards, a no_sync loop on real ranks."""

import copy
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, no_distributed_sampler, register
from autograd_lab.checking.variation import choose, generator
from autograd_lab_solutions._escapes import in_child

# --- 08.grad_scale --------------------------------------------------------------------

# The setups of the notebook: 2 ranks, K = 4 micro-batches of B = 3 rows per rank, a model with
# 2 outputs (make_model() is a Linear(4, 2)).
WORLD_SIZE, K, B, OUTPUTS = 2, 4, 3, 2
GRAD_SCALE = {"A": 4, "B": 1, "C": 6}


def grad_scale():
    # A: mean loss, no / K: K accumulated micro-batch means, averaged over ranks -> K.
    # B: mean loss / K: exactly the global-batch mean -> 1.
    # C: sum loss / K: a sum over B rows x 2 outputs is B * 2 times their mean -> 6.
    return dict(GRAD_SCALE)


def measure_grad_scale():
    """The experiment of the prompt: a real 2-process DDP run of each setup, against one process."""
    from autograd_lab.labs import ddp_scenarios as scenarios
    from autograd_lab.labs.distributed import launch

    model = scenarios.make_model()
    x, y = scenarios.make_data(WORLD_SIZE * K * B)
    F.mse_loss(model(x), y).backward()
    reference = torch.cat([p.grad.flatten() for p in model.parameters()])
    factors = {}
    for setup, loss in (("A", "mean"), ("B", "mean/K"), ("C", "sum/K")):
        run = launch(scenarios.accumulated_scale, world_size=WORLD_SIZE, micro_batches=K,
                     micro_batch_size=B, loss=loss)
        run.raise_errors()
        grads = run.results[0]["grads"]
        ddp = torch.cat([grads[name].flatten() for name, _ in model.named_parameters()])
        factor = float(ddp @ reference / (reference @ reference))
        assert torch.allclose(ddp, factor * reference, rtol=1e-4, atol=1e-6), "not a pure scaling"
        factors[setup] = round(factor) if abs(factor - round(factor)) < 1e-4 else factor
    return factors


def _says(key, number):
    """The prediction gives ``number`` for ``key`` (an int or a float, not a bool or a string)."""
    def detect(student, reference, args):
        value = student.get(key) if isinstance(student, dict) else None
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == number
    return detect


def _not_numbers(student, reference, args):
    """Some entry is not a plain number (a tensor, a string, None, a Fraction): the right factor in the wrong type
    reads as a wrong one."""
    return isinstance(student, dict) and any(
        isinstance(value, bool) or not isinstance(value, (int, float)) for value in student.values())


register(Exercise(
    id="08.grad_scale",
    title="Predict the gradient scale of DDP with accumulation",
    kind="value",
    answer_name="grad_scale",
    reference=grad_scale,
    experiment=measure_grad_scale,
    solution_code=f"grad_scale = {GRAD_SCALE!r}",
    hints=(
        "Start from what DDP does with the ranks' gradients: the first runs of this notebook measured it for a "
        "mean and for a summed loss.",
        "Accumulation: what does each `backward()` do with the `.grad` the previous micro-batch left?",
        "`F.mse_loss` takes its mean over every element of its input, not over rows: count the elements of "
        "one micro-batch's output.",
    ),
    misconceptions=(
        Misconception("ddp_sums",
                      "The ranks' gradients are not added: by default DDP divides each rank's gradient by the "
                      "world size before the all-reduce sums them, so the ranks' contributions are averaged.",
                      _says("B", 2)),
        Misconception("accumulation_averages",
                      "Accumulation does not average: `backward()` adds into `.grad`, so micro-batch means that are "
                      "not divided add up to more than one mean.",
                      _says("A", 1)),
        Misconception("not_numbers",
                      "Answer with plain numbers (an `int` or a `float`), not tensors, strings, fractions or None: "
                      "turn a measured ratio into a number with `float(...)`.",
                      _not_numbers),
        Misconception("sum_over_rows_only",
                      "A summed loss is not counted by rows: `reduction=\"sum\"` adds every element of the (rows, "
                      "outputs) loss, and the mean divides by all of them.",
                      _says("C", B)),
        Misconception("accumulated_sums_undivided",
                      "The `/ K` applies to a summed loss too: each micro-batch's loss is divided by K before its "
                      "`backward()`, and accumulation adds the K divided gradients.",
                      _says("C", B * OUTPUTS * K)),
    ),
    wrong_answers=(
        WrongAnswer({"A": 8, "B": 2, "C": 12}, expect="ddp_sums"),
        WrongAnswer({"A": 1, "B": 1, "C": 6}, expect="accumulation_averages"),
        WrongAnswer({"A": 1.0, "B": 1, "C": 6}, expect="accumulation_averages", note="the same claim as a float"),
        WrongAnswer({"A": 4, "B": 1, "C": 3}, expect="sum_over_rows_only", note="the old, wrong key"),
        WrongAnswer({"A": "4", "B": "1", "C": "6"}, expect="not_numbers", note="strings"),
        WrongAnswer({"A": None, "B": 1, "C": 6}, expect="not_numbers", note="an entry left None (adv-05-08-r3 forms)"),
        WrongAnswer({"A": 4, "B": 1, "C": 12}, expect="wrong_value", note="C confused with K * B"),
        WrongAnswer({"A": 4, "B": 1, "C": 24}, expect="accumulated_sums_undivided",
                    note="C without the / K: B x 2 outputs x K micro-batches (adv-05-08-r2)"),
        WrongAnswer({"A": 4.0000045, "B": 1.000003, "C": 6.000004}, expect="wrong_value",
                    note="off in the sixth digit: the grader's tolerance, not a rounding of six digits"),
    ),
))


# --- 08.shard ------------------------------------------------------------------------------

def shard(n, world_size, rank):
    padded = list(range(n)) * (-(-world_size // max(n, 1)) + 1)    # room for padding when n < world_size
    total = -(-n // world_size) * world_size                          # round n up to a multiple
    return padded[:total][rank::world_size]                           # every world_size-th index


def _as_ndarray(n, world_size, rank):
    import numpy

    return numpy.array(shard(n, world_size, rank))


# (items, ranks) regimes: padding shorter than the dataset, longer than it (fewer items than
# ranks), and a dataset that needs none; each public seed takes another, hidden seeds too.
_SHARD_REGIMES = ("short", "long", "none")


def _shard_inputs(seed, hidden):
    g = generator(seed)
    regime = choose(seed, _SHARD_REGIMES, hidden=hidden, hidden_choices=("long", "short", "long"))
    world_size = int(torch.randint(3, 9 if hidden else 8, (), generator=g))
    if regime == "long":       # padding longer than the dataset: the indices are repeated more than once
        n = int(torch.randint(1, (world_size - 1) // 2 + 1, (), generator=g))
        rank = int(torch.randint(2 * n, world_size, (), generator=g))   # a rank that one copy does not reach
        return n, world_size, rank
    if regime == "short":      # a rank whose last index is padding
        n = world_size * int(torch.randint(2, 4, (), generator=g)) + int(torch.randint(1, world_size, (), generator=g))
        return n, world_size, int(torch.randint(n % world_size, world_size, (), generator=g))
    else:
        n = world_size * int(torch.randint(2, 5, (), generator=g))
    return n, world_size, int(torch.randint(world_size, (), generator=g))


def _contiguous(n, world_size, rank):
    share = -(-n // world_size)
    return list(range(n))[rank * share:(rank + 1) * share]


def _no_padding(n, world_size, rank):
    return list(range(n))[rank::world_size]


def _pads_once(n, world_size, rank):
    indices = list(range(n))
    total = math.ceil(n / world_size) * world_size
    indices += indices[:total - n]          # too short when the padding is longer than the dataset
    return indices[rank::world_size]


def _through_the_sampler(n, world_size, rank):
    return list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))


def _sampler_iter_on_a_namespace(n, world_size, rank):
    from types import SimpleNamespace
    per_rank = math.ceil(n / world_size)
    fake = SimpleNamespace(dataset=range(n), num_replicas=world_size, rank=rank, shuffle=False, drop_last=False,
                           seed=0, epoch=0, num_samples=per_rank, total_size=per_rank * world_size)
    return list(DistributedSampler.__iter__(fake))


def _sampler_by_new(n, world_size, rank):
    sampler = object.__new__(DistributedSampler)
    per_rank = math.ceil(n / world_size)
    sampler.__dict__.update(dataset=range(n), num_replicas=world_size, rank=rank, shuffle=False, drop_last=False,
                            seed=0, epoch=0, num_samples=per_rank, total_size=per_rank * world_size)
    return list(sampler)


_PREBUILT = DistributedSampler(range(1), num_replicas=1, rank=0, shuffle=False)


def _sampler_copied(n, world_size, rank):
    sampler = copy.copy(_PREBUILT)
    per_rank = math.ceil(n / world_size)
    sampler.dataset, sampler.num_replicas, sampler.rank = range(n), world_size, rank
    sampler.num_samples, sampler.total_size = per_rank, per_rank * world_size
    return list(sampler)


def _recompiled(function, name):
    """``function``'s source, its ``def`` line renamed, compiled from a string (adversarial round 5, s08f)."""
    import inspect
    import re
    import textwrap
    source = re.sub(r"def \w+\(self\)[^:]*:", f"def {name}(self):", textwrap.dedent(inspect.getsource(function)), 1)
    namespace = {"torch": torch, "math": math}
    exec(source, namespace)     # text no file or cell holds: "<string>"
    return namespace[name]


_sampler_iter_text = _recompiled(DistributedSampler.__iter__, "_it")


def _sampler_source_execd(n, world_size, rank):
    from types import SimpleNamespace
    per_rank = math.ceil(n / world_size)
    fake = SimpleNamespace(dataset=range(n), num_replicas=world_size, rank=rank, shuffle=False, drop_last=False,
                           seed=0, epoch=0, num_samples=per_rank, total_size=per_rank * world_size)
    return list(_sampler_iter_text(fake))


class _OwnInitSampler(DistributedSampler):
    def __init__(self, n, world_size, rank):   # no super().__init__: nothing is "built" the usual way
        self.dataset, self.num_replicas, self.rank = range(n), world_size, rank
        self.shuffle, self.drop_last, self.seed, self.epoch = False, False, 0, 0
        self.num_samples = math.ceil(n / world_size)
        self.total_size = self.num_samples * world_size


def _sampler_subclass(n, world_size, rank):
    return list(_OwnInitSampler(n, world_size, rank))


def _is_contiguous(student, reference, args):
    # Padding once can also deal a rank a run of consecutive indices: that case is the padding's.
    return isinstance(student, list) and len(student) > 1 and student != _pads_once(*args) and all(
        b - a == 1 for a, b in zip(student, student[1:]))


def _same_as_unpadded(student, reference, args):
    # Where one copy of the indices does not reach this rank, no padding and padding once look alike:
    # that case is named by the padding's own misconception.
    return (isinstance(student, list) and student == _no_padding(*args) != _pads_once(*args)
            and len(student) != len(reference))


def _same_as_padded_once(student, reference, args):
    return isinstance(student, list) and student == _pads_once(*args) != reference


register(Exercise(
    id="08.shard",
    title="Which indices does DistributedSampler(shuffle=False) give a rank?",
    answer_name="shard",
    reference=shard,
    inputs=_shard_inputs,
    method=no_distributed_sampler(),
    hints=(
        "Print `list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))` for a few "
        "cases, fewer items than ranks among them, and compare with yours.",
        "Every rank gets the same number of indices, ceil(n / world_size): the sampler pads the list of indices "
        "by repeating it from its start, as often as needed.",
        "After padding, the ranks are dealt the indices in turn, like cards.",
    ),
    misconceptions=(
        Misconception("contiguous",
                      "DistributedSampler does not give each rank a contiguous block: it deals the indices "
                      "out in turn (rank r gets r, r + world_size, ...).",
                      _is_contiguous),
        Misconception("no_padding",
                      "Every rank must get the same number of samples, or the ranks would run different "
                      "numbers of steps and one would wait for the others' all-reduce forever. The sampler "
                      "pads with indices from the start.",
                      _same_as_unpadded),
        Misconception("padded_once",
                      "With fewer items than ranks the padding is longer than the dataset: the sampler repeats "
                      "the whole list of indices as many times as it takes, so a rank can get an index that "
                      "one copy of the list does not reach.",
                      _same_as_padded_once),
    ),
    wrong_answers=(
        WrongAnswer(_contiguous, expect="contiguous"),
        WrongAnswer(_no_padding, expect="no_padding"),
        WrongAnswer(_pads_once, expect="padded_once", note="idx + idx[:pad]: wrong when pad > n"),
        WrongAnswer(in_child(shard), expect="used_sampler",
                    note="round 8 (08s_ctypes): the indices from a child Python started by ctypes.CDLL(None).system"),
        WrongAnswer(in_child(shard, prefetched=True), expect="used_sampler",
                    note="round 8: the same through libc's system() fetched before the check (no Python frame)"),
        WrongAnswer(_through_the_sampler, expect="used_sampler", note="the shortcut the prompt forbids"),
        WrongAnswer(_sampler_iter_on_a_namespace, expect="used_sampler", note="its __iter__ on a namespace"),
        WrongAnswer(_sampler_by_new, expect="used_sampler", note="object.__new__(DistributedSampler)"),
        WrongAnswer(_sampler_copied, expect="used_sampler", note="copy.copy of a sampler built beforehand"),
        WrongAnswer(_sampler_subclass, expect="used_sampler", note="a subclass whose __init__ skips super()"),
        WrongAnswer(_sampler_source_execd, expect="used_sampler", note="its __iter__'s source, renamed and exec'd "
                    "(adversarial round 5, s08f)"),
        WrongAnswer(_as_ndarray, expect="structure",
                    note="adv-05-08-r9 note 3 (a08_npx): a NumPy array for the list; the message names no length, "
                         "which is ceil(n / world_size), part of the answer"),
    ),
))


# --- 08.no_sync_loop -------------------------------------------------------------------------

# The check calls the answer on real gloo ranks (autograd_lab/labs/ddp_check.py): each rank wraps its
# copy of the module in DDP, runs the answer on its own micro-batches and reports its forwards, its
# backward passes, when DDP all-reduced and its final gradients.  Ranks that synchronised the wrong
# micro-batch end with different gradients.

def accumulate(model, micro_batches):
    rows = sum(len(x) for x, _ in micro_batches)
    *first, last = micro_batches
    with model.no_sync():                                 # forward AND backward: no all-reduce
        for x, y in first:
            (F.mse_loss(model(x), y) * len(x) / rows).backward()
    x, y = last
    (F.mse_loss(model(x), y) * len(x) / rows).backward()  # this backward all-reduces, once


def _no_sync_inputs(seed, hidden):
    g = generator(seed)
    k = choose(seed, (3, 4, 2), hidden=hidden, hidden_choices=(5, 3, 4))
    sizes = [int(s) for s in torch.randint(1, 5, (k,), generator=g)]
    if len(set(sizes)) == 1:                              # uneven: the last micro-batch is smaller
        sizes[-1] = sizes[-1] - 1 if sizes[-1] > 1 else sizes[-1] + 2
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module = nn.Linear(3, 2)
    micro_batches = [[(torch.randn(s, 3, generator=g), torch.randn(s, 2, generator=g)) for s in sizes]
                     for _ in range(2)]                   # one list per rank, the same sizes on both
    return module, micro_batches


def _weighted_step(model, micro_batches, weights):
    k = len(micro_batches)
    for step, ((x, y), weight) in enumerate(zip(micro_batches, weights)):
        if step < k - 1:
            with model.no_sync():
                (F.mse_loss(model(x), y) * weight).backward()
        else:
            (F.mse_loss(model(x), y) * weight).backward()


def _divide_by_count(model, micro_batches):
    """The notebook's loop, each loss / K: right only when the micro-batches have equal sizes."""
    _weighted_step(model, micro_batches, [1 / len(micro_batches)] * len(micro_batches))


def _no_division(model, micro_batches):
    _weighted_step(model, micro_batches, [1.0] * len(micro_batches))


def _shares(micro_batches):
    rows = sum(len(x) for x, _ in micro_batches)
    return [len(x) / rows for x, _ in micro_batches]


def _forward_outside(model, micro_batches):
    k = len(micro_batches)
    for step, ((x, y), share) in enumerate(zip(micro_batches, _shares(micro_batches))):
        loss = F.mse_loss(model(x), y) * share           # wrong: this forward prepares an all-reduce
        if step < k - 1:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()


def _forge_the_old_counter(model, micro_batches):
    """No no_sync at all, then the round-1 forgery: set the old check's counting parameter to 1."""
    for (x, y), share in zip(micro_batches, _shares(micro_batches)):
        (F.mse_loss(model(x), y) * share).backward()
    counter = getattr(model.module, "gradient_allreduces", None)
    if counter is not None:
        with torch.no_grad():
            counter.fill_(1)


def _never_synced(model, micro_batches):
    with model.no_sync():
        for (x, y), share in zip(micro_batches, _shares(micro_batches)):
            (F.mse_loss(model(x), y) * share).backward()


def _averaged_by_hand(model, micro_batches):
    _never_synced(model, micro_batches)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def _sync_first(model, micro_batches):
    for step, ((x, y), share) in enumerate(zip(micro_batches, _shares(micro_batches))):
        if step == 0:
            (F.mse_loss(model(x), y) * share).backward()
        else:
            with model.no_sync():
                (F.mse_loss(model(x), y) * share).backward()


def _synced_one_first(model, micro_batches):
    """"In any order" taken at its word (audit 08-r12, item 11): the last micro-batch's synchronised backward
    runs first, the others inside ``no_sync()`` after it, every row weighted right."""
    shares = _shares(micro_batches)
    x, y = micro_batches[-1]
    (F.mse_loss(model(x), y) * shares[-1]).backward()
    for (x, y), share in zip(micro_batches[:-1], shares):
        with model.no_sync():
            (F.mse_loss(model(x), y) * share).backward()


def _sync_middle(model, micro_batches):
    middle = len(micro_batches) // 2
    for step, ((x, y), share) in enumerate(zip(micro_batches, _shares(micro_batches))):
        if step == middle:
            (F.mse_loss(model(x), y) * share).backward()
        else:
            with model.no_sync():
                (F.mse_loss(model(x), y) * share).backward()


def _through_the_inner_module(model, micro_batches):
    """No no_sync: the first micro-batches run through ``model.module``, so DDP never hears of them (adv-05-08-r3)."""
    *first, last = micro_batches
    shares = _shares(micro_batches)
    for (x, y), share in zip(first, shares):
        (F.mse_loss(model.module(x), y) * share).backward()
    x, y = last
    (F.mse_loss(model(x), y) * shares[-1]).backward()


def _through_the_parameters(model, micro_batches):
    """The same bypass with no module call: the inner module's parameters by hand, a DDP forward for show."""
    *first, last = micro_batches
    shares = _shares(micro_batches)
    weight, bias = model.module.weight, model.module.bias
    for (x, y), share in zip(first, shares):
        with model.no_sync():
            model(x)                                      # for show: its output is not what is backpropagated
        (F.mse_loss(F.linear(x, weight, bias), y) * share).backward()
    x, y = last
    (F.mse_loss(model(x), y) * shares[-1]).backward()


def _pops_the_last(model, micro_batches):
    """A right loop that takes the last micro-batch with ``pop()``: the caller's list loses it (round 5, d08j)."""
    rows = sum(len(x) for x, _ in micro_batches)
    x_last, y_last = micro_batches.pop()
    with model.no_sync():
        for x, y in micro_batches:
            (F.mse_loss(model(x), y) * len(x) / rows).backward()
    (F.mse_loss(model(x_last), y_last) * len(x_last) / rows).backward()


def _extra_pass_to_sync(model, micro_batches):
    """Adversarial round 7 (ac_zero_extra): every micro-batch under no_sync, then a zero loss for show to all-reduce."""
    _never_synced(model, micro_batches)
    x, _ = micro_batches[-1]
    (model(x[:1]).sum() * 0).backward()


def _one_big_batch(model, micro_batches):
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    F.mse_loss(model(x), y).backward()


def _one_backward(model, micro_batches):
    """A forward per micro-batch, but one backward of their sum: every micro-batch's graph kept alive at once."""
    *first, last = micro_batches
    shares = _shares(micro_batches)
    with model.no_sync():
        losses = [F.mse_loss(model(x), y) * share for (x, y), share in zip(first, shares)]
    x, y = last
    total = sum(losses) + F.mse_loss(model(x), y) * shares[-1]
    total.backward()


def _counts(student, key):
    return student[key] if isinstance(student, dict) and isinstance(student.get(key), list) else None


def _k(args):
    return len(args[1][0])


def _ranks_agree(student):
    grads = _counts(student, "grads")
    return bool(grads) and all(torch.allclose(grads[0][name], other[name], rtol=1e-4, atol=1e-6)
                               for other in grads[1:] for name in grads[0] if grads[0][name] is not None)


def _allreduced_every_micro_batch(student, reference, args):
    synced = _counts(student, "allreduced_after_forward")
    return synced is not None and _k(args) > 1 and all(len(s) == _k(args) for s in synced)


def _sync_was_off(student):
    """Some forward or backward ran while DDP's synchronisation was off (``no_sync()`` or its flag)."""
    return any(_counts(student, "sync_turned_off") or [])


def _forward_outside_no_sync(student, reference, args):
    return _allreduced_every_micro_batch(student, reference, args) and _sync_was_off(student)


def _sync_never_off(student, reference, args):
    return (_allreduced_every_micro_batch(student, reference, args) and not _sync_was_off(student)
            and not _bypassed_ddp(student, reference, args))


def _bypassed_ddp(student, reference, args):
    """A forward of the inner module outside DDP's, or a backward pass that did not flow through DDP's output."""
    return any(count > 0 for count in _counts(student, "around_ddp") or [])


def _never_all_reduced(student, reference, args):
    synced = _counts(student, "allreduced_after_forward")
    return synced is not None and all(len(s) == 0 for s in synced) and not _ranks_agree(student)


def _averaged_outside_ddp(student, reference, args):
    synced = _counts(student, "allreduced_after_forward")
    return synced is not None and all(len(s) == 0 for s in synced) and _ranks_agree(student)


def _allreduced_once_after(student, args, first, last):
    """One all-reduce on every rank, after a forward numbered ``first`` to ``last`` (from 1), of all k."""
    synced, rows = _counts(student, "allreduced_after_forward"), _counts(student, "forward_rows")
    return (synced is not None and rows is not None and all(len(r) == _k(args) for r in rows)
            and all(len(s) == 1 and first <= s[0] <= last for s in synced))


def _allreduced_first(student, reference, args):
    return _k(args) > 1 and _allreduced_once_after(student, args, 1, 1)


def _allreduced_early(student, reference, args):
    return _allreduced_once_after(student, args, 2, _k(args) - 1)


def _fewer_forwards(student, reference, args):
    rows = _counts(student, "forward_rows")
    return (rows is not None and all(0 < len(r) < _k(args) for r in rows)
            and not _bypassed_ddp(student, reference, args))


def _extra_forwards(student, reference, args):
    rows = _counts(student, "forward_rows")
    return rows is not None and all(len(r) > _k(args) for r in rows)


def _fewer_backwards(student, reference, args):
    rows, passes = _counts(student, "forward_rows"), _counts(student, "backward_passes")
    return (rows is not None and passes is not None and all(len(r) == _k(args) for r in rows)
            and all(p < _k(args) for p in passes))


def _grads_weighted(args, weights_of):
    """The DDP gradient, computed in one process, had each rank weighted its micro-batches by ``weights_of``.

    A detector sees the module as a dict of its parameters (the case's ``nn.Linear``).
    """
    parameters, per_rank = args
    total = {name: torch.zeros_like(value) for name, value in parameters.items()}
    for micro_batches in per_rank:
        weight, bias = (parameters[name].detach().clone().requires_grad_() for name in ("weight", "bias"))
        for (x, y), share in zip(micro_batches, weights_of(micro_batches)):
            (F.mse_loss(F.linear(x, weight, bias), y) * share).backward()
        for name, p in (("weight", weight), ("bias", bias)):
            total[name] += p.grad / len(per_rank)
    return total


def _matches(student, expected):
    grads = _counts(student, "grads")
    return bool(grads) and all(torch.allclose(g[name], expected[name], rtol=1e-4, atol=1e-6)
                               for g in grads for name in expected)


def _weighted_by_count(student, reference, args):
    return _matches(student, _grads_weighted(args, lambda batches: [1 / len(batches)] * len(batches)))


def _not_divided(student, reference, args):
    return _matches(student, _grads_weighted(args, lambda batches: [1.0] * len(batches)))


register(Exercise(
    id="08.no_sync_loop",
    title="Accumulate micro-batches of different sizes under DDP, synchronising once",
    answer_name="accumulate",
    reference=accumulate,
    inputs=_no_sync_inputs,
    call="autograd_lab.labs.ddp_check:on_ranks",   # the answer runs on 2 real gloo ranks
    modifies=("model:grad",),     # on each rank (the ranks report what the answer changed in their copies)
    hints=(
        "Which call makes DDP decide that the next backward will all-reduce? The notebook measured it with four "
        "variants of the loop.",
        "Only one backward may all-reduce, and it must be the one that completes the local sum of all "
        "micro-batches: any earlier one averages a partial sum, and the rest stays different on each rank.",
        "Micro-batches of different sizes: a row of a small micro-batch must count as much as a row of a large "
        "one. Dividing every loss by the number of micro-batches does not do that.",
    ),
    misconceptions=(
        Misconception("bypassed_ddp",
                      "Some micro-batches went around DDP: their forward ran on the wrapped module itself "
                      "(`model.module`, or its parameters by hand), which DDP never sees, so it neither "
                      "all-reduces nor waits for their gradients. That skips DDP instead of using its method for "
                      "this: run every forward through `model` and keep DDP from synchronising with "
                      "`model.no_sync()`. (Going around DDP also skips what its forward does, such as sending "
                      "rank 0's buffers to every rank.)",
                      _bypassed_ddp),
        Misconception("forward_outside_no_sync",
                      "DDP all-reduced after every micro-batch, not once: DDP decides whether the next backward "
                      "will all-reduce when the forward runs, so each forward of a micro-batch that must not "
                      "synchronise belongs inside `no_sync()` too, not only its backward.",
                      _forward_outside_no_sync),
        Misconception("sync_never_off",
                      "DDP all-reduced after every micro-batch, not once: no forward or backward ran with DDP's "
                      "synchronisation turned off. The micro-batches that must not synchronise run inside "
                      "`model.no_sync()`, their forward included.",
                      _sync_never_off),
        Misconception("never_synced",
                      "DDP never all-reduced and the ranks ended with different gradients: with every backward "
                      "inside `no_sync()`, the replicas would drift apart at the next step.",
                      _never_all_reduced),
        Misconception("averaged_by_hand",
                      "DDP never all-reduced, yet the ranks ended with the same gradients: they were combined "
                      "outside DDP, by a collective of your own. The exercise asks for DDP's own synchronisation, "
                      "once, in the last backward.",
                      _averaged_outside_ddp),
        # Audit 08-r12 item 11: a synchronised backward run first, in an order of the student's own, matched no
        # print in a release and got only "got 1, which is not the expected value".
        Misconception("synced_first",
                      "DDP all-reduced once, but in the first backward of the step: that all-reduce averaged one "
                      "micro-batch's gradients, and the gradients accumulated inside `no_sync()` after it stayed "
                      "on each rank, unaveraged, so the two ranks ended with different gradients. "
                      "The micro-batches may come in any order, but not the synchronised backward: it averages "
                      "only what has been accumulated when it runs.",
                      _allreduced_first),
        Misconception("synced_early",
                      "DDP all-reduced once, but not in the last backward of the step: that all-reduce averaged "
                      "only the micro-batches seen so far, and what was accumulated after it stayed local, so "
                      "the two ranks ended with different gradients.",
                      _allreduced_early),
        Misconception("one_big_batch",
                      "The model ran fewer forwards than there are micro-batches: the micro-batches were joined "
                      "into one batch, which is what accumulation exists to avoid (it would not fit in memory).",
                      _fewer_forwards),
        # Adversarial round 7 (ac_zero_extra): a bare "['forward_rows'][0]: expected a list of length 3, got 4".
        Misconception("extra_forward",
                      "The model ran more forwards than there are micro-batches: a pass of its own (a zero loss, "
                      "say) to make DDP all-reduce what the micro-batches accumulated is one forward and backward "
                      "more per step than accumulation needs. The all-reduce belongs to a backward you already "
                      "run: the one that completes the sum.",
                      _extra_forwards),
        Misconception("one_backward",
                      "One forward per micro-batch but fewer backward passes: the losses were added and "
                      "backpropagated together, which keeps every micro-batch's graph in memory at once. Call "
                      "backward once per micro-batch.",
                      _fewer_backwards),
        Misconception("weighted_by_count",
                      "Each micro-batch counted equally, but they have different sizes: the result is not the "
                      "mean over all rows. Weight each micro-batch's mean loss by its share of the rows.",
                      _weighted_by_count),
        Misconception("not_divided",
                      "The micro-batch losses were added without weights: the result is a sum of means, larger "
                      "than the mean over all rows. Weight each micro-batch's mean loss by its share of the rows.",
                      _not_divided),
    ),
    wrong_answers=(
        WrongAnswer(_forward_outside, expect="forward_outside_no_sync"),
        WrongAnswer(_forge_the_old_counter, expect="sync_never_off",
                    note="no no_sync at all (adv-05-08-r3 a_every), and the round-1 forgery of the old count buffer"),
        WrongAnswer(_through_the_inner_module, expect="bypassed_ddp",
                    note="model.module(x) instead of no_sync (adv-05-08-r3 a_module: full marks)"),
        WrongAnswer(_through_the_parameters, expect="bypassed_ddp", note="the inner module's parameters by hand"),
        WrongAnswer(_never_synced, expect="never_synced"),
        WrongAnswer(_averaged_by_hand, expect="averaged_by_hand"),
        WrongAnswer(_sync_first, expect="synced_first", note="issue 20: ranks disagree"),
        WrongAnswer(_synced_one_first, expect="synced_first",
                    note="audit 08-r12 item 11: the last micro-batch synchronised, run first (\"in any order\")"),
        WrongAnswer(_sync_middle, expect="synced_early"),
        WrongAnswer(_one_big_batch, expect="one_big_batch", note="issue 20: no accumulation, no no_sync"),
        WrongAnswer(_one_backward, expect="one_backward"),
        WrongAnswer(_extra_pass_to_sync, expect="extra_forward",
                    note="adversarial round 7 (ac_zero_extra): a zero-loss pass for show to trigger the all-reduce"),
        WrongAnswer(_divide_by_count, expect="weighted_by_count", note="the notebook's / K: right for equal sizes"),
        WrongAnswer(_no_division, expect="not_divided"),
        WrongAnswer(_pops_the_last, expect="modified_input",
                    note="micro_batches.pop(): the caller's list changed (adversarial round 5, d08j: full marks)"),
    ),
))
