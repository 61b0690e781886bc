"""Methods an exercise requires or forbids, judged on the facts recorded while the answer ran.

``Exercise(..., method=uses_autograd())`` makes ``check`` (and the batch grader)
fail an answer that gets the right value the wrong way, with a message that
names the method.  A ``Method`` is a name, a predicate on the recorded facts
(``facts.FACTS``: ``engine_runs``, ``silent_writes``, ``tiny_backwards``, ``largest_numel``) and the
message shown when the predicate is false.  The ready-made ones below cover the
course; write another by giving the three fields.
"""

import inspect
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Method:
    """A required or forbidden method.

    ``name``: what the prompt asks for ("autograd", "no .data").  ``holds(facts)``:
    True when the answer kept to it; ``holds(facts, args)`` also receives the
    case's arguments (as recorded before the call), for a count that depends on
    them.  ``message``: the feedback when it did not;
    it should say what the answer did.  ``tag``: the misconception tag of a
    failure (the bank's ``WrongAnswer.expect``).  ``sizes``: the predicate reads
    ``largest_numel``, which is recorded only when some method asks for it.
    """

    name: str
    holds: Callable[[dict], bool]
    message: str
    tag: str = "method"
    sizes: bool = False

    def kept(self, facts, args):
        """``holds`` called with the arguments it declares."""
        if len(inspect.signature(self.holds).parameters) >= 2:
            return bool(self.holds(facts, args))
        return bool(self.holds(facts))

    def feedback(self):
        return f"This exercise asks for {self.name}: {self.message}"


def uses_autograd():
    """The result must come out of autograd: at least one backward pass (``backward`` or ``autograd.grad``)."""
    return Method(
        name="autograd",
        holds=lambda facts: facts["engine_runs"] >= 1,
        message=("your answer computed the result without calling `backward()` or `torch.autograd.grad`, "
                 "so it is a formula typed by hand, not a gradient taken by autograd."),
        tag="typed_formula")


def backward_calls(n, *, name=None):
    """Exactly ``n`` backward passes; ``n`` may be a function of the case's arguments.

    ``backward_calls(1)``; ``backward_calls(lambda x, k: k, name="one backward pass per
    micro-batch")`` for an answer called as ``answer(x, k)``.
    """
    # The predicate's only free variable is ``n``: the release rebuilds a ready-made method
    # from its factory and closure (release.method_data).
    wanted = "" if callable(n) else f" ({n})"
    default = (f"exactly {n} backward pass{'es' if n != 1 else ''}" if not callable(n)
               else "one backward pass per step the prompt names")
    return Method(
        name=name or default,
        holds=lambda facts, args: facts["engine_runs"] == (n(*args) if callable(n) else n),
        message=("your answer ran a different number of backward passes "
                 f"(`backward()` or `torch.autograd.grad` calls) than the prompt asks for{wanted}."),
        tag="backward_calls")


def no_distributed_sampler():
    """The sharding is written by hand: no ``DistributedSampler`` may be built to compute it."""
    return Method(
        name="sharding written by hand (no `DistributedSampler`)",
        holds=lambda facts: facts.get("samplers_built", 0) == 0,
        message=("your answer built a `DistributedSampler` and read its indices; the exercise asks you to "
                 "compute them yourself, from the padding and the interleaving measured above."),
        tag="used_sampler")


def no_grad_scaler():
    """The scaler's rule is written by hand: no ``GradScaler`` may be built to compute it."""
    return Method(
        name="the update rule written by hand (no `GradScaler`)",
        holds=lambda facts: facts.get("scalers_built", 0) == 0,
        message=("your answer built a `GradScaler` and read its scales; the exercise asks you to write its "
                 "update rule yourself, from the skip-and-halve and grow-after-clean-steps behaviour measured above."),
        tag="used_grad_scaler")


def no_data_attribute():
    """No write through ``.data``: a tensor argument must not change behind autograd's back."""
    return Method(
        name="updates autograd can see (no `.data`)",
        holds=lambda facts: facts["silent_writes"] == 0,
        message=("your answer changed a tensor without moving its version counter, which is what a write "
                 "through `.data` does; autograd cannot see such a write. Update it in place under "
                 "`torch.no_grad()` instead."),
        tag="data_write")


def no_jacobian(max_numel=None):
    """No Jacobian-sized tensor: none with more than ``max_numel`` elements.

    ``max_numel=None``: less than n * n, where n is the size of the largest tensor
    argument (the Jacobian of a map from n numbers to n numbers has n * n).
    """
    def holds(facts):
        n = facts["largest_input_numel"]
        limit = max_numel if max_numel is not None else (n * n - 1 if n > 1 else float("inf"))
        return facts["largest_numel"] <= limit
    size = f"more than {max_numel} elements" if max_numel is not None else "as many elements as a full Jacobian"
    return Method(
        name="a vector-Jacobian product without building the Jacobian",
        holds=holds,
        message=(f"your answer built a tensor with {size}; compute the product with "
                 "`backward(v)` or `torch.autograd.grad(..., v)`, which never builds the Jacobian."),
        tag="jacobian", sizes=True)


def tiny_engine_op(op):
    """The result comes out of the tiny engine, through a node of the answer's own labelled ``op``.

    For every element of the tensor arguments, the tiny engine's ``Value.backward`` ran the
    ``_backward`` of a distinct ``Value`` labelled ``op`` (``Value(t, (a,), op)``): a
    derivative typed as a formula, or taken from a torch function, runs none.
    """
    # The predicate's only free variable is ``op``: the release rebuilds it from this factory.
    return Method(
        name=f"the tiny engine's backward pass through your `{op}` node",
        holds=lambda facts, args: facts["tiny_backwards"].get(op, 0) >= _elements(args),
        message=(f"your answer did not run the tiny engine's `backward()` through a `Value` labelled "
                 f"`'{op}'` for each input, so its numbers came from somewhere else (a formula typed in, or "
                 f"a torch function), not from the engine. Build `out = Value(t, (a,), '{op}')` with its "
                 "`_backward` closure, and call `.backward()` on the tiny engine's result for each input."),
        tag="typed_formula")


def _elements(args):
    """How many numbers the tensor arguments hold together."""
    return sum(arg.numel() for arg in args if hasattr(arg, "numel"))


def broken(methods, facts, args=()):
    """The first method in ``methods`` that ``facts`` break, or ``None``."""
    for method in methods:
        if not method.kept(facts, args):
            return method
    return None
