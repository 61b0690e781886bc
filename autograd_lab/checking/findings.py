"""What went wrong in a failed case: a misconception tag and a message, and the built-in messages."""

from dataclasses import dataclass

MESSAGES = {
    "none": ("{where} is None, but a tensor was expected. Usual causes: the path to it was "
             "detached (.detach(), .item(), torch.tensor(...), torch.no_grad()), you read .grad "
             "of a non-leaf tensor, or a retain_grad() is missing."),
    "all_zeros": ("{where} is all zeros, but the expected one is not. Usual causes: it was "
                  "computed under torch.no_grad(), or the gradient was zeroed after backward "
                  "instead of before."),
    "doubled": ("{where} is twice the expected one, element by element. Usual causes: backward ran twice, or "
                ".grad was not zeroed between steps (gradients accumulate)."),
    "sign_flipped": ("{where} has the right size but the opposite sign. Usual causes: a sign "
                     "error such as a - b instead of b - a, or a step up the gradient instead of down."),
    "scaled": ("{where} is {factor:.4g} times the expected one. A factor near a whole number N "
               "or 1/N usually means a sum instead of a mean (or the reverse), or a missing or "
               "extra division by the batch size or the number of accumulation steps."),
}


@dataclass(frozen=True)
class Finding:
    """Why a case failed: a misconception tag and a message for the student."""

    tag: str
    message: str


# What usually causes an error autograd raises, said once for every exercise.  An exercise
# adds its own causes with a ``Misconception`` whose detector reads ``student_run.error``.
ERROR_ADVICE = (
    ("does not require grad and does not have a grad_fn",
     "Usual cause: nothing on the path to the tensor you called `backward()` on requires grad: a "
     "`requires_grad_()` is missing on your leaf, or the value was computed under `torch.no_grad()` or "
     "from a detached copy."),
    ("backward through the graph a second time",
     "Usual cause: a second `backward()` through a graph whose saved tensors the first one freed: "
     "build the graph again, or pass `retain_graph=True` to the first call."),
    ("modified by an inplace operation",
     "Usual cause: an in-place op overwrote a tensor that autograd saved for the backward pass: compute "
     "it out of place, or modify a `clone()`."),
    ("leaf Variable that requires grad is being used in an in-place operation",
     "Usual cause: an in-place update of a leaf while autograd records: wrap the update in "
     "`with torch.no_grad():`."),
    ("grad can be implicitly created only for scalar outputs",
     "Usual cause: `backward()` without an argument needs a scalar: reduce the output (`.sum()`), or pass "
     "the cotangent as `gradient=`."),
    ("appears to not have been used in the graph",
     "Usual cause: one of the tensors you asked a gradient for is not on the path to the output."),
    ("Can't call numpy() on Tensor that requires grad",
     "Usual cause: a tensor in the graph was handed to NumPy: call `.detach()` first, or stay in torch."),
    ("'NoneType'",
     "Usual cause, when that `None` is a `.grad`: a tensor that took no part in the loss got no gradient "
     "(`None`, not zeros); an update skips it, as `torch.optim` does."),
)


def error_advice(message):
    """`` Usual cause: ...`` for an error autograd raises, or ``""``."""
    for phrase, advice in ERROR_ADVICE:
        if phrase in message:
            return " " + advice
    return ""
