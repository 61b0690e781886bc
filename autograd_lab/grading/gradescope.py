"""``autograd-lab gradescope``: a Gradescope autograder zip built from an assignment file.

The zip holds ``setup.sh`` (Gradescope runs it once, as root, when it builds the
image), ``run_autograder`` (run as root for every upload), the assignment (as
YAML), ``requirements.txt`` (``requirements/autograder.txt``: pins with wheels for
Python 3.10, the default image's, through 3.13), the full package with its
solutions, and the instructor's release key (to trust release stamps).

**The container is the sandbox.**  Docker's default seccomp profile stops
bubblewrap from making namespaces, and Gradescope gives each upload a container
of its own.  So ``setup.sh`` installs a venv with the requirements and **no**
course package; builds the student release (no solutions) into
``/autograder/release``; makes both readable by any user and
``/autograder/source`` root-only.  ``run_autograder`` makes ``results/`` and
``submission_metadata.json`` root-only too, then grades with the ``container``
sandbox (docs/contracts.md §4): the student's kernel runs as an unprivileged uid
and can read neither the solutions, nor the assignment, nor its results.

``run`` (``python -m autograd_lab.grading.gradescope run``) grades the upload with
the ``grade --assignment`` machinery and **always** writes ``results/results.json``:
for no file, several files, a file of the wrong kind or the wrong notebook it
writes a score and says what it did; if the grader fails, the student reads
"tell your instructor" and the traceback goes to the instructor-only log.  If
Python itself cannot start, the shell script writes a zero-score result.

Gradescope's ``submission_metadata.json`` decides the submission time
(``created_at``), the student (``users``) and the due date: the student's own
(``users[].assignment.due_date``, an extension) before the assignment's, unless
the assignment file says ``gradescope: {due_date: assignment}``.  Visibility is
``gradescope: {visibility: ...}`` (``visible``, ``hidden``, ``after_due_date``,
``after_published``); an "upload" test worth 0 points is always visible, so a
student knows which file was graded as which notebook even while scores are hidden.

Gradescope's layout (``/autograder/{source,submission,results,release,venv}``) is
read under ``$AUTOGRADER_ROOT`` when set, so the whole run can be simulated.
"""

import argparse
import dataclasses
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

import yaml

REPOSITORY = Path(__file__).resolve().parents[2]
ASSIGNMENT = "assignment.yml"
KEY = "release.key"

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this as root for every upload. It always leaves results/results.json behind.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-${AUTOGRADER_VENV:-$ROOT/venv}/bin/python}"
mkdir -p "$ROOT/results"
rm -f "$ROOT/results/results.json"
# The student's kernel runs as an unprivileged user: none of this is readable by it.
chmod 700 "$ROOT/source" "$ROOT/results"
[ -e "$ROOT/submission_metadata.json" ] && chmod 600 "$ROOT/submission_metadata.json"
cd "$ROOT"
AUTOGRAD_LAB_RELEASE_KEY="$ROOT/source/release.key" PYTHONPATH="$ROOT/source/package" \\
    "$PYTHON" -m autograd_lab.grading.gradescope run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  printf '%s\\n' '{"score": 0, "execution_time": 0, "output": "The autograder could not start (exit status '"$status"'). This is not your fault: tell your instructor.", "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden", "tests": []}' > "$ROOT/results/results.json"
fi
exit 0
"""

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image
# (default image: Ubuntu 22.04, whose python3 is 3.10). Every path can be moved for a simulation.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
VENV="${AUTOGRADER_VENV:-$ROOT/venv}"
BASE_PYTHON="${AUTOGRADER_BASE_PYTHON:-python3}"
PIP_ARGS="${AUTOGRADER_PIP_ARGS-"--extra-index-url https://download.pytorch.org/whl/cpu"}"
if [ "${AUTOGRADER_SKIP_APT:-0}" != 1 ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv python3-pip graphviz
fi
"$BASE_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "the autograder needs Python 3.10 or newer")'
# The venv holds the requirements only: no course package, so no solutions, for the kernel to import.
[ -x "$VENV/bin/python" ] || "$BASE_PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet $PIP_ARGS -r "$SOURCE/requirements.txt"
# Only root reads the package, the solutions, the assignment and the release key.
chown -R root:root "$SOURCE"
chmod -R go-rwx "$SOURCE"
# The student build the kernels import (no solutions), readable by the kernel's user.
AUTOGRAD_LAB_RELEASE_KEY="$SOURCE/release.key" PYTHONPATH="$SOURCE/package" \\
    "$VENV/bin/python" -m autograd_lab.grading.gradescope setup --root "$ROOT"
# The kernel runs as an unprivileged uid: it may read the venv and the release, nothing else of ours.
chmod a+rx "$ROOT"
chmod -R a+rX "$VENV" "$ROOT/release"
"""


# --- building the zip ------------------------------------------------------------------------

def build_zip(assignment_path, out_zip):
    """Write the autograder zip for the assignment file; return its path."""
    from . import assignment, release

    data = assignment.read_data(assignment_path)
    assignment.from_dict(data, str(assignment_path))  # refuse a broken file now, not on Gradescope
    out_zip = Path(out_zip)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out_zip, "w", zipfile.ZIP_DEFLATED) as archive:
        _add_text(archive, "setup.sh", SETUP_SH, executable=True)
        _add_text(archive, "run_autograder", RUN_AUTOGRADER, executable=True)
        # YAML, whatever the instructor wrote: Python 3.10 has no TOML reader of its own.
        _add_text(archive, ASSIGNMENT, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        _add_text(archive, "requirements.txt", (REPOSITORY / "requirements" / "autograder.txt").read_text())
        _add_text(archive, KEY, release.release_key().decode() + "\n")
        for path in ("pyproject.toml", "README.md", "requirements/course.txt"):
            if (REPOSITORY / path).exists():
                archive.write(REPOSITORY / path, f"package/{path}")
        # The grader needs the references; they stay in /autograder/source, root-only.
        for package in ("autograd_lab", "autograd_lab_solutions"):
            for path in sorted((REPOSITORY / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    archive.write(path, f"package/{path.relative_to(REPOSITORY)}")
    return str(out_zip)


def _add_text(archive, name, text, executable=False):
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = (0o755 if executable else 0o644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, text)


def setup(root):
    """At image build time: the student release the kernels import, in ``root/release``."""
    from . import release

    release.build(Path(root) / "release")


# --- grading one upload ----------------------------------------------------------------------

def run(root, assignment_path=None, grade=None):
    """Grade the upload under ``root``; always write ``root/results/results.json``; return it."""
    started = time.monotonic()
    root = Path(root)
    results_path = root / "results" / "results.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    visibility = "visible"
    try:
        from . import assignment
        plan = assignment.load(assignment_path or root / "source" / ASSIGNMENT)
        visibility = plan.gradescope.visibility
        results = _grade_upload(root, plan, grade)
    except BaseException as error:  # whatever happens, Gradescope gets a result and a reason
        reference = secrets.token_hex(4)
        # The traceback goes to the log only the instructor reads: it names our files.
        print(f"autograder error {reference}:", file=sys.stdout)
        traceback.print_exc(file=sys.stdout)
        results = _result(0, "The autograder failed while grading this upload. This is not your fault: "
                             f"tell your instructor (error {reference}: {type(error).__name__}).", [], visibility)
    results["execution_time"] = round(time.monotonic() - started)
    temporary = results_path.with_suffix(".part")
    temporary.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(temporary, results_path)
    return results


def _result(score, output, tests, visibility="visible"):
    return {"score": score, "output": output, "output_format": "text", "visibility": visibility,
            "stdout_visibility": "hidden", "tests": tests}


def _grade_upload(root, plan, grade):
    from . import gradebook
    from .assignment import Student

    metadata = _metadata(root)
    student = _student(plan, metadata)
    due = effective_due(plan, metadata)
    upload = root / "submission"
    chosen, notes, uploaded = _choose(upload, plan)
    expected = ", ".join(f"notebook {n}" for n in plan.notebooks)
    if not chosen:
        why = "No file was uploaded." if not uploaded else "None of the uploaded files is a notebook of this assignment."
        tests = [_upload_test([why, *notes])] + [_missing_test(plan, n) for n in plan.notebooks]
        return _result(0, "\n".join([why, f"Upload the .ipynb file(s) of {expected}.", *notes]), _numbered(tests),
                       plan.gradescope.visibility)
    grade = grade or gradebook.batch_grader(stream=sys.stdout, **_container_options(root))
    with tempfile.TemporaryDirectory(prefix="gradescope-") as work:
        folder = Path(work) / "submissions" / "student"
        folder.mkdir(parents=True)
        for number, path in chosen.items():
            shutil.copyfile(path, folder / f"{number}.ipynb")
        created = metadata.get("created_at")
        if created:
            (folder.parent / "timestamps.csv").write_text(f"student,notebook,submitted_at\nstudent,,{created}\n")
        # Gradescope keeps the roster: whoever it sends is on it (never "not on the roster").
        plan = dataclasses.replace(plan, roster=(Student("student", student.name or student.id, student.email),))
        table = gradebook.grade_assignment(plan, folder.parent, Path(work) / "out", grade=grade,
                                           stream=sys.stdout, context={"student": due})
        state = gradebook.load_state(Path(work) / "out")
        _log_sandbox(Path(work) / "out" / "runs")
    row = next(r for r in table if r["id"] == "student")
    entries = state["students"].get("student", {})
    graded = ", ".join(f"{path.name} as notebook {n}" for n, path in chosen.items())
    lines = [f"Graded {graded}: {row['score']:g} / {row['max_score']:g} points.", _due_line(plan, due), *notes,
             *row["notes"]]
    problems = [f"notebook {n}: {p}" for n, e in entries.items() for p in e["problems"]]
    tests = [_upload_test([f"Graded {graded}.", *notes])] + _tests(plan, row, entries)
    return _result(row["score"], "\n".join(gradebook.clean([line for line in lines + problems if line])),
                   _numbered(tests), plan.gradescope.visibility)


def _log_sandbox(runs):
    """Say in the instructor's log which sandbox the kernels ran in."""
    for path in sorted(runs.glob("*/students/*.json")):
        try:
            print(f"sandbox: {json.loads(path.read_text()).get('sandbox')}", file=sys.stdout)
        except (OSError, ValueError):
            continue
        return


def _container_options(root):
    """Ask the back end for the container as the sandbox (docs/contracts.md §4), with the prebuilt release.

    ``AUTOGRADER_SANDBOX=bubblewrap`` asks for bwrap instead (a test on a machine
    whose Python the kernel's unprivileged uid cannot run).
    """
    from .batch import Options

    names = {f.name for f in dataclasses.fields(Options)}
    wanted = {"sandbox": os.environ.get("AUTOGRADER_SANDBOX", "container"), "release": str(root / "release"),
              "jobs": 1, "progress": True}
    if not (root / "release").is_dir():
        wanted.pop("release")
    missing = sorted(set(wanted) - names)
    if missing:
        print(f"autograd-lab: this grader has no {', '.join(missing)} option: using its defaults.", file=sys.stdout)
    return {key: value for key, value in wanted.items() if key in names}


def _metadata(root):
    try:
        data = json.loads((root / "submission_metadata.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _student(plan, metadata):
    """The student Gradescope names (the first of a group), matched to the roster by email when it has one."""
    from .assignment import Student
    from .collect import fold

    users = [u for u in metadata.get("users") or () if isinstance(u, dict)]
    first = users[0] if users else {}
    email, name = str(first.get("email") or ""), str(first.get("name") or "")
    for entry in plan.roster:
        if email and (fold(entry.email) == fold(email) or fold(entry.id) == fold(email)):
            return entry
    names = ", ".join(str(u.get("name") or u.get("email") or "") for u in users)
    return Student(email or name or "student", names or name, email)


def effective_due(plan, metadata):
    """The due date that applies: the student's extension, Gradescope's due date, or the assignment's."""
    from .assignment import parse_time

    if plan.gradescope.due_date == "assignment":
        return plan.due
    dates = []
    for user in metadata.get("users") or ():
        own = user.get("assignment") if isinstance(user, dict) else None
        if isinstance(own, dict) and own.get("due_date"):
            dates.append(parse_time(own["due_date"]))
    if dates:
        return max(dates)    # a group is late only after the latest of its members' due dates
    shared = (metadata.get("assignment") or {}).get("due_date") if isinstance(metadata.get("assignment"), dict) else None
    return parse_time(shared) if shared else plan.due


def _due_line(plan, due):
    if due is None:
        return ""
    if plan.due is not None and due != plan.due and plan.gradescope.due_date == "gradescope":
        return f"Due {due.isoformat()} (Gradescope's due date for you; the assignment file says {plan.due.isoformat()})."
    return f"Due {due.isoformat()}."


def _choose(upload, plan):
    """Which uploaded file is which notebook; a note for every file left out.  Returns (chosen, notes, files)."""
    from .submissions import exercise_ids_marked, printable, read_notebook

    files, notes, candidates = [], [], {}
    for path in sorted(upload.rglob("*")) if upload.is_dir() else ():
        if ".ipynb_checkpoints" in path.parts or path.is_dir():
            continue
        shown = printable(path.relative_to(upload))
        files.append(path)
        if path.is_symlink() or not path.is_file():
            notes.append(f"{shown}: a link or not a regular file, so it was not graded.")
            continue
        if path.suffix.lower() != ".ipynb":
            notes.append(f"{shown}: not a notebook (.ipynb), so it was not graded.")
            continue
        notebook, problem = read_notebook(path)
        if notebook is None:
            notes.append(f"{problem.replace(printable(path), shown)}; it was not graded.")
            continue
        numbers = sorted({i[:2] for i in exercise_ids_marked(notebook)}) or [path.name[:2]]
        number = numbers[0] if len(numbers) == 1 else None
        if number not in plan.notebooks:
            notes.append(f"{shown}: this is not a notebook of this assignment "
                         f"(expected {', '.join(plan.notebooks)}), so it was not graded.")
        else:
            candidates.setdefault(number, []).append((path, shown))
    chosen = {}
    for number, items in sorted(candidates.items()):
        if plan.several_files == "newest":   # to the minute: files of one upload (one time) keep name order
            items = sorted(items, key=lambda item: -(int(item[0].stat().st_mtime) // 60))
        chosen[number] = items[0][0]
        for _, shown in items[1:]:
            notes.append(f"{shown}: a second file for notebook {number}; graded {items[0][1]} only.")
    return chosen, notes, files


def _tests(plan, row, entries):
    from .gradebook import notebook_exercises

    tests = []
    for number in plan.notebooks:
        part, entry = row["notebooks"][number], entries.get(number)
        if entry is None:
            tests.append(_missing_test(plan, number))
            continue
        counted = [e for e in notebook_exercises(number) if e.id not in part["exempt"]]
        raw_max = sum(e.points for e in counted) or 1
        before_penalty = part["score"] + part["penalty"]
        kept = part["score"] / before_penalty if before_penalty else 1.0  # the late policy, per test too
        scale = part["max"] / raw_max
        for exercise in counted:
            grade = entry["exercises"][exercise.id]
            tests.append({
                "name": f"{exercise.id} · {grade['title']}", "number": number,
                "score": round(grade["score"] * scale * kept, 4), "max_score": round(exercise.points * scale, 4),
                "status": "passed" if grade["status"] == "passed" else "failed",
                "output": "\n".join([f"status: {grade['status']}", *grade["messages"]]),
                "output_format": "md", "visibility": plan.gradescope.visibility,
                "tags": [grade["misconception"]] if grade.get("misconception") else [],
            })
    return tests


def _upload_test(lines):
    """Worth nothing, always visible: which file was graded as which notebook, even while scores are hidden."""
    return {"name": "upload", "number": "upload", "score": 0.0, "max_score": 0.0, "status": "passed",
            "output": "\n".join(lines), "output_format": "text", "visibility": "visible", "tags": []}


def _missing_test(plan, number):
    from .gradebook import notebook_maximum

    return {"name": f"notebook {number}", "number": number, "score": 0.0,
            "max_score": float(notebook_maximum(plan, number)), "status": "failed",
            "output": f"Notebook {number} was not uploaded.", "output_format": "text",
            "visibility": plan.gradescope.visibility, "tags": ["missing"]}


def _numbered(tests):
    """Unique numbers in Gradescope's ``1.2`` style: the notebook, then the test within it."""
    counts = {}
    for test in tests:
        group = test["number"]
        if group == "upload":
            test["number"] = "0"      # first, and apart from notebook 00's 0.1, 0.2, ...
            continue
        counts[group] = counts.get(group, 0) + 1
        test["number"] = f"{int(group)}.{counts[group]}"
    return tests


# --- command lines ----------------------------------------------------------------------------

def main(args):
    """``autograd-lab gradescope ASSIGNMENT --out ZIP``."""
    path = build_zip(args.assignment, args.out)
    print(f"Wrote {path}: upload it as the Gradescope autograder (setup.sh, run_autograder, the package). "
          "It holds the solutions and your release key: keep it private.")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m autograd_lab.grading.gradescope")
    parser.add_argument("command", choices=["run", "setup"])
    parser.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    parser.add_argument("--assignment", default=None)
    options = parser.parse_args()
    if options.command == "setup":
        setup(options.root)
    else:
        run(options.root, options.assignment)
    sys.exit(0)
