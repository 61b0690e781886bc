"""Grade an assignment into a gradebook that regrades merge into, never overwrite.

``grade_assignment`` grades each notebook of the assignment with the batch grader
(each notebook against its own exercises only), then merges the results into
``OUT/gradebook.json``, the one source of truth, keyed by student, notebook and
exercise.  A regrade of one student (``students=``) or one exercise
(``exercise_ids=``) replaces exactly those entries and keeps everything else.
From that file it writes:

* ``gradebook.csv``: one row per student (roster first), per-notebook score,
  maximum, days late and late penalty, the total, the status and notes;
* ``lms.csv``: ``id, email, name, score, max_score`` for an LMS import;
* ``feedback/<student>.html``: the student's offline feedback page;
* ``item_analysis.json``/``.md`` over every graded notebook.
"""

import csv
import datetime as dt
import json
import os
import shutil
from pathlib import Path

from autograd_lab import checking

from . import feedback, reports
from .submissions import UsageError, exercise_ids_marked, read_notebook

STATE = "gradebook.json"


def notebook_exercises(number):
    return [e for e in checking.all_exercises() if e.id[:2] == number]


def batch_grader(jobs=2, cell_timeout=60.0, **options):
    """The default way to grade one notebook's files: ``autograd-lab grade`` itself."""
    def grade(folder, number, out):
        from .batch import Options, grade_batch
        graded = grade_batch([str(folder)], Options(out=str(out), jobs=jobs, cell_timeout=cell_timeout,
                                                    notebooks=(number,), progress=False, **options))
        return {report["student"]: report for report in graded}
    return grade


def grade_assignment(assignment, folder, out, *, students=None, exercise_ids=None, grade=None):
    """Grade (or regrade part of) ``assignment`` from the submissions in ``folder`` into ``out``."""
    from .assignment import find

    grade = grade or batch_grader()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = load_state(out)
    found = find(folder, assignment)
    wanted = _wanted_notebooks(assignment, exercise_ids)
    for number in wanted:
        files = {student: path for (student, nb), path in found.files.items()
                 if nb == number and (not students or student in students)}
        if not files:
            continue
        stage = out / ".stage" / number
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        for student, path in files.items():
            shutil.copy2(path, stage / f"{student}.ipynb")
        graded = grade(stage, number, out / "runs" / number)
        for student, report in graded.items():
            entry = _entry(report, number, assignment, files[student], found.submitted[(student, number)])
            _merge(state, student, number, entry, exercise_ids)
        shutil.rmtree(stage, ignore_errors=True)
    state["ignored"] = [list(item) for item in found.ignored]
    save_state(out, state)
    rows = write_outputs(out, assignment, state)
    return rows


def _wanted_notebooks(assignment, exercise_ids):
    if not exercise_ids:
        return list(assignment.notebooks)
    unknown = [e for e in exercise_ids if e[:2] not in assignment.notebooks]
    if unknown:
        raise UsageError(f"--exercise {', '.join(unknown)}: not in this assignment's notebooks "
                         f"({', '.join(assignment.notebooks)}).")
    return sorted({e[:2] for e in exercise_ids})


def _entry(report, number, assignment, path, submitted_at):
    notebook, _ = read_notebook(path)
    by_id = {e.id: e for e in notebook_exercises(number)}
    grades = feedback.renamed_answers([dict(g) for g in report["exercises"] if g["exercise_id"] in by_id],
                                      by_id, notebook)
    marked = exercise_ids_marked(notebook) if notebook is not None else set()
    # An exercise whose cell is not in the student's copy was added after it was made.
    absent = sorted(set(by_id) - marked) if marked else []
    return {
        "submission": str(path), "sha256": report.get("sha256", ""), "status": report["status"],
        "submitted_at": submitted_at.isoformat() if submitted_at else None,
        "exercises": {g["exercise_id"]: g for g in grades},
        "not_in_copy": absent,
        "problems": feedback.problems(report),
        "graded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _merge(state, student, number, entry, exercise_ids):
    notebooks = state["students"].setdefault(student, {})
    old = notebooks.get(number)
    if exercise_ids and old is not None:
        for exercise_id in exercise_ids:
            if exercise_id in entry["exercises"]:
                old["exercises"][exercise_id] = entry["exercises"][exercise_id]
        old["regraded"] = sorted(set(old.get("regraded", [])) | set(exercise_ids))
        return
    notebooks[number] = entry


def load_state(out):
    path = Path(out) / STATE
    if path.exists():
        return json.loads(path.read_text())
    return {"students": {}}


def save_state(out, state):
    path = Path(out) / STATE
    temporary = path.with_suffix(".part")
    temporary.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)


# --- scores -----------------------------------------------------------------------------

def notebook_score(assignment, number, entry):
    """The notebook's part of a row: score (after policy, scaling and late penalty) and its parts."""
    all_ids = [e.id for e in notebook_exercises(number)]
    full = sum(e.points for e in notebook_exercises(number))
    scale_to = assignment.points.get(number)
    if entry is None:
        return {"status": "missing", "score": 0.0, "max": scale_to if scale_to is not None else full,
                "late_days": 0, "penalty": 0.0, "notes": [f"{number}: missing"]}
    absent = set(entry["not_in_copy"])
    later = absent & set(assignment.added_later)
    exempt = later if assignment.new_exercises == "exempt" else set()
    counted = [i for i in all_ids if i not in exempt]
    grades = entry["exercises"]
    raw = sum(grades[i]["score"] for i in counted if i in grades)
    raw_max = sum(e.points for e in notebook_exercises(number) if e.id in counted)
    maximum = scale_to if scale_to is not None else raw_max
    scaled = raw * (maximum / raw_max) if raw_max else 0.0
    when = entry.get("submitted_at")
    days = assignment.late_days(dt.datetime.fromisoformat(when) if when else None)
    factor = assignment.late_factor(days)
    notes = []
    if later:
        counted_or_not = "not counted" if exempt else "counted"
        notes.append(f"{number}: {', '.join(sorted(later))} not in your copy (added later), {counted_or_not}")
    if absent - later:
        notes.append(f"{number}: the cell of {', '.join(sorted(absent - later))} is missing from your copy; counted")
    if days:
        notes.append(f"{number}: {days} day(s) late, {assignment.describe_late()}: kept {factor:.0%}")
    if entry["problems"]:
        notes.append(f"{number}: {len(entry['problems'])} problem(s)")
    return {"status": entry["status"], "score": round(scaled * factor, 2), "max": round(maximum, 2),
            "late_days": days, "penalty": round(scaled - scaled * factor, 2), "notes": notes}


def rows(assignment, state):
    """One row per student: the roster in its order, then students not on it, alphabetically."""
    roster = {s.id: s for s in assignment.roster}
    order = [s.id for s in assignment.roster] + sorted(set(state["students"]) - set(roster))
    table = []
    for student in order:
        entries = state["students"].get(student, {})
        parts = {n: notebook_score(assignment, n, entries.get(n)) for n in assignment.notebooks}
        info = roster.get(student)
        submitted = [n for n in assignment.notebooks if n in entries]
        status = "missing" if not submitted else "partial" if len(submitted) < len(assignment.notebooks) else "graded"
        notes = [note for part in parts.values() for note in part["notes"]]
        if roster and info is None:
            notes.append("not on the roster")
        table.append({
            "id": student, "name": info.name if info else "", "email": info.email if info else "",
            "status": status, "notebooks": parts,
            "score": round(sum(p["score"] for p in parts.values()), 2),
            "max_score": round(sum(p["max"] for p in parts.values()), 2),
            "notes": notes,
        })
    return table


# --- files --------------------------------------------------------------------------------

def write_outputs(out, assignment, state):
    out = Path(out)
    table = rows(assignment, state)
    _write_csv(out / "gradebook.csv", _gradebook_header(assignment),
               [_gradebook_row(assignment, row) for row in table])
    _write_csv(out / "lms.csv", ["id", "email", "name", "score", "max_score"],
               [[r["id"], r["email"], r["name"], f"{r['score']:g}", f"{r['max_score']:g}"] for r in table])
    for row in table:
        _write_feedback(out, assignment, row, state["students"].get(row["id"], {}))
    graded = [_as_report(student, entries) for student, entries in sorted(state["students"].items())]
    ids = [e.id for n in assignment.notebooks for e in notebook_exercises(n)]
    reports.write_item_analysis(str(out), graded, ids)
    return table


def _gradebook_header(assignment):
    columns = ["id", "name", "email", "status", "score", "max_score"]
    for number in assignment.notebooks:
        columns += [f"{number}_score", f"{number}_max", f"{number}_status", f"{number}_late_days", f"{number}_penalty"]
    return columns + ["notes"]


def _gradebook_row(assignment, row):
    cells = [row["id"], row["name"], row["email"], row["status"], f"{row['score']:g}", f"{row['max_score']:g}"]
    for number in assignment.notebooks:
        part = row["notebooks"][number]
        cells += [f"{part['score']:g}", f"{part['max']:g}", part["status"], part["late_days"], f"{part['penalty']:g}"]
    return cells + [" | ".join(row["notes"])]


def _write_csv(path, header, body):
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(body)


def _as_report(student, entries):
    grades = [g for number in sorted(entries) for g in entries[number]["exercises"].values()]
    return {"student": student, "exercises": grades}


def _write_feedback(out, assignment, row, entries):
    pairs = [(n, g) for n in assignment.notebooks if n in entries for g in entries[n]["exercises"].values()]
    problem_lines = [f"notebook {n}: {line}" for n in assignment.notebooks if n in entries
                     for line in entries[n]["problems"]]
    summary = (f"{row['id']}: {row['score']:g} / {row['max_score']:g} points ({row['status']}). "
               + " ".join(row["notes"]))
    feedback.write_html(str(out / "feedback" / f"{reports.file_stem(row['id'])}.html"),
                        f"{assignment.name}: feedback for {row['name'] or row['id']}", pairs, problem_lines, summary)
