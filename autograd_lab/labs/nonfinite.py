"""Small expressions whose backward pass may turn a gradient into inf or NaN, kept as plain data.

``Expression("scale", "square", "sum", "sqrt")`` is ``f(x) = sqrt(sum((3 x)^2))``: a
callable made of named steps.  Being data (a tuple of names), it pickles by value, so
notebook 07's exercise can ship such functions as public inputs in a student build,
and a checker can rebuild one from its ``repr``.  Each step is one ordinary torch op,
so the backward nodes are the ones a student meets in real models.
"""

import re

import torch

STEPS = {
    "scale": lambda t: t * 3.0,                                          # MulBackward0
    "shift": lambda t: t + 0.5,                                          # AddBackward0
    "square": lambda t: t ** 2,                                          # PowBackward0
    "sum": lambda t: t.sum(),                                            # SumBackward0
    "mean": lambda t: t.mean(),                                          # MeanBackward0
    "sqrt": torch.sqrt,                                                  # SqrtBackward0: inf slope at 0
    "log": torch.log,                                                    # LogBackward0: 1/x at 0
    "tanh": torch.tanh,                                                  # TanhBackward0
    "exp": torch.exp,                                                    # ExpBackward0
    "ratio": lambda t: t / t,                                            # DivBackward0: 0/0
    "x_log_x": lambda t: t * torch.log(t),                               # MulBackward0 and LogBackward0
    "safe_sqrt": lambda t: torch.where(t > 0, torch.sqrt(t), torch.zeros_like(t)),   # WhereBackward0
}


class Expression:
    """``f(x)``: the named ``STEPS`` applied in order; its ``repr`` names them, and ``parse`` reads it back."""

    def __init__(self, *steps):
        unknown = [step for step in steps if step not in STEPS]
        if unknown or not steps:
            raise ValueError(f"unknown steps {unknown}; known: {sorted(STEPS)}")
        self.steps = tuple(steps)

    def __call__(self, x):
        for step in self.steps:
            x = STEPS[step](x)
        return x

    def __repr__(self):
        return f"Expression({', '.join(map(repr, self.steps))})"

    def __eq__(self, other):
        return isinstance(other, Expression) and other.steps == self.steps

    def __hash__(self):
        return hash(self.steps)

    @classmethod
    def parse(cls, text):
        """The expression a ``repr`` describes (``None`` for any other text)."""
        match = re.fullmatch(r"Expression\(((?:'\w+'(?:, )?)+)\)", str(text))
        return cls(*re.findall(r"'(\w+)'", match.group(1))) if match else None
