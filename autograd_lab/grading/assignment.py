"""An assignment: which notebooks are graded, for how many points, when they are due, for whom.

The assignment file is YAML (``.yml``/``.yaml``) or TOML (``.toml``)::

    name: "Homework 1: graphs and gradients"
    notebooks:                   # each graded only against its own exercises
      - {notebook: "01"}         # points: the sum of its exercises' points
      - {notebook: "02", points: 10}   # or rescaled to 10
    due: 2026-11-20T23:59:00Z    # ISO 8601; no time zone means UTC
    late: {policy: percent_per_day, percent: 10}   # or {policy: cutoff, grace_minutes: 0}, or {policy: none}
    added_later: ["03.train"]    # exercises added after students made their copies
    new_exercises: exempt        # such an exercise missing from a student's copy: exempt (default) or count
    roster:                      # optional: students without a submission get a "missing" row
      - {id: alice, name: Alice Liddell, email: alice@example.edu}

Submissions (``find``) may be laid out per student, ``SUBMISSIONS/alice/01_dynamic_graph.ipynb``
(a file named by its notebook number), or flat, ``SUBMISSIONS/alice_01.ipynb``
(``<student>_<NN>[anything].ipynb``).  The submission time of a file is its
modification time, unless ``SUBMISSIONS/timestamps.csv`` (``student,notebook,submitted_at``;
an empty notebook means all of that student's notebooks) says otherwise.
"""

import csv
import datetime as dt
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .submissions import UsageError

LATE_POLICIES = ("none", "percent_per_day", "cutoff")
NEW_EXERCISE_POLICIES = ("exempt", "count")
_FOLDER_FILE = re.compile(r"^(?P<nn>\d\d)(?:[_\-. ].*)?\.ipynb$")
_FLAT_FILE = re.compile(r"^(?P<student>.+?)[_\-](?P<nn>\d\d)(?:[_\-. ].*)?\.ipynb$")


@dataclass(frozen=True)
class Student:
    id: str
    name: str = ""
    email: str = ""


@dataclass(frozen=True)
class Assignment:
    name: str
    notebooks: tuple            # notebook numbers, "01"
    points: dict                # notebook -> points it is worth (None: its exercises' points)
    due: object = None          # an aware datetime, or None
    late_policy: str = "none"
    late_percent: float = 0.0
    grace_minutes: float = 0.0
    new_exercises: str = "exempt"
    added_later: tuple = ()     # only these may be exempted: a student cannot exempt a cell by deleting it
    roster: tuple = ()

    def late_days(self, submitted_at):
        """Whole days late, rounded up (1 second late is 1 day); 0 when on time or no due date."""
        if self.due is None or submitted_at is None:
            return 0
        late = (submitted_at - self.due).total_seconds() - 60 * self.grace_minutes
        return 0 if late <= 0 else math.ceil(late / 86400)

    def late_factor(self, days):
        """The fraction of the score kept after ``days`` days late."""
        if days <= 0 or self.late_policy == "none":
            return 1.0
        if self.late_policy == "cutoff":
            return 0.0
        return max(0.0, 1.0 - self.late_percent * days / 100)

    def describe_late(self):
        if self.late_policy == "percent_per_day":
            return f"{self.late_percent:g}% off per day late (a started day counts)"
        if self.late_policy == "cutoff":
            return "no credit after the due date" + (f" (+{self.grace_minutes:g} min grace)" if self.grace_minutes else "")
        return "late work is not penalised"


def load(path):
    """The ``Assignment`` in a YAML or TOML file; a ``UsageError`` that says what to fix."""
    path = Path(path)
    text = path.read_text()
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        raise UsageError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: {error}") from None
    return from_dict(data or {}, str(path))


def from_dict(data, where="the assignment"):
    if not data.get("notebooks"):
        raise UsageError(f"{where}: list the graded notebooks, e.g. notebooks: [{{notebook: \"01\"}}].")
    numbers, points = [], {}
    for item in data["notebooks"]:
        item = item if isinstance(item, dict) else {"notebook": item}
        number = f"{int(str(item['notebook'])[:2]):02d}"
        numbers.append(number)
        points[number] = None if item.get("points") is None else float(item["points"])
    late = data.get("late") or {"policy": "none"}
    if late.get("policy", "none") not in LATE_POLICIES:
        raise UsageError(f"{where}: late.policy must be one of {LATE_POLICIES}, got {late.get('policy')!r}.")
    policy = data.get("new_exercises", "exempt")
    if policy not in NEW_EXERCISE_POLICIES:
        raise UsageError(f"{where}: new_exercises must be one of {NEW_EXERCISE_POLICIES}, got {policy!r}.")
    roster = tuple(Student(str(s["id"]), str(s.get("name", "")), str(s.get("email", "")))
                   for s in data.get("roster") or ())
    return Assignment(
        name=str(data.get("name", "assignment")), notebooks=tuple(numbers), points=points,
        due=parse_time(data.get("due")), late_policy=late.get("policy", "none"),
        late_percent=float(late.get("percent", 0)), grace_minutes=float(late.get("grace_minutes", 0)),
        new_exercises=policy, added_later=tuple(str(i) for i in data.get("added_later") or ()), roster=roster,
    )


def parse_time(value):
    """An aware datetime from ISO 8601 text or a datetime (no zone: UTC); ``None`` stays ``None``."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time(23, 59, 59))
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


# --- finding the submissions ---------------------------------------------------------

@dataclass
class Found:
    files: dict = field(default_factory=dict)      # (student, notebook) -> Path
    submitted: dict = field(default_factory=dict)  # (student, notebook) -> aware datetime
    ignored: list = field(default_factory=list)    # (path, why)


def find(folder, assignment):
    """Every submitted file of the assignment's notebooks under ``folder``, by student and notebook."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder of submissions.")
    found = Found()
    for path in sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts):
        student, number = _who_and_which(path.relative_to(folder))
        if student is None:
            found.ignored.append((str(path), "not named <student>/<NN>_*.ipynb or <student>_<NN>.ipynb"))
        elif number not in assignment.notebooks:
            found.ignored.append((str(path), f"notebook {number} is not part of this assignment"))
        elif (student, number) in found.files:
            found.ignored.append((str(path), f"a second file for {student}'s notebook {number}; "
                                             f"graded {found.files[(student, number)].name}"))
        else:
            found.files[(student, number)] = path
            found.submitted[(student, number)] = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
    _apply_timestamps(folder / "timestamps.csv", found)
    return found


def _who_and_which(relative):
    parts = relative.parts
    if len(parts) == 2 and _FOLDER_FILE.match(parts[1]):
        return parts[0], _FOLDER_FILE.match(parts[1])["nn"]
    if len(parts) == 1 and _FLAT_FILE.match(parts[0]):
        match = _FLAT_FILE.match(parts[0])
        return match["student"], match["nn"]
    return None, None


def _apply_timestamps(path, found):
    if not path.exists():
        return
    with open(path, newline="") as file:
        for row in csv.DictReader(file):
            when = parse_time(row.get("submitted_at"))
            number = (row.get("notebook") or "").strip()
            for key in list(found.submitted):
                if key[0] == row.get("student", "").strip() and (not number or key[1] == f"{int(number):02d}"):
                    found.submitted[key] = when
