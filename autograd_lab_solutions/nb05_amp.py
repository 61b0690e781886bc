"""Exercises of notebooks/05_amp.ipynb: choosing a loss scale, ordering the AMP step, GradScaler's rule."""

import copy
import math

import torch
import torch.nn.functional as F

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, no_grad_scaler, register
from autograd_lab_solutions._escapes import in_child
from autograd_lab_solutions._mutants import mutant

_FLOAT16_INF = 65520.0   # float16 rounds |x| >= 65520 to inf; below, at most to 65504, its largest value


# --- 05.pick_scale ------------------------------------------------------------------

def pick_scale(grads):
    # The largest power of two by which the biggest |gradient| still rounds to a finite float16:
    # float16 rounds 65504 <= x < 65520 down to 65504, and from 65520 up to inf.
    biggest = grads.abs().max().item()
    exponent = math.floor(math.log2(65520.0 / biggest))
    if biggest * 2.0 ** exponent >= 65520.0:   # exactly 65520 is a tie, and ties round to inf
        exponent -= 1
    return 2.0 ** exponent


# What decides the answer is the largest |gradient|.  Each case puts it somewhere in the tensor
# (never among the first few entries), with either sign, and on one of float16's three edges, so
# that looking at one entry, forgetting abs(), or using 65504 or 65536 as the limit gets some case
# wrong.  Public and hidden cases draw from the same three kinds, so check() catches what grading does.
# The kinds also sit in three ranges of the largest |gradient| (the prompt says it can sit anywhere):
# between 2^8 and 2^11 (answers 2^5 to 2^8); at least 65520, where float16 holds it as inf and the
# answer is below 1 (adversarial round 7: a search that only grows from 1, or a maximum taken in
# float16, got full marks); and below 2^-25, where float16 flushes it to zero and the answer is above
# 2^40 (round 7: a search down from 2^40, or a float16 maximum, got full marks; starting at
# GradScaler's 65536 and only halving, p05j, or a search bounded by 2^24, p05i, stay too small there).
# The third kind's largest is exactly 65520 / 2^k, float16's tie: floor(log2(65520 / max)) without the
# tie overflows (round 7, ps_ceilslip).
_EDGES = {
    0: ("exactly 65504 after scaling", lambda u: 65504.0, -1.0),          # a ceil-based rule halves it
    1: ("rounds down to 65504", lambda u: 65505.0 + 14.0 * u, 1.0),       # a 65504 limit halves it
    2: ("a tie at 65520, which rounds up to inf", lambda u: 65520.0, -1.0),  # 65536, or no tie, overflows
}
_EXPONENTS = {0: (5, 9), 1: (-4, 0), 2: (42, 47)}  # randint bounds: answers 2^5..2^8, 2^-4..2^-1, 2^41..2^45


def _gradient_sample(seed, hidden):
    """Log-normal gradient magnitudes with random signs, and a largest |value| placed on an edge."""
    generator = torch.Generator().manual_seed(seed)
    size = 5000 if hidden else 2000
    log10 = torch.empty(size, dtype=torch.float64).normal_(-5.0, 1.2, generator=generator)
    signs = torch.randint(0, 2, (size,), generator=generator).to(torch.float64) * 2 - 1
    grads = signs * 10.0 ** log10
    kind = seed % 3
    _, product, sign = _EDGES[kind]
    # each kind keeps to its own binades, so that no two cases share an answer (the student build
    # names a mistake by matching outputs, which must not collide across cases)
    exponent = int(torch.randint(*_EXPONENTS[kind], (1,), generator=generator))
    largest = product(float(torch.rand(1, generator=generator))) / 2.0 ** exponent
    # small gradients stay small: the sample is shrunk until its own largest is a fifth of the placed one
    grads *= min(1.0, 0.2 * largest / grads.abs().max().item())
    # a few large gradients of both signs, as at the start of training; the largest one anywhere
    positions = torch.randperm(size - 10, generator=generator)[:5] + 10
    others = largest * (0.25 + 0.2 * torch.rand(4, generator=generator, dtype=torch.float64))
    grads[positions[1:]] = others * torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    grads[positions[0]] = sign * largest
    return (grads.to(torch.float32),)


def _overflows(student, args):
    """Whether ``grads * student`` really has an inf in float16 (65504 < |x| < 65520 rounds down to 65504)."""
    return bool((args[0].double() * float(student)).to(torch.float16).isinf().any())


def _is_power_of_two(value):
    return value > 0 and math.log2(value).is_integer()


def _rounds_to_max(student, reference, args):
    """Half the answer, where the answer puts the largest gradient between 65504 and 65520."""
    largest = args[0].abs().max().item() * float(reference)
    return float(student) == float(reference) / 2 and 65504.0 < largest < _FLOAT16_INF


def _largest_power(limit):
    return lambda grads: 2.0 ** math.floor(math.log2(limit / grads.abs().max().item()))


def _scale_for(largest):
    """The reference's rule applied to a value that may not be the largest |gradient|."""
    return pick_scale(torch.tensor([largest]))


def _ceil_minus_one(grads):
    return 2.0 ** (math.ceil(math.log2(65504.0 / grads.abs().max().item())) - 1)


def _halved_from_gradscaler_default(grads):
    """Adversary (round 5, p05j): GradScaler's initial 65536, halved while the cast overflows, never grown."""
    scale = 65536.0
    while torch.isinf((grads * scale).to(torch.float16)).any():
        scale /= 2
    return scale


def _bounded_search(grads):
    """Adversary (round 5, p05i): powers of two tried from 2^24 down only."""
    for exponent in range(24, -24, -1):
        if not torch.isinf((grads * 2.0 ** exponent).to(torch.float16)).any():
            return 2.0 ** exponent
    return 2.0 ** -24


def _floor_without_tie(grads):
    """Adversary round 7 (ps_ceilslip): floor(log2(65520 / max)) without the tie at exactly 65520."""
    return 2.0 ** math.floor(math.log2(65520.0 / grads.abs().max().item()))


def _grown_from_one(grads):
    """Adversary round 7 (ps_onlyup): a search that starts at 1 and only doubles, so never below 1."""
    scale = 1.0
    while torch.isfinite((grads * (2 * scale)).to(torch.float16)).all():
        scale *= 2
    return scale


def _maximum_in_float16(grads):
    """Adversary round 7 (ps_round_m_half): the largest |gradient| read after a cast to float16 (inf or 0)."""
    biggest = grads.to(torch.float16).abs().max().item()
    exponent = math.floor(math.log2(65520.0 / biggest))
    if biggest * 2.0 ** exponent >= 65520.0:
        exponent -= 1
    return 2.0 ** exponent


def _halved_from_two_to_forty(grads):
    """Adversary round 7 (ps_from1_down): 2^40 halved while the cast overflows, so never above 2^40."""
    scale = 2.0 ** 40
    while not torch.isfinite((grads * scale).to(torch.float16)).all():
        scale /= 2
    return scale


def _scale_in_place(grads):
    grads.abs_()                                     # works on the caller's tensor
    return pick_scale(grads)


register(Exercise(
    id="05.pick_scale",
    title="Pick a loss scale between underflow and overflow",
    answer_name="pick_scale",
    reference=pick_scale,
    inputs=_gradient_sample,
    points=1,
    hints=(
        "Only the largest |gradient| can overflow: find it (its sign does not matter), wherever it sits.",
        "Overflow means inf. The number-formats cell showed where float16's rounding stops at its largest "
        "value and where inf begins: a product a little above 65504 is not yet an overflow.",
        "Either compute the exponent with math.log2 and check the boundary case, or try powers of two and "
        "cast `grads * scale` to float16 to see whether any entry became inf.",
    ),
    misconceptions=(
        Misconception("overflow", "With this scale the largest gradient becomes inf in float16: the step "
                      "would be skipped. Overflow depends on a gradient's size, not its sign: the one that "
                      "overflows may be negative.", lambda s, r, args: _overflows(s, args)),
        Misconception("not_power_of_two", "Return a power of two (by default GradScaler moves its scale by "
                      "factors of 2, and a power of two scales exactly, without rounding any gradient).",
                      lambda s, r, args: not _is_power_of_two(float(s))),
        Misconception("rounds_to_max", "This scale does not overflow, but it is not the largest that does "
                      "not: the limit you stopped at is not where float16 starts to give inf. Re-read the "
                      "number-formats cell: what does float16 make of a value a little above its largest "
                      "number?", _rounds_to_max),
        Misconception("too_small", "This scale does not overflow, but a larger power of two would not "
                      "either: the prompt asks for the largest, which lifts the small gradients as far from "
                      "float16's bottom (subnormals, then zero) as the largest gradient allows.",
                      lambda s, r, args: float(s) < float(r)),
    ),
    wrong_answers=(
        WrongAnswer(lambda grads: 2.0 ** 16, expect="overflow", note="GradScaler's initial scale, blindly"),
        WrongAnswer(lambda grads: 2.0 * pick_scale(grads), expect="overflow"),
        WrongAnswer(lambda grads: 65504.0 / grads.abs().max().item(), expect="not_power_of_two"),
        WrongAnswer(lambda grads: 65510.0 / grads.abs().max().item(), expect="not_power_of_two",
                    note="near miss of `overflow`: the largest lands at 65510, which float16 rounds down to 65504"),
        WrongAnswer(lambda grads: 8.0, expect="too_small", note="the paper's fixed scale of 8, for other data"),
        WrongAnswer(lambda grads: 2.0 ** math.floor(math.log2(1 / grads.abs().min().item())),
                    expect="overflow", note="scaled the smallest gradient to 1 and ignored the largest"),
        WrongAnswer(_largest_power(65504.0), expect="rounds_to_max",
                    note="65504 as the limit: right unless the product lands in (65504, 65520)"),
        WrongAnswer(_largest_power(65536.0), expect="overflow", note="2^16 as the limit"),
        WrongAnswer(lambda grads: _scale_for(grads.max().item()), expect="overflow",
                    note="max() instead of abs().max(): the largest gradient is negative"),
        WrongAnswer(lambda grads: _scale_for(abs(grads[2].item())), expect="overflow",
                    note="adversary: looked at the entry where 397ff6f's inputs kept the largest value"),
        WrongAnswer(lambda grads: _scale_for(grads[:3].abs().max().item()), expect="overflow",
                    note="adversary: the first three entries only"),
        WrongAnswer(_ceil_minus_one, expect="too_small", note="ceil - 1: wrong when the ratio is a power of two"),
        WrongAnswer(_halved_from_gradscaler_default, expect="too_small",
                    note="adversary round 5 (p05j): 65536 only halved; public cases hold a largest |gradient| below 1"),
        WrongAnswer(_bounded_search, expect="too_small",
                    note="adversary round 5 (p05i): 2^24 at most; public cases hold a largest |gradient| below 2^-9"),
        WrongAnswer(_scale_in_place, expect="modified_input", note="changes the caller's gradients"),
        WrongAnswer(_floor_without_tie, expect="overflow",
                    note="adversary round 7 (ps_ceilslip): the third kind's largest is exactly 65520 / 2^k"),
        WrongAnswer(_grown_from_one, expect="overflow",
                    note="adversary round 7 (ps_onlyup): the second kind's largest is at least 65520"),
        WrongAnswer(_maximum_in_float16, expect="error",
                    note="adversary round 7 (ps_round_m_half): the maximum is inf (>= 65520) or 0 (< 2^-25) in float16"),
        WrongAnswer(_halved_from_two_to_forty, expect="too_small",
                    note="adversary round 7 (ps_from1_down): the third kind's answers are 2^41 to 2^45"),
    ),
))


# --- 05.amp_step_order ----------------------------------------------------------------

def amp_step_order(micro_batches, clip, schedule):
    calls = ["forward_in_autocast", "scale_and_backward"] * micro_batches
    if clip:
        calls += ["unscale", "clip"]
    calls += ["scaler_step", "scaler_update"]
    if schedule:
        calls.append("scheduler_step_unless_skipped")
    return calls


_CALLS = ("forward_in_autocast", "scale_and_backward", "unscale", "clip", "scaler_step", "scaler_update",
          "scheduler_step_unless_skipped")
_NOTEBOOK_STEP = ["forward_in_autocast", "scale_and_backward", "unscale", "clip", "scaler_step", "scaler_update"]
# (micro_batches, clip, schedule) per seed: the public cases cover accumulation, clipping and the
# scheduler in different combinations, and none is the notebook's single-batch step.  Each argument
# has two public cases that differ in it alone (seeds 2 and 3 in `clip`, 2 and 4 in `schedule`, 0 and
# 3, 1 and 4 in `micro_batches`), so an answer that never reads one of the three gives the same list
# on both and fails one publicly, whatever it guesses from the other two (adversarial round 8,
# 05o_overfit: `clip` guessed from micro_batches > 1, `schedule` from micro_batches != 3, passed the
# three public cases of round 7, all of which paired a flag with a different micro_batches).
_ORDER_CASES = {0: (1, False, True), 1: (3, True, False), 2: (2, True, True), 3: (2, False, True),
                4: (2, True, False),
                101: (4, True, True), 102: (1, True, False), 103: (2, False, False)}
_ORDER_PUBLIC_SEEDS = (0, 1, 2, 3, 4)


def _order_case(seed, hidden):
    if seed in _ORDER_CASES:
        return _ORDER_CASES[seed]
    generator = torch.Generator().manual_seed(seed)
    micro_batches = int(torch.randint(1, 5, (1,), generator=generator))
    clip, schedule = (bool(flag) for flag in torch.randint(0, 2, (2,), generator=generator))
    return (micro_batches, clip, schedule)


def _position(calls, name, last=False):
    places = [i for i, call in enumerate(calls) if call == name]
    return (places[-1] if last else places[0]) if places else None


def _before(first, second, last_first=False):
    """The answer has both calls, and the (last, if asked) ``first`` comes after ``second``."""
    def detect(student, reference, args):
        a, b = _position(student, first, last=last_first), _position(student, second)
        return a is not None and b is not None and a > b
    return detect


def _unknown_name(student, reference, args):
    return isinstance(student, (list, tuple)) and any(call not in _CALLS for call in student)


def _unscale_twice_in_one_step(student, reference, args):
    """Two ``unscale`` with no ``scaler_update`` between them: what GradScaler refuses with a RuntimeError."""
    pending = False
    for call in student:
        if call == "unscale":
            if pending:
                return True
            pending = True
        elif call == "scaler_update":
            pending = False
    return False


def _stepped_per_micro_batch(micro_batches, clip, schedule):
    """Adversary round 8 (05o_stepinloop): unscale, clip, step and update inside the micro-batch loop."""
    calls = []
    for _ in range(micro_batches):
        calls += ["forward_in_autocast", "scale_and_backward"]
        if clip:
            calls += ["unscale", "clip"]
        calls += ["scaler_step", "scaler_update"]
    if schedule:
        calls.append("scheduler_step_unless_skipped")
    return calls


def _flags_from_micro_batches(micro_batches, clip, schedule):
    """Adversary round 8 (05o_overfit): never reads `clip` or `schedule`, guesses them from micro_batches."""
    return amp_step_order(micro_batches, micro_batches > 1, micro_batches != 3)


def _schedule_from_micro_batches(micro_batches, clip, schedule):
    """Reads `clip`, but guesses `schedule` from micro_batches (true of round 7's three public cases)."""
    return amp_step_order(micro_batches, clip, micro_batches != 3)


def _count_differs(name, expected):
    return lambda student, reference, args: student.count(name) != expected(*args)


def _swap(calls, first, second):
    calls = list(calls)
    i, j = calls.index(first), calls.index(second)
    calls[i], calls[j] = calls[j], calls[i]
    return calls


_AMP_MAX_NORM = 0.01   # smaller than the gradients' norm, so clipping changes the step

register(Exercise(
    id="05.amp_step_order",
    title="Order the AMP training step",
    answer_name="amp_step_order",
    reference=amp_step_order,
    inputs=_order_case,
    public_seeds=_ORDER_PUBLIC_SEEDS,
    points=1,
    hints=(
        "Build the list in the order the calls run. One optimizer step runs the forward pass and the scaled "
        "backward once per micro-batch; everything else runs once per optimizer step.",
        "Something that reads the size of the gradients must see them divided by the scale; scaler.step does "
        "that division itself only when nothing did it earlier.",
        "The scale changes in scaler.update(): a check that compares it with the scale at the start of the "
        "step can only see this step's skip after that call.",
    ),
    misconceptions=(
        Misconception("unknown_name", "Your list has a name that is not one of the seven in the table: use "
                      "them exactly as written (lower case, no trailing underscore).", _unknown_name),
        Misconception("micro_batches", "With gradient accumulation every micro-batch runs its own forward pass "
                      "and its own scaled backward: the list needs them `micro_batches` times.",
                      lambda s, r, args: s.count("forward_in_autocast") != args[0]
                      or s.count("scale_and_backward") != args[0]),
        Misconception("same_list_for_every_case", "Your list is the single-batch step with clipping and no "
                      "scheduler, whatever the arguments: `micro_batches`, `clip` and `schedule` change which "
                      "calls the step needs and how often.",
                      lambda s, r, args: list(s) == _NOTEBOOK_STEP and list(r) != _NOTEBOOK_STEP),
        Misconception("forwards_first", "Every forward pass runs before any backward: the gradients come out "
                      "the same, but all the micro-batches' graphs (and their activations) are alive at once, which "
                      "is what accumulation exists to avoid. Run each micro-batch's backward before the next forward.",
                      lambda s, r, args: args[0] > 1 and s.count("forward_in_autocast") == args[0]
                      and _position(s, "forward_in_autocast", last=True) < _position(s, "scale_and_backward")),
        Misconception("backward_before_forward", "Backward needs the loss, so each micro-batch's forward pass "
                      "(in autocast, with the loss) comes before its scaled backward.",
                      _before("forward_in_autocast", "scale_and_backward")),
        # Adversarial round 8 (05o_stepinloop): step and update inside the micro-batch loop got a bare "expected
        # a list of length 10, got 18" in the release; the cause is an optimizer step per micro-batch.
        Misconception("step_per_micro_batch", "Your list runs scaler.step more than once: that steps the "
                      "optimizer after every micro-batch, which is training on small batches, not accumulating. "
                      "With accumulation the micro-batches' backward passes only add into `.grad`, and one "
                      "optimizer step uses the whole window's gradients.",
                      lambda s, r, args: list(s).count("scaler_step") > 1),
        # Adversarial round 7 (as_clipfirst_only_once): `unscale` in the micro-batch loop got a bare "expected a
        # list of length 10, got 12" in check(); the cause is GradScaler's own rule, one unscale_ per step.
        # Two unscales with an update between them are legal (a step per micro-batch: named above).
        Misconception("unscale_per_micro_batch", "Your step calls unscale more than once: GradScaler allows one "
                      "`unscale_(optimizer)` between two `update()` calls, and a second one raises RuntimeError "
                      "(`unscale_() has already been called on this optimizer since the last update()`). The "
                      "gradients are unscaled once, when the whole window's gradients are in.",
                      _unscale_twice_in_one_step),
        Misconception("step_inside_window", "scaler.step (or unscale_ or clipping) ran before the last "
                      "micro-batch's backward: the step must use the gradients of the whole window.",
                      lambda s, r, args: list(s).count("scaler_step") <= 1
                      and any(_before("scale_and_backward", call, last_first=True)(s, r, args)
                              for call in ("unscale", "clip", "scaler_step"))),
        Misconception("clip_before_unscale", "Clipping before unscale_ clips the *scaled* gradients: the "
                      "norm it sees is the true norm times the scale, so after unscaling the step uses a "
                      "gradient of norm at most `max_norm / scale`.", _before("unscale", "clip")),
        Misconception("clip_without_unscale", "Clipping reads the size of the gradients, so they must be "
                      "unscaled first: scaler.step would unscale them only after the clipping.",
                      lambda s, r, args: "clip" in s and "unscale" not in s),
        Misconception("unscale_without_reader", "Nothing reads the gradients before scaler.step here, and "
                      "scaler.step unscales them itself: the prompt asks for unscale only when something "
                      "reads them first.", lambda s, r, args: "unscale" in s and "clip" not in s),
        Misconception("clip_flag", "Clip exactly when `clip` asks for it.",
                      lambda s, r, args: ("clip" in s) != bool(args[1])),
        Misconception("update_before_step", "scaler.update() must come after scaler.step(): update reads "
                      "the inf/NaN check that step (or unscale_) recorded.", _before("scaler_step", "scaler_update")),
        Misconception("scheduler_before_update", "The scale drops in scaler.update(): a skip check that runs "
                      "before it compares two equal scales, so the scheduler advances on a skipped step too.",
                      _before("scaler_update", "scheduler_step_unless_skipped")),
        Misconception("schedule_flag", "Step the scheduler exactly when `schedule` asks for one.",
                      lambda s, r, args: ("scheduler_step_unless_skipped" in s) != bool(args[2])),
    ),
    wrong_answers=(
        WrongAnswer(lambda micro_batches, clip, schedule: list(_NOTEBOOK_STEP), expect="same_list_for_every_case",
                    note="adversary: the list shown above the prompt, for every case"),
        WrongAnswer(lambda micro_batches, clip, schedule: [c.replace("unscale", "unscale_")
                                                           for c in amp_step_order(micro_batches, True, schedule)],
                    expect="unknown_name", note="a typo: `unscale_`"),
        WrongAnswer(lambda micro_batches, clip, schedule: ["Forward_in_autocast"]
                    + amp_step_order(micro_batches, clip, schedule)[1:], expect="unknown_name",
                    note="capitalised"),
        WrongAnswer(lambda micro_batches, clip, schedule: ["forward_in_autocast"] * micro_batches
                    + amp_step_order(1, clip, schedule)[1:], expect="micro_batches",
                    note="one backward for the whole window"),
        WrongAnswer(lambda micro_batches, clip, schedule: ["forward_in_autocast"] * micro_batches
                    + ["scale_and_backward"] * micro_batches + amp_step_order(micro_batches, clip, schedule)[
                        2 * micro_batches:], expect="forwards_first", note="all forwards, then all backwards"),
        WrongAnswer(lambda micro_batches, clip, schedule: ["scale_and_backward", "forward_in_autocast"]
                    * micro_batches + amp_step_order(micro_batches, clip, schedule)[2 * micro_batches:],
                    expect="backward_before_forward"),
        WrongAnswer(lambda micro_batches, clip, schedule: ["forward_in_autocast", "scale_and_backward"]
                    + amp_step_order(1, clip, False)[2:] + ["forward_in_autocast", "scale_and_backward"]
                    * (micro_batches - 1) + (["scheduler_step_unless_skipped"] if schedule else []),
                    expect="step_inside_window", note="steps after the first micro-batch"),
        WrongAnswer(lambda micro_batches, clip, schedule: (
            ["forward_in_autocast", "scale_and_backward", "unscale"] * micro_batches + ["clip"] if clip else
            ["forward_in_autocast", "scale_and_backward"] * micro_batches)
            + ["scaler_step", "scaler_update"] + (["scheduler_step_unless_skipped"] if schedule else []),
            expect="unscale_per_micro_batch", note="adversarial round 7: unscale inside the micro-batch loop"),
        WrongAnswer(lambda micro_batches, clip, schedule: [
            "forward_in_autocast", "scale_and_backward"] * micro_batches + (["clip", "unscale"] if clip else [])
            + ["scaler_step", "scaler_update"] + (["scheduler_step_unless_skipped"] if schedule else []),
            expect="clip_before_unscale"),
        WrongAnswer(lambda micro_batches, clip, schedule: [c for c in amp_step_order(micro_batches, clip, schedule)
                                                           if c != "unscale"], expect="clip_without_unscale"),
        WrongAnswer(lambda micro_batches, clip, schedule: ["forward_in_autocast", "scale_and_backward"]
                    * micro_batches + ["unscale"] + (["clip"] if clip else [])
                    + amp_step_order(micro_batches, False, schedule)[2 * micro_batches:],
                    expect="unscale_without_reader", note="unscale_ also without clipping"),
        WrongAnswer(lambda micro_batches, clip, schedule: amp_step_order(micro_batches, True, schedule),
                    expect="clip_flag", note="clips whatever `clip` says"),
        WrongAnswer(_flags_from_micro_batches, expect="clip_flag",
                    note="adversarial round 8 (05o_overfit): public seeds 2 and 3 differ in `clip` alone"),
        WrongAnswer(_schedule_from_micro_batches, expect="schedule_flag",
                    note="`schedule` guessed from micro_batches: public seeds 2 and 4 differ in `schedule` alone"),
        WrongAnswer(_stepped_per_micro_batch, expect="step_per_micro_batch",
                    note="adversarial round 8 (05o_stepinloop): an optimizer step per micro-batch"),
        WrongAnswer(lambda micro_batches, clip, schedule: _swap(
            amp_step_order(micro_batches, clip, schedule), "scaler_step", "scaler_update"),
            expect="update_before_step"),
        WrongAnswer(lambda micro_batches, clip, schedule: _swap(
            amp_step_order(micro_batches, clip, True), "scaler_update", "scheduler_step_unless_skipped"),
            expect="scheduler_before_update", note="the skip check before update(): always steps"),
        WrongAnswer(lambda micro_batches, clip, schedule: amp_step_order(micro_batches, clip, not schedule),
                    expect="schedule_flag", note="the scheduler flag read the wrong way round"),
    ),
))


# The proof that the reference's order is right (tests/test_nb05_amp.py): run it with a real
# GradScaler, two optimizer steps of which the first overflows, and compare with the same steps
# done without a scaler (the skipped step does nothing; the other clips, steps and advances).

def _amp_setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    batches = [(torch.randn(8, 4), torch.randn(8, 2)) for _ in range(16)]
    return model, optimizer, scheduler, batches


def _amp_loss(model, x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return F.mse_loss(model(x).float(), y)


def _amp_result(model, optimizer):
    return [p.detach().clone() for p in model.parameters()] + [optimizer.param_groups[0]["lr"]]


def amp_run(order, micro_batches, clip, schedule):
    """Two optimizer steps whose calls run in ``order`` (names of 05.amp_step_order); the first overflows."""
    model, optimizer, scheduler, batches = _amp_setup()
    scaler, batches = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16), iter(batches)
    for overflow in (True, False):
        optimizer.zero_grad()
        state = {"start": scaler.get_scale(), "losses": []}

        def backward():
            scaler.scale(state["losses"].pop(0) / micro_batches).backward()
            if overflow:
                model.weight.grad[0, 0] = math.inf       # what a float16 overflow leaves behind

        actions = {
            "forward_in_autocast": lambda: state["losses"].append(_amp_loss(model, *next(batches))),
            "scale_and_backward": backward,
            "unscale": lambda: scaler.unscale_(optimizer),
            "clip": lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), _AMP_MAX_NORM),
            "scaler_step": lambda: scaler.step(optimizer),
            "scaler_update": scaler.update,
            "scheduler_step_unless_skipped": lambda: scheduler.step() if scaler.get_scale() >= state["start"] else None,
        }
        for call in order:
            actions[call]()
    return _amp_result(model, optimizer)


def amp_target(micro_batches, clip, schedule):
    """The same two steps without a scaler: the overflowing one does nothing, the other trains."""
    model, optimizer, scheduler, batches = _amp_setup()
    optimizer.zero_grad()
    for x, y in batches[micro_batches:2 * micro_batches]:   # the first step used the first micro-batches
        (_amp_loss(model, x, y) / micro_batches).backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), _AMP_MAX_NORM)
    optimizer.step()
    if schedule:
        scheduler.step()
    return _amp_result(model, optimizer)


# --- 05.next_scales ---------------------------------------------------------------------

def next_scales(init_scale, found_inf, growth_interval):
    # GradScaler.update(): halve and reset on inf/NaN; double after growth_interval clean steps in a row.
    scale, clean_steps, scales = init_scale, 0, []
    for overflow in found_inf:
        if overflow:
            scale, clean_steps = scale * 0.5, 0
        else:
            clean_steps += 1
            if clean_steps == growth_interval:
                scale, clean_steps = scale * 2.0, 0
        scales.append(scale)
    return scales


def _flag_sequence(seed, hidden):
    """Flags with overflows about 3 steps in 10, one of them early; a starting scale and interval per seed."""
    generator = torch.Generator().manual_seed(seed)
    length = 24 if hidden else 14
    flags = (torch.rand(length, generator=generator) < 0.3).tolist()
    flags[seed % 2] = True                                  # an overflow at the first or the second step
    # each case starts in its own binades, so that no two cases share an answer
    shift = int(torch.randint(0, 4, (1,), generator=generator))
    init_scale = 2.0 ** (8 + 4 * (seed % 3) + shift)
    if seed % 3 == 0:
        # one public and one hidden case start at 1.5 × 2^-shift: the first halving leaves the integers and
        # goes below 1, where a backoff by floor division (`scale // 2`) gives 0 instead of GradScaler's half
        init_scale = 1.5 * 2.0 ** -shift
    return (init_scale, flags, 2 + seed % 3)                 # growth_interval 2 to 4


def _no_reset(init_scale, found_inf, growth_interval):
    scale, clean_steps, scales = init_scale, 0, []
    for overflow in found_inf:
        if overflow:
            scale *= 0.5
        else:
            clean_steps += 1
            if clean_steps % growth_interval == 0:
                scale *= 2.0
        scales.append(scale)
    return scales


# Adversary (adv-05-08-r3, ns_int.py): the backoff written ``scale // 2``, right only on even integers.
_floor_division_backoff = mutant(next_scales, "scale * 0.5, 0", "scale // 2, 0")


# Adversary round 7 (ns_noreset_growth): the count restarts on an overflow but not after a growth.
_count_kept_after_growth = mutant(next_scales,
                                  "            if clean_steps == growth_interval:\n"
                                  "                scale, clean_steps = scale * 2.0, 0\n",
                                  "            if clean_steps >= growth_interval:\n"
                                  "                scale *= 2.0\n")


def _counts_every_step(init_scale, found_inf, growth_interval):
    """Adversary round 7 (ns_growth_also_on_inf_step): every step counted, a growth on each multiple of the interval."""
    scale, scales = init_scale, []
    for step, overflow in enumerate(found_inf, start=1):
        if overflow:
            scale *= 0.5
        elif step % growth_interval == 0:
            scale *= 2.0
        scales.append(scale)
    return scales


def _grow_every_step(init_scale, found_inf, growth_interval):
    scale, scales = init_scale, []
    for overflow in found_inf:
        scale = scale * 0.5 if overflow else scale * 2.0
        scales.append(scale)
    return scales


def _growth_off_by_one(init_scale, found_inf, growth_interval):
    return next_scales(init_scale, found_inf, growth_interval + 1)


def _scales_before_update(init_scale, found_inf, growth_interval):
    return [init_scale] + next_scales(init_scale, found_inf, growth_interval)[:-1]


def _drive(scaler, found_inf):
    """Feed a real scaler an inf gradient on each flagged step; its scale after each update()."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scales = []
    for overflow in found_inf:
        optimizer.zero_grad()
        scaler.scale(weight.sum()).backward()
        if overflow:
            weight.grad.fill_(float("inf"))
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


def _real_scaler(init_scale, found_inf, growth_interval):
    """The shortcut the prompt rules out: a real GradScaler, fed an inf gradient on each flagged step."""
    return _drive(torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval), found_inf)


def _settings(init_scale, growth_interval):
    return {"scale": float(init_scale), "growth_factor": 2.0, "backoff_factor": 0.5,
            "growth_interval": growth_interval, "_growth_tracker": 0}


_PREBUILT_SCALER = torch.amp.GradScaler("cpu")   # built when the module loads, outside any answer


def _copied_scaler(init_scale, found_inf, growth_interval):
    """Adversary: a copy of a scaler built before the check started (no constructor runs in the answer)."""
    scaler = copy.deepcopy(_PREBUILT_SCALER)
    scaler.load_state_dict(_settings(init_scale, growth_interval))
    return _drive(scaler, found_inf)


def _new_without_constructor(init_scale, found_inf, growth_interval):
    """Adversary: ``object.__new__(GradScaler)`` with a prebuilt scaler's attributes."""
    scaler = object.__new__(torch.amp.GradScaler)
    scaler.__dict__.update(copy.deepcopy(_PREBUILT_SCALER.__dict__))
    scaler.load_state_dict(_settings(init_scale, growth_interval))
    return _drive(scaler, found_inf)


class _ScalerWithoutInit(torch.amp.GradScaler):
    """Adversary: a subclass whose ``__init__`` never calls GradScaler's."""

    def __init__(self, init_scale, growth_interval):
        self.__dict__.update(copy.deepcopy(_PREBUILT_SCALER.__dict__))
        self.load_state_dict(_settings(init_scale, growth_interval))


def _update_kernel(init_scale, found_inf, growth_interval):
    """Adversary: GradScaler's own kernel, called in a loop."""
    scale, tracker, scales = torch.full((1,), float(init_scale)), torch.zeros(1, dtype=torch.int32), []
    for overflow in found_inf:
        torch._amp_update_scale_(scale, tracker, torch.full((1,), float(overflow)), 2.0, 0.5, growth_interval)
        scales.append(scale.item())
    return scales


def _update_op(init_scale, found_inf, growth_interval):
    """Adversary: the same kernel through ``torch.ops.aten``."""
    scale, tracker, scales = torch.full((1,), float(init_scale)), torch.zeros(1, dtype=torch.int32), []
    for overflow in found_inf:
        torch.ops.aten._amp_update_scale_(scale, tracker, torch.full((1,), float(overflow)), 2.0, 0.5,
                                          growth_interval)
        scales.append(float(scale))
    return scales


def _update_op_out_of_place(init_scale, found_inf, growth_interval):
    """Adversary (round 5, q05c): the kernel's out-of-place twin, which returns the new scale and tracker."""
    scale, tracker, scales = torch.full((1,), float(init_scale)), torch.zeros(1, dtype=torch.int32), []
    for overflow in found_inf:
        scale, tracker = getattr(torch.ops.aten, "_amp_update_scale")(
            scale, tracker, torch.full((1,), float(overflow)), 2.0, 0.5, growth_interval)
        scales.append(scale.item())
    return scales


def _fsdp_scalers_python_rule(init_scale, found_inf, growth_interval):
    """Adversary (round 6): FSDP's scaler's pure-Python update rule, called on a stand-in, no scaler built."""
    from types import SimpleNamespace
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    state = SimpleNamespace(_growth_factor=2.0, _backoff_factor=0.5, _growth_interval=growth_interval,
                            _scale=torch.full((1,), float(init_scale)), _growth_tracker=torch.zeros(1, dtype=torch.int32))
    scales = []
    for overflow in found_inf:
        ShardedGradScaler._amp_update_scale_cpu_(state, torch.full((1,), float(overflow)))
        scales.append(state._scale.item())
    return scales


def _kernel_behind_a_guard(init_scale, found_inf, growth_interval):
    """Adversary (round 5, F2's own find): the kernel run where no Python dispatch mode can see it."""
    scale, tracker, scales = torch.full((1,), float(init_scale)), torch.zeros(1, dtype=torch.int32), []
    for overflow in found_inf:
        with torch._C._DisableTorchDispatch():
            torch._amp_update_scale_(scale, tracker, torch.full((1,), float(overflow)), 2.0, 0.5, growth_interval)
        scales.append(scale.item())
    return scales


def _checker_patched(init_scale, found_inf, growth_interval):
    """Adversary: switch off the checker's count of GradScaler constructions, then use a real one."""
    from autograd_lab.checking import facts
    counter = getattr(facts, "_CountingConstructions", None)
    saved = (counter.__enter__, counter.__exit__) if counter is not None else None
    try:
        if counter is not None:
            counter.__enter__, counter.__exit__ = (lambda self: self), (lambda self, *exc: False)
        return _real_scaler(init_scale, found_inf, growth_interval)
    finally:
        if counter is not None:
            counter.__enter__, counter.__exit__ = saved


def _consumes_flags(init_scale, found_inf, growth_interval):
    scales = []
    while found_inf:
        scales.append(found_inf.pop(0))                      # empties the caller's list
    return next_scales(init_scale, scales, growth_interval)


register(Exercise(
    id="05.next_scales",
    title="Predict GradScaler's scale, step by step",
    answer_name="next_scales",
    reference=next_scales,
    inputs=_flag_sequence,
    points=1,
    hints=(
        "Keep two numbers: the scale and a count of clean (finite) steps in a row.",
        "An overflow halves the scale *and* resets the count to zero.",
        "A clean step adds one to the count; when it reaches growth_interval the scale doubles and the count restarts.",
    ),
    misconceptions=(
        Misconception("tracker_not_reset", "An overflow must also reset the count of clean steps: "
                      "GradScaler grows only after growth_interval clean steps *in a row*.",
                      lambda s, r, args: s != r and s == _no_reset(*args)),
        Misconception("grows_every_step", "The scale grows only after growth_interval clean steps in a row, "
                      "not after every clean step.", lambda s, r, args: s != r and s == _grow_every_step(*args)),
        Misconception("off_by_one", "The scale doubles on the growth_interval-th clean step itself.",
                      lambda s, r, args: s != r and s == _growth_off_by_one(*args)),
        Misconception("floor_division", "The backoff multiplies the scale by 0.5, and a scale need not be an "
                      "even integer: it can be odd or below 1, where floor division (`//`) drops the fraction.",
                      lambda s, r, args: s != r and s == _floor_division_backoff(*args)),
        Misconception("scale_before_update", "Return the scale *after* each update(): the first entry is "
                      "the scale that the second step uses, not `init_scale`.",
                      lambda s, r, args: s != r and s == _scales_before_update(*args)),
        Misconception("count_kept_after_growth", "After the scale grows, the count of clean steps starts again: "
                      "the next growth needs another growth_interval clean steps, so your scale doubles too often.",
                      lambda s, r, args: s != r and s == _count_kept_after_growth(*args)),
        Misconception("counts_every_step", "The count is of clean steps in a row since the last overflow or growth, "
                      "not of all the steps taken: a step with an overflow does not count, and it starts the count again.",
                      lambda s, r, args: s != r and s == _counts_every_step(*args)),
    ),
    wrong_answers=(
        WrongAnswer(_no_reset, expect="tracker_not_reset"),
        WrongAnswer(_grow_every_step, expect="grows_every_step"),
        WrongAnswer(_growth_off_by_one, expect="off_by_one"),
        WrongAnswer(_scales_before_update, expect="scale_before_update"),
        WrongAnswer(_count_kept_after_growth, expect="count_kept_after_growth", note="adversary round 7 (ns_noreset_growth)"),
        WrongAnswer(_counts_every_step, expect="counts_every_step", note="adversary round 7 (ns_growth_also_on_inf_step)"),
        WrongAnswer(_floor_division_backoff, expect="floor_division",
                    note="adversary round 4 (ns_int): public and hidden cases start at 1.5 x 2^-k"),
        WrongAnswer(lambda init_scale, found_inf, growth_interval: [init_scale] * len(found_inf),
                    expect="wrong_value"),
        WrongAnswer(_consumes_flags, expect="modified_input", note="pops the caller's flags"),
        WrongAnswer(_real_scaler, expect="used_grad_scaler", note="the shortcut the prompt forbids"),
        WrongAnswer(_copied_scaler, expect="used_grad_scaler", note="adversary: deepcopy of a prebuilt scaler"),
        WrongAnswer(_new_without_constructor, expect="used_grad_scaler", note="adversary: object.__new__"),
        WrongAnswer(lambda init_scale, found_inf, growth_interval: _drive(
            _ScalerWithoutInit(init_scale, growth_interval), found_inf), expect="used_grad_scaler",
            note="adversary: a subclass that skips GradScaler.__init__"),
        WrongAnswer(_update_kernel, expect="used_grad_scaler", note="adversary: torch._amp_update_scale_"),
        WrongAnswer(_update_op, expect="used_grad_scaler", note="adversary: torch.ops.aten._amp_update_scale_"),
        WrongAnswer(_update_op_out_of_place, expect="used_grad_scaler",
                    note="adversary round 5 (q05c): torch.ops.aten._amp_update_scale, out of place"),
        WrongAnswer(_checker_patched, expect="used_grad_scaler", note="adversary: monkeypatched checker"),
        WrongAnswer(_fsdp_scalers_python_rule, expect="used_grad_scaler",
                    note="adversary round 6: ShardedGradScaler._amp_update_scale_cpu_ on a stand-in"),
        WrongAnswer(_kernel_behind_a_guard, expect="used_grad_scaler",
                    note="round 5 (found while closing q05c): the kernel inside torch._C._DisableTorchDispatch()"),
        WrongAnswer(in_child(next_scales), expect="used_grad_scaler",
                    note="round 8 (05n_ctypes): the rule in a child Python started by ctypes.CDLL(None).system"),
        WrongAnswer(in_child(next_scales, prefetched=True), expect="used_grad_scaler",
                    note="round 8: the same through libc's system() fetched before the check (no Python frame)"),
    ),
    method=no_grad_scaler(),
))
