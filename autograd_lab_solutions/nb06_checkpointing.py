"""Exercises of notebooks/06_checkpointing.ipynb: segment counts, saved activations, a checkpointed step."""

import torch
import torch.nn as nn

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, checkpoint_used, register
from autograd_lab.checking.methods import no_library
from autograd_lab.labs import saved_check
from autograd_lab_solutions._mutants import mutant


# --- 06.best_segments ------------------------------------------------------------------

def best_segments(n):
    # Uniform segments (s divides n) keep (s - 1) + n / s + 1 activations; ties go to the
    # smaller s, which recomputes fewer blocks (only the last segment is not recomputed).
    divisors = [s for s in range(1, n + 1) if n % s == 0]
    return min(divisors, key=lambda s: ((s - 1) + n // s + 1, s))


# Every public and hidden n is chosen so that the shortcuts fail on some of them: n that are not
# perfect squares, where sqrt(n) is no divisor (isqrt, round(sqrt(n)), and minimising over every s,
# divisor or not, then pick a non-divisor), and n with two tied divisors (the larger is wrong).
_PUBLIC_COUNTS = (12, 50, 64)
_HIDDEN_COUNTS = (18, 96, 200)


def _block_count(seed, hidden):
    return ((_HIDDEN_COUNTS if hidden else _PUBLIC_COUNTS)[seed % 3],)


def _largest_of_ties(n):
    counts = {s: (s - 1) + n // s + 1 for s in range(1, n + 1) if n % s == 0}
    return max(s for s, count in counts.items() if count == min(counts.values()))


def _by_predicted_saved(n):
    """Adversarial round 9 (adv-05-08-r8 finding 3, a06_r5): the lab's ``predicted_saved`` counts for every divisor."""
    from autograd_lab.labs.recompute import predicted_saved

    return min((s for s in range(1, n + 1) if n % s == 0), key=lambda s: (predicted_saved(n, s), s))


def _by_lab_measurement(n):
    """Adversarial round 10 (adv-05-08-r9 finding 2, a06_rt): the lab's ``forward_saved`` and ``activations_kept``
    measure the count for each divisor on a throwaway model; the lab's code counts, not the student's."""
    from autograd_lab.labs.recompute import activations_kept, forward_saved

    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh()) for _ in range(n)])
    x = torch.randn(3, 2, requires_grad=True)
    counts = {s: activations_kept(forward_saved(model, x, s)) for s in range(1, n + 1) if n % s == 0}
    return min(counts, key=lambda s: (counts[s], s))


def _by_step_moments(n):
    """Adversarial round 11 (adv-05-08-r10 finding 3, a06_pk): the lab's ``step_moments`` walk of ``uniform(n, s)``
    counts what the last forward moment keeps, for each divisor."""
    from autograd_lab.labs.step_memory import step_moments, uniform

    def kept(s):
        moment = [m for m in step_moments(uniform(n, s), 1, 1) if m.node is None][-1]
        return moment.terms.get("kept by checkpoints", 0) + moment.terms.get("saved by the last segment", 0)
    return min((s for s in range(1, n + 1) if n % s == 0), key=lambda s: (kept(s), s))


def _any_segment_count(n):
    """The formula minimised over every s, divisor or not (with n / s as a float)."""
    return min(range(1, n + 1), key=lambda s: (s - 1) + n / s + 1)


register(Exercise(
    id="06.best_segments",
    title="The segment count that keeps the fewest activations",
    answer_name="best_segments",
    reference=best_segments,
    inputs=_block_count,
    points=1,
    # The notebook imports the lab's count and prints its table: the count is the student's (adv-05-08-r8, 3).
    # Nor its measurement helpers (adv-05-08-r9, finding 2): `forward_saved` + `activations_kept` on a throwaway model
    # count for each divisor, the lab's code doing the counting the prompt asks for; so does `step_moments`
    # (adv-05-08-r10 finding 3).  The name states no formula: it is the answer (06-r13, adv-05-08-r10 note 4).
    method=no_library("code:autograd_lab.labs.recompute:predicted_saved",
                      "code:autograd_lab.labs.recompute:forward_saved",
                      "code:autograd_lab.labs.recompute:activations_kept",
                      "code:autograd_lab.labs.recompute:measure_segments",
                      "code:autograd_lab.labs.memory:saved_tensors",
                      "code:autograd_lab.labs.step_memory:step_moments",
                      name="your own count (not the lab's `predicted_saved`, nor its measurement helpers "
                           "`forward_saved`, `activations_kept`, `measure_segments`, `saved_tensors`, "
                           "`step_moments`)"),
    hints=(
        "Only segment counts that divide n give uniform segments: which s are allowed for n = 12?",
        "For one allowed s, what does each checkpointed segment keep after the forward pass, and what does the "
        "last segment keep? Compare that count over every allowed s instead of guessing where it is smallest.",
        "Swapping s and n // s leaves the count unchanged, so the fewest can be reached by two segment counts: "
        "the exercise says which one to return.",
    ),
    misconceptions=(
        Misconception("not_divisor", "Segments must be uniform: choose s among the divisors of n. sqrt(n), "
                      "rounded or not, is a divisor only for some n.",
                      lambda s, r, args: not isinstance(s, int) or args[0] % s != 0),
        Misconception("tie_break", "That count ties with the best one; prefer the smaller s, which "
                      "recomputes fewer blocks.",
                      lambda s, r, args: (s - 1) + args[0] // s == (r - 1) + args[0] // r and s != r),
        Misconception("extreme", "s = 1 keeps every activation and s = n checkpoints every block: "
                      "the minimum lies in between, near sqrt(n).", lambda s, r, args: s in (1, args[0])),
    ),
    wrong_answers=(
        WrongAnswer(lambda n: n ** 0.5, expect="not_divisor", note="sqrt(n) itself, rarely a divisor"),
        WrongAnswer(lambda n: __import__("math").isqrt(n), expect="not_divisor",
                    note="isqrt(n): a divisor only when n is a square (50 is not)"),
        WrongAnswer(lambda n: round(n ** 0.5), expect="not_divisor", note="round(sqrt(n))"),
        WrongAnswer(_any_segment_count, expect="not_divisor", note="the formula minimised over every s"),
        WrongAnswer(_largest_of_ties, expect="tie_break", note="the right count, the wrong side of sqrt(n)"),
        WrongAnswer(lambda n: n, expect="extreme"),
        WrongAnswer(lambda n: 1, expect="extreme"),
        WrongAnswer(_by_predicted_saved, expect="used_library",
                    note="adversary round 9 (a06_r5): the lab's predicted_saved does the count, right on every case"),
        WrongAnswer(_by_lab_measurement, expect="used_library",
                    note="adversary round 10 (a06_rt): forward_saved + activations_kept measure each divisor"),
        WrongAnswer(_by_step_moments, expect="used_library",
                    note="adversary round 11 (a06_pk): the lab's step_moments walk counts each divisor"),
    ),
))


# --- 06.saved_for_segments ------------------------------------------------------------------

def saved_for_segments(sizes):
    # The forward pass keeps each checkpointed segment's input, and the last segment's input plus
    # one activation per block.  Recomputing checkpointed segment k (0-based) brings its sizes[k]
    # activations back while the inputs of segments 0..k are still kept: k + 1 + sizes[k].  That
    # expression for the last segment is the forward pass's count, so the most is its maximum.
    kept = (len(sizes) - 1) + sizes[-1] + 1
    most = max(k + 1 + size for k, size in enumerate(sizes))
    return kept, most


# Schedules where the last, the first and a middle segment hold the most, and one of a single segment
# (adversarial round 7, sf_emptymax: `max()` over the checkpointed segments, empty there, got full
# marks); the seed picks which.  Chosen so that no wrong answer of the bank prints, on any public case,
# what another prints or what the reference returns on any case: the student build names a mistake by
# those prints.
_PUBLIC_SCHEDULES = ([8, 9, 11], [12, 8, 5], [10, 3, 10, 6], [5])
_HIDDEN_SCHEDULES = ([3, 1, 6, 11, 6, 11], [11, 3, 7, 5, 4], [10, 11, 1, 5], [9])


def _segment_sizes(seed, hidden):
    schedules = _HIDDEN_SCHEDULES if hidden else _PUBLIC_SCHEDULES
    return (list(schedules[seed % len(schedules)]),)


def _recomputing(sizes):
    """What recomputing each checkpointed segment holds at once: its activations and the k + 1 inputs kept."""
    return [k + 1 + size for k, size in enumerate(sizes[:-1])]


def _segments_explaining(student, reference, sizes):
    """The checkpointed segments whose recomputation alone (with the forward count) explains the answer's most."""
    if student[0] != reference[0] or student[1] == reference[1]:
        return []
    return [k for k, held in enumerate(_recomputing(sizes)) if max(reference[0], held) == student[1]]


def _kept_only(sizes):
    kept = (len(sizes) - 1) + sizes[-1] + 1
    return kept, kept


def _first_segment_only(sizes):
    kept = (len(sizes) - 1) + sizes[-1] + 1
    return kept, max(kept, 1 + sizes[0])


def _last_checkpointed_only(sizes):
    """Adversary round 7 (sf_lastonly): the forward count against the last checkpointed segment only."""
    kept = (len(sizes) - 1) + sizes[-1] + 1
    return kept, max(kept, len(sizes) - 1 + sizes[-2]) if len(sizes) > 1 else kept


def _recomputed_without_own_input(sizes):
    """Adversary round 7 (sf_mostforgot): a recomputed segment's own input not counted."""
    kept = (len(sizes) - 1) + sizes[-1] + 1
    return kept, max([kept] + [k + size for k, size in enumerate(sizes[:-1])])


def _nothing_freed(sizes):
    """Adversary round 7 (sf_wrong2): everything the forward pass kept, plus the largest recomputed segment."""
    kept = (len(sizes) - 1) + sizes[-1] + 1
    return kept, kept + max(sizes[:-1], default=0)


def _step_memory_model(sizes):
    """Audit 06-r12 item 5: the lab's own step model (step_moments, printed in the notebook) read term by term."""
    from autograd_lab.labs.step_memory import step_moments

    activations = ("kept by checkpoints", "saved by the last segment", "recomputed segment")
    counts = [round(sum(m.terms.get(term, 0) for term in activations)) + 1 for m in step_moments(sizes, 64, 2**20)]
    return (len(sizes) - 1) + sizes[-1] + 1, max(counts)


def _step_moments_read_off(sizes):
    """Adversarial round 9 (adv-05-08-r8 finding 3, a06_r5): kept and most both read off the lab's step_moments."""
    from autograd_lab.labs.step_memory import step_moments

    terms = ("kept by checkpoints", "saved by the last segment", "recomputed segment")
    moments = step_moments(list(sizes), width=64, batch=64)
    held = [sum(m.terms.get(t, 0) for t in terms) for m in moments]
    end_of_forward = max(i for i, m in enumerate(moments) if m.node is None and m.where != "the loss")
    return int(round(held[end_of_forward])) + 1, int(round(max(held))) + 1


def _sizes_max_of_empty(sizes):
    """Adversary round 7 (sf_emptymax): right for two segments or more, ValueError for one."""
    kept = (len(sizes) - 1) + sizes[-1] + 1
    return kept, max(kept, max(k + 1 + sizes[k] for k in range(len(sizes) - 1)))


register(Exercise(
    id="06.saved_for_segments",
    title="Predict what a schedule keeps, and the most it holds",
    answer_name="saved_for_segments",
    reference=saved_for_segments,
    inputs=_segment_sizes,
    public_seeds=(0, 1, 2, 3),
    hidden_seeds=(101, 102, 103, 104),
    points=2,
    # The notebook imports the lab's step model and prints its source: the count is the skill (audit 06-r12, 5).
    method=no_library("code:autograd_lab.labs.step_memory",
                      name="your own count (no `step_memory` model, which the notebook uses to check the profiler)",
                      tag="used_step_model"),
    hints=(
        "A checkpointed segment keeps one tensor: its input. Which segments are checkpointed?",
        "The last segment runs normally: each of its blocks keeps one activation, plus its input.",
        "During backward, a checkpointed segment is recomputed while the inputs of the segments before it "
        "(and its own) are still kept. What does each recomputation hold at once? Compare it with what the "
        "forward pass leaves alive.",
    ),
    misconceptions=(
        Misconception("all_segments_checkpointed", "checkpoint_sequential does not checkpoint the last "
                      "segment: it runs normally and keeps all its activations.",
                      lambda s, r, args: s[0] == len(args[0])),
        Misconception("counted_every_block", "Blocks inside a checkpointed segment keep nothing: only the "
                      "segment's input is stored, and the blocks are recomputed during backward.",
                      lambda s, r, args: s[0] == sum(args[0]) + 1),
        Misconception("forgot_input", "The last segment also keeps its input (its first Linear saves it).",
                      lambda s, r, args: s[0] == r[0] - 1),
        Misconception("most_is_kept", "Backward can hold more than the forward pass kept: a recomputed segment "
                      "brings its activations back while earlier segments' inputs are still kept.",
                      lambda s, r, args: s[0] == r[0] and s[1] == r[0] != r[1]),
        # Judged from the cause, not the value alone (adversarial round 7, sf_lastonly was told about the
        # first segment): named only where the first segment's recomputation, and no other's, gives the answer.
        Misconception("only_first_segment", "The first segment is not always the one that holds the most when "
                      "recomputed: segment k holds its own activations plus the k + 1 inputs still kept, so "
                      "compare every segment.",
                      lambda s, r, args: _segments_explaining(s, r, args[0]) == [0]),
        Misconception("one_segment_only", "Your most is what recomputing one checkpointed segment holds, and "
                      "another one holds more: during backward every checkpointed segment is recomputed in "
                      "turn, so compare all of them.",
                      lambda s, r, args: _segments_explaining(s, r, args[0]) not in ([], [0])),
        Misconception("recomputed_without_own_input", "While a checkpointed segment is recomputed, its own input "
                      "is still kept too: count it with the inputs of the segments before it.",
                      lambda s, r, args: s[0] == r[0] and s[1] != r[1] and s[1] == max(
                          [r[0]] + [held - 1 for held in _recomputing(args[0])])),
        Misconception("nothing_freed", "Backward goes through the last segment first and frees its activations "
                      "before any checkpointed segment is recomputed: what the forward pass kept is not all "
                      "alive during a recomputation.",
                      lambda s, r, args: s[0] == r[0] and s[1] != r[1] and len(args[0]) > 1 and
                      s[1] == r[0] + max(args[0][:-1])),
    ),
    wrong_answers=(
        WrongAnswer(lambda sizes: (len(sizes), len(sizes)), expect="all_segments_checkpointed"),
        WrongAnswer(lambda sizes: (sum(sizes) + 1, sum(sizes) + 1), expect="counted_every_block"),
        WrongAnswer(lambda sizes: ((len(sizes) - 1) + sizes[-1], (len(sizes) - 1) + sizes[-1]), expect="forgot_input"),
        WrongAnswer(_kept_only, expect="most_is_kept", note="the forward pass's count as the most"),
        WrongAnswer(_first_segment_only, expect="only_first_segment",
                    note="max(kept, recomputing the first segment): right only when the first segment is the longest"),
        WrongAnswer(_last_checkpointed_only, expect="one_segment_only", note="adversary round 7 (sf_lastonly)"),
        WrongAnswer(_recomputed_without_own_input, expect="recomputed_without_own_input",
                    note="adversary round 7 (sf_mostforgot)"),
        WrongAnswer(_nothing_freed, expect="nothing_freed", note="adversary round 7 (sf_wrong2)"),
        WrongAnswer(_step_memory_model, expect="used_step_model",
                    note="audit 06-r12 item 5: step_moments' terms summed, right on every case"),
        WrongAnswer(_step_moments_read_off, expect="used_step_model",
                    note="adversary round 9 (a06_r5): kept and most both read off step_moments"),
        WrongAnswer(_sizes_max_of_empty, expect="error",
                    note="adversary round 7 (sf_emptymax): one public and one hidden case hold a single segment"),
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
    depth, width = (5 + seed % 2, 24) if hidden else (3 + seed % 3, 16)   # the depth varies by case
    blocks = [nn.Sequential(_seeded_linear(width, 2 * width, generator), nn.GELU(),
                            _seeded_linear(2 * width, width, generator)) for _ in range(depth)]
    x = torch.randn(4, width, generator=generator)  # the output of a frozen embedding: no requires_grad
    return nn.Sequential(*blocks), x


def _mistaken_step(model, x, *, wrap=True, reentrant=False, backward=True, loss_inside=True, as_input=None,
                   **checkpoint_options):
    """The reference with one thing changed: the wrong answers students actually write."""
    import warnings

    from torch.utils.checkpoint import checkpoint

    from autograd_lab.labs.memory import saved_tensors
    from autograd_lab.labs.recompute import activations_kept

    h = x if as_input is None else as_input(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reentrant + frozen input: "None of the inputs have requires_grad=True"
        with saved_tensors(exclude=model.parameters()) as saved:
            for block in model:
                h = checkpoint(block, h, use_reentrant=reentrant, **checkpoint_options) if wrap else block(h)
            loss = h.pow(2).mean() if loss_inside else None
    if loss is None:
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


def _typed_count(model, x):
    """No checkpoint at all, and the count a checkpointed step would have, typed."""
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss, len(model) + 1


def _checkpointed_typed_count(model, x):
    """Every block checkpointed, and the count typed instead of measured (adv-05-08-r2, 06.checkpointed_step 1)."""
    from torch.utils.checkpoint import checkpoint

    h = x
    for block in model:
        h = checkpoint(block, h, use_reentrant=False)
    loss = h.pow(2).mean()
    loss.backward()
    return loss, len(model) + 1


def _checkpointed_for_show(model, x):
    """A checkpointed forward measured for the count, then an ordinary forward for the loss and backward."""
    count = _mistaken_step(model, x, backward=False)[1]
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss, count


def _sequential_shortcut(model, x):
    """checkpoint_sequential with one segment per block: its last segment is not checkpointed."""
    from torch.utils.checkpoint import checkpoint_sequential

    from autograd_lab.labs.memory import saved_tensors
    from autograd_lab.labs.recompute import activations_kept

    with saved_tensors(exclude=model.parameters()) as saved:
        loss = checkpoint_sequential(model, len(model), x, use_reentrant=False).pow(2).mean()
    loss.backward()
    return loss, activations_kept(saved)


def _forshow_under_own_hooks(model, x):
    """Adversarial round 4 (c06_forshow): checkpoints for show beside an ordinary forward, all under the answer's
    own identity hooks (which hide every save from the check's hooks above them), and a typed count."""
    from torch.utils.checkpoint import checkpoint

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        h = x
        for block in model:
            shown = checkpoint(block, h, use_reentrant=False)
            h = block(h) + 0 * shown.sum()      # the checkpoint stays in the graph and is recomputed, for nothing
        loss = h.pow(2).mean()
    loss.backward()
    return loss, len(model) + 1


def _forshow_measured(model, x):
    """The same forward for show, measured for real with the course's measurement around the checkpoints only."""
    from torch.utils.checkpoint import checkpoint

    from autograd_lab.labs.memory import saved_tensors
    from autograd_lab.labs.recompute import activations_kept

    with saved_tensors(exclude=model.parameters()) as saved:
        h = x
        for block in model:
            shown = checkpoint(block, h, use_reentrant=False)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                plain = block(h)                 # its saves go to these hooks, not to the measurement
            h = plain + 0 * shown
        loss = h.pow(2).mean()
    loss.backward()
    return loss, activations_kept(saved)


def _measured_count_typed(model, x):
    """Adversarial round 4 (c06_typed): the real step inside the course's measurement, the count typed beside it."""
    from torch.utils.checkpoint import checkpoint

    from autograd_lab.labs.memory import saved_tensors

    with saved_tensors(exclude=model.parameters()):
        h = x
        for block in model:
            h = checkpoint(block, h, use_reentrant=False)
        loss = h.pow(2).mean()
    loss.backward()
    return loss, len(model) + 1


# Adversarial round 5 (s06c): the real measured step, `activations_kept` called for show, its count thrown away.
_measured_then_typed = mutant(checkpointed_step, "    return loss, activations_kept(saved)",
                              "    activations_kept(saved)\n    return loss, len(model) + 1")


# Adversarial round 8 (adv-05-08-r7 06c_countonly): only the count returned, not the pair the prompt asks for.
_count_only = mutant(checkpointed_step, "    return loss, activations_kept(saved)",
                     "    return activations_kept(saved)")

# Adversarial round 8 (adv-05-08-r7 06c_fake, full marks, 3/3 hidden): the real step measured, the count read from a
# second measurement around ``len(model) + 1`` tanh ops on a tensor of the answer's own.
_count_of_a_second_measurement = mutant(
    checkpointed_step, "    return loss, activations_kept(saved)",
    "    t = torch.zeros(2, requires_grad=True)\n"
    "    with saved_tensors() as fake:\n"
    "        for _ in range(len(model) + 1):\n"
    "            t = torch.tanh(t)\n"
    "    return loss, activations_kept(fake)")


def _own_hooks_count_typed(model, x):
    """Adversarial round 4 (c06_ownhooks): real checkpoints under the answer's own identity hooks, a typed count."""
    from torch.utils.checkpoint import checkpoint

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        h = x
        for block in model:
            h = checkpoint(block, h, use_reentrant=False)
        loss = h.pow(2).mean()
    loss.backward()
    return loss, len(model) + 1


def _own_hooks_measured(model, x):
    """Real checkpoints, measured with hooks of one's own that count storages: the count is right, the tool is not."""
    from torch.utils.checkpoint import checkpoint

    kept, parameters = set(), {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(tensor):
        if tensor.untyped_storage().nbytes() and tensor.untyped_storage().data_ptr() not in parameters:
            kept.add(tensor.untyped_storage().data_ptr())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        h = x
        for block in model:
            h = checkpoint(block, h, use_reentrant=False)
        loss = h.pow(2).mean()
    loss.backward()
    return loss, len(kept)


def _loss_outside_plus_one(model, x):
    """Adversarial round 4 (c06_half): the loss after the measurement, and its save added by hand."""
    loss, count = _mistaken_step(model, x, loss_inside=False)
    return loss, count + 1


def _selective(policy):
    """A ``context_fn`` for ``checkpoint``: selective checkpointing with ``policy`` (a function or an op list)."""
    import functools

    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return functools.partial(create_selective_checkpoint_contexts, policy)


def _saves_every_op(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE


def _saves_matmuls(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


# Adversarial round 6 (adv-05-08-r5, 06.checkpointed_step 10): every saved tensor counted, the checkpoints' empty
# placeholders included (right on releases whose checkpoints save none, one more per step on the others).
_every_saved_tensor_counted = mutant(checkpointed_step, "    return loss, activations_kept(saved)",
                                     "    return loss, len(saved.tensors)")


def _blocks_in(parameters):
    """Blocks in the model, from its decoded parameters ({"0.0.weight": ..., "0.2.weight": ...})."""
    return sum(name.endswith(".0.weight") for name in parameters)


def _saved_count(student):
    return student[1] if isinstance(student, (tuple, list)) and len(student) == 3 else None


def _seen(student, what, default=0):
    """What ``labs/saved_check.py`` saw of the step (the output's last item), or ``default``."""
    if isinstance(student, (tuple, list)) and len(student) == 3 and isinstance(student[2], dict):
        return student[2].get(what, default)
    return default


def _unmeasured(student):
    """How many saved tensors the answer's own measurement missed, when they were not only saved after it."""
    return _seen(student, saved_check.OUTSIDE) - _seen(student, saved_check.AFTER)


register(Exercise(
    id="06.checkpointed_step",
    title="Checkpoint every block, keep the gradients",
    answer_name="checkpointed_step",
    reference=checkpointed_step,
    inputs=_frozen_input_model,
    compare=("value", "args"),
    modifies=("model:grad",),          # loss.backward() fills the parameters' .grad, and nothing else
    # Called under saved-tensor hooks of the checker's: the output is (loss, count, {"saved outside your
    # measurement": n}), n > 0 when saves escaped the answer's own measurement (a typed count, whatever its value).
    call="autograd_lab.labs.saved_check:step_with_unmeasured_saves",
    method=checkpoint_used(),          # one non-reentrant checkpoint per block, each recomputed in backward
    rtol=1e-5,
    atol=1e-7,
    points=2,
    hints=(
        "Loop over the blocks of the model and give each block its own non-reentrant checkpoint, passing the "
        "previous block's output on to the next.",
        "The count is measured: the forward pass and the loss both go inside the `saved_tensors` measurement "
        "that leaves out the parameters; backward comes after it, and `activations_kept` counts what was saved.",
        "x comes from a frozen embedding (no requires_grad): the reentrant checkpoint would leave the blocks "
        "without gradients (only a warning at forward time), so use use_reentrant=False.",
    ),
    misconceptions=(
        # The check appends what it saw to the answer's output: a pair becomes three items, so the comparison alone
        # would count that dict among the student's (adversarial round 8: "yours has 2 entries" for a bare count).
        Misconception("not_a_pair", "Your step must return a pair `(loss, count)`: the loss tensor, then the number "
                      "`activations_kept` counted. What it returned is not two items.",
                      lambda s, r, args: not (isinstance(s, (tuple, list)) and len(s) == 3)),
        Misconception("loss_outside", "Your count leaves out the tensor the loss saves: `pow(2)` saves the "
                      "model's output for its backward. Compute the loss inside the `saved_tensors` block too "
                      "(and count it there, rather than adding it by hand).",
                      lambda s, r, args: (_saved_count(s) == _blocks_in(args[0])
                                          or _seen(s, saved_check.AFTER) > 0)),
        Misconception("not_checkpointed_for_real", "Your step kept activations from inside the blocks until the "
                      "backward pass: the loss came through blocks run without a checkpoint. An ordinary "
                      "`block(h)` saves every activation its layers need, whatever a checkpoint computes beside it "
                      "(or whichever hooks it runs under). Pass each block's checkpointed output on to the next "
                      "block and to the loss, and nothing else.",
                      lambda s, r, args: _seen(s, saved_check.KEPT_INSIDE_BLOCKS) > 0),
        Misconception("selective_policy_kept", "Your checkpoints' selective policy (`context_fn=`) kept the outputs "
                      "of ops inside the blocks until the backward pass: an op whose output the policy saves is not "
                      "recomputed, and what it keeps lives in the checkpoint's own cache, which saved-tensor hooks "
                      "(and so `saved_tensors` and your count) never see. The prompt asks that each block keep only "
                      "its input until backward: checkpoint the blocks without a policy that saves any op.",
                      lambda s, r, args: _seen(s, saved_check.KEPT_BY_POLICY) > 0),
        Misconception("counted_empty", "Your count includes saved tensors that hold no data: `len(saved.tensors)`, "
                      "`saved.count` and `saved.saves` count every entry (or every save), the empty `(0,)` "
                      "placeholder a checkpoint saves on some torch releases included, so the number depends on the "
                      "release. The prompt's count is `activations_kept(saved)`, which counts only the tensors that "
                      "hold data.",
                      lambda s, r, args: _seen(s, saved_check.PLACEHOLDERS, False) is True),
        Misconception("own_hooks", "Your step pushed saved-tensor hooks of its own: hooks form a stack and only the "
                      "innermost sees a save, so yours hide what your step saves from the course's measurement (and "
                      "from the check). Measure with `saved_tensors(exclude=model.parameters())`, as the prompt says, "
                      "and no other hooks.",
                      lambda s, r, args: _seen(s, saved_check.OWN_HOOKS) > 0),
        Misconception("count_not_read", "Your count was not read from a `saved_tensors` measurement of your step: "
                      "return what `activations_kept(saved)` counts for the `saved_tensors(exclude=model."
                      "parameters())` block around your forward pass and loss, not a number worked out by hand, "
                      "nor one measured around something other than the model's forward pass (nor with hooks of "
                      "your own, which hide the saves from the course's).",
                      lambda s, r, args: (_seen(s, saved_check.FROM_MEASUREMENT, True) is False
                                          and _unmeasured(s) <= 0 and _seen(s, saved_check.AFTER) == 0)),
        Misconception("count_not_measured", "Your count was not measured: tensors your step saved for backward "
                      "reached the check's own saved-tensor hooks, so no measurement of yours saw them. The count must be measured: the "
                      "forward pass and the loss go inside a `saved_tensors` measurement that leaves out the "
                      "parameters, and the step returns what `activations_kept` counts there, not a number worked "
                      "out by hand.",
                      lambda s, r, args: _unmeasured(s) > 0),
    ),
    wrong_answers=(
        WrongAnswer(_forshow_under_own_hooks, expect="not_checkpointed_for_real",
                    note="adversarial round 4 (c06_forshow): checkpoints for show beside an ordinary forward, own "
                         "identity hooks, typed count (was full marks)"),
        WrongAnswer(_forshow_measured, expect="not_checkpointed_for_real",
                    note="the same forward for show, with the course's measurement around the checkpoints only"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, context_fn=_selective(_saves_every_op)),
                    expect="selective_policy_kept",
                    note="adversarial round 6 (adv-05-08-r5 #4): a selective policy that saves every op, so nothing "
                         "is recomputed and every activation kept (was full marks, 3/3 hidden)"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, context_fn=_selective(
                        [torch.ops.aten.addmm.default, torch.ops.aten.gelu.default, torch.ops.aten.t.default])),
                    expect="selective_policy_kept",
                    note="adversarial round 6 (adv-05-08-r5 #7): the op-list form, every op the blocks run (was full "
                         "marks, 3/3 hidden)"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, context_fn=_selective(_saves_matmuls)),
                    expect="selective_policy_kept",
                    note="the notebook's selective policy (matmul outputs saved): the first Linear's output is kept "
                         "until backward, which the prompt rules out"),
        WrongAnswer(_every_saved_tensor_counted, expect="counted_empty",
                    note="adversarial round 6 (adv-05-08-r5 #10): len(saved.tensors), passed on 2.13.0, a bare "
                         "'expected 4, got 5' on 2.5.1"),
        WrongAnswer(_measured_count_typed, expect="count_not_read",
                    note="adversarial round 4 (c06_typed): the real measured step, the count typed beside it"),
        WrongAnswer(_measured_then_typed, expect="count_not_read",
                    note="adversarial round 5 (s06c): activations_kept(saved) called and thrown away, the count typed "
                         "(was full marks: the call was judged, not where the count came from)"),
        WrongAnswer(_count_only, expect="not_a_pair",
                    note="adversarial round 8 (adv-05-08-r7 06c_countonly): the count alone was told 'expected a "
                         "tuple of length 3, got length 2', the check's own record counted among the answer's"),
        WrongAnswer(_count_of_a_second_measurement, expect="count_not_read",
                    note="adversarial round 8 (adv-05-08-r7 06c_fake): the count read from a second measurement of "
                         "tanh ops on a tensor of the answer's own (was full marks, 3/3 hidden)"),
        WrongAnswer(_own_hooks_count_typed, expect="own_hooks",
                    note="adversarial round 4 (c06_ownhooks): own identity hooks instead of the measurement, typed"),
        WrongAnswer(_own_hooks_measured, expect="own_hooks",
                    note="a measurement of one's own hooks in place of the course's (round 3 accepted it)"),
        WrongAnswer(_loss_outside_plus_one, expect="loss_outside",
                    note="adversarial round 4 (c06_half): the loss outside the measurement, its save added by hand"),
        WrongAnswer(_checkpointed_typed_count, expect="count_not_measured",
                    note="every block checkpointed, the count typed as len(model) + 1 (adv-05-08-r2)"),
        WrongAnswer(_typed_count, expect="checkpoint", note="no checkpoint, the count typed as len(model) + 1"),
        WrongAnswer(_checkpointed_for_show, expect="checkpoint",
                    note="checkpointed only for the count; the loss comes from an ordinary forward"),
        WrongAnswer(_one_segment, expect="checkpoint", note="one checkpoint around the whole model"),
        WrongAnswer(_sequential_shortcut, expect="checkpoint",
                    note="checkpoint_sequential(model, len(model)): its last block is not checkpointed"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, wrap=False), expect="checkpoint",
                    note="no checkpoint, the count measured"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, backward=False), expect="checkpoint",
                    note="forgot loss.backward(): nothing was recomputed, no parameter gradients"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, reentrant=True,
                                                     as_input=lambda t: t.detach().requires_grad_()),
                    expect="checkpoint", note="the reentrant checkpoint on a copy of x that requires grad"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, reentrant=True), expect="error",
                    note="reentrant + frozen input: the loss has no grad_fn"),
        WrongAnswer(lambda model, x: _mistaken_step(model, x, loss_inside=False), expect="loss_outside",
                    note="measured the blocks, computed the loss after the saved_tensors block"),
    ),
))
