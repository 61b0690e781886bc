"""Inputs that vary what a shortcut depends on, seed by seed, so the public checks catch what the hidden ones do.

``check()`` must never say "passed" to an answer the grader fails
(``tests/test_exercise_bank.py`` proves it for every bank entry), so whatever a
shortcut could key on (a depth, a width, a name, the graph's shape, which
micro-batch) must already vary across the *public* seeds, not only between public
and hidden ones.  These helpers make that the easy way to write ``inputs``::

    def _inputs(seed, hidden):
        g = generator(seed)
        depth = choose(seed, (2, 3, 4), hidden=hidden, hidden_choices=(5, 6))
        model = renamed_sequential(seed, [nn.Linear(8, 8) for _ in range(depth)])
        ...

``spread`` checks it: the distinct values a property takes over the public seeds.
"""

import collections

import torch

_NAMES = ("block", "layer", "stage", "unit", "part", "step")


def generator(seed):
    """A ``torch.Generator`` seeded with ``seed``: every tensor of a case made from it."""
    return torch.Generator().manual_seed(int(seed))


def choose(seed, choices, *, hidden=False, hidden_choices=None):
    """``choices[seed % len(choices)]``: consecutive public seeds (0, 1, 2) take different choices.

    ``hidden_choices``: what hidden cases choose from instead (other depths, other sizes),
    so a hidden case is never a public one again.
    """
    pool = tuple(hidden_choices) if hidden and hidden_choices else tuple(choices)
    return pool[int(seed) % len(pool)]


def renamed_sequential(seed, modules):
    """An ``nn.Sequential`` whose children's names change with the seed (``block0``, ``stage0``, ...).

    An answer that looks its modules up by a name it saw in the notebook fails on the
    next public seed, not only when graded.
    """
    prefix = choose(seed, _NAMES)
    return torch.nn.Sequential(collections.OrderedDict((f"{prefix}{i}", m) for i, m in enumerate(modules)))


_OPS = (lambda a, b: a * b, lambda a, b: a + b, lambda a, b: a - b, lambda a, b: torch.tanh(a) * b,
        lambda a, b: a.exp() + b, lambda a, b: a.sigmoid() * b)


def random_graph(seed, *, leaves=3, depth=(2, 5), reuse=0.5, size=3):
    """A scalar whose autograd graph changes shape with the seed: depth, op mix, which values are reused.

    ``depth``: the range of the number of op layers; ``reuse``: the chance that a layer
    reads an older value again (a node reached along several paths).  Returns
    ``(output, leaves)``.  For exercises that walk or count the graph.
    """
    g = generator(seed)
    inputs = [torch.randn(size, generator=g).requires_grad_() for _ in range(leaves)]
    values = list(inputs)
    layers = int(torch.randint(depth[0], depth[1] + 1, (), generator=g))
    for _ in range(layers):
        pick = torch.randint(len(values), (2,), generator=g).tolist()
        op = _OPS[int(torch.randint(len(_OPS), (), generator=g))]
        new = op(values[pick[0]], values[pick[1]])
        if float(torch.rand((), generator=g)) < reuse:
            values.append(new)
        else:
            values = values[:leaves] + [new]
    return values[-1].sum(), inputs


def spread(exercise, describe):
    """The distinct values ``describe(*args)`` takes over the exercise's public seeds.

    ``assert len(spread(exercise, lambda model, x: len(model))) > 1`` proves the public
    checks already vary the depth.
    """
    return {describe(*exercise.inputs(seed, False)) for seed in exercise.public_seeds}
