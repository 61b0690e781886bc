"""Notebook 04's helpers: run a step and show what it raised, what a node saved, and what the version error names.

A prediction's answer cell should show the outcome, not announce it: ``attempt`` runs one
step and prints what happened (the error's type and message, or that it ran), and the
next cell asserts it with ``expect_error(...)`` around ``outcome.reraise()``, so the
lesson still fails loudly if PyTorch stops raising.  The version error names a tensor's
producer differently across releases (``versions.py``, ``version_error_names``):
``names_producer`` and ``producer_names`` keep that out of the notebook's cells.
"""

import torch

from autograd_lab import versions
from autograd_lab.labs.errors import _clean


class Outcome:
    """What one step did: ``error`` (the exception, or ``None``) and ``message`` (its cleaned text)."""

    def __init__(self, error):
        self.error = error
        self.message = None if error is None else _clean(error, 2)

    @property
    def raised(self):
        return self.error is not None

    def reraise(self):
        """Raise the step's error again (inside ``expect_error``), or do nothing if it ran."""
        if self.error is not None:
            raise self.error


def attempt(step):
    """Run ``step()``; print ``raised <Type>: <message>`` or ``ran without an error``; return the ``Outcome``."""
    try:
        step()
    except Exception as error:  # noqa: BLE001 - the lesson is whatever it raised
        outcome = Outcome(error)
        print(f"raised {type(error).__name__}: {outcome.message}")
        return outcome
    print("ran without an error")
    return Outcome(None)


def saved_names(node):
    """The tensors an autograd node saved for backward, by name without the ``_saved_`` prefix."""
    return sorted(name[len("_saved_"):] for name in dir(node)
                  if name.startswith("_saved_") and isinstance(getattr(node, name), torch.Tensor))


def names_producer(message, op):
    """Whether the version error ``message`` names ``op`` ("Sigmoid") as the saved tensor's producer.

    Torch writes ``output 0 of Sigmoid,`` from 2.13.0 and ``output 0 of SigmoidBackward0,``
    before: the installed release's spelling is the one that must appear.
    """
    return f"output 0 of {versions.behaviour('version_error_names').value.format(op=op)}," in message


def names_no_producer(message):
    """Whether the version error ``message`` names no producer at all (a leaf's does not)."""
    return "output 0 of" not in message


def producer_names():
    """One line per release: how the version error spells the producer's name."""
    print(versions.behaviour("version_error_names").explain())


def notebook_lines(traceback_text):
    """The code lines of a traceback (anomaly mode's warning) that come from the notebook itself.

    A frame is the notebook's when its file is not inside an installed package, the
    standard library or a frozen module: what is left is the code the student wrote.
    """
    lines = str(traceback_text).splitlines()
    return [code.strip() for where, code in zip(lines, lines[1:])
            if where.lstrip().startswith("File") and not code.lstrip().startswith("File")
            and not any(other in where for other in ("site-packages", "/lib/python", "<frozen"))]


def step_in_grad_mode(step, params, lr, weight_decay, grad_enabled):
    """Call ``step(params, lr, weight_decay)`` with grad mode set to ``grad_enabled`` (04.sgd_step's check).

    The grad mode is not restored afterwards: the check reads the mode the step left behind,
    so a step that forces grad mode on when it was called with it off is seen.
    """
    torch.set_grad_enabled(grad_enabled)
    return step(params, lr, weight_decay)
