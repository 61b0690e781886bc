"""Find the submissions, name the students, and read each notebook defensively."""

import hashlib
from dataclasses import dataclass
from pathlib import Path

import nbformat


class UsageError(Exception):
    """A problem with the command line, explained with what to do."""


@dataclass(frozen=True)
class Submission:
    student: str
    path: Path


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
            found += [Submission("__".join(p.relative_to(root).with_suffix("").parts), p) for p in files]
        elif root.is_file():
            found.append(Submission(root.stem, root))
        else:
            raise UsageError(f"{argument}: no such file or folder. Give .ipynb files or folders of them.")
    if not found:
        raise UsageError("No .ipynb submissions found in " + ", ".join(map(str, arguments)) + ".")
    _require_unique_students(found)
    return found


def _require_unique_students(submissions):
    seen = {}
    for submission in submissions:
        if submission.student in seen:
            raise UsageError(f"Two submissions would both be graded as {submission.student!r}: "
                             f"{seen[submission.student]} and {submission.path}. "
                             "Rename one, or put each student's file in a folder of their own.")
        seen[submission.student] = submission.path


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_notebook(path):
    """``(notebook, None)`` for a valid nbformat v4 notebook, else ``(None, what is wrong)``."""
    try:
        notebook = nbformat.read(str(path), as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # malformed JSON, wrong schema, unreadable: all one verdict
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return None, f"not a valid Jupyter notebook: {first_line[:300]}"
    return notebook, None


def exercise_ids_marked(notebook):
    """The exercise ids in the cells' ``autograd_lab.exercise`` metadata."""
    return {cell.get("metadata", {}).get("autograd_lab", {}).get("exercise")
            for cell in notebook.cells} - {None}
