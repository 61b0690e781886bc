"""The grader's code inside the student's kernel (students never call this).

After the notebook has run, the grader asks the kernel, one exercise at a time,
to ``emit`` the records of the student's answer on the cases it chooses.  The
inputs come inside the request itself (base64 of ``portable`` bytes): nothing is
written to or read from a file the student could have replaced.  The kernel
rebuilds them (graphs replayed, functions from source), sends back a
fingerprint of what it rebuilt so the grader can check they arrived intact, and
the records, as display data of a MIME type of our own, answering the grader's
own execute request: what the notebook printed, and what its own ``check``
calls said, are never read.

Each call of the answer has ``timeout`` seconds of this process's CPU time
(``hermetic.deadline``, as ``check()`` gives it), not of the wall clock, so a busy
machine does not make an honest answer time out.

Everything here runs next to student code, so nothing here is trusted: the
grader deserialises the bytes with ``torch.load(weights_only=True)`` and judges
them against references computed in its own process.  A student who tampers
with this module can only change what their own answers appear to return.
"""

import base64
import copy
import io
import pickle
from collections.abc import Mapping

MIME = "application/vnd.autograd-lab.records+base64"
_MISSING = object()
_snapshots = {}
_seen = {}


def _user_namespace():
    from IPython import get_ipython
    return get_ipython().user_ns


def snapshot(names):
    """Keep the value of each answer name whose object changed in the cell just run.

    Copied at once, so a later in-place change (or a running thread) cannot alter
    what this cell left; a later cell that binds the name again replaces it, as in
    a top-to-bottom run.
    """
    namespace = _user_namespace()
    for name in names:
        if name not in namespace or _seen.get(name) is namespace[name]:
            continue
        _seen[name] = namespace[name]
        try:
            _snapshots[name] = copy.deepcopy(namespace[name])
        except Exception:  # functions, non-leaf tensors: keep the object itself
            _snapshots[name] = namespace[name]


def reap():
    """Collect the exit status of the kernel's children the grader killed after a timeout (no zombies left
    holding the sandbox's task limit)."""
    import os

    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _stub(*args, **kwargs):
    raise NotImplementedError  # the answer was never defined: observed as "not attempted"


def _answer(exercise):
    if exercise.answer_name in _snapshots:
        return _snapshots[exercise.answer_name]
    answer = _user_namespace().get(exercise.answer_name, _MISSING)
    if answer is _MISSING:
        return Ellipsis if exercise.kind == "value" else _stub
    return answer


class Inputs(Mapping):
    """``{seed: args}`` rebuilt fresh from the grader's bytes on every lookup (an answer may change its arguments)."""

    def __init__(self, packed):
        self.packed = packed          # seed -> portable bytes of {"args", "grads"}

    def __getitem__(self, seed):
        from autograd_lab.checking.observe import flat_tensors

        from . import portable

        entry = portable.unpack(self.packed[int(seed)])
        for tensor, grad in zip(flat_tensors(entry["args"]), entry["grads"]):
            if grad is not None:
                tensor.grad = grad
        return entry["args"]

    def __iter__(self):
        return iter(self.packed)

    def __len__(self):
        return len(self.packed)


def emit(exercise_id, seeds, timeout, inputs=None, hidden_seeds=()):
    """Display the saved ``{"records": {seed: observe(...)}, "fingerprints": {seed: ...}}``.

    The kernel imports a student build: it knows the exercise's public data but
    no reference and no hidden seed.  ``inputs`` (base64) holds every input of
    ``seeds``, made by the grader; ``None`` for a value exercise.
    """
    import torch
    from IPython.display import publish_display_data

    from autograd_lab.checking import get
    from autograd_lab.checking.public import with_inputs

    from . import portable

    exercise = get(exercise_id)
    fingerprints = {}
    if inputs is not None:
        rebuilt = Inputs(pickle.loads(base64.b64decode(inputs)))   # the grader's own bytes
        fingerprints = {int(seed): portable.fingerprint(rebuilt[seed]) for seed in rebuilt}
        exercise = with_inputs(exercise, rebuilt, hidden_seeds)
    answer = _answer(exercise)
    records, last = {}, None
    for seed in seeds:
        if last is not None and last["status"] == "timed out":
            last = dict(last, seed=int(seed), hidden=exercise.is_hidden(seed))   # one endless loop is enough
        else:
            last = _observe(exercise, answer, seed, timeout)
        records[int(seed)] = last
    buffer = io.BytesIO()
    torch.save({"records": records, "fingerprints": fingerprints}, buffer)
    publish_display_data({MIME: base64.b64encode(buffer.getvalue()).decode("ascii")})


def _observe(exercise, answer, seed, timeout):
    from autograd_lab.checking import observe
    from autograd_lab.checking.hermetic import TimedOut, deadline

    try:
        with deadline(timeout) as timer:
            record = observe(exercise, answer, seed)
            timer.stop()
    except TimedOut:   # out of time outside the answer's own call: the same verdict
        record = observe(exercise, _out_of_time, seed)
    # A verdict is the grader's to make: send what gradcheck measures, not what it concluded.
    record.pop("gradcheck", None)
    if exercise.gradcheck and record["status"] == "ok":
        record["jacobians"] = jacobians(exercise, answer, seed, timeout)
    return record


def _out_of_time(*args, **kwargs):
    from autograd_lab.checking.hermetic import TimedOut
    raise TimedOut()


def jacobians(exercise, answer, seed, timeout, eps=1e-6):
    """The analytical and central-difference Jacobians of the answer's first output, in float64.

    What ``torch.autograd.gradcheck`` compares; the grader compares them
    (``scoring.gradcheck_verdict``), so the kernel never says "passed".
    """
    import torch

    from autograd_lab.checking.hermetic import TimedOut, deadline, isolated
    from autograd_lab.checking.observe import as_callable

    function = as_callable(answer)
    args = [a.detach().to(torch.float64).requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point()
            else a for a in exercise.inputs(seed, exercise.is_hidden(seed))]

    def first_output(*values):
        out = function(*values)
        return (out[0] if isinstance(out, (tuple, list)) else out).reshape(-1)

    try:
        with isolated(seed), deadline(timeout) as timer:
            analytical, numerical = [], []
            output = first_output(*args)
            for index, arg in enumerate(args):
                if not (isinstance(arg, torch.Tensor) and arg.requires_grad):
                    continue
                rows = [torch.autograd.grad(output[k], arg, retain_graph=True, allow_unused=True)[0]
                        for k in range(output.numel())]
                analytical.append(torch.stack([torch.zeros_like(arg) if r is None else r for r in rows])
                                  .reshape(output.numel(), -1).detach())
                columns = []
                flat = arg.detach().reshape(-1)
                for j in range(flat.numel()):
                    shifted = []
                    for sign in (1, -1):
                        moved = flat.clone()
                        moved[j] += sign * eps
                        values = list(args)
                        values[index] = moved.reshape(arg.shape)
                        with torch.no_grad():
                            shifted.append(first_output(*values).detach())
                    columns.append((shifted[0] - shifted[1]) / (2 * eps))
                numerical.append(torch.stack(columns, dim=1))
            timer.stop()
    except TimedOut:
        return {"error": "gradcheck timed out"}
    except (Exception, SystemExit) as error:
        return {"error": f"{type(error).__name__}: {str(error)[:200]}"}
    return {"analytical": analytical, "numerical": numerical}
