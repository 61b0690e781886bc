"""Exercises of notebook 03 (accumulation): micro-batches, token-exact losses, the training loop."""

import torch
import torch.nn.functional as F

from autograd_lab.checking import Exercise, Method, Misconception, WrongAnswer, register


# --- 03.accumulated_grad --------------------------------------------------------

def accumulated_grad(w, x, y, k):
    w = w.detach().clone().requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        loss = F.mse_loss(x_micro @ w, y_micro) / k   # each micro-batch is 1/k of the batch mean
        loss.backward()
    return w.grad


def _accumulated_grad_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    batch, features, k = (24, 6, 3) if hidden else (12, 5, 4)
    w = torch.randn(features, generator=generator)
    x = torch.randn(batch, features, generator=generator)
    y = torch.randn(batch, generator=generator)
    return w, x, y, k


def _last_micro_batch_grad(w, x, y, k, divide):
    w = w.detach().clone().requires_grad_()
    loss = F.mse_loss(x.chunk(k)[-1] @ w, y.chunk(k)[-1])
    (loss / k if divide else loss).backward()
    return w.grad


def _keeps_only_last_micro_batch(student, reference, args):
    return any(torch.allclose(student, _last_micro_batch_grad(*args, divide=divide), atol=1e-6)
               for divide in (True, False))


def _zeroed_inside_loop(w, x, y, k):
    w = w.detach().clone().requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        w.grad = None                                   # wrong: clears the earlier micro-batches
        (F.mse_loss(x_micro @ w, y_micro) / k).backward()
    return w.grad


def _without_division(w, x, y, k):
    w = w.detach().clone().requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        F.mse_loss(x_micro @ w, y_micro).backward()     # wrong: k times the batch-mean gradient
    return w.grad


def _grad_of_non_leaf(w, x, y, k):
    leaf = w.detach().clone().requires_grad_()
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):
        weights = leaf.clone()                         # an intermediate, not a leaf
        (F.mse_loss(x_micro @ weights, y_micro) / k).backward()
    return weights.grad                                # wrong: non-leaf tensors keep no .grad


def _one_full_batch_backward(w, x, y, k):
    """The shortcut the prompt forbids: the large-batch gradient from one backward pass."""
    w = w.detach().clone().requires_grad_()
    F.mse_loss(x @ w, y).backward()
    return w.grad


# Every input has k >= 3 micro-batches; the facts do not see k, so this asks for more than one pass.
ONE_BACKWARD_PER_MICRO_BATCH = Method(
    name="one backward pass per micro-batch",
    holds=lambda facts: facts["engine_runs"] >= 2,
    message=("your answer ran a single backward pass (or none), so it did not accumulate over "
             "micro-batches: call `backward()` once per `x.chunk(k)` micro-batch."),
    tag="one_backward")


register(Exercise(
    id="03.accumulated_grad",
    title="The large-batch gradient from k micro-batches",
    answer_name="accumulated_grad",
    reference=accumulated_grad,
    inputs=_accumulated_grad_inputs,
    hints=(
        "Make a leaf of your own: w = w.detach().clone().requires_grad_(). Its .grad starts as None.",
        "Loop over zip(x.chunk(k), y.chunk(k)) and call .backward() on each micro-batch loss: "
        "the gradients add up in w.grad.",
        "F.mse_loss averages over its micro-batch; the batch mean is the average of the k "
        "micro-batch means, so divide each micro-batch loss by k.",
    ),
    misconceptions=(
        Misconception(
            "last_micro_batch_only",
            "Your gradient is the last micro-batch's alone: .grad was reset inside the loop (a "
            "zero_grad or a fresh leaf per micro-batch). Every backward must add into the same .grad.",
            _keeps_only_last_micro_batch),
    ),
    method=ONE_BACKWARD_PER_MICRO_BATCH,
    wrong_answers=(
        WrongAnswer(_one_full_batch_backward, expect="one_backward", note="right value, no accumulation"),
        WrongAnswer(_without_division, expect="scaled", note="forgot / k"),
        WrongAnswer(_zeroed_inside_loop, expect="last_micro_batch_only"),
        WrongAnswer(_grad_of_non_leaf, expect="none"),
    ),
))


# --- 03.micro_batch_losses ------------------------------------------------------

def micro_batch_losses(token_losses, masks):
    total_tokens = sum(int(mask.sum()) for mask in masks)   # the whole window, known up front
    return [losses[mask].sum() / total_tokens for losses, mask in zip(token_losses, masks)]


def _micro_batch_losses_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    k, rows = (5, 3) if hidden else (4, 2)
    token_losses, masks = [], []
    for _ in range(k):
        # Very different lengths per micro-batch: that is what makes mean-of-means wrong.
        width = int(torch.randint(2, 60, (), generator=generator))
        lengths = torch.randint(1, width + 1, (rows,), generator=generator)
        masks.append(torch.arange(width) < lengths[:, None])
        token_losses.append(torch.rand(rows, width, generator=generator) * 4)   # padding holds junk too
    return token_losses, masks


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
    ]
    return _matches_any(student, candidates)


register(Exercise(
    id="03.micro_batch_losses",
    title="Token-exact normalisation across micro-batches",
    answer_name="micro_batch_losses",
    reference=micro_batch_losses,
    inputs=_micro_batch_losses_inputs,
    hints=(
        "The target is the mean over every real token of the window: (sum of all real token "
        "losses) / (number of real tokens in all micro-batches).",
        "Count the real tokens of the whole window first: sum(int(mask.sum()) for mask in masks).",
        "For each micro-batch, sum its real token losses (losses[mask].sum()) and divide by that "
        "window total. Do not divide by k.",
    ),
    misconceptions=(
        Misconception(
            "mean_of_means",
            "You averaged per micro-batch: every micro-batch then weighs the same however many "
            "tokens it holds, so tokens of short micro-batches are over-weighted. Sum the token "
            "losses and divide by the total number of real tokens in the window.",
            _is_mean_of_means),
        Misconception(
            "counts_padding",
            "Padded positions were counted: use the mask to select real tokens (losses[mask]) and "
            "count only those in the denominator.",
            _counts_padding),
    ),
    wrong_answers=(
        WrongAnswer(_mean_of_means, expect="mean_of_means"),
        WrongAnswer(_mean_per_micro_batch, expect="mean_of_means", note="and no / k either"),
        WrongAnswer(_padding_counted, expect="counts_padding"),
    ),
))


# --- 03.train -------------------------------------------------------------------

def train(w0, x, y, lr, steps):
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()              # clear last step's gradient before this backward
        loss = F.mse_loss(x @ w, y)
        loss.backward()
        optimizer.step()
    return w.detach()


def _train_inputs(seed, hidden):
    generator = torch.Generator().manual_seed(seed)
    features, steps = (6, 8) if hidden else (4, 5)
    w0 = torch.randn(features, generator=generator)
    x = torch.randn(16, features, generator=generator)
    y = x @ torch.randn(features, generator=generator)
    return w0, x, y, 0.1, steps


def _buggy_train(w0, x, y, lr, steps, zero_before_step=False):
    w = w0.detach().clone().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=lr)
    for _ in range(steps):
        loss = F.mse_loss(x @ w, y)
        loss.backward()
        if zero_before_step:
            optimizer.zero_grad()          # wrong place: step() then sees no gradient
        optimizer.step()
    return w.detach()


def _no_zero_grad(w0, x, y, lr, steps):
    return _buggy_train(w0, x, y, lr, steps)


def _zero_grad_before_step(w0, x, y, lr, steps):
    return _buggy_train(w0, x, y, lr, steps, zero_before_step=True)


def _accumulates_across_steps(student, reference, args):
    return torch.allclose(student, _no_zero_grad(*args), atol=1e-6)


def _never_moves(student, reference, args):
    return torch.equal(student, args[0]) and not torch.equal(reference, args[0])


register(Exercise(
    id="03.train",
    title="Find the bug in a loop that accumulates across steps",
    answer_name="train",
    reference=train,
    inputs=_train_inputs,
    hints=(
        "Print w.grad at the start of each step of the given loop: what is in it at step 2?",
        "Gradients add up in .grad across backward calls; something must clear them once per step.",
        "Call optimizer.zero_grad() at the start of every step, before loss.backward().",
    ),
    misconceptions=(
        Misconception(
            "accumulated_across_steps",
            "Your weights match the original loop: .grad is never cleared, so every step applies "
            "the sum of all gradients so far. Call optimizer.zero_grad() once per step.",
            _accumulates_across_steps),
        Misconception(
            "zeroed_before_step",
            "Your weights never moved: zero_grad() ran between backward() and step(), so step() "
            "found no gradient. Clear the gradients before backward(), not after it.",
            _never_moves),
    ),
    wrong_answers=(
        WrongAnswer(_no_zero_grad, expect="accumulated_across_steps", note="the loop as given"),
        WrongAnswer(_zero_grad_before_step, expect="zeroed_before_step"),
    ),
))
