"""The grader's code inside the student's kernel (students never call this).

After the notebook has run, the grader asks the kernel, one exercise at a time,
to ``emit`` the records of the student's answer on the seeds it chooses (public
and hidden).  The records travel back as display data of a MIME type of our own,
answering the grader's own execute request: what the notebook printed, and what
its own ``check`` calls said, are never read.

Everything here runs next to student code, so nothing here is trusted: the
grader deserialises the bytes with ``torch.load(weights_only=True)`` and judges
them against references computed in its own process.  A student who tampers
with this module can only change what their own answers appear to return.
"""

import base64
import copy
import io

MIME = "application/vnd.autograd-lab.records+base64"
_MISSING = object()
_snapshots = {}


def _user_namespace():
    from IPython import get_ipython
    return get_ipython().user_ns


def snapshot(names):
    """Keep the current value of each answer name, right after a cell that defines it.

    A later cell that reuses the name (``for needs_grad in ...``) then cannot
    change the graded answer, but a later cell that defines it again does.
    """
    namespace = _user_namespace()
    for name in names:
        if name not in namespace:
            continue
        try:
            _snapshots[name] = copy.deepcopy(namespace[name])
        except Exception:  # functions, non-leaf tensors: keep the object itself
            _snapshots[name] = namespace[name]


def _stub(*args, **kwargs):
    raise NotImplementedError  # the answer was never defined: observed as "not attempted"


def _answer(exercise):
    if exercise.answer_name in _snapshots:
        return _snapshots[exercise.answer_name]
    answer = _user_namespace().get(exercise.answer_name, _MISSING)
    if answer is _MISSING:
        return Ellipsis if exercise.kind == "value" else _stub
    return answer


def emit(exercise_id, seeds, timeout):
    """Display the saved records ``{seed: observe(...)}`` of the student's answer."""
    import torch
    from IPython.display import publish_display_data

    from autograd_lab.exercises import get, observe

    exercise = get(exercise_id)
    answer = _answer(exercise)
    records, last = {}, None
    for seed in seeds:
        if last is not None and last["status"] == "timed out":
            last = dict(last, seed=int(seed))  # one endless loop is enough to wait for
        else:
            last = observe(exercise, answer, seed, timeout=timeout)
        records[int(seed)] = last
    buffer = io.BytesIO()
    torch.save(records, buffer)
    publish_display_data({MIME: base64.b64encode(buffer.getvalue()).decode("ascii")})
