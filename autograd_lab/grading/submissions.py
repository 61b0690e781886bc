"""Find the submissions, name the students, and read each notebook defensively."""

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat


MAX_NOTEBOOK_BYTES = 32 << 20


class UsageError(Exception):
    """A problem with the command line, explained with what to do."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Submission:
    student: str        # unique, safe as a file name and in a terminal or CSV
    path: Path

    @property
    def display(self):
        return printable(self.path)


def printable(path):
    """A path as text safe to print or write: undecodable bytes as ``\\xNN``, control characters as ``?``."""
    text = os.fsencode(str(path)).decode("utf-8", "backslashreplace")
    return _CONTROL.sub("?", text)


def student_id(parts):
    """``alice/hw.ipynb`` -> ``alice__hw``: letters, digits, ``.``, ``_`` and ``-`` only."""
    text = "__".join(printable(part) for part in parts)
    return _UNSAFE.sub("_", text).lstrip(".") or "_"


def find_submissions(arguments):
    """Every ``.ipynb`` named or found under the folders named, each with a unique student id.

    The id is the path below the folder given, without ``.ipynb`` and with ``/``
    written ``__`` (``alice.ipynb`` -> ``alice``, ``alice/hw.ipynb`` -> ``alice__hw``).
    """
    found = []
    for argument in arguments:
        root = Path(argument)
        if root.is_dir():
            files = sorted(p for p in root.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            found += [Submission(student_id(p.relative_to(root).with_suffix("").parts), p) for p in files]
        elif root.is_file():
            found.append(Submission(student_id([root.stem]), root))
        else:
            raise UsageError(f"{argument}: no such file or folder. Give .ipynb files or folders of them.")
    if not found:
        raise UsageError("No .ipynb submissions found in " + ", ".join(map(str, arguments)) + ".")
    return _unique_students(found)


def _unique_students(submissions):
    """Names made safe can collide (``a b`` and ``a_b``): later ones get ``-2``, ``-3``... and are flagged."""
    seen, unique = set(), []
    for submission in submissions:
        name, number = submission.student, 1
        while name.lower() in seen:   # case-insensitive: report files may land on such a file system
            number += 1
            name = f"{submission.student}-{number}"
        seen.add(name.lower())
        unique.append(Submission(name, submission.path))
    return unique


def flag_shared_files(submissions):
    """student -> problems: a symlink, a renamed student id, or the same bytes as another submission."""
    flags, by_digest = {}, {}
    for submission in submissions:
        notes = flags.setdefault(submission.student, [])
        if any(p.is_symlink() for p in (submission.path, *submission.path.parents)):
            notes.append(f"FLAG: the submission is a symbolic link ({printable(submission.path)} -> "
                         f"{printable(os.path.realpath(submission.path))})")
        try:
            by_digest.setdefault(sha256(submission.path), []).append(submission.student)
        except OSError as error:
            notes.append(f"the submission could not be read ({type(error).__name__})")
    for students in by_digest.values():
        for student in students if len(students) > 1 else ():
            others = ", ".join(s for s in students if s != student)
            flags[student].append(f"FLAG: identical file (same SHA-256) as {others}")
    return flags


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_notebook(path):
    """``(notebook, None)`` for a valid nbformat v4 notebook, else ``(None, what is wrong)``.

    Beyond nbformat's schema, every code cell's source must be text: what the
    grader reads from a notebook it reads as the types it expects.
    """
    try:
        if os.path.getsize(path) > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"larger than {MAX_NOTEBOOK_BYTES >> 20} MiB")
        notebook = nbformat.read(str(path), as_version=4)
        nbformat.validate(notebook)
        for index, cell in enumerate(notebook.cells):
            if not isinstance(cell.get("source"), str) or not isinstance(cell.get("metadata", {}), dict):
                raise ValueError(f"cell {index} has a source or metadata of the wrong type")
    except Exception as error:  # malformed JSON, wrong schema, unreadable: all one verdict
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return None, f"{printable(path)}: not a valid Jupyter notebook: {_CONTROL.sub('?', first_line[:300])}"
    return notebook, None


def exercise_ids_marked(notebook):
    """The exercise ids in the cells' ``autograd_lab.exercise`` metadata (text only; other types ignored).

    Informational: the grader takes the exercises to grade from ``--notebook`` or
    the assignment, never from what a student's file says.
    """
    marked = set()
    for cell in notebook.cells:
        metadata = cell.get("metadata")
        ours = metadata.get("autograd_lab") if isinstance(metadata, dict) else None
        value = ours.get("exercise") if isinstance(ours, dict) else None
        if isinstance(value, str):
            marked.add(value)
    return marked
