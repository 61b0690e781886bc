"""Call an answer on one case and record what came back.

``observe`` never compares anything: the batch grader observes the student in
the student's kernel and judges in its own process, where the student's code
cannot reach the comparison.  Everything that can go wrong in the answer (not
attempted, an exception, a timeout) is written into the record, never raised.
"""

import contextlib
import functools
import inspect
import os

import torch

from . import untouched
from .facts import grad_phase_points, stepped, watch, with_complex_points
from .methods import watch_specs
from .tape import Tape
from .hermetic import TimedOut, deadline, isolated
from .origin import first_paragraph, student_frame, where
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
    record["touched"] = []
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
    before, elsewhere = untouched.snapshot(args), untouched.Elsewhere()
    # The tensors the case handed over, taken before the call: an answer that empties an argument's list
    # (`pop`) must not make the checker's own backward fail and be reported as the student's error
    # (adversarial round 7, 03-2); the emptied list is judged as a changed argument instead.
    handed_over = flat_tensors(args)
    try:
        with deadline(timeout) as timer:
            output = _call(record, exercise, answer, function, args, elsewhere)
            record["touched"] = untouched.changes(before) + elsewhere.found
            if "grad" in exercise.compare or _needs_grad_phase(exercise):
                grads = _grad_phase(record, exercise, answer, output, handed_over, seed)
                if "grad" in exercise.compare:
                    record.update(grads)
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


def _call(record, exercise, answer, function, args, elsewhere):
    """``function(*args)``; for an exercise with a ``method``, the tape's facts go into ``record["facts"]``.

    An exercise with ``call`` has the answer called through that function instead
    (``08.no_sync_loop``: on real ranks, ``labs/ddp_check.py``); a caller that gives the
    answer copies of the arguments elsewhere takes ``watch_arguments`` and reports to
    ``elsewhere`` what the answer changed there (``untouched.Elsewhere``).
    """
    via = exercise.caller()
    if via is not None:
        watching = {"watch_arguments": elsewhere} if "watch_arguments" in inspect.signature(via).parameters else {}
        function = functools.partial(via, function, **watching)
    if not exercise.method:
        return function(*args)
    with watch(flat_tensors(args), watchlist=watch_specs(exercise.method), answer=answer) as watched:
        output = function(*args)
        watched.returned(output)
    record["facts"] = watched.facts
    return output


def _needs_grad_phase(exercise):
    return any(method.grad_phase for method in exercise.method)


def _grad_phase(record, exercise, answer, output, args, seed):
    """The input gradients; for a method that asks, the tape of that backward in ``facts["grad_phase"]``."""
    if not _needs_grad_phase(exercise):
        return _input_grads(output, args, seed)
    own = answer if isinstance(answer, type) and issubclass(answer, torch.autograd.Function) else None
    # The method's code specs are watched here too: a backward may call what the method bans (``torch._decomp``).
    specs = tuple(spec for spec in watch_specs(exercise.method) if spec.startswith(("code:", "op:", "args:", "held:")))
    points = grad_phase_points(specs, answer)     # where a numerical derivative would evaluate (``facts._Points``)
    tape = Tape(specs, own=own)
    tape.points = points
    with (points if points is not None else contextlib.nullcontext()), tape:
        grads = _input_grads(output, args, seed)
    record["facts"]["grad_phase"] = {key: value for key, value in tape.facts().items()
                                     if key in ("engine_runs", "nested_engine_runs", "backward_ops",
                                                "own_backward_ops", "own_library_derivatives", "library_derivatives",
                                                "escapes", "other_threads", "tape_intact", "ran", "forward_ad", "complex_outputs", "exact_arithmetic",
                                                "complex_values", "complex_code", "own_arithmetic", "small_steps")}
    record["facts"]["grad_phase"]["complex_values"] = with_complex_points(record["facts"]["grad_phase"]["complex_values"],
                                                                          points)
    record["facts"]["grad_phase"]["stepped_points"] = (
        stepped(points, flat_tensors(args) + flat_tensors(output)) if points is not None else 0)
    record["facts"]["grad_phase"]["ctx_tensors"] = _ctx_tensors(output, own)
    return grads


def _ctx_tensors(output, own):
    """Tensors the Function's ``ctx`` holds as attributes (``ctx.x = x``), not through ``save_for_backward``."""
    found = 0
    for tensor in flat_tensors(output):
        ctx = tensor.grad_fn
        if own is None or getattr(ctx, "_forward_cls", None) is not own:
            continue
        for value in vars(ctx).values():
            found += len(flat_tensors(value))
    return found


def _record_error(record, error):
    record["status"] = "error"
    record["error"] = describe_error(error)


def describe_error(error):
    """``Type: message (in `f`, line 4: `code`)``, and the error it was raised while handling.

    The line is the student's own (``origin``), never one inside torch: an ``IndexError``
    raised while handling autograd's ``RuntimeError`` names both, since the first is
    usually the cause.
    """
    text = _one_error(error)
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    if cause is not None and cause is not error:
        text += f"; raised while handling {_one_error(cause)}"
    return clean_text(text, limit=600)


def _one_error(error):
    text = f"{type(error).__name__}: {first_paragraph(error)}".rstrip(": ")
    frame = student_frame(error.__traceback__)
    return text + (where(*frame) if frame else "")


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
