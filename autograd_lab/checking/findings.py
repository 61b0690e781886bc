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
