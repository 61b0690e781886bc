"""Exercises of notebooks/06_checkpointing.ipynb: segment counts, saved activations, a checkpointed step."""

import torch
import torch.nn as nn

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, register


# --- 06.best_segments ------------------------------------------------------------------

def best_segments(n):
    # Uniform segments (s divides n) keep (s - 1) + n / s + 1 activations; ties go to the
    # smaller s, which recomputes fewer blocks (only the last segment is not recomputed).
    divisors = [s for s in range(1, n + 1) if n % s == 0]
    return min(divisors, key=lambda s: ((s - 1) + n // s + 1, s))


def _block_count(seed, hidden):
    public = (12, 36, 64)
    hidden_counts = (50, 96, 128)
    return ((hidden_counts if hidden else public)[seed % 3],)


def _largest_of_ties(n):
    counts = {s: (s - 1) + n // s + 1 for s in range(1, n + 1) if n % s == 0}
    return max(s for s, count in counts.items() if count == min(counts.values()))


register(Exercise(
    id="06.best_segments",
    title="The segment count that keeps the fewest activations",
    answer_name="best_segments",
    reference=best_segments,
    inputs=_block_count,
    points=1,
    hints=(
        "Only segment counts that divide n give uniform segments: try every divisor s of n.",
        "Count (s - 1) + n // s + 1 for each and keep the smallest.",
        "When two counts tie (s and n // s often do), prefer the smaller s: it recomputes fewer blocks.",
    ),
    misconceptions=(
        Misconception("not_divisor", "Segments must be uniform: choose s among the divisors of n.",
                      lambda s, r, args: not isinstance(s, int) or args[0] % s != 0),
        Misconception("tie_break", "That count ties with the best one; prefer the smaller s, which "
                      "recomputes fewer blocks.",
                      lambda s, r, args: (s - 1) + args[0] // s == (r - 1) + args[0] // r and s != r),
        Misconception("extreme", "s = 1 keeps every activation and s = n checkpoints every block: "
                      "the minimum lies in between, near sqrt(n).", lambda s, r, args: s in (1, args[0])),
    ),
    wrong_answers=(
        WrongAnswer(lambda n: n ** 0.5, expect="not_divisor", note="sqrt(n) itself, rarely a divisor"),
        WrongAnswer(_largest_of_ties, expect="tie_break", note="the right count, the wrong side of sqrt(n)"),
        WrongAnswer(lambda n: n, expect="extreme"),
        WrongAnswer(lambda n: 1, expect="extreme"),
    ),
))


# --- 06.saved_for_segments ------------------------------------------------------------------

def saved_for_segments(sizes):
    # Every segment but the last is checkpointed and keeps only its input; the last one runs
    # normally and keeps its input plus one activation per block.
    return (len(sizes) - 1) + sizes[-1] + 1


def _segment_sizes(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    count = int(torch.randint(2, 7 if hidden else 5, (1,), generator=generator))
    return (torch.randint(1, 9, (count,), generator=generator).tolist(),)


register(Exercise(
    id="06.saved_for_segments",
    title="Predict the saved activations of a schedule",
    answer_name="saved_for_segments",
    reference=saved_for_segments,
    inputs=_segment_sizes,
    points=1,
    hints=(
        "A checkpointed segment keeps one tensor: its input. Which segments are checkpointed?",
        "checkpoint_sequential runs the last segment normally: each of its blocks keeps one activation, plus its input.",
    ),
    misconceptions=(
        Misconception("all_segments_checkpointed", "checkpoint_sequential does not checkpoint the last "
                      "segment: it runs normally and keeps all its activations.",
                      lambda s, r, args: s == len(args[0])),
        Misconception("counted_every_block", "Blocks inside a checkpointed segment keep nothing: only the "
                      "segment's input is stored, and the blocks are recomputed during backward.",
                      lambda s, r, args: s == sum(args[0]) + 1),
        Misconception("forgot_input", "The last segment also keeps its input (the first Linear saves it).",
                      lambda s, r, args: s == r - 1),
    ),
    wrong_answers=(
        WrongAnswer(lambda sizes: len(sizes), expect="all_segments_checkpointed"),
        WrongAnswer(lambda sizes: sum(sizes) + 1, expect="counted_every_block"),
        WrongAnswer(lambda sizes: (len(sizes) - 1) + sizes[-1], expect="forgot_input"),
    ),
))


# --- 06.checkpointed_step -------------------------------------------------------------------

def checkpointed_step(model, x):
    from torch.utils.checkpoint import checkpoint

    from autograd_lab.labs.memory import saved_tensors
    from autograd_lab.labs.recompute import activations_kept

    # Non-reentrant checkpoints: correct even though x does not require grad (a frozen input).
    with saved_tensors(exclude=model.parameters()) as saved:
        h = x
        for block in model:
            h = checkpoint(block, h, use_reentrant=False)
        loss = h.pow(2).mean()
    loss.backward()
    return loss, activations_kept(saved)


def _seeded_linear(fan_in, fan_out, generator):
    linear = nn.Linear(fan_in, fan_out)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(fan_out, fan_in, generator=generator) / fan_in ** 0.5)
        linear.bias.copy_(torch.randn(fan_out, generator=generator) * 0.1)
    return linear


def _frozen_input_model(seed, hidden):
    """An MLP of Linear -> GELU -> Linear blocks (three saved activations each) and a frozen input."""
    generator = torch.Generator().manual_seed(seed)
    depth, width = (5, 24) if hidden else (4, 16)
    blocks = [nn.Sequential(_seeded_linear(width, 2 * width, generator), nn.GELU(),
                            _seeded_linear(2 * width, width, generator)) for _ in range(depth)]
    x = torch.randn(4, width, generator=generator)  # the output of a frozen embedding: no requires_grad
    return nn.Sequential(*blocks), x


def _mistaken_step(model, x, *, wrap=True, reentrant=False, backward=True):
    """The reference with one thing changed: the wrong answers students actually write."""
    import warnings

    from torch.utils.checkpoint import checkpoint

    from autograd_lab.labs.memory import saved_tensors
    from autograd_lab.labs.recompute import activations_kept

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reentrant + frozen input: "None of the inputs have requires_grad=True"
        with saved_tensors(exclude=model.parameters()) as saved:
            h = x
            for block in model:
                h = checkpoint(block, h, use_reentrant=reentrant) if wrap else block(h)
            loss = h.pow(2).mean()
    if backward:
        loss.backward()
    return loss, activations_kept(saved)


def _one_segment(model, x):
    from torch.utils.checkpoint import checkpoint

    from autograd_lab.labs.memory import saved_tensors
    from autograd_lab.labs.recompute import activations_kept

    with saved_tensors(exclude=model.parameters()) as saved:
        loss = checkpoint(model, x, use_reentrant=False).pow(2).mean()
    loss.backward()
    return loss, activations_kept(saved)


def _plain_step(model, x):
    return _mistaken_step(model, x, wrap=False)


def _depth(parameters):
    """Blocks in the model, from its decoded parameters ({"0.0.weight": ..., "0.2.weight": ...})."""
    return sum(name.endswith(".0.weight") for name in parameters)


def _saved_count(student):
    return student[1] if isinstance(student, (tuple, list)) and len(student) == 2 else None


register(Exercise(
    id="06.checkpointed_step",
    title="Checkpoint every block, keep the gradients",
    answer_name="checkpointed_step",
    reference=checkpointed_step,
    inputs=_frozen_input_model,
    compare=("value", "args"),
    modifies=("model:grad",),          # loss.backward() fills the parameters' .grad, and nothing else
    rtol=1e-5,
    atol=1e-7,
    points=2,
    hints=(
        "Loop over the blocks of model and call checkpoint(block, h, use_reentrant=False) on each.",
        "Measure inside `with saved_tensors(exclude=model.parameters()) as saved:` and return "
        "`activations_kept(saved)`, the saved tensors that hold data.",
        "x comes from a frozen embedding (no requires_grad): the reentrant checkpoint would silently "
        "give the blocks no gradients, so use use_reentrant=False.",
    ),
    misconceptions=(
        Misconception("not_checkpointed", "The blocks were not checkpointed: the forward pass kept "
                      "three activations per block. Wrap each block in checkpoint(..., use_reentrant=False).",
                      lambda s, r, args: _saved_count(s) == 3 * _depth(args[0]) + 1),
        Misconception("one_segment", "The model was checkpointed as one segment: the forward pass kept only "
                      "its input and the output the loss saves. The exercise asks for one checkpoint per block, "
                      "which keeps every block's input.",
                      lambda s, r, args: _saved_count(s) == 2),
    ),
    wrong_answers=(
        WrongAnswer(_plain_step, expect="not_checkpointed"),
        WrongAnswer(_one_segment, expect="one_segment", note="the shortcut: one checkpoint around the model"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, backward=False), expect="none",
                    note="forgot loss.backward(): no parameter gradients"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, reentrant=True), expect="error",
                    note="reentrant + frozen input: the loss has no grad_fn"),
    ),
))
