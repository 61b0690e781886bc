"""Which code is the student's: where an answer raised or warned, told with the student's own line.

Feedback points at the line of the student's code that raised or warned, never at
PyTorch's internals, the standard library, the kernel's launcher or this package:
those paths (``ipykernel_launcher.py``, ``<frozen runpy>``) mean nothing to a student
and change from machine to machine.  Everything else, a notebook cell
(``/tmp/ipykernel_123/456.py``), a script, a test file, is the student's.
"""

import linecache
import os
import site
import sys
import sysconfig

import torch

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # autograd_lab/
_INTERNAL_PREFIXES = tuple(sorted({
    os.path.dirname(os.path.abspath(torch.__file__)),
    _PACKAGE,
    *(p for p in (sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")) if p),
    *site.getsitepackages(),
    *([site.getusersitepackages()] if site.ENABLE_USER_SITE else []),
    sys.base_prefix, sys.prefix,
}))
# Lines that quote a traceback inside a message ("File "...", line 3, in f"): cut from feedback.
_TRACEBACK_MARKERS = ('File "', "Traceback (most recent call last)", "Traceback of forward call")


def is_student_file(filename):
    """True for code the student wrote: a notebook cell, a script; not torch, Python or autograd_lab."""
    if not filename or filename.startswith("<frozen") or filename.startswith("<string>"):
        return False
    if filename.startswith("<"):      # "<ipython-input-3-...>" on older IPython: a cell
        return True
    path = os.path.abspath(filename)
    return not any(path == prefix or path.startswith(prefix + os.sep) for prefix in _INTERNAL_PREFIXES)


def source_line(filename, lineno):
    """The stripped source of one line (IPython registers its cells with ``linecache``), or ``""``."""
    return linecache.getline(filename, lineno).strip() if filename and lineno else ""


def student_frame(traceback):
    """``(function name, line number, source)`` of the innermost student frame of ``traceback``, or ``None``."""
    found = None
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if is_student_file(code.co_filename):
            found = (code.co_name, traceback.tb_lineno, source_line(code.co_filename, traceback.tb_lineno))
        traceback = traceback.tb_next
    return found


def where(function, lineno, source):
    """`` (in `f`, line 4: `x.backward()`)``: a location in the student's own words."""
    code = f": `{short_code(source)}`" if source else ""
    return f" (in `{function}`, line {lineno}{code})"


def first_paragraph(text, limit=300):
    """A message without the traceback a warning or error may quote (internal paths, machine-specific)."""
    lines = []
    for line in str(text).splitlines():
        if any(marker in line for marker in _TRACEBACK_MARKERS):
            break
        lines.append(line.rstrip())
    text = " ".join(line.strip() for line in lines if line.strip()).rstrip(":").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_code(source, limit=80):
    """One line of code fit for backticks in Markdown feedback."""
    source = source.replace("`", "'")
    return source if len(source) <= limit else source[: limit - 3] + "..."
