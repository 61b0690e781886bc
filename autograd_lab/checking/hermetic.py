"""Run answer code without letting it change the student's session.

``isolated(seed)`` forks the RNGs and seeds them, starts from grad mode on,
float32 default dtype, anomaly mode off and inference mode off, and restores the
caller's settings afterwards.  Warnings and anything written to stderr are
captured (nbgrader scores a cell that writes to stderr as zero; we put them in
the result instead); only warnings raised by the student's own code are kept, each
with its line (``origin``).

``deadline(seconds)`` interrupts code that runs too long: ``seconds`` of this
process's CPU time (``ITIMER_PROF``), not of the wall clock, so a busy machine
never makes an honest answer time out (a verdict may not depend on the load; a
check on a loaded 2-core machine took 12.6 s of wall clock for 2 s of work).  The
timed code runs on one intra-op thread: with two, a thread that waits for a descheduled
peer spins, and the process's CPU time grows with the load (a case of
06.checkpointed_step: 0.02-0.04 s alone, 0.22-0.39 s with two threads at load 19).  An
answer that waits without computing (``time.sleep``) is not stopped by it.  The
timer only exists on POSIX and only works in the main thread: elsewhere (Windows,
a worker thread) the check runs without a time limit, and ``deadline.supported``
says so.  Code stuck inside one long C++ call is interrupted when that call
returns to Python, and code that is importing a module when the alarm comes is
interrupted when the import is done.
"""

import contextlib
import io
import random
import signal
import threading
import warnings

import torch

from .origin import first_paragraph, is_student_file, short_code, source_line
from .records import clean_text


class TimedOut(BaseException):
    """Raised inside answer code when its time is up.

    A ``BaseException`` so that a student's ``except Exception`` cannot swallow it;
    the timer also re-fires every 50 ms of CPU time until the check regains control, which
    defeats a bare ``except:`` inside a loop.
    """


class deadline:
    """Context manager: raise ``TimedOut`` in the running code after ``seconds`` of CPU time."""

    _REFIRE = 0.05

    def __init__(self, seconds):
        self.seconds = seconds
        self.supported = (seconds is not None and hasattr(signal, "SIGPROF")
                          and threading.current_thread() is threading.main_thread())
        self._active = False

    def _fire(self, signum, frame):
        # Never inside an import: a module interrupted half-way stays half-imported in sys.modules
        # and breaks every later use (a first `torch.func` call imports torch._dynamo, seconds on a
        # loaded machine).  The timer fires again every 50 ms, so the answer stops right after it.
        if self._active and not _importing(frame):
            raise TimedOut()

    def stop(self):
        """Call as soon as the timed code returns, so a late alarm is ignored."""
        self._active = False

    def __enter__(self):
        if self.supported:
            self._threads = torch.get_num_threads()
            torch.set_num_threads(1)   # no spinning peer threads: CPU time that does not grow with the load
            self._previous = signal.signal(signal.SIGPROF, self._fire)
            self._active = True
            signal.setitimer(signal.ITIMER_PROF, max(self.seconds, 0.001), self._REFIRE)
        return self

    def __exit__(self, *exc_info):
        self._active = False
        if self.supported:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, self._previous)
            torch.set_num_threads(self._threads)
        return False


def _importing(frame):
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class isolated:
    """Context manager around one call of answer code; see the module docstring.

    After the block, ``warnings`` holds the captured warnings and stderr text as
    clean strings, and ``grad_enabled_after`` the grad mode the code left behind.
    """

    def __init__(self, seed):
        self.seed = seed
        self.warnings = []
        self.grad_enabled_after = True

    def __enter__(self):
        self._saved = (torch.is_grad_enabled(), torch.get_default_dtype(),
                       torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled(),
                       random.getstate())
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(torch.random.fork_rng(devices=[]))
        self._stack.enter_context(torch.inference_mode(False))
        self._caught = self._stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        self._stderr = io.StringIO()
        self._stack.enter_context(contextlib.redirect_stderr(self._stderr))
        torch.manual_seed(self.seed)
        random.seed(self.seed)
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
        torch.set_anomaly_enabled(False)
        return self

    def __exit__(self, *exc_info):
        self.grad_enabled_after = torch.is_grad_enabled()
        self._stack.close()
        grad_enabled, dtype, anomaly, check_nan, python_rng = self._saved
        torch.set_grad_enabled(grad_enabled)
        torch.set_default_dtype(dtype)
        torch.set_anomaly_enabled(anomaly, check_nan)
        random.setstate(python_rng)
        # Only what the student's own code raised, with its line: a warning raised inside
        # torch (anomaly mode's "Error detected in ...", quoting the kernel's launcher) is not theirs.
        self.warnings = [_warning_text(w) for w in self._caught if is_student_file(w.filename)]
        stderr = first_paragraph(self._stderr.getvalue())
        if stderr:
            self.warnings.append(f"stderr: {clean_text(stderr)}")
        return False


def _warning_text(warning):
    """``UserWarning: text (line 4: `source`)``, without any traceback the message quotes."""
    source = source_line(warning.filename, warning.lineno)
    line = f" (line {warning.lineno}: `{short_code(source)}`)" if source else f" (line {warning.lineno})"
    return f"{warning.category.__name__}: {clean_text(first_paragraph(warning.message))}{line}"
