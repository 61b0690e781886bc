"""Teach real PyTorch errors and warnings without stopping the notebook.

A lab shows an error on purpose, explains it, then fixes it.  Wrapping the
failing line in ``expect_error`` keeps the notebook running, prints the real
message, and fails loudly if PyTorch ever stops raising it, so the course
cannot keep teaching an error that no longer exists::

    with expect_error(RuntimeError, "grad can be implicitly created only for scalar outputs"):
        y.backward()

Only the stable start of a message is matched: the wording of the tail
changes between releases.
"""

import re
import warnings

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


def _clean(message, max_lines):
    """Hide memory addresses (outputs must be deterministic) and keep the message short."""
    lines = _ADDRESS.sub("0x...", str(message)).strip().splitlines()
    if len(lines) > max_lines:
        lines = lines[:max_lines] + ["..."]
    return "\n".join(lines)


def _as_prefixes(starts_with):
    return (starts_with,) if isinstance(starts_with, str) else tuple(starts_with)


def _matches(message, prefixes):
    text = str(message).strip()
    return any(text.startswith(prefix) for prefix in prefixes)


class expect_error:
    """Context manager: the block must raise ``exc_type`` with a message starting with ``starts_with``.

    ``starts_with`` may be a tuple of accepted prefixes, for messages whose start
    differs between PyTorch releases.  On success the message is printed and kept
    as ``.message``; the exception itself is kept as ``.error``.  Any other
    outcome raises ``AssertionError`` that says what happened instead.
    """

    def __init__(self, exc_type, starts_with, *, max_lines=4, quiet=False):
        self.exc_type = exc_type
        self.prefixes = _as_prefixes(starts_with)
        self.max_lines = max_lines
        self.quiet = quiet
        self.error = None
        self.message = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        expected = f"{self.exc_type.__name__} starting with {self.prefixes[0]!r}"
        if exc is None:
            raise AssertionError(
                f"Expected {expected}, but the code ran without error. PyTorch's "
                "behaviour has changed: update this cell and the text around it."
            )
        if not isinstance(exc, self.exc_type) or not _matches(exc, self.prefixes):
            raise AssertionError(
                f"Expected {expected}, but got {type(exc).__name__}: {_clean(exc, self.max_lines)}"
            ) from exc
        self.error = exc
        self.message = _clean(exc, self.max_lines)
        if not self.quiet:
            print(f"{type(exc).__name__} (expected): {self.message}")
        return True  # swallow the expected error so the notebook keeps running


class expect_warning:
    """Context manager: the block must emit a ``category`` warning starting with ``starts_with``.

    Warnings are captured rather than sent to stderr, so a graded cell stays clean.
    The expected warning is printed and kept as ``.message``; ``.count`` says how many
    times it was raised in the block; any other warnings raised in the block are listed
    in ``.others``.  ``always=True`` also turns on ``torch.set_warn_always`` inside the
    block (restored after it), for a warning torch raises only once per process, so that
    the block still sees it when the cell is run again.
    """

    def __init__(self, category, starts_with, *, max_lines=3, quiet=False, always=False):
        self.category = category
        self.prefixes = _as_prefixes(starts_with)
        self.max_lines = max_lines
        self.quiet = quiet
        self.always = always
        self.message = None
        self.count = 0
        self.others = []

    def __enter__(self):
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        if self.always:
            import torch
            self._warn_always = torch.is_warn_always_enabled()
            torch.set_warn_always(True)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.always:
            import torch
            torch.set_warn_always(self._warn_always)
        self._catcher.__exit__(exc_type, exc, tb)
        if exc is not None:
            return False  # a real error inside the block is not ours to hide
        found = [w for w in self._caught
                 if issubclass(w.category, self.category) and _matches(w.message, self.prefixes)]
        self.others = [_clean(w.message, self.max_lines) for w in self._caught if w not in found]
        if not found:
            seen = "; ".join(self.others) or "no warnings at all"
            raise AssertionError(
                f"Expected a {self.category.__name__} starting with {self.prefixes[0]!r}, "
                f"but saw {seen}. PyTorch's behaviour has changed: update this cell."
            )
        self.message = _clean(found[0].message, self.max_lines)
        self.count = len(found)
        if not self.quiet:
            print(f"{found[0].category.__name__} (expected): {self.message}")
        return False

