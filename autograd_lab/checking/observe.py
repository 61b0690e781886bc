"""Call an answer on one case and record what came back.

``observe`` never compares anything: the batch grader observes the student in
the student's kernel and judges in its own process, where the student's code
cannot reach the comparison.  Everything that can go wrong in the answer (not
attempted, an exception, a timeout) is written into the record, never raised.
"""

import os

import torch

from .facts import watch
from .hermetic import TimedOut, deadline, isolated
from .records import clean_text, encode, unique_capped

_TORCH_DIR = os.path.dirname(torch.__file__)
_COTANGENT_SEED_OFFSET = 1_000_003


# Every status a record can carry.  Anything else (a forged "passed") is not a record of ours.
RECORD_STATUSES = ("ok", "not attempted", "error", "timed out")

def observe(exercise, answer, seed, *, timeout=None):
    """The record of ``answer`` on the case ``seed`` of ``exercise`` (a plain dict).

    ``timeout`` is in seconds (``None``: no limit).  See ``docs/authoring-exercises.md``
    for what the record holds.
    """
    hidden = exercise.is_hidden(seed)
    record = {"exercise": exercise.id, "seed": int(seed), "hidden": hidden, "status": "ok",
              "error": None, "output": None, "inputs": [], "warnings": [], "grad_mode_after": True}
    if exercise.kind == "value":
        _observe_value(record, answer)
        return record
    args = tuple(exercise.inputs(seed, hidden))
    record["inputs"] = [encode(arg) for arg in args]
    with isolated(seed) as sandbox:
        _run_function(record, exercise, answer, args, seed, timeout)
    record["warnings"] = unique_capped(sandbox.warnings)   # linear: a flood of warnings costs one pass
    record["grad_mode_after"] = sandbox.grad_enabled_after
    if exercise.gradcheck and record["status"] == "ok":
        with isolated(seed) as sandbox:
            record["gradcheck"] = _gradcheck(exercise, answer, seed, hidden, timeout)
        record["warnings"] = unique_capped(record["warnings"] + sandbox.warnings)
    return record


def _observe_value(record, answer):
    if answer is Ellipsis:
        record["status"] = "not attempted"
    else:
        record["output"] = encode(answer)


def as_callable(answer):
    """``Function.apply`` for an ``autograd.Function`` subclass, else the answer itself."""
    if isinstance(answer, type) and issubclass(answer, torch.autograd.Function):
        return answer.apply
    return answer


def _run_function(record, exercise, answer, args, seed, timeout):
    function = as_callable(answer)
    if not callable(function):
        record["status"] = "error"
        record["error"] = (f"TypeError: expected a function named {exercise.answer_name}, "
                           f"got {type(answer).__name__}")
        return
    try:
        with deadline(timeout) as timer:
            output = _call(record, exercise, function, args)
            if "grad" in exercise.compare:
                record.update(_input_grads(output, args, seed))
            timer.stop()
    except TimedOut:
        record["status"] = "timed out"
        return
    except NotImplementedError as error:
        if _raised_by_stub(error):
            record["status"] = "not attempted"
        else:
            _record_error(record, error)
        return
    except (Exception, SystemExit) as error:  # SystemExit: a student's exit() must not end the check
        _record_error(record, error)
        return
    record["output"] = encode(output)
    if "args" in exercise.compare:
        record["args_after"] = [encode(arg) for arg in args]


def _call(record, exercise, function, args):
    """``function(*args)``; for an exercise with a ``method``, its facts go into ``record["facts"]``."""
    if not exercise.method:
        return function(*args)
    with watch(flat_tensors(args), sizes=any(m.sizes for m in exercise.method)) as watched:
        output = function(*args)
    record["facts"] = watched.facts
    return output


def _record_error(record, error):
    record["status"] = "error"
    record["error"] = f"{type(error).__name__}: {clean_text(error)}".rstrip(": ")


def _raised_by_stub(error):
    """The ``raise NotImplementedError`` of an unfilled stub, not one from deep inside torch."""
    traceback = error.__traceback__
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    return not traceback.tb_frame.f_code.co_filename.startswith(_TORCH_DIR)


def flat_tensors(value):
    """Every tensor inside nested tuples, lists, dicts and modules, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, torch.nn.Module):
        return list(value.parameters())
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flat_tensors(item)]
    return []


def _input_grads(output, args, seed):
    """Backpropagate a seeded random cotangent through the output; the inputs' gradients."""
    inputs = [t for t in flat_tensors(args) if t.requires_grad and t.is_leaf]
    outputs = [t for t in flat_tensors(output) if t.requires_grad]
    if not outputs:
        return {"input_grads": None, "grad_error": "the output does not require grad"}
    generator = torch.Generator().manual_seed(seed + _COTANGENT_SEED_OFFSET)
    cotangents = [torch.randn(t.shape, generator=generator, dtype=t.dtype).to(t.device) for t in outputs]
    grads = torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True)
    return {"input_grads": [None if g is None else encode(g) for g in grads], "grad_error": None}


def _gradcheck(exercise, answer, seed, hidden, timeout):
    """``torch.autograd.gradcheck`` in float64 (float32 gives false alarms) on fresh inputs."""
    args = tuple(_as_float64_leaf(arg) for arg in exercise.inputs(seed, hidden))
    try:
        with deadline(timeout) as timer:
            torch.autograd.gradcheck(as_callable(answer), args, raise_exception=True)
            timer.stop()
    except TimedOut:
        return {"passed": False, "message": "gradcheck timed out"}
    except (Exception, SystemExit) as error:
        return {"passed": False, "message": clean_text(f"{type(error).__name__}: {error}")}
    return {"passed": True, "message": ""}


def _as_float64_leaf(arg):
    if isinstance(arg, torch.Tensor) and arg.is_floating_point():
        return arg.detach().to(torch.float64).requires_grad_(True)
    return arg
