"""Notebook 08's exercises: correct answers the adversaries found refused, and the feedback they named."""

import fractions

import torch
import torch.nn.functional as F

from autograd_lab.checking import get, judge, observe, reference_records
from autograd_lab.checking.forms import compare_form, form_record
from autograd_lab.checking.records import encode


def _in_another_order(model, micro_batches):
    """A correct loop that does not take the micro-batches in the list's order (adv-05-08-r3 a_rev).

    Even counts reversed, odd counts rotated: the list's first micro-batch is always the synchronised
    one, processed last; the others run only their forward inside ``no_sync`` (the forward decides).
    """
    k = len(micro_batches)
    order = list(range(k))[::-1] if k % 2 == 0 else list(range(1, k)) + [0]
    rows = sum(len(x) for x, _ in micro_batches)
    for step, index in enumerate(order):
        x, y = micro_batches[index]
        if step < k - 1:
            with model.no_sync():
                loss = F.mse_loss(model(x), y) * len(x) / rows
            loss.backward()                               # the forward decides: the backward may sit outside
        else:
            (F.mse_loss(model(x), y) * len(x) / rows).backward()


def test_a_correct_no_sync_loop_in_any_order_passes_public_and_hidden_checks():
    # What the ranks did is judged, not the order of the code: one forward per micro-batch through DDP,
    # one all-reduce after the last, the same final gradients (up to the order of a float sum).
    exercise = get("08.no_sync_loop")
    seeds = exercise.public_seeds + exercise.hidden_seeds
    assert {len(exercise.inputs(seed, seed in exercise.hidden_seeds)[1][0]) % 2 for seed in seeds} == {0, 1}
    records = {seed: observe(exercise, _in_another_order, seed, timeout=60.0) for seed in seeds}
    result = judge(exercise, records, reference_records(exercise, seeds))
    assert result.status == "passed", repr(result)
    assert result.hidden_total == len(exercise.hidden_seeds)


def test_a_prediction_of_the_wrong_type_is_told_what_came_and_how_to_make_it_a_number():
    # adv-05-08-r3, 08.grad_scale in a release: a ratio measured as a tensor or kept as a Fraction got
    # only "expected a number"; the form check says what came and names float(...), and no more.
    exercise = get("08.grad_scale")
    form = form_record(encode(exercise.reference()))
    for entry, came in ((torch.tensor(4.0), "a float32 tensor of shape ()"), (fractions.Fraction(4), "a Fraction object")):
        message = compare_form(encode({"A": entry, "B": 1, "C": 6}), form, "grad_scale").message
        assert message.startswith(f"grad_scale['A']: expected a number, got {came}.") and "`float(...)`" in message


def test_shard_written_with_numpys_repeating_resize_passes_public_and_hidden():
    # adv-05-08-r3 sh_np, kept accepted on purpose: the prompt forbids DistributedSampler only, and choosing
    # np.resize (which repeats the list from its start) needs the padding rule the exercise teaches.
    import numpy as np

    def shard(n, world_size, rank):
        total = -(-n // world_size) * world_size
        return [int(i) for i in np.resize(np.arange(n), total)[rank::world_size]]

    exercise = get("08.shard")
    seeds = exercise.public_seeds + exercise.hidden_seeds
    result = judge(exercise, {seed: observe(exercise, shard, seed) for seed in seeds},
                   reference_records(exercise, seeds))
    assert result.status == "passed" and result.hidden_total == len(exercise.hidden_seeds), repr(result)
