"""02.mlp_backward: the chain rule written one example (or one unit) at a time passes, public and hidden
(adversarial round 4, A4: a matrix-product budget of 16 refused it)."""

import pytest
import torch

from autograd_lab.checking import all_exercises, judge, observe

TIMEOUT = 60.0


def _per_example(X, W1, b1, W2, b2, G_Z):
    """One forward pass, then the chain rule example by example (adv-00-04-r3 A4)."""
    H = torch.tanh(X @ W1 + b1)
    gW1, gb1, gW2, gb2 = (torch.zeros_like(t) for t in (W1, b1, W2, b2))
    for i in range(X.shape[0]):
        x_i, h_i, g_i = X[i:i + 1], H[i:i + 1], G_Z[i:i + 1]
        gW2 += h_i.T @ g_i
        gb2 += g_i[0]
        ga_i = (g_i @ W2.T) * (1 - h_i ** 2)
        gW1 += x_i.T @ ga_i
        gb1 += ga_i[0]
    return {"W1": gW1, "b1": gb1, "W2": gW2, "b2": gb2}


def _forward_in_the_loop(X, W1, b1, W2, b2, G_Z):
    """Forward and backward per example: tanh runs once per row (9 on a hidden case)."""
    gW1, gb1, gW2, gb2 = (torch.zeros_like(t) for t in (W1, b1, W2, b2))
    for x, g in zip(X, G_Z):
        h = torch.tanh(x @ W1 + b1)
        gW2 += torch.outer(h, g)
        gb2 += g
        ga = (W2 @ g) * (1 - h * h)
        gW1 += torch.outer(x, ga)
        gb1 += ga
    return {"W1": gW1, "b1": gb1, "W2": gW2, "b2": gb2}


def _per_unit(X, W1, b1, W2, b2, G_Z):
    """Each example, each hidden unit: the slowest chain rule measured (about 7 forward passes' work)."""
    gW1, gb1, gW2, gb2 = (torch.zeros_like(t) for t in (W1, b1, W2, b2))
    for i in range(X.shape[0]):
        h = torch.tanh(X[i] @ W1 + b1)
        gb2 += G_Z[i]
        for j in range(W1.shape[1]):
            gW2[j] += h[j] * G_Z[i]
            ga = (W2[j] * G_Z[i]).sum() * (1 - h[j] ** 2)
            gW1[:, j] += X[i] * ga
            gb1[j] += ga
    return {"W1": gW1, "b1": gb1, "W2": gW2, "b2": gb2}


@pytest.mark.parametrize("answer", [_per_example, _forward_in_the_loop, _per_unit],
                         ids=["per_example", "forward_in_the_loop", "per_unit"])
def test_the_chain_rule_one_example_at_a_time_passes_public_and_hidden(answer):
    exercise = next(e for e in all_exercises() if e.id == "02.mlp_backward")
    seeds = exercise.public_seeds + exercise.hidden_seeds
    student = {seed: observe(exercise, answer, seed, timeout=TIMEOUT) for seed in seeds}
    reference = {seed: observe(exercise, exercise.reference, seed, timeout=TIMEOUT) for seed in seeds}
    public = exercise.public_seeds
    full = judge(exercise, student, reference)
    shown = judge(exercise, {s: student[s] for s in public}, {s: reference[s] for s in public})
    assert full.status == "passed" and shown.status == "passed", (full, shown)
