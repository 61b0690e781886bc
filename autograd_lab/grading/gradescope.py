"""``autograd-lab gradescope``: a Gradescope autograder zip built from an assignment file.

The zip holds ``setup.sh`` (Gradescope runs it once, when it builds the image),
``run_autograder`` (run for every upload), the assignment file, the course's
pinned requirements and the full package (the instructor's side: Gradescope keeps
the zip private).  ``run_autograder`` calls ``python -m autograd_lab.grading.gradescope run``,
which grades the upload with ``grade --assignment`` machinery and **always**
writes ``results/results.json``: for no file, several files, a file of the wrong
kind or the wrong notebook it writes a score and a message saying what it did.
If Python itself cannot start, the shell script writes a zero-score result.

Gradescope's layout (``/autograder/submission``, ``/autograder/results``,
``/autograder/source``) is read under ``$AUTOGRADER_ROOT`` when set, so the
whole run can be tested in a temporary folder.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
# What the autograder needs from requirements/course.txt (no JupyterLab, no browser).
_NEEDED = ("torch", "numpy", "matplotlib", "graphviz", "ipykernel", "nbformat", "nbclient", "pyyaml", "jupyter_client")
VISIBILITY = "visible"

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every upload. It always leaves results/results.json behind.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
mkdir -p "$ROOT/results"
rm -f "$ROOT/results/results.json"
cd "$ROOT/source"
PYTHONPATH="$ROOT/source/package${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m autograd_lab.grading.gradescope run \\
    --root "$ROOT" --assignment "$ROOT/source/ASSIGNMENT_NAME"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  printf '%s\\n' '{"score": 0, "output": "The autograder could not start (exit status '"$status"'). This is not your fault: tell your instructor.", "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden", "tests": []}' > "$ROOT/results/results.json"
fi
exit 0
"""

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder image (Ubuntu, as root).
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip bubblewrap graphviz
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
/autograder/venv/bin/pip install --extra-index-url https://download.pytorch.org/whl/cpu -r /autograder/source/requirements.txt
/autograder/venv/bin/pip install --no-deps /autograder/source/package
"""


# --- building the zip ------------------------------------------------------------------------

def build_zip(assignment_path, out_zip):
    """Write the autograder zip for the assignment file; return its path."""
    from . import assignment

    assignment.load(assignment_path)  # refuse a broken file now, not on Gradescope
    name = "assignment" + Path(assignment_path).suffix
    out_zip = Path(out_zip)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out_zip, "w", zipfile.ZIP_DEFLATED) as archive:
        _add_text(archive, "setup.sh", SETUP_SH, executable=True)
        _add_text(archive, "run_autograder", RUN_AUTOGRADER.replace("ASSIGNMENT_NAME", name), executable=True)
        archive.write(assignment_path, name)
        _add_text(archive, "requirements.txt", _requirements())
        for path in ("pyproject.toml", "README.md"):
            if (REPOSITORY / path).exists():
                archive.write(REPOSITORY / path, f"package/{path}")
        # The grader needs the references (autograd_lab_solutions); `pip install` of the
        # package leaves them out of the venv that the students' kernels import from.
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


def _requirements():
    lines = (REPOSITORY / "requirements" / "course.txt").read_text().splitlines()
    keep = [line for line in lines if line.split("==")[0].strip().lower().replace("-", "_") in _NEEDED]
    return "\n".join(keep) + "\n"


# --- grading one upload ----------------------------------------------------------------------

def run(root, assignment_path, grade=None):
    """Grade the upload under ``root``; always write ``root/results/results.json``; return it."""
    started = time.monotonic()
    results_path = Path(root) / "results" / "results.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        results = _grade_upload(Path(root), assignment_path, grade)
    except BaseException as error:  # whatever happens, Gradescope gets a result and a reason
        results = _result(0, "The autograder failed while grading this upload. This is not your fault: "
                             f"tell your instructor.\n{type(error).__name__}: {error}\n"
                             + "".join(traceback.format_exc(limit=3)), [])
    results["execution_time"] = round(time.monotonic() - started)
    temporary = results_path.with_suffix(".part")
    temporary.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(temporary, results_path)
    return results


def _result(score, output, tests):
    return {"score": score, "output": output, "output_format": "text", "visibility": VISIBILITY,
            "stdout_visibility": "hidden", "tests": tests}


def _grade_upload(root, assignment_path, grade):
    from . import assignment, gradebook

    plan = assignment.load(assignment_path)
    upload = root / "submission"
    files = sorted(p for p in upload.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts) \
        if upload.is_dir() else []
    expected = ", ".join(f"notebook {n}" for n in plan.notebooks)
    chosen, notes = _choose(files, plan, upload)
    if not chosen:
        why = "No file was uploaded." if not files else "None of the uploaded files is a notebook of this assignment."
        tests = [_missing_test(plan, n, i) for i, n in enumerate(plan.notebooks, start=1)]
        return _result(0, "\n".join([why, f"Upload the .ipynb file(s) of {expected}.", *notes]), tests)
    with tempfile.TemporaryDirectory(prefix="gradescope-") as work:
        folder = Path(work) / "submissions" / "student"
        folder.mkdir(parents=True)
        for number, path in chosen.items():
            shutil.copy2(path, folder / f"{number}.ipynb")
        _timestamps(root, folder.parent)
        rows = gradebook.grade_assignment(plan, folder.parent, Path(work) / "out", grade=grade)
        state = gradebook.load_state(Path(work) / "out")
    row = next(r for r in rows if r["id"] == "student")
    tests = _tests(plan, row, state["students"].get("student", {}))
    graded = ", ".join(f"{path.name} as notebook {n}" for n, path in chosen.items())
    lines = [f"Graded {graded}: {row['score']:g} / {row['max_score']:g} points.", *notes, *row["notes"]]
    problems = [f"notebook {n}: {p}" for n, e in state["students"].get("student", {}).items() for p in e["problems"]]
    return _result(row["score"], "\n".join(lines + problems), tests)


def _choose(files, plan, upload):
    """Which uploaded file is which notebook; a note for every file left out."""
    from .submissions import exercise_ids_marked, read_notebook

    chosen, notes = {}, []
    for path in files:
        shown = path.relative_to(upload)
        if path.suffix != ".ipynb":
            notes.append(f"{shown}: not a notebook (.ipynb), so it was not graded.")
            continue
        notebook, problem = read_notebook(path)
        if notebook is None:
            notes.append(f"{shown}: {problem}; it was not graded.")
            continue
        numbers = sorted({i[:2] for i in exercise_ids_marked(notebook)}) or [path.name[:2]]
        number = numbers[0] if len(numbers) == 1 else None
        if number not in plan.notebooks:
            notes.append(f"{shown}: this is not a notebook of this assignment "
                         f"(expected {', '.join(plan.notebooks)}), so it was not graded.")
        elif number in chosen:
            notes.append(f"{shown}: a second file for notebook {number}; graded {chosen[number].name} only.")
        else:
            chosen[number] = path
    return chosen, notes


def _timestamps(root, folder):
    """Gradescope's own submission time (``submission_metadata.json``) drives the late policy."""
    try:
        created = json.loads((root / "submission_metadata.json").read_text())["created_at"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    (folder / "timestamps.csv").write_text(f"student,notebook,submitted_at\nstudent,,{created}\n")


def _tests(plan, row, entries):
    from .gradebook import notebook_exercises

    tests = []
    for number in plan.notebooks:
        part, entry = row["notebooks"][number], entries.get(number)
        if entry is None:
            tests.append(_missing_test(plan, number, len(tests) + 1))
            continue
        exempt = set(entry["not_in_copy"]) & set(plan.added_later) if plan.new_exercises == "exempt" else set()
        counted = [e for e in notebook_exercises(number) if e.id not in exempt]
        raw_max = sum(e.points for e in counted) or 1
        before_penalty = part["score"] + part["penalty"]
        kept = part["score"] / before_penalty if before_penalty else 1.0  # the late policy, per test too
        scale = part["max"] / raw_max * kept
        for exercise in counted:
            grade = entry["exercises"][exercise.id]
            tests.append({
                "name": f"{exercise.id} · {grade['title']}", "number": f"{number}.{len(tests) + 1}",
                "score": round(grade["score"] * scale, 4), "max_score": round(exercise.points * part["max"] / raw_max, 4),
                "status": "passed" if grade["status"] == "passed" else "failed",
                "output": "\n".join([f"status: {grade['status']}", *grade["messages"]]),
                "output_format": "md", "visibility": VISIBILITY,
                "tags": [grade["misconception"]] if grade.get("misconception") else [],
            })
    return tests


def _missing_test(plan, number, index):
    from .gradebook import notebook_exercises

    maximum = plan.points.get(number)
    maximum = sum(e.points for e in notebook_exercises(number)) if maximum is None else maximum
    return {"name": f"notebook {number}", "number": str(index), "score": 0.0, "max_score": float(maximum),
            "status": "failed", "output": f"Notebook {number} was not uploaded.", "output_format": "text",
            "visibility": VISIBILITY, "tags": ["missing"]}


# --- command lines ----------------------------------------------------------------------------

def main(args):
    """``autograd-lab gradescope ASSIGNMENT --out ZIP``."""
    path = build_zip(args.assignment, args.out)
    print(f"Wrote {path}: upload it as the Gradescope autograder (setup.sh, run_autograder, the package).")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m autograd_lab.grading.gradescope")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    parser.add_argument("--assignment", required=True)
    options = parser.parse_args()
    run(options.root, options.assignment)
    sys.exit(0)
