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


def saved_bytes_graph_holds(forward, exclude=()):
    """Run ``forward()``; return its result and the bytes of what it saved that its graph still holds.

    Each tensor saved while ``forward`` runs is kept as an alias that only the graph holds, followed
    by a weak reference (saved-tensor hooks, the mechanism ``labs.memory.saved_tensors`` measures
    with): the alias dies with the graph, so a saved storage counts while the graph still holds it.
    Whatever else holds the same storage (the input batch, a forward hook's copy) is not seen: this
    measures the graph, not the storage's other owners (audit 04-r5 item 1).
    ``exclude``: tensors not to count (the parameters).
    """
    import weakref

    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    refs = []

    def pack(tensor):
        packed = tensor.detach()   # an alias only the graph holds (the tensor itself would make a cycle with its node)
        if packed.untyped_storage().data_ptr() not in excluded:
            refs.append((weakref.ref(packed), packed.untyped_storage().nbytes(), packed.untyped_storage().data_ptr()))
        return packed

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = forward()
    alive = {pointer: nbytes for ref, nbytes, pointer in refs if ref() is not None}
    return result, sum(alive.values())


class NotAutogradsDerivative(Exception):
    """04.squash's check: the answer's gradient does not change with x as autograd's own derivative would."""


class InPlaceWriteBehindDetach(Exception):
    """04.squash's check: with its ``detach()`` calls kept in the graph, the answer raises the version error."""


def squash_with_second_derivative(squash, x, step=1e-5):
    """``squash(x)``, after checking that a right gradient is autograd's derivative of the values (04.squash).

    The gradient of a squash computed in the graph changes with ``x`` as autograd's second
    derivative, taken through it, says. A derivative typed by hand and added as a constant
    matches the values' change (a central difference, float64) but has no second derivative
    (autograd sees a constant factor): then this raises ``NotAutogradsDerivative``. Only then:
    a gradient that is already wrong, or an answer that raises, is judged as before, by the
    output of the first call. Elementwise: the sum's gradient is the derivative.
    """
    output = squash(x)
    try:
        first_right, second_right, worst = _derivatives_agree(squash, x, step)
    except Exception:   # the answer's own error or wrong gradient is reported from its first call
        return output
    if _version_error_behind_detach(squash, x):
        raise InPlaceWriteBehindDetach(
            "your squash still writes in place into a tensor autograd needs: with its `detach()` calls kept in the "
            "graph, backward raises the in-place (version) error. Values computed from a detached copy, with a "
            "differentiable squash added straight-through for the gradient, hide the broken code instead of fixing "
            "it; fix the write itself and return values the graph computes.")
    if first_right and not second_right:
        raise NotAutogradsDerivative(
            "your squash's gradient is not autograd's derivative of its values: the second derivative autograd "
            f"takes through your gradient differs from how that gradient changes with x (by up to {worst:.3g}). "
            "A derivative typed by hand, added to values computed out of autograd's sight, does that; compute the "
            "values in the graph and let autograd differentiate them.")
    return output


class _DetachKept(torch.overrides.TorchFunctionMode):
    """``detach()`` (method, function, in place) returns a view that stays in the graph."""

    _DETACHES = (torch.Tensor.detach, torch.detach, torch.Tensor.detach_)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self._DETACHES:
            return args[0] if func is torch.Tensor.detach_ else args[0].view_as(args[0])
        return func(*args, **(kwargs or {}))


def _version_error_behind_detach(squash, x):
    """Whether ``squash``, run with ``detach()`` kept in the graph, raises the version error in backward.

    Adversarial round 3, E1: the broken code's values from ``x.detach()``, and a right squash
    added straight-through (``right - right.detach()``), pass values and both derivatives.
    Kept in the graph, the detached copy is ``x`` again, so the write into what sigmoid saved
    is seen; a right answer that calls ``detach()`` does not write into a saved tensor.
    """
    leaf = x.detach().clone().requires_grad_()
    try:
        with _DetachKept():
            output = squash(leaf)
        output.sum().backward()
    except RuntimeError as error:
        return "modified by an inplace operation" in str(error)
    except Exception:   # noqa: BLE001 - anything else is judged from the answer's own run
        return False
    return False


def _derivatives_agree(squash, x, step):
    """(first derivative matches the values' change, second matches the first's change, worst second gap)."""
    def first_at(shift, create_graph=False):
        leaf = (x.detach() + shift).requires_grad_()
        return leaf, torch.autograd.grad(squash(leaf).sum(), leaf, create_graph=create_graph)[0]

    def values_at(shift):
        return squash(x.detach() + shift)

    leaf, first = first_at(0.0, create_graph=True)
    second = torch.autograd.grad(first.sum(), leaf)[0] if first.requires_grad else torch.zeros_like(leaf)
    values_change = (values_at(step) - values_at(-step)) / (2 * step)
    first_change = (first_at(step)[1] - first_at(-step)[1]) / (2 * step)
    worst = (second - first_change).abs().max().item()
    return (torch.allclose(first.detach(), values_change.detach(), rtol=1e-4, atol=1e-6),
            torch.allclose(second, first_change, rtol=1e-4, atol=1e-6), worst)
