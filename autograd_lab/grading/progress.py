"""A one-line progress bar on stderr, redrawn in place (no dependency needed).

When stderr is not a terminal (a CI log, a file), it prints one plain line per
finished submission instead, so the log stays readable.
"""

import sys
import threading
import time

_WIDTH = 30


class ProgressBar:
    def __init__(self, total, stream=None, enabled=True):
        self.total = total
        self.done = 0
        self.problems = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def advance(self, student, summary, problem=False):
        """Count one finished submission; ``summary`` is a few words such as ``1.5/2``."""
        with self._lock:
            self.done += 1
            self.problems += bool(problem)
            if not self.enabled:
                return
            if self.interactive:
                self.stream.write("\r" + self._line(f"{student}: {summary}")[:160].ljust(100))
                if self.done == self.total:
                    self.stream.write("\n")
            else:
                self.stream.write(f"[{self.done}/{self.total}] {student}: {summary}\n")
            self.stream.flush()

    def _line(self, last):
        filled = _WIDTH * self.done // max(self.total, 1)
        elapsed = int(time.monotonic() - self.started)
        return (f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {self.done}/{self.total} "
                f"{elapsed // 60}:{elapsed % 60:02d}  problems: {self.problems}  last: {last}")
