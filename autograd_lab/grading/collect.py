"""Which file of which student is graded for which notebook, and why every other file is not.

``collect(folder, assignment)`` walks the submissions and decides, per file:

* **who**: the folder (``alice/01.ipynb``) or the name's prefix (``alice_01.ipynb``),
  matched to the roster without regard to case, by id, by email, or by Moodle's
  participant number (``Jane Doe_123_assignsubmission_file_/``).  Names keep every
  character (``@``, spaces, accents); two spellings of one off-roster name
  (``Victor/``, ``victor/``) are one student, and the collision is reported;
* **which notebook**: the ``NN`` the name starts with, else the exercise cells it
  holds (a renamed ``carol_final.ipynb`` is still notebook 00);
* **which version**: of several files for one student and notebook, the newest
  (``several_files: newest``, by submission time) or the first by name; the
  others are kept as ``others`` and shown on the student's page and in the CSV.

Nothing is dropped silently: each file not graded is in ``ignored`` (no student
or notebook could be told) or ``others`` (a version not graded), with the reason.
The submission time of a file is ``SUBMISSIONS/timestamps.csv`` when it names the
file (column ``file``) or its student and notebook, else the file's modification time.
"""

import csv
import datetime as dt
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .assignment import parse_time
from .submissions import UsageError, exercise_ids_marked, printable, read_notebook

_NUMBERED = re.compile(r"^(?P<nn>\d\d)(?:[^0-9].*)?\.ipynb$", re.IGNORECASE)
_FLAT = re.compile(r"^(?P<student>.+?)[_\-. ](?P<nn>\d\d)(?:[^0-9].*)?\.ipynb$", re.IGNORECASE)
_MOODLE = re.compile(r"^(?P<name>.+)_(?P<participant>\d+)_assignsubmission_[a-z]+_?$")
_SEPARATORS = "_-. "


@dataclass
class Collected:
    files: dict = field(default_factory=dict)      # (student, notebook) -> Path graded
    submitted: dict = field(default_factory=dict)  # (student, notebook) -> aware datetime
    others: dict = field(default_factory=dict)     # (student, notebook) -> [(shown path, why not graded)]
    ignored: list = field(default_factory=list)    # (shown path, why, student or None)
    collisions: list = field(default_factory=list)  # sentences for the instructor
    renamed: dict = field(default_factory=dict)    # (student, notebook) -> how the notebook was told

    def students(self):
        return sorted({student for student, _ in self.files} | {s for s, _ in self.others}
                      | {s for _, _, s in self.ignored if s})


def collect(folder, assignment):
    """Every submitted file under ``folder``, sorted out by student and notebook (see the module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder of submissions.")
    names = _Names(assignment.roster)
    result, candidates = Collected(), {}
    for path in _notebook_files(folder, result):
        relative = path.relative_to(folder)
        student, number, how = _who_and_which(relative, path, names, assignment)
        shown = printable(relative)
        if student is None:
            result.ignored.append((shown, "no student could be told from its name: use <student>/<NN>_*.ipynb "
                                          "or <student>_<NN>.ipynb", None))
        elif number is None:
            result.ignored.append((shown, "no notebook number in its name and no exercise cells of one notebook "
                                          "in it: name it <NN>_*.ipynb", student))
        elif number not in assignment.notebooks:
            result.ignored.append((shown, f"notebook {number} is not part of this assignment", student))
        else:
            candidates.setdefault((student, number), []).append((path, shown, how))
    result.collisions = names.collisions()
    times = _timestamps(folder / "timestamps.csv", names)
    for key, files in sorted(candidates.items()):
        _choose_version(key, files, times, assignment.several_files, result)
    return result


def _notebook_files(folder, result):
    """The ``.ipynb`` files under ``folder``; links and odd files are refused, with the reason."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".ipynb_checkpoints" and not d.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            if not name.lower().endswith(".ipynb"):
                continue
            if path.is_symlink() or not path.is_file():
                result.ignored.append((printable(path.relative_to(folder)), "a link or not a regular file", None))
                continue
            yield path


def _who_and_which(relative, path, names, assignment):
    """(student, notebook, how the notebook was told) for one file."""
    parts = relative.parts
    if len(parts) >= 2:
        student = names.match(parts[0])
        name = parts[-1]
        numbered = _NUMBERED.match(name) or _FLAT.match(name)
    else:
        name = parts[0]
        numbered = _FLAT.match(name)
        student = names.match(numbered["student"]) if numbered else names.match_prefix(name)
    number = numbered["nn"] if numbered else None
    how = "name"
    if number is None or number not in assignment.notebooks:
        marked = _notebook_of_cells(path)
        if marked is not None and (number is None or marked in assignment.notebooks):
            number, how = marked, "cells"
    return student, number, how


def _notebook_of_cells(path):
    """The one notebook whose exercise cells ``path`` holds, or ``None``."""
    notebook, _ = read_notebook(path)
    if notebook is None:
        return None
    numbers = {exercise_id[:2] for exercise_id in exercise_ids_marked(notebook)}
    return numbers.pop() if len(numbers) == 1 else None


def _choose_version(key, files, times, policy, result):
    def submitted(item):
        path, shown, _ = item
        when = times.get(("file", shown)) or times.get(key) or times.get((key[0], ""))
        return when or dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)

    ordered = sorted(files, key=lambda item: item[1])                  # first by name
    if policy == "newest":
        ordered = sorted(ordered, key=submitted, reverse=True)         # stable: ties keep name order
    chosen, rest = ordered[0], ordered[1:]
    result.files[key] = chosen[0]
    result.submitted[key] = submitted(chosen)
    if chosen[2] == "cells":
        result.renamed[key] = f"{chosen[1]} was graded as notebook {key[1]} (told by its exercise cells)"
    why = "an older version" if policy == "newest" else "a later file by name"
    for _, shown, _ in rest:
        result.others.setdefault(key, []).append((shown, f"{why}; graded {chosen[1]}"))


def _timestamps(path, names):
    """``timestamps.csv``: (``"file"``, path) or (student, notebook) or (student, "") -> time."""
    times = {}
    if not path.exists():
        return times
    with open(path, newline="", encoding="utf-8", errors="replace") as file:
        for line, row in enumerate(csv.DictReader(file), start=2):
            try:
                when = parse_time(row.get("submitted_at"))
            except ValueError:
                raise UsageError(f"{path}, line {line}: submitted_at is not an ISO 8601 time: "
                                 f"{row.get('submitted_at')!r}.") from None
            if (row.get("file") or "").strip():
                times[("file", row["file"].strip())] = when
                continue
            student = names.match((row.get("student") or "").strip(), record=False)
            number = (row.get("notebook") or "").strip()
            times[(student, f"{int(number):02d}" if number else "")] = when
    return times


# --- names ----------------------------------------------------------------------------------

def fold(text):
    """The form two spellings of one id share: Unicode-normalised and case-folded."""
    return unicodedata.normalize("NFC", text).casefold().strip()


class _Names:
    """Matches folder and file names to students: the roster first, else one id per spelling."""

    def __init__(self, roster):
        self.keys = {}
        for student in roster:
            for key in (student.id, student.email):
                if key:
                    self.keys.setdefault(fold(key), student.id)
            if student.moodle_id:
                self.keys.setdefault(("moodle", student.moodle_id), student.id)
        self.roster_ids = sorted((s.id for s in roster), key=len, reverse=True)
        self.spellings = {}          # canonical id -> every spelling met

    def match(self, name, record=True):
        name = unicodedata.normalize("NFC", printable(name))   # undecodable bytes as \\xNN, no control characters
        moodle = _MOODLE.match(name)
        found = self.keys.get(fold(name))
        if found is None and moodle:
            found = self.keys.get(("moodle", moodle["participant"])) or self.keys.get(fold(moodle["name"]))
        if found is None:
            if not record:
                return name
            found = self.keys.setdefault(fold(name), name)   # off the roster: the first spelling names it
        if record:
            self.spellings.setdefault(found, set()).add(name)
        return found

    def match_prefix(self, file_name):
        """A flat file without ``_NN``: the longest roster id it starts with, followed by a separator."""
        stem = unicodedata.normalize("NFC", printable(file_name[:-len(".ipynb")]))
        for student in self.roster_ids:
            if fold(stem).startswith(fold(student)) and stem[len(student):len(student) + 1] in (*_SEPARATORS, ""):
                return self.match(student)
        return None

    def collisions(self):
        lines = []
        for student, spellings in sorted(self.spellings.items()):
            folded = {}
            for spelling in spellings:
                folded.setdefault(fold(spelling), set()).add(spelling)
            for same in folded.values():
                if len(same) > 1:
                    shown = ", ".join(sorted(printable(s) for s in same))
                    lines.append(f"{shown} differ only by case: graded as one student, {printable(student)}")
        return lines
