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
    several_files: newest        # two files for one notebook: grade the newest (default) or first_by_name
    canvas: {assignment_id: 12345}      # optional: the Canvas column canvas.csv fills
    gradescope: {visibility: after_due_date, due_date: gradescope}   # optional, the autograder's settings
    roster:                      # optional: who is graded; students without a submission get a "missing" row
      - {id: alice, name: Alice Liddell, email: alice@example.edu}

A roster entry may also carry ``section``, ``sis_user_id``, ``sis_login_id`` and
``canvas_id`` (Canvas's columns) and ``moodle_id`` (the number in Moodle's
``Name_123_assignsubmission_file_`` folders).  Ids may hold any character
(``@``, spaces, accents); two ids that differ only by case are refused, since
they would be one student on most file systems and in most LMSs.
"""

import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from .submissions import UsageError

try:                       # Python 3.11+; 3.10 (Gradescope's image) reads TOML through tomli if present
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - exercised on Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

LATE_POLICIES = ("none", "percent_per_day", "cutoff")
NEW_EXERCISE_POLICIES = ("exempt", "count")
SEVERAL_FILES = ("newest", "first_by_name")
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
DUE_DATE_SOURCES = ("gradescope", "assignment")


@dataclass(frozen=True)
class Student:
    id: str
    name: str = ""
    email: str = ""
    section: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    canvas_id: str = ""
    moodle_id: str = ""


@dataclass(frozen=True)
class GradescopeSettings:
    visibility: str = "visible"          # the whole result; tests inherit it
    stdout_visibility: str = "hidden"    # the grader's log: for the instructor
    due_date: str = "gradescope"         # "gradescope": its due date and the student's extension win


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
    several_files: str = "newest"
    canvas_assignment_id: str = ""
    gradescope: GradescopeSettings = GradescopeSettings()

    def late_days(self, submitted_at, due=None):
        """Whole days late, rounded up (1 second late is 1 day); 0 when on time or no due date."""
        due = due or self.due
        if due is None or submitted_at is None:
            return 0
        late = (submitted_at - due).total_seconds() - 60 * self.grace_minutes
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

    def on_roster(self, student):
        return any(s.id == student for s in self.roster)


def load(path):
    """The ``Assignment`` in a YAML or TOML file; a ``UsageError`` that says what to fix."""
    return from_dict(read_data(path), str(path))


def read_data(path):
    """The assignment file's keys as plain data (YAML or TOML)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot be read ({error}).") from None
    if path.suffix == ".toml":
        if tomllib is None:
            raise UsageError(f"{path}: reading TOML needs Python 3.11 or the `tomli` package on Python 3.10; "
                             "`pip install tomli`, or write the assignment in YAML.")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise UsageError(f"{path}: not valid TOML: {error}") from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise UsageError(f"{path}: not valid YAML: {error}") from None
    if data is not None and not isinstance(data, dict):
        raise UsageError(f"{path}: the assignment must be a mapping of keys (name, notebooks, due, ...).")
    return data or {}


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
    _choice(where, "late.policy", late.get("policy", "none"), LATE_POLICIES)
    policy = _choice(where, "new_exercises", data.get("new_exercises", "exempt"), NEW_EXERCISE_POLICIES)
    several = _choice(where, "several_files", data.get("several_files", "newest"), SEVERAL_FILES)
    return Assignment(
        name=str(data.get("name", "assignment")), notebooks=tuple(numbers), points=points,
        due=_time(data.get("due"), where, "due"), late_policy=late.get("policy", "none"),
        late_percent=float(late.get("percent", 0)), grace_minutes=float(late.get("grace_minutes", 0)),
        new_exercises=policy, added_later=tuple(str(i) for i in data.get("added_later") or ()),
        roster=_roster(data.get("roster") or (), where), several_files=several,
        canvas_assignment_id=str((data.get("canvas") or {}).get("assignment_id", "") or ""),
        gradescope=_gradescope(data.get("gradescope") or {}, where),
    )


def _choice(where, key, value, allowed):
    if value not in allowed:
        raise UsageError(f"{where}: {key} must be one of {', '.join(allowed)}; got {value!r}.")
    return value


def _roster(entries, where):
    students, seen = [], {}
    for entry in entries:
        entry = entry if isinstance(entry, dict) else {"id": entry}
        if entry.get("id") in (None, ""):
            raise UsageError(f"{where}: every roster entry needs an id; got {entry!r}.")
        student = Student(**{key: str(entry.get(key, "") or "") for key in Student.__dataclass_fields__})
        other = seen.get(student.id.casefold())
        if other is not None:
            raise UsageError(f"{where}: roster ids {other!r} and {student.id!r} differ only by case; they would be one "
                             "student in file names and in most LMSs. Give them different ids.")
        seen[student.id.casefold()] = student.id
        students.append(student)
    return tuple(students)


def _gradescope(data, where):
    settings = GradescopeSettings(**{k: str(v) for k, v in data.items() if k in GradescopeSettings.__dataclass_fields__})
    unknown = sorted(set(data) - set(GradescopeSettings.__dataclass_fields__))
    if unknown:
        raise UsageError(f"{where}: unknown gradescope setting(s) {', '.join(unknown)}; "
                         f"known: {', '.join(GradescopeSettings.__dataclass_fields__)}.")
    _choice(where, "gradescope.visibility", settings.visibility, VISIBILITIES)
    _choice(where, "gradescope.stdout_visibility", settings.stdout_visibility, VISIBILITIES)
    _choice(where, "gradescope.due_date", settings.due_date, DUE_DATE_SOURCES)
    return settings


def _time(value, where, key):
    try:
        return parse_time(value)
    except ValueError:
        raise UsageError(f"{where}: {key} is not an ISO 8601 time (2026-11-20T23:59:00Z): {value!r}.") from None


def parse_time(value):
    """An aware datetime from ISO 8601 text or a datetime (no zone: UTC); ``None`` stays ``None``.

    Python 3.10's ``fromisoformat`` reads only what ``isoformat`` writes, so a trailing
    ``Z`` and fractions of other than 3 or 6 digits are normalised first.
    """
    if value is None or value == "":
        return None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time(23, 59, 59))
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromisoformat(_normalise_iso(str(value).strip()))
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _normalise_iso(text):
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    date, sep, rest = text.partition("T")
    if "." not in rest:
        return text
    clock, _, tail = rest.partition(".")
    digits = len(tail) - len(tail.lstrip("0123456789"))
    fraction, zone = tail[:digits], tail[digits:]
    return f"{date}{sep}{clock}.{(fraction + '000000')[:6]}{zone}"
