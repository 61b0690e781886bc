"""Exercises of notebooks/05_amp.ipynb: choosing a loss scale, ordering the AMP step, GradScaler's rule."""

import itertools
import math

import torch
import torch.nn.functional as F

from autograd_lab.checking import Exercise, Misconception, WrongAnswer, no_grad_scaler, register


# --- 05.pick_scale ------------------------------------------------------------------

def pick_scale(grads):
    # The largest power of two that keeps the biggest gradient finite in fp16.
    biggest = grads.abs().max().item()
    exponent = math.floor(math.log2(65504.0 / biggest))
    return 2.0 ** exponent


def _gradient_sample(seed, hidden):
    """Log-normal gradient magnitudes spanning many decades, with random signs."""
    generator = torch.Generator().manual_seed(seed)
    size = 5000 if hidden else 2000
    log10 = torch.empty(size, dtype=torch.float64).normal_(-5.0, 1.2, generator=generator)
    signs = torch.randint(0, 2, (size,), generator=generator).to(torch.float64) * 2 - 1
    grads = signs * 10.0 ** log10
    # a few large gradients, as at the start of training, decide the overflow limit
    grads[:3] = torch.tensor([3.0, -17.0, 90.0], dtype=torch.float64) * (1 + seed % 5)
    return (grads.to(torch.float32),)


def _overflows(student, args):
    """Whether ``grads * student`` really has an inf in float16 (65504 < |x| < 65520 rounds down to 65504)."""
    return bool((args[0].double() * float(student)).to(torch.float16).isinf().any())


def _is_power_of_two(value):
    return value > 0 and math.log2(value).is_integer()


register(Exercise(
    id="05.pick_scale",
    title="Pick a loss scale between underflow and overflow",
    answer_name="pick_scale",
    reference=pick_scale,
    inputs=_gradient_sample,
    points=1,
    hints=(
        "Overflow sets the ceiling: after scaling, the largest |gradient| must stay at or below 65504.",
        "Among the scales that do not overflow, the largest one rescues the most small gradients.",
        "By default GradScaler only multiplies its scale by 2 or 0.5, so answer with a power of two: "
        "2.0 ** math.floor(math.log2(65504 / largest)).",
    ),
    misconceptions=(
        Misconception("overflow", "With this scale the largest gradient exceeds 65504 and becomes inf "
                      "in float16: the step would be skipped.",
                      lambda s, r, args: _overflows(s, args)),
        Misconception("not_power_of_two", "Return a power of two (by default GradScaler moves its scale by "
                      "factors of 2, and a power of two scales exactly, without rounding any gradient).",
                      lambda s, r, args: not _is_power_of_two(float(s))),
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
    ),
))


# --- 05.amp_step_order ----------------------------------------------------------------

def amp_step_order():
    return ["forward_in_autocast", "scale_and_backward", "unscale", "clip", "scaler_step", "scaler_update"]


_AMP_STEPS = ("forward_in_autocast", "scale_and_backward", "unscale", "clip", "scaler_step", "scaler_update")
_AMP_MAX_NORM = 0.01   # smaller than the gradient's norm, so clipping changes the step


def _amp_setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(8, 4), torch.randn(8, 2)


def _amp_target():
    model, optimizer, x, y = _amp_setup()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x).float(), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), _AMP_MAX_NORM)
    optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _amp_run(order):
    model, optimizer, x, y = _amp_setup()
    scaler, state = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16), {}
    actions = {
        "forward_in_autocast": lambda: state.update(loss=_amp_forward(model, x, y)),
        "scale_and_backward": lambda: scaler.scale(state["loss"]).backward(),
        "unscale": lambda: scaler.unscale_(optimizer),
        "clip": lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), _AMP_MAX_NORM),
        "scaler_step": lambda: scaler.step(optimizer),
        "scaler_update": scaler.update,
    }
    for step in order:
        actions[step]()
    return [p.detach() for p in model.parameters()]


def _amp_forward(model, x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return F.mse_loss(model(x).float(), y)


def _amp_order_works(order, target):
    try:
        return all(torch.equal(a, b) for a, b in zip(_amp_run(order), target))
    except (RuntimeError, KeyError, AssertionError):
        return False




def _amp_step_order_experiment():
    """Run every order of the six steps with a real GradScaler; keep those that give the clipped fp32 step."""
    target = _amp_target()
    orders = [list(order) for order in itertools.permutations(_AMP_STEPS) if _amp_order_works(order, target)]
    assert len(orders) == 1, f"the prompt's steps do not fix one order: {orders}"
    return orders[0]


def _before(first, second):
    def detect(student, reference, args):
        return first in student and second in student and student.index(first) > student.index(second)
    return detect


register(Exercise(
    id="05.amp_step_order",
    title="Order the AMP training step",
    kind="value",
    answer_name="amp_step_order",
    reference=amp_step_order,
    experiment=_amp_step_order_experiment,
    solution_code=('amp_step_order = ["forward_in_autocast", "scale_and_backward", "unscale", "clip", '
                   '"scaler_step", "scaler_update"]'),
    points=1,
    hints=(
        "Gradients must be unscaled before anything reads their size: clipping compares them with max_norm.",
        "scaler.step(optimizer) may skip the step; scaler.update() then decides the next scale, once per step.",
    ),
    misconceptions=(
        Misconception("clip_before_unscale", "Clipping before unscale_ clips the *scaled* gradients: the "
                      "norm it sees is the true norm times the scale, so after unscaling the step uses a "
                      "gradient of norm at most `max_norm / scale`.", _before("unscale", "clip")),
        Misconception("update_before_step", "scaler.update() must come after scaler.step(): update reads "
                      "the inf/NaN check that step (or unscale_) recorded.", _before("scaler_step", "scaler_update")),
        Misconception("backward_before_forward", "Backward needs the loss, so the forward pass (in autocast, "
                      "with the loss) comes first.", _before("forward_in_autocast", "scale_and_backward")),
    ),
    wrong_answers=(
        WrongAnswer(["forward_in_autocast", "scale_and_backward", "clip", "unscale", "scaler_step",
                     "scaler_update"], expect="clip_before_unscale"),
        WrongAnswer(["forward_in_autocast", "scale_and_backward", "unscale", "clip", "scaler_update",
                     "scaler_step"], expect="update_before_step"),
        WrongAnswer(["scale_and_backward", "forward_in_autocast", "unscale", "clip", "scaler_step",
                     "scaler_update"], expect="backward_before_forward"),
        WrongAnswer(["forward_in_autocast", "scale_and_backward", "clip", "scaler_step", "scaler_update"],
                    expect="structure", note="unscale_ left out"),
    ),
))


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
    generator = torch.Generator().manual_seed(seed)
    length = 24 if hidden else 12
    flags = (torch.rand(length, generator=generator) < 0.3).tolist()
    flags[0] = True  # the default initial scale overflows on the first step
    return (2.0 ** 16, flags, 2 + seed % 3)


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


def _grow_every_step(init_scale, found_inf, growth_interval):
    scale, scales = init_scale, []
    for overflow in found_inf:
        scale = scale * 0.5 if overflow else scale * 2.0
        scales.append(scale)
    return scales


def _growth_off_by_one(init_scale, found_inf, growth_interval):
    return next_scales(init_scale, found_inf, growth_interval + 1)


def _real_scaler(init_scale, found_inf, growth_interval):
    """The shortcut the prompt rules out: a real GradScaler, fed an inf gradient on each flagged step."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
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
                      lambda s, r, args: s == _no_reset(*args)),
        Misconception("grows_every_step", "The scale grows only after growth_interval clean steps in a row, "
                      "not after every clean step.", lambda s, r, args: s == _grow_every_step(*args)),
        Misconception("off_by_one", "The scale doubles on the growth_interval-th clean step itself.",
                      lambda s, r, args: s == _growth_off_by_one(*args)),
    ),
    wrong_answers=(
        WrongAnswer(_no_reset, expect="tracker_not_reset"),
        WrongAnswer(_grow_every_step, expect="grows_every_step"),
        WrongAnswer(_growth_off_by_one, expect="off_by_one"),
        WrongAnswer(lambda init_scale, found_inf, growth_interval: [init_scale] * len(found_inf),
                    expect="wrong_value"),
        WrongAnswer(_real_scaler, expect="used_grad_scaler", note="the shortcut the prompt forbids"),
    ),
    method=no_grad_scaler(),
))
