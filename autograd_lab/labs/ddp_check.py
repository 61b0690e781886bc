"""Run an answer of 08.no_sync_loop on real gloo ranks and record, per rank, what DDP did.

The exercise's check calls the answer through ``on_ranks`` (its ``call``): the
answer travels to one process per rank (``shipping``: by value, so a function
written in a notebook works), each rank wraps its own copy of the model in DDP,
calls ``answer(model, its_micro_batches)``, and reports

* ``forward_rows``: the rows of each forward that ran through DDP's ``forward``,
  smallest first (the order the answer took its micro-batches in is its own choice);
* ``around_ddp``: the work that went around DDP: forwards of the wrapped module
  that did not run inside DDP's ``forward`` (``model.module(x)``: DDP never hears of
  them, so its reducer neither all-reduces nor waits for their gradients), plus the
  backward passes that reached the parameters without flowing through an output of
  DDP's forward (the parameters used by hand, a DDP forward run for show);
* ``sync_turned_off``: whether any forward or backward pass ran while DDP's
  synchronisation was off (``no_sync()``, or its flag set by hand);
* ``backward_passes``: how many backward passes reached the parameters;
* ``allreduced_after_forward``: for each all-reduce DDP ran, how many forwards had
  run through DDP by then (a communication hook records it, then averages as DDP does);
* ``grads``: each parameter's ``.grad`` at the end;

and, given ``watch_arguments`` (the check's ``untouched.Elsewhere``), what the answer changed
in its rank's copies of the model and of its micro-batches (``micro_batches.pop()``), in
the terms of the caller's arguments: the check fails an answer that changes its inputs.

Ranks that synchronised at the wrong time end with different gradients, which no
single process can show.  Every correct answer leaves the same record, whatever
order it takes the micro-batches in and wherever its ``backward`` calls sit.
Starting the processes is the check's time, not the answer's: ``on_ranks`` stops
the check's clock (its CPU-time timer, see ``checking.hermetic``) while the ranks
start, gives the answer the time that was left inside each rank, and starts the
clock again with what the answer did not use (at once, if a rank ran out).
"""

import builtins
import signal
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import shipping
from .distributed import launch

_TORCH = torch.__path__[0]
_HERE = __file__.rsplit("/", 1)[0]      # the course's own labs: not the answer's lines
START_UP_SECONDS = 120.0     # process start and DDP set-up, on a loaded machine
ANSWER_SECONDS = 300.0       # an answer's limit inside a rank when the check set none


RECORDED = ("forward_rows", "around_ddp", "sync_turned_off", "backward_passes",
            "allreduced_after_forward", "grads")


class AnswerTimedOut(BaseException):
    """Raised inside a rank when the answer's time is up (a ``BaseException``: ``except Exception`` cannot keep it)."""


class AnswerRaised(Exception):
    """The answer raised inside a rank; the message is ``Type<tab>message (line N: `code`)``."""


class AnswerOutOfTime(Exception):
    """The answer's time ran out inside a rank (reported to ``launch`` as an ordinary error)."""


def on_ranks(answer, module, micro_batches, *, watch_arguments=None):
    """Call ``answer(DDP(module), micro_batches[rank])`` on ``len(micro_batches)`` real ranks; what each did.

    Returns ``{"forward_rows": [...], "around_ddp": [...], "sync_turned_off": [...],
    "backward_passes": [...], "allreduced_after_forward": [...], "grads": [...]}``, one entry per rank.  An answer that raised on a rank raises here
    the same builtin exception type with its line; one that ran out of time is stopped
    by the check's own clock.  ``watch_arguments``: see the module's docstring.
    """
    if _is_stub(answer):   # the unfilled stub: no need to start processes to see it raise
        raise NotImplementedError
    shipped = shipping.dumps(answer)
    clock = _PausedClock()
    seconds = clock.remaining if clock.remaining is not None else ANSWER_SECONDS
    try:
        run = launch(_rank, world_size=len(micro_batches), timeout=START_UP_SECONDS + seconds,
                     collective_timeout=min(seconds, 30.0) + 5.0, answer=shipped, module=module,
                     micro_batches=micro_batches, seconds=seconds, watch=watch_arguments)
    except BaseException:
        clock.resume(0.0)
        raise
    used = max([result["seconds"] for result in run.results.values()], default=0.0)
    timed_out = any(kind == "AnswerOutOfTime" for kind, _ in run.errors.values())
    clock.resume(seconds if timed_out else used)
    if timed_out:
        clock.wait_for_alarm()
    _raise_answer_error(run)
    if watch_arguments is not None:
        for rank in range(run.world_size):      # rank r's micro-batches are micro_batches[r] here
            watch_arguments.report(dict(entry, path=f"#1[{rank}]" + entry["path"][2:]) if entry["argument"] == 1
                                   else entry for entry in run.results[rank]["touched"])
    return {key: [run.results[rank][key] for rank in range(run.world_size)]
            for key in RECORDED}


def _is_stub(answer):
    """True for a function whose whole body is ``raise NotImplementedError`` (the builtin)."""
    import dis

    code = getattr(answer, "__code__", None)
    if code is None or "NotImplementedError" in getattr(answer, "__globals__", {}):
        return False
    steps = [(i.opname, i.argval) for i in dis.get_instructions(code)
             if i.opname not in ("RESUME", "NOP", "CACHE", "PRECALL", "PUSH_NULL", "CALL", "CALL_FUNCTION")]
    return steps == [("LOAD_GLOBAL", "NotImplementedError"), ("RAISE_VARARGS", 1)]


def _raise_answer_error(run):
    for rank in sorted(run.errors):
        kind, message = run.errors[rank]
        if kind == "AnswerRaised":
            name, _, text = message.partition("\t")
            error_type = getattr(builtins, name, None)
            if isinstance(error_type, type) and issubclass(error_type, Exception) and error_type is not AnswerRaised:
                raise _exception(error_type, f"{text} (on rank {rank})".strip()) from None
            raise RuntimeError(f"{name}: {text} (on rank {rank})") from None
    for rank in sorted(run.errors):   # not the answer's own error: a collective that timed out, say
        kind, message = run.errors[rank]
        raise RuntimeError(f"rank {rank} failed: {kind}: {message}") from None
    if run.terminated:
        raise RuntimeError(f"ranks {run.terminated} did not finish: a rank waited for a collective that another "
                           "rank never started (every rank must run the same forwards and backwards)")


def _exception(error_type, text):
    try:
        return error_type(text)
    except Exception:
        return RuntimeError(text)


# --- inside one rank ---------------------------------------------------------------------

def _rank(rank, world_size, answer, module, micro_batches, seconds, watch=None):
    """One rank: DDP over this rank's copy of ``module``, the answer on ``micro_batches[rank]``, the record."""
    function = shipping.loads(answer)
    record = {"forward_rows": [], "around_ddp": 0, "sync_turned_off": False, "backward_passes": 0,
              "allreduced_after_forward": []}
    through_ddp = [0]          # backward passes that flowed through an output of DDP's forward
    model = None

    def note_forward(_, args):
        if not _inside(DDP.forward.__code__):      # model.module(x): DDP's forward never ran
            record["around_ddp"] += 1
            return
        record["forward_rows"].append(_rows(args))
        record["sync_turned_off"] |= not model.require_backward_grad_sync

    def mark_output(_, args, output):
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        tensor = next((t for t in outputs if isinstance(t, torch.Tensor) and t.requires_grad), None)
        if tensor is not None and _inside(DDP.forward.__code__):
            tensor.register_hook(lambda grad: through_ddp.__setitem__(0, through_ddp[0] + 1))

    def count_backward(_):
        record["backward_passes"] += 1
        record["sync_turned_off"] |= not model.require_backward_grad_sync
    module.register_forward_pre_hook(note_forward)
    module.register_forward_hook(mark_output)
    first = next(p for p in module.parameters() if p.requires_grad)
    first.register_post_accumulate_grad_hook(count_backward)
    model = DDP(module)
    model.register_comm_hook(None, _recording_allreduce(record))
    before = watch.snapshot((module, micro_batches[rank])) if watch is not None else None   # after DDP's broadcast
    start = time.process_time()
    try:
        with _time_limit(seconds):
            function(model, micro_batches[rank])
    except AnswerTimedOut:
        raise AnswerOutOfTime(f"the answer ran for more than {seconds:.1f} s of CPU time") from None
    except Exception as error:
        raise AnswerRaised(_describe(error)) from None
    record["seconds"] = time.process_time() - start   # CPU time, what the clock counts
    record["touched"] = watch.changes(before) if watch is not None else []
    record["forward_rows"].sort()
    record["around_ddp"] += max(record["backward_passes"] - through_ddp[0], 0)
    record["grads"] = {name: None if p.grad is None else p.grad.detach().clone()
                       for name, p in model.module.named_parameters()}
    return record


def _inside(code):
    """True when a frame of ``code`` is on the calling thread's stack."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    return frame is not None


def _rows(args):
    first = args[0] if args else None
    return int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() else -1


def _recording_allreduce(record):
    """DDP's default averaging all-reduce, noting how many forwards had run when it started."""
    def hook(state, bucket):
        record["allreduced_after_forward"].append(len(record["forward_rows"]))
        tensor = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])
    return hook


def _describe(error):
    """``Type<tab>message (line N: `code`)``, with the line of the answer's own code that raised.

    A ``NotImplementedError`` raised inside torch is reported as a ``RuntimeError``: only the
    answer's own ``NotImplementedError`` (the unfilled stub) means "not attempted".
    """
    name = type(error).__name__
    innermost = traceback.extract_tb(error.__traceback__)[-1:]
    if isinstance(error, NotImplementedError) and innermost and innermost[0].filename.startswith(_TORCH):
        name = "RuntimeError"
    message = str(error).strip()
    text = message.splitlines()[0] if message else ""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith((_TORCH, _HERE))]
    if frames and frames[-1].line:
        text += f" (line {frames[-1].lineno}: `{frames[-1].line.strip()}`)"
    return f"{name}\t{text.strip()}"   # one line: launch keeps a rank's first line


class _time_limit:
    """``AnswerTimedOut`` in this rank's main thread after ``seconds`` of its CPU time (re-fired every 50 ms).

    CPU time, as the check's own clock (``checking.hermetic.deadline``): a busy machine
    never times out an honest answer.
    """

    def __init__(self, seconds):
        self.seconds = seconds

    def _fire(self, signum, frame):
        raise AnswerTimedOut()

    def __enter__(self):
        self.previous = signal.signal(signal.SIGPROF, self._fire)
        signal.setitimer(signal.ITIMER_PROF, max(self.seconds, 0.001), 0.05)

    def __exit__(self, *exc_info):
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, self.previous)
        return False


# --- the check's clock in the calling process -----------------------------------------------

class _PausedClock:
    """Stop the caller's CPU-time timer (the check's deadline); start it again later with what is left."""

    def __init__(self):
        self.remaining, self.interval = None, 0.0
        if threading.current_thread() is threading.main_thread():
            remaining, self.interval = signal.setitimer(signal.ITIMER_PROF, 0)
            self.remaining = remaining or None

    def resume(self, used):
        if self.remaining is not None:
            signal.setitimer(signal.ITIMER_PROF, max(self.remaining - used, 0.001), self.interval)

    def wait_for_alarm(self):
        """Let the check's own alarm end the call (it raises its own timeout here)."""
        if self.remaining is None:
            raise TimeoutError("the answer ran out of time on a rank")
        deadline = time.process_time() + 5.0
        while time.process_time() < deadline:   # CPU time runs the timer: spin, do not sleep
            pass
        raise TimeoutError("the answer ran out of time on a rank")
