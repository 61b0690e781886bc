"""Exercises of notebook 03 (accumulation): micro-batches, token-exact losses, the training loop."""

import torch
import torch.nn.functional as F

from autograd_lab.checking import (Exercise, Method, Misconception, WrongAnswer, autograd_derivative, register,
                                    steps_on_autograd_grads, uses_autograd)
from autograd_lab.checking.methods import micro_batches
from autograd_lab.checking.variation import choose, generator


# --- 03.accumulated_grad --------------------------------------------------------

def accumulated_grad(w, x, y, k):
    w = w.detach().clone().requires_grad_()
    held = []
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        loss = F.mse_loss(x_micro @ w, y_micro) / k   # each micro-batch is 1/k of the batch mean
        loss.backward()
        held.append(w.grad.clone())                   # .grad is one tensor that each backward adds into
    return held


# Round 7 (03-r4 item 15): the exercise returned only the final gradient, which cell-019's demo loop
# computes almost verbatim. It now returns what `.grad` held after each backward call, so the student
# has to see the running sum (and that `.grad` is one tensor added into in place) rather than copy.


def _accumulated_grad_inputs(seed, hidden):
    g = generator(seed)
    # k differs on every public seed, so an answer that ignores k (or fixes the number of
    # backward passes) fails publicly; the batch size is a multiple of k. The rows per
    # micro-batch vary too and never equal the features: a pass through one micro-batch's
    # graph then differs in size from a pass through the whole batch, or through a
    # features-by-features summary of it (MICRO_BATCH_GRAPHS).
    k = choose(seed, (3, 4, 2), hidden=hidden, hidden_choices=(5, 6))
    features = choose(seed, (5, 3, 4), hidden=hidden, hidden_choices=(6, 2))
    rows = choose(seed, (3, 2, 5), hidden=hidden, hidden_choices=(4, 3))
    w = torch.randn(features, generator=g)
    x = torch.randn(rows * k, features, generator=g)
    y = torch.randn(rows * k, generator=g)
    return w, x, y, k


def _micro_batch_grad(w, x_micro, y_micro, divide):
    w = w.detach().clone().requires_grad_()
    loss = F.mse_loss(x_micro @ w, y_micro)
    (loss / divide).backward()
    return w.grad


def _keeps_only_own_micro_batch(student, reference, args):
    """Each entry is its own micro-batch's gradient (divided by k or not), not the sum so far."""
    w, x, y, k = args
    return len(student) == k > 1 and any(
        all(torch.allclose(s, _micro_batch_grad(w, xm, ym, divide), atol=1e-6)
            for s, xm, ym in zip(student, x.chunk(k), y.chunk(k))) for divide in (k, 1))


def _same_tensor_every_time(student, reference, args):
    """Every entry holds the final sum: `.grad` itself kept k times (one tensor, added into in place)."""
    return (len(student) == len(reference) > 1 and all(torch.allclose(s, reference[-1], atol=1e-6) for s in student)
            and not torch.allclose(reference[0], reference[-1], atol=1e-6))


def _k_times_each(student, reference, args):
    """Every entry k times the expected one: the micro-batch means added undivided (k = 2 looks "doubled")."""
    k = args[3]
    return len(student) == len(reference) and all(torch.allclose(s, k * r, rtol=1e-5, atol=1e-6)
                                                  for s, r in zip(student, reference))


def _zeroed_inside_loop(w, x, y, k):
    w = w.detach().clone().requires_grad_()
    held = []
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        w.grad = None                                   # wrong: clears the earlier micro-batches
        (F.mse_loss(x_micro @ w, y_micro) / k).backward()
        held.append(w.grad.clone())
    return held


def _without_division(w, x, y, k):
    w = w.detach().clone().requires_grad_()
    held = []
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        F.mse_loss(x_micro @ w, y_micro).backward()     # wrong: k times the batch-mean gradient
        held.append(w.grad.clone())
    return held


def _grad_itself_kept(w, x, y, k):
    """Round 7: `.grad` appended without a copy: the list holds one tensor k times, the final sum."""
    w = w.detach().clone().requires_grad_()
    held = []
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        (F.mse_loss(x_micro @ w, y_micro) / k).backward()
        held.append(w.grad)
    return held


def _demo_loop_copied(w, x, y, k):
    """Round 7: cell-019's loop as it is, returning the final gradient only."""
    w = w.detach().clone().requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        (F.mse_loss(x_micro @ w, y_micro) / k).backward()
    return w.grad


def _grad_of_non_leaf(w, x, y, k):
    leaf = w.detach().clone().requires_grad_()
    held = []
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        weights = leaf.clone()                         # an intermediate, not a leaf
        (F.mse_loss(x_micro @ weights, y_micro) / k).backward()
        held.append(weights.grad)                      # wrong: non-leaf tensors keep no .grad
    return held


def _one_full_batch_backward(w, x, y, k):
    """The shortcut the prompt forbids: the large-batch gradient from one backward pass."""
    w = w.detach().clone().requires_grad_()
    F.mse_loss(x @ w, y).backward()
    return w.grad


def _full_batch_twice(w, x, y, k):
    """A reviewer's shortcut: the full-batch loss halved, backward twice through one graph."""
    w = w.detach().clone().requires_grad_()
    loss = F.mse_loss(x @ w, y)
    (loss / 2).backward(retain_graph=True)
    (loss / 2).backward()
    return w.grad


def _four_micro_batches(w, x, y, k):
    """A reviewer's shortcut: k ignored, four micro-batches whatever the prompt says."""
    w = w.detach().clone().requires_grad_()
    held = []
    for x_micro, y_micro in zip(x.chunk(4), y.chunk(4)):
        (F.mse_loss(x_micro @ w, y_micro) * len(x_micro) / len(x)).backward()
        held.append(w.grad.clone())
    return held


def _full_batch_k_times(w, x, y, k):
    """A reviewer's shortcut: k backward passes, each through the whole batch's loss divided by k."""
    w = w.detach().clone().requires_grad_()
    for _ in range(k):
        (F.mse_loss(x @ w, y) / k).backward()
    return w.grad


def _full_batch_then_empty_passes(w, x, y, k):
    """The whole batch in the first backward pass, then k - 1 passes that add nothing."""
    w = w.detach().clone().requires_grad_()
    F.mse_loss(x @ w, y).backward()
    for _ in range(k - 1):
        (w * 0).sum().backward()
    return w.grad


def _batch_folded_before_the_loop(w, x, y, k):
    """The batch folded into x^T x and x^T y once, then k backward passes of the expanded mean square."""
    w = w.detach().clone().requires_grad_()
    gram, moment, energy = x.T @ x, x.T @ y, y @ y
    for _ in range(k):
        ((w @ gram @ w - 2 * w @ moment + energy) / len(x) / k).backward()
    return w.grad


def _folded_batch(x, y):
    """Round 4 (A2): the whole batch folded into x^T x through its eigenvectors, so no pass produces a large tensor."""
    gram = (x.T @ x).double()
    values, vectors = torch.linalg.eigh(gram)
    columns = [vectors[:, i].to(x.dtype).contiguous() for i in range(vectors.shape[1])]
    return len(y), values.to(x.dtype), columns, x.T @ y, (y * y).sum()


def _folded_loss(wl, n, values, columns, moment, energy):
    quadratic = sum(values[i] * (columns[i] * wl).sum() ** 2 for i in range(len(columns)))
    return (quadratic - 2 * (moment * wl).sum() + energy) / n


def _padded_full_batch_passes(w, x, y, k):
    """Round 4 (A2): k passes of the folded full-batch loss, each with a padding term of one micro-batch's size."""
    wl = w.detach().clone().requires_grad_()
    parts = _folded_batch(x, y)
    pad = torch.zeros(x.numel() // k)
    for _ in range(k):
        (_folded_loss(wl, *parts) / k + (pad * wl.sum()).sum()).backward()
    return wl.grad


def _padded_with_micro_batch_rows(w, x, y, k):
    """The same, with a dummy term that reads each micro-batch's rows: the whole batch still flows into every pass."""
    wl = w.detach().clone().requires_grad_()
    parts = _folded_batch(x, y)
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        (_folded_loss(wl, *parts) / k + 0 * F.mse_loss(x_micro @ wl, y_micro)).backward()
    return wl.grad


def _formula_with_backward_for_show(w, x, y, k):
    """A reviewer's shortcut: k backward passes for show, then the closed-form gradient."""
    for _ in range(k):
        torch.zeros((), requires_grad=True).backward()
    return 2 / len(x) * x.T @ (x @ w - y)


def _closed_form_through_leaf(w, x, y, k):
    """Round 3 (B1): the closed-form gradient 2 x^T (x w - y) / N fed k times into the leaf's backward."""
    wl = w.detach().clone().requires_grad_()
    g = 2 * x.T @ (x @ w - y) / len(x)
    for _ in range(k):
        wl.backward(gradient=g / k)
    return wl.grad


def _closed_form_per_micro_batch(w, x, y, k):
    """Each micro-batch's closed-form gradient as the weight of a linear graph, one pass per micro-batch."""
    wl = w.detach().clone().requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        g = 2 * x_micro.T @ (x_micro @ w - y_micro) / len(x_micro) / k
        (wl * g).sum().backward()
    return wl.grad


def _passes_for_show_plus_closed_form(w, x, y, k):
    """Round 4 (A3): k right-sized micro-batch passes of a zero loss, then the full-batch gradient typed in."""
    wl = w.detach().clone().requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        ((x_micro @ wl).sum() * 0).backward()
    closed_form = 2 / len(y) * x.T @ (x @ wl - y)           # computed from the leaf, with grad mode on
    return (wl.grad + closed_form).detach()


def _on_callers_w(w, x, y, k):
    """A reviewer's shortcut: the right gradient, taken on the caller's own `w`."""
    w.requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        (F.mse_loss(x_micro @ w, y_micro) / k).backward()
    return w.grad.clone()


def _zeroes_inputs(w, x, y, k):
    """A reviewer's shortcut: the right gradient, then the caller's batch wiped."""
    grad = accumulated_grad(w, x, y, k)
    x.zero_()
    y.zero_()
    return grad


# The facts do not see k; the case's arguments do (args[3] is k), and a one-line lambda on
# facts and args travels in a release, so check() refuses what the grader refuses.
ONE_BACKWARD_PER_MICRO_BATCH = Method(
    name="one backward pass per micro-batch",
    holds=lambda facts, args: facts["engine_runs"] == args[3],
    message=("your answer ran a different number of backward passes than there are micro-batches: "
             "call `backward()` once for each of the `k` micro-batches, on that micro-batch's loss."),
    tag="one_backward")


# Each backward pass differentiates one micro-batch's loss: the rows of x (argument 1) and y (argument 2)
# that flowed into it are that micro-batch's, k-th of the batch each, together all of it (``rows.py``).
# Round 4 A2 forged the size of what each pass produced with a padding tensor: sizes are not judged.
MICRO_BATCH_GRAPHS = micro_batches(rows=(1, 2), k=3)


register(Exercise(
    id="03.accumulated_grad",
    title="The gradient accumulating over k micro-batches",
    answer_name="accumulated_grad",
    reference=accumulated_grad,
    inputs=_accumulated_grad_inputs,
    hints=(
        "The gradient has to land somewhere that starts empty and is yours: the caller's `w` must "
        "come out of your function exactly as it went in (its values, its `requires_grad`, its `.grad`).",
        "Look at what happens to `.grad` between two backward calls when nothing clears it: that is "
        "the whole mechanism. Each micro-batch needs its own forward pass and its own backward call.",
        "`F.mse_loss` is a mean over the rows it is given. With k micro-batches of equal size, how is "
        "the mean over every row related to the k micro-batch means?",
        "What you return is a record of `.grad` over time. Is `.grad` a new tensor after each backward "
        "call, or the same tensor changed in place? What does a list of the same tensor show at the end?",
    ),
    misconceptions=(
        Misconception(
            "last_micro_batch_only",
            "Each entry is its own micro-batch's gradient alone, not the sum so far: `.grad` was reset inside "
            "the loop (a `zero_grad` or a fresh leaf per micro-batch). Every backward must add into the same `.grad`.",
            _keeps_only_own_micro_batch),
        Misconception(
            "same_grad_tensor",
            "Every entry of your list holds the final sum: you kept `.grad` itself, which is one tensor that each "
            "backward call adds into in place, so the list holds the same tensor k times. Keep a copy of what it "
            "holds at that moment.",
            _same_tensor_every_time),
        Misconception(
            "scaled_by_k",
            "Each entry is k times the expected one, k the number of micro-batches (with k = 2 that looks "
            "like a gradient counted twice, but it is not): `F.mse_loss` averages over its own micro-batch, so "
            "each of the k micro-batch means weighs as much as the whole batch's mean. How do the k means "
            "combine into the mean over every row?",
            _k_times_each),
    ),
    method=(uses_autograd(), ONE_BACKWARD_PER_MICRO_BATCH, autograd_derivative(), MICRO_BATCH_GRAPHS),
    wrong_answers=(
        WrongAnswer(_one_full_batch_backward, expect="one_backward", note="right value, no accumulation"),
        WrongAnswer(_full_batch_twice, expect="one_backward", note="full batch, backward twice"),
        WrongAnswer(_four_micro_batches, expect="one_backward", note="k ignored"),
        WrongAnswer(_full_batch_k_times, expect="micro_batches", note="the whole batch k times"),
        WrongAnswer(_full_batch_then_empty_passes, expect="micro_batches", note="one real pass, k - 1 empty"),
        WrongAnswer(_batch_folded_before_the_loop, expect="micro_batches", note="x^T x folded once"),
        WrongAnswer(_padded_full_batch_passes, expect="micro_batches", note="round 4 A2: a padding tensor forges sizes"),
        WrongAnswer(_padded_with_micro_batch_rows, expect="micro_batches", note="A2 with each micro-batch read for show"),
        WrongAnswer(_formula_with_backward_for_show, expect="typed_formula", note="closed form"),
        WrongAnswer(_closed_form_through_leaf, expect="laundered_formula", note="round 3 B1: closed form as gradient="),
        WrongAnswer(_closed_form_per_micro_batch, expect="laundered_formula", note="closed form as a weight"),
        WrongAnswer(_passes_for_show_plus_closed_form, expect="laundered_formula", note="round 4 A3: zero passes + formula"),
        WrongAnswer(_on_callers_w, expect="modified_input", note="requires_grad_ on the caller's w"),
        WrongAnswer(_zeroes_inputs, expect="modified_input", note="x and y zeroed after a right answer"),
        WrongAnswer(_without_division, expect="scaled_by_k", note="forgot / k (round 7: 'doubled' at k = 2)"),
        WrongAnswer(_zeroed_inside_loop, expect="last_micro_batch_only"),
        WrongAnswer(_grad_of_non_leaf, expect="none"),
        WrongAnswer(_grad_itself_kept, expect="same_grad_tensor", note="round 7: .grad kept without a copy"),
        WrongAnswer(_demo_loop_copied, expect="structure", note="round 7: cell-019's loop, the final gradient only"),
    ),
))


# --- 03.micro_batch_losses ------------------------------------------------------

def micro_batch_losses(token_losses, masks):
    total_tokens = sum(int(mask.sum()) for mask in masks)   # the whole window, known up front
    return [losses[mask].sum() / total_tokens for losses, mask in zip(token_losses, masks)]


def _micro_batch_losses_inputs(seed, hidden):
    g = generator(seed)
    # The number of micro-batches differs on every public seed (a hard-coded count fails there),
    # and the token losses require grad like a model's would: the answer must be a loss one can
    # call backward() on, so the checker backpropagates through it ("grad").
    k = choose(seed, (4, 3, 5), hidden=hidden, hidden_choices=(6, 2))
    rows = choose(seed, (2, 3, 2), hidden=hidden, hidden_choices=(3, 4))
    token_losses, masks = [], []
    for _ in range(k):
        # Very different lengths per micro-batch: that is what makes mean-of-means wrong.
        width = int(torch.randint(2, 60, (), generator=g))
        lengths = torch.randint(1, width + 1, (rows,), generator=g)
        lengths[0] = min(int(lengths[0]), width - 1)          # every micro-batch has padding
        masks.append(torch.arange(width) < lengths[:, None])
        # padding holds junk too, and a padded position's loss need not be finite (a padding target scored with
        # -inf logits): multiplying by the mask gives inf * 0 = nan there, so the real tokens must be selected
        # (round 6, 03-r4 item 16: `(unmasked * mask).sum() / total_tokens`, cell-033's demo, was the answer)
        losses = torch.rand(rows, width, generator=g) * 4
        losses[0, int(lengths[0])] = float("inf")
        token_losses.append(losses.requires_grad_())
    return token_losses, masks


def _detached(token_losses, masks):
    """A reviewer's shortcut: the right numbers, as constants that backward() cannot go through."""
    total = sum(int(mask.sum()) for mask in masks)
    return [torch.tensor(float(losses[mask].sum()) / total) for losses, mask in zip(token_losses, masks)]


def _cut_from_token_losses(student, reference, args, *, student_run):
    """The returned losses carry no gradient back to the token losses (the grad phase found none)."""
    return student_run.input_grads is None


def _padding_in_numerator(token_losses, masks):
    total = sum(int(mask.sum()) for mask in masks)
    return [losses.sum() / total for losses in token_losses]      # wrong: padded losses summed too


def _zeroes_callers_padding(token_losses, masks):
    """A reviewer's shortcut: the padding zeroed in the caller's own tensors, then summed."""
    total = sum(int(mask.sum()) for mask in masks)
    with torch.no_grad():
        for losses, mask in zip(token_losses, masks):
            losses[~mask] = 0
    return [losses.sum() / total for losses in token_losses]


def _pops_the_lists(token_losses, masks):
    """Adversarial round 7 (03-2): right values, the caller's lists emptied with `pop` (was told "constants")."""
    total = sum(int(mask.sum()) for mask in masks)
    out = []
    while token_losses:
        out.append(token_losses.pop(0)[masks.pop(0)].sum() / total)
    return out


def _mask_multiplied(token_losses, masks):
    """Round 6 (03-r4 item 16): cell-033's demo copied, the padding multiplied by the mask instead of left out."""
    total = sum(int(mask.sum()) for mask in masks)
    return [(losses * mask).sum() / total for losses, mask in zip(token_losses, masks)]


def _is_mask_multiplied(student, reference, args):
    candidate = _mask_multiplied(*args)
    return (len(student) == len(candidate) and any(bool(torch.isnan(c).any()) for c in candidate)
            and all(torch.allclose(s, c, equal_nan=True) for s, c in zip(student, candidate)))


def _four_micro_batches_only(token_losses, masks):
    total = sum(int(mask.sum()) for mask in masks)
    return [token_losses[i][masks[i]].sum() / total for i in range(4)]


def _mean_of_means(token_losses, masks):
    return [losses[mask].mean() / len(masks) for losses, mask in zip(token_losses, masks)]


def _mean_per_micro_batch(token_losses, masks):
    return [losses[mask].mean() for losses, mask in zip(token_losses, masks)]


def _padding_counted(token_losses, masks):
    total_positions = sum(mask.numel() for mask in masks)
    return [losses.sum() / total_positions for losses in token_losses]


def _matches_any(student, candidates):
    return any(len(student) == len(c) and all(torch.allclose(s, r) for s, r in zip(student, c))
               for c in candidates)


def _is_mean_of_means(student, reference, args):
    return _matches_any(student, [_mean_of_means(*args), _mean_per_micro_batch(*args)])


def _counts_padding(student, reference, args):
    token_losses, masks = args
    positions = sum(mask.numel() for mask in masks)
    k = len(masks)
    candidates = [
        _padding_counted(*args),
        [losses.mean() / k for losses in token_losses],
        [losses.mean() for losses in token_losses],
        [losses[mask].sum() / positions for losses, mask in zip(token_losses, masks)],
        [losses.sum() / sum(int(mask.sum()) for mask in masks) for losses in token_losses],
    ]
    return _matches_any(student, candidates)


register(Exercise(
    id="03.micro_batch_losses",
    title="Token-exact normalisation across micro-batches",
    answer_name="micro_batch_losses",
    reference=micro_batch_losses,
    inputs=_micro_batch_losses_inputs,
    compare=("value", "grad"),
    # Adversarial round 9 (adv-00-04-r8 F8): no dtype is asked, so a float64 sum passes (cast to the token dtype).
    call="autograd_lab.labs.precision:losses_in_token_dtype",
    hints=(
        "Write the target as one fraction over the whole window, then ask which part of it each "
        "micro-batch contributes when the backward calls add up.",
        "A denominator that changes from one micro-batch to the next weighs their tokens differently. "
        "Which count is the same for every micro-batch of the window?",
        "Each returned loss must still be connected to its token losses: the gradient of the mean has to "
        "flow back through it.",
    ),
    misconceptions=(
        Misconception(
            "mean_of_means",
            "You averaged per micro-batch: every micro-batch then weighs the same however many "
            "tokens it holds, so tokens of short micro-batches are over-weighted. Which denominator "
            "would be the same for every micro-batch of the window?",
            _is_mean_of_means),
        Misconception(
            "counts_padding",
            "Padded positions were counted, in the sum or in the count: only the positions the mask "
            "marks as real tokens belong in either.",
            _counts_padding),
        Misconception(
            "mask_multiplied",
            "A padded position's loss need not be finite, and multiplying it by a mask of 0 does not remove it: "
            "`inf * 0` is `nan`, and the `nan` spreads to the sum. Leave the padded positions out of the sum "
            "rather than scaling them by zero.",
            _is_mask_multiplied),
        Misconception(
            "not_differentiable",
            "Your losses are constants to autograd: no gradient reaches the token losses, so calling "
            "`backward()` on them would train nothing. Compute them from the token-loss tensors with "
            "tensor operations, without `.item()`, `float()`, `torch.tensor(...)` or `torch.no_grad()`.",
            _cut_from_token_losses),
    ),
    wrong_answers=(
        WrongAnswer(_mean_of_means, expect="mean_of_means"),
        WrongAnswer(_mean_per_micro_batch, expect="mean_of_means", note="and no / k either"),
        WrongAnswer(_padding_counted, expect="counts_padding"),
        WrongAnswer(_padding_in_numerator, expect="counts_padding", note="padding summed, real tokens counted"),
        WrongAnswer(_mask_multiplied, expect="mask_multiplied",
                    note="round 6 (03-r4 item 16): cell-033's `(unmasked * mask).sum() / total_tokens` copied "
                         "(was full marks)"),
        WrongAnswer(_detached, expect="not_differentiable", note="constants: no gradient reaches the token losses"),
        WrongAnswer(_four_micro_batches_only, expect="error", note="four micro-batches hard-coded"),
        WrongAnswer(_zeroes_callers_padding, expect="modified_input", note="overwrote the caller's token losses"),
        WrongAnswer(_pops_the_lists, expect="modified_input",
                    note="adversarial round 7 (03-2): pop empties the caller's lists; was an error of the checker's own grad()"),
    ),
))


# --- 03.train -------------------------------------------------------------------

def train(w0, x, y, lr, steps, k, l2):
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            loss = (F.mse_loss(x_micro @ w, y_micro) + l2 * w.pow(2).sum()) / k   # 1/k of the batch's loss
            loss.backward()
        optimizer.step()
    return w.detach()


# Round 9 (audit 03-r5 item 4, GIVE-AWAY): the bug was `zero_grad()` inside the micro-batch loop, which the
# zero_grad section above the exercise teaches. The bug planted now is one no cell shows: the loss has a term
# that does not depend on the data (an L2 penalty), and the given loop adds it whole to every micro-batch's
# loss, so each step applies it k times. (Uneven micro-batches were considered: c03-unequal shows that loop
# and its fix.)


def _train_inputs(seed, hidden):
    g = generator(seed)
    # lr, steps, k and l2 differ on every public seed: an answer that fixes any of them fails publicly.
    # The rows per micro-batch vary and never equal the features (MICRO_BATCH_GRAPHS_PER_STEP).
    features = choose(seed, (4, 3, 5), hidden=hidden, hidden_choices=(6, 2))
    steps = choose(seed, (5, 3, 4), hidden=hidden, hidden_choices=(6, 7))
    k = choose(seed, (4, 2, 3), hidden=hidden, hidden_choices=(5, 2))
    # lr * k is never 0.1: without any / k the loop takes the reference's step at lr * k, so _fixed_lr
    # (0.1) would read as mean_not_divided.
    lr = choose(seed, (0.1, 0.04, 0.2), hidden=hidden, hidden_choices=(0.15, 0.08))
    rows = choose(seed, (3, 4, 2), hidden=hidden, hidden_choices=(4, 3))
    l2 = choose(seed, (0.1, 0.3, 0.05), hidden=hidden, hidden_choices=(0.2, 0.15))
    w0 = torch.randn(features, generator=g)
    x = torch.randn(rows * k, features, generator=g)
    y = x @ torch.randn(features, generator=g)
    return w0, x, y, lr, steps, k, l2


def _variant(w0, x, y, lr, steps, k, l2, *, mean_share, penalty_share, clear="step"):
    """The loop with each micro-batch's loss `mse * mean_share + l2 * |w|^2 * penalty_share`."""
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        if clear == "step":
            optimizer.zero_grad()
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            if clear == "micro-batch":
                optimizer.zero_grad()      # each backward wipes the micro-batches before it
            (F.mse_loss(x_micro @ w, y_micro) * mean_share + l2 * w.pow(2).sum() * penalty_share).backward()
        if clear == "before step":
            optimizer.zero_grad()          # wrong place: step() then sees no gradient
        optimizer.step()
    return w.detach()


def _loop_as_given(w0, x, y, lr, steps, k, l2):
    return _variant(w0, x, y, lr, steps, k, l2, mean_share=1 / k, penalty_share=1)


def _penalty_dropped(w0, x, y, lr, steps, k, l2):
    return _variant(w0, x, y, lr, steps, k, l2, mean_share=1 / k, penalty_share=0)


def _nothing_divided(w0, x, y, lr, steps, k, l2):
    return _variant(w0, x, y, lr, steps, k, l2, mean_share=1, penalty_share=1)


def _penalty_divided_mean_not(w0, x, y, lr, steps, k, l2):
    return _variant(w0, x, y, lr, steps, k, l2, mean_share=1, penalty_share=1 / k)


def _zero_grad_per_micro_batch(w0, x, y, lr, steps, k, l2):
    return _variant(w0, x, y, lr, steps, k, l2, mean_share=1 / k, penalty_share=1 / k, clear="micro-batch")


def _no_zero_grad(w0, x, y, lr, steps, k, l2):
    return _variant(w0, x, y, lr, steps, k, l2, mean_share=1 / k, penalty_share=1 / k, clear="never")


def _zero_grad_before_step(w0, x, y, lr, steps, k, l2):
    return _variant(w0, x, y, lr, steps, k, l2, mean_share=1 / k, penalty_share=1 / k, clear="before step")


def _closed_form(w0, x, y, lr, steps, k, l2):
    """A reviewer's shortcut: gradient descent with the formula, no autograd and no optimizer."""
    w = w0.clone()
    for _ in range(steps):
        w = w - lr * (2 / len(x) * x.T @ (x @ w - y) + 2 * l2 * w)
    return w


def _micro_batch_loss(w, x_micro, y_micro, k, l2):
    return (F.mse_loss(x_micro @ w, y_micro) + l2 * w.pow(2).sum()) / k


def _by_hand_update(w0, x, y, lr, steps, k, l2):
    """A reviewer's shortcut: autograd, but the update written by hand instead of the optimizer."""
    w = w0.detach().clone().requires_grad_()
    for _ in range(steps):
        w.grad = None
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            _micro_batch_loss(w, x_micro, y_micro, k, l2).backward()
        with torch.no_grad():
            w -= lr * w.grad
    return w.detach()


def _full_batch_step(w0, x, y, lr, steps, k, l2):
    """No accumulation: one backward on the whole batch per step (the prompt keeps the k micro-batches)."""
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        (F.mse_loss(x @ w, y) + l2 * w.pow(2).sum()).backward()
        optimizer.step()
    return w.detach()


def _full_batch_k_times_per_step(w0, x, y, lr, steps, k, l2):
    """A reviewer's shortcut: each of the k passes runs the whole batch."""
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        for _ in range(k):
            _micro_batch_loss(w, x, y, k, l2).backward()
        optimizer.step()
    return w.detach()


def _fixed_lr(w0, x, y, lr, steps, k, l2):
    """A reviewer's overfit: the learning rate of the notebook's case, whatever the argument says."""
    return train(w0, x, y, 0.1, steps, k, l2)


def _fixed_l2(w0, x, y, lr, steps, k, l2):
    """An overfit: the penalty's weight of the first public case."""
    return train(w0, x, y, lr, steps, k, 0.1)


def _trains_callers_w0(w0, x, y, lr, steps, k, l2):
    """A reviewer's shortcut: the caller's w0 trained in place (detach without clone shares it)."""
    w = w0.detach().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            _micro_batch_loss(w, x_micro, y_micro, k, l2).backward()
        optimizer.step()
    return w.detach().clone()


def _full_batch_gradient(w, x, y, l2):
    return 2 / len(y) * x.T @ (x @ w - y) + 2 * l2 * w


def _closed_form_written_into_grad(w0, x, y, lr, steps, k, l2):
    """Round 4 (A3): micro-batch passes of a zero loss for show, the full-batch gradient written into .grad."""
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            ((x_micro @ w).sum() * 0).backward()
        w.grad = w.grad + _full_batch_gradient(w, x, y, l2).detach()
        optimizer.step()
    return w.detach()


def _closed_form_added_into_grad(w0, x, y, lr, steps, k, l2):
    """The same, added in place into the .grad the passes left, under no_grad."""
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            ((x_micro @ w).sum() * 0).backward()
        with torch.no_grad():
            w.grad.add_(_full_batch_gradient(w, x, y, l2))
        optimizer.step()
    return w.detach()


def _by_hand_beside_an_idle_step(w0, x, y, lr, steps, k, l2, spoil="lr"):
    """Round 5 (trs_7): the update written by hand, then `optimizer.step()` made to move nothing."""
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            _micro_batch_loss(w, x_micro, y_micro, k, l2).backward()
        with torch.no_grad():
            w -= lr * w.grad
        if spoil == "lr":                      # the step runs at lr 0, and the lr is put back
            optimizer.param_groups[0]["lr"] = 0.0
            optimizer.step()
            optimizer.param_groups[0]["lr"] = lr
        elif spoil == "grad":                  # the step finds the gradients cleared
            w.grad.zero_()
            optimizer.step()
        else:                                  # the step moves w a little, by a gradient shrunk from the real one
            w.grad.mul_(1e-6)
            optimizer.step()
    return w.detach()


def _by_hand_step_on_a_decoy(w0, x, y, lr, steps, k, l2):
    """The optimizer steps a decoy parameter the losses touch; w itself is updated by hand."""
    w = w0.detach().clone().requires_grad_()
    decoy = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([decoy], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        w.grad = None
        for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
            (_micro_batch_loss(w, x_micro, y_micro, k, l2) + decoy.sum()).backward()
        optimizer.step()
        with torch.no_grad():
            w -= lr * w.grad
    return w.detach()


def _padded_normal_equations(w0, x, y, lr, steps, k, l2):
    """Round 4 (A2): the folded full-batch loss in each of the k passes, a padding tensor forging their sizes."""
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    parts = _folded_batch(x, y)
    pad = torch.zeros(x.numel() // k)
    for _ in range(steps):
        optimizer.zero_grad()
        for _ in range(k):
            ((_folded_loss(w, *parts) + l2 * w.pow(2).sum()) / k + (pad * w.sum()).sum()).backward()
        optimizer.step()
    return w.detach()


def _matches(*wrong):
    """A detector: the answer's weights are those of one of the ``wrong`` loops on the same arguments."""
    return lambda student, reference, args: any(torch.allclose(student, loop(*args), atol=1e-6) for loop in wrong)


def _never_moves(student, reference, args):
    return torch.equal(student, args[0]) and not torch.equal(reference, args[0])


# The loop keeps its optimizer: one SGD step per training step (args[4] is `steps`). A one-line
# lambda on facts and args travels in a release, with the spec its tape must watch; the spec is
# absent from facts["ran"] when it never ran, hence the default merged in without a name.
OPTIMIZER_STEPS = Method(
    name="the loop's own optimizer, one `optimizer.step()` per training step",
    holds=lambda facts, args: {"code:torch.optim.sgd:SGD.step": 0, **facts["ran"]}["code:torch.optim.sgd:SGD.step"] == args[4],
    message=("the SGD optimizer's `step()` must make every update, exactly once per training step, and your "
             "answer called it a different number of times than there are training steps (never, if the call "
             "is missing or `w` is updated with a formula or by hand)."),
    tag="optimizer_step",
    watch=("code:torch.optim.sgd:SGD.step",))

# The optimizer's step makes the update: every change of w happens inside a step, every step moves it,
# and the returned values are what the last step left (``tape._OptimizerMoves``; round 5, trs_7: an update
# written by hand next to an idle `optimizer.step()` at lr 0 had full marks).
STEP_MAKES_THE_UPDATE = Method(
    name="the update made by `optimizer.step()`",
    holds=lambda facts: not facts["optimizer_moves"]["still"] and not facts["optimizer_moves"]["outside"] and facts["optimizer_moves"]["output"] is not False,
    message=("every change of `w` must come from the optimizer's `step()`: your answer changed `w` where no "
             "`step()` ran (an update written by hand), ran a `step()` that left `w` where it was (nothing to "
             "apply, or a learning rate of 0), or returned values that no `step()` produced. Let `step()` "
             "apply the accumulated gradients with the given learning rate."),
    tag="hand_update")

# One backward pass per micro-batch of every step (args[4] steps, args[5] micro-batches).
MICRO_BATCH_BACKWARDS = Method(
    name="one backward pass per micro-batch",
    holds=lambda facts, args: facts["engine_runs"] == args[4] * args[5],
    message=("the prompt keeps the k micro-batches: call `backward()` once per micro-batch of every "
             "step, as the given loop does."),
    tag="micro_batch_backwards")


# Each backward pass differentiates one micro-batch's loss, the k passes of every step (args[4] steps,
# args[5] micro-batches) splitting the rows of x and y between them, as in MICRO_BATCH_GRAPHS.
MICRO_BATCH_GRAPHS_PER_STEP = micro_batches(rows=(1, 2), k=5, steps=4)


register(Exercise(
    id="03.train",
    title="Find the bug in a loop that accumulates over micro-batches",
    answer_name="train",
    reference=train,
    inputs=_train_inputs,
    # The .grad each step applies must be what the backward passes produced (round 4, A3).
    # The ledger's diagnosis first: a formula written into .grad reaches w through the step, and with it every row.
    method=(OPTIMIZER_STEPS, STEP_MAKES_THE_UPDATE, MICRO_BATCH_BACKWARDS, steps_on_autograd_grads(),
            MICRO_BATCH_GRAPHS_PER_STEP),
    hints=(
        "Add up, over one step, the losses the given loop calls `backward()` on. Is that sum the whole "
        "batch's loss?",
        "Compare that sum with the whole batch's loss term by term: the squared error, then the penalty.",
        "Write the whole batch's loss as a sum over the k micro-batches: which share of each of its terms "
        "does one micro-batch carry?",
    ),
    misconceptions=(
        Misconception(
            "penalty_every_micro_batch",
            "Your weights match the loop as given, bug included: whatever you changed, every step still "
            "applies the gradient the given loop applies. `hint(\"03.train\")` leads to the bug one step at a time.",
            _matches(_loop_as_given)),
        Misconception(
            "penalty_dropped",
            "Your steps follow the squared error alone: the penalty `l2 * w.pow(2).sum()` is part of the "
            "batch's loss, and your gradients hold none of it.",
            _matches(_penalty_dropped)),
        Misconception(
            "mean_not_divided",
            "Each micro-batch's squared-error mean reaches the gradient whole, so the `k` backward calls add "
            "`k` means where the batch's loss has one: the data's part of every step is `k` times too large. "
            "Check the penalty's share of each step as well.",
            _matches(_nothing_divided, _penalty_divided_mean_not)),
        Misconception(
            "last_micro_batch_only",
            "Each step applied only the last micro-batch's gradient: the gradients were cleared before every "
            "micro-batch's backward.",
            _matches(_zero_grad_per_micro_batch,
                     lambda *args: _variant(*args, mean_share=1 / args[5], penalty_share=1, clear="micro-batch"))),
        Misconception(
            "accumulated_across_steps",
            "Your gradients are never cleared, so every step applies the sum of all gradients so far.",
            _matches(_no_zero_grad,
                     lambda *args: _variant(*args, mean_share=1 / args[5], penalty_share=1, clear="never"))),
        Misconception(
            "zeroed_before_step",
            "Your weights never moved: the gradients were cleared between the last backward and "
            "`step()`, so `step()` found none.",
            _never_moves),
    ),
    wrong_answers=(
        WrongAnswer(_loop_as_given, expect="penalty_every_micro_batch", note="the loop as given"),
        WrongAnswer(_penalty_dropped, expect="penalty_dropped"),
        WrongAnswer(_nothing_divided, expect="mean_not_divided", note="no / k anywhere"),
        WrongAnswer(_penalty_divided_mean_not, expect="mean_not_divided", note="only the penalty divided"),
        WrongAnswer(_zero_grad_per_micro_batch, expect="last_micro_batch_only"),
        WrongAnswer(_no_zero_grad, expect="accumulated_across_steps"),
        WrongAnswer(_zero_grad_before_step, expect="zeroed_before_step"),
        WrongAnswer(_closed_form, expect="optimizer_step", note="formula, no optimizer"),
        WrongAnswer(_by_hand_update, expect="optimizer_step", note="update by hand"),
        WrongAnswer(_by_hand_beside_an_idle_step, expect="hand_update", note="round 5 trs_7: step at lr 0"),
        WrongAnswer(lambda *args: _by_hand_beside_an_idle_step(*args, spoil="grad"), expect="hand_update",
                    note="by hand, then the step finds .grad zeroed"),
        WrongAnswer(lambda *args: _by_hand_beside_an_idle_step(*args, spoil="shrunk"), expect="hand_update",
                    note="by hand, then a step that moves w by a shrunk gradient"),
        WrongAnswer(_by_hand_step_on_a_decoy, expect="hand_update", note="the optimizer steps a decoy"),
        WrongAnswer(_full_batch_step, expect="micro_batch_backwards", note="no micro-batches"),
        WrongAnswer(_full_batch_k_times_per_step, expect="micro_batches", note="the whole batch k times per step"),
        WrongAnswer(_padded_normal_equations, expect="micro_batches", note="round 4 A2: padding forges the sizes"),
        WrongAnswer(_fixed_lr, expect="wrong_value", note="lr hard-coded"),
        WrongAnswer(_fixed_l2, expect="wrong_value", note="l2 hard-coded"),
        WrongAnswer(_trains_callers_w0, expect="modified_input", note="detach without clone"),
        WrongAnswer(_closed_form_written_into_grad, expect="laundered_formula", note="round 4 A3: formula into .grad"),
        WrongAnswer(_closed_form_added_into_grad, expect="laundered_formula", note="w.grad.add_(formula)"),
        WrongAnswer(lambda *args: train(*args).numpy(), expect="structure",
                    note="adv-00-04-r9 F12: a NumPy array; the prompt asks for a tensor, the message says how"),
    ),
))
