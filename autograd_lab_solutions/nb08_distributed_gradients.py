"""Exercises of notebook 08 (distributed gradients): gradient scale, rank shards, a no_sync loop."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from autograd_lab.labs.ddp_scenarios import counting_allreduce
from autograd_lab.labs.distributed import single_process_group
from autograd_lab.checking import Exercise, Misconception, WrongAnswer, claims, no_distributed_sampler, register

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


def _scaled_by(factor):
    def detect(student, reference, args):
        return (isinstance(student, dict) and set(student) == set(reference)
                and all(abs(student[key] - factor * reference[key]) < 1e-9 for key in reference))
    return detect


def _c_counts_rows_only(student, reference, args):
    # C = B: the sum taken over rows only, as if the model had one output.
    return (isinstance(student, dict) and set(student) == set(reference)
            and student["C"] == B and reference["C"] == B * OUTPUTS)


register(Exercise(
    id="08.grad_scale",
    title="Predict the gradient scale of DDP with accumulation",
    kind="value",
    answer_name="grad_scale",
    reference=grad_scale,
    experiment=measure_grad_scale,
    solution_code=f"grad_scale = {GRAD_SCALE!r}",
    hints=(
        "DDP averages the gradients of the ranks; it never sums them.",
        "Accumulation adds the gradients of the micro-batches: K means added up are K times a mean.",
        "`F.mse_loss` averages over every element, not over rows: a micro-batch of 3 rows and 2 outputs "
        "has 6 elements, so its summed loss is 6 times its mean.",
    ),
    checked_numbers={"6": lambda key: key["C"]},
    misconceptions=(
        Misconception("ddp_sums",
                      "Every factor is twice the truth: DDP averages the ranks' gradients (it divides the "
                      "all-reduced sum by the world size), so ranks never multiply the scale.",
                      _scaled_by(2)),
        Misconception("accumulation_averages",
                      "Setup A is not 1: `backward()` adds into `.grad`, so K micro-batch means accumulate to "
                      "K times the mean unless each loss is divided by K.",
                      claims("A", 1)),
        Misconception("sum_over_rows_only",
                      "Setup C counts rows only: `reduction=\"sum\"` adds every element of the "
                      "(rows, outputs) loss, and the mean divides by all of them, so the factor is rows "
                      "times outputs.",
                      _c_counts_rows_only),
    ),
    wrong_answers=(
        WrongAnswer({"A": 8, "B": 2, "C": 12}, expect="ddp_sums"),
        WrongAnswer({"A": 1, "B": 1, "C": 6}, expect="accumulation_averages"),
        WrongAnswer({"A": 4, "B": 1, "C": 3}, expect="sum_over_rows_only", note="the old, wrong key"),
        WrongAnswer({"A": 4, "B": 1, "C": 12}, expect="wrong_value", note="C confused with K * B"),
    ),
))


# --- 08.shard ------------------------------------------------------------------------------

def shard(n, world_size, rank):
    padded = list(range(n)) * (-(-world_size // max(n, 1)) + 1)    # room for padding when n < world_size
    total = -(-n // world_size) * world_size                          # round n up to a multiple
    return padded[:total][rank::world_size]                           # every world_size-th index


def _shard_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    world_size = int(torch.randint(2, 5 if hidden else 4, (), generator=generator))
    n = int(torch.randint(world_size + 1, 23, (), generator=generator))
    if n % world_size == 0:
        n += 1                                                        # make padding necessary
    rank = int(torch.randint(world_size, (), generator=generator))
    return n, world_size, rank


def _contiguous(n, world_size, rank):
    share = -(-n // world_size)
    return list(range(n))[rank * share:(rank + 1) * share]


def _no_padding(n, world_size, rank):
    return list(range(n))[rank::world_size]


def _through_the_sampler(n, world_size, rank):
    from torch.utils.data import DistributedSampler
    return list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))


def _is_contiguous(student, reference, args):
    return isinstance(student, list) and len(student) > 1 and all(
        b - a == 1 for a, b in zip(student, student[1:]))


def _same_as_unpadded(student, reference, args):
    return isinstance(student, list) and student == _no_padding(*args) and len(student) != len(reference)


register(Exercise(
    id="08.shard",
    title="Which indices does DistributedSampler(shuffle=False) give a rank?",
    answer_name="shard",
    reference=shard,
    inputs=_shard_inputs,
    method=no_distributed_sampler(),
    hints=(
        "Compare with list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False)).",
        "Every rank gets the same number of indices, ceil(n / world_size): the list is padded by "
        "repeating indices from its start.",
        "After padding, rank r takes every world_size-th index starting at r: padded[rank::world_size].",
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
    ),
    wrong_answers=(
        WrongAnswer(_contiguous, expect="contiguous"),
        WrongAnswer(_no_padding, expect="no_padding"),
        WrongAnswer(_through_the_sampler, expect="used_sampler", note="the shortcut the prompt forbids"),
    ),
))


# --- 08.no_sync_loop -------------------------------------------------------------------------

def accumulate(model, micro_batches):
    k = len(micro_batches)
    for step, (x, y) in enumerate(micro_batches):
        if step < k - 1:
            with model.no_sync():                        # forward AND backward inside no_sync
                (F.mse_loss(model(x), y) / k).backward()
        else:
            (F.mse_loss(model(x), y) / k).backward()     # the last backward all-reduces once


def _no_sync_inputs(seed, hidden):
    single_process_group()
    generator = torch.Generator().manual_seed(seed)
    k = 5 if hidden else 4
    torch.manual_seed(seed)
    module = nn.Linear(3, 2)
    # A frozen parameter, not a buffer: DDP leaves it alone and the check compares parameters.
    module.gradient_allreduces = nn.Parameter(torch.zeros((), dtype=torch.int64), requires_grad=False)
    model = DDP(module)
    model.register_comm_hook(None, counting_allreduce(lambda: module.gradient_allreduces.add_(1)))
    batches = [(torch.randn(2, 3, generator=generator), torch.randn(2, 2, generator=generator))
               for _ in range(k)]
    return model, batches


def _forward_outside(model, micro_batches):
    k = len(micro_batches)
    for step, (x, y) in enumerate(micro_batches):
        loss = F.mse_loss(model(x), y) / k               # wrong: this forward prepares an all-reduce
        if step < k - 1:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()


def _no_division(model, micro_batches):
    k = len(micro_batches)
    for step, (x, y) in enumerate(micro_batches):
        if step < k - 1:
            with model.no_sync():
                F.mse_loss(model(x), y).backward()
        else:
            F.mse_loss(model(x), y).backward()


def _never_synced(model, micro_batches):
    with model.no_sync():
        for x, y in micro_batches:
            (F.mse_loss(model(x), y) / len(micro_batches)).backward()


def _allreduces(run):
    """How many gradient all-reduces the DDP model ran (its counting parameter, after the call)."""
    return int(run.args_after[0]["module.gradient_allreduces"])


def _synced_every_micro_batch(student, reference, args, *, student_run, reference_run):
    return _allreduces(student_run) == len(args[1]) > _allreduces(reference_run)


def _never_all_reduced(student, reference, args, *, student_run):
    return _allreduces(student_run) == 0


register(Exercise(
    id="08.no_sync_loop",
    title="Fix a no_sync accumulation loop",
    answer_name="accumulate",
    reference=accumulate,
    inputs=_no_sync_inputs,
    compare=("value", "args"),
    modifies=("model",),               # the backward passes fill .grad; the comm hook counts all-reduces
    hints=(
        "The given loop computes the loss outside `with model.no_sync():`. DDP decides whether to "
        "all-reduce when the forward runs.",
        "Put the forward and the backward of every micro-batch but the last inside no_sync(); run the "
        "last one normally so that its backward all-reduces once.",
        "Divide each micro-batch loss by the number of micro-batches, so the sum is the batch mean.",
    ),
    misconceptions=(
        Misconception("forward_outside_no_sync",
                      "Your loop all-reduced after every micro-batch, not once: DDP decides whether the next "
                      "backward will all-reduce when the forward runs, so the forward must be inside "
                      "`with model.no_sync():` too, not only the backward.",
                      _synced_every_micro_batch),
        Misconception("never_synced",
                      "Your loop never all-reduced: with every backward inside no_sync(), the ranks' gradients "
                      "are never averaged and the replicas drift apart. Run the last micro-batch outside no_sync().",
                      _never_all_reduced),
    ),
    wrong_answers=(
        WrongAnswer(_forward_outside, expect="forward_outside_no_sync"),
        WrongAnswer(_never_synced, expect="never_synced"),
        WrongAnswer(_no_division, expect="scaled"),
    ),
))
