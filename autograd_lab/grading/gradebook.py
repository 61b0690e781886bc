"""Grade an assignment into a gradebook that regrades merge into, never overwrite.

``grade_assignment`` sorts the submissions out (``collect``), grades each notebook
of the assignment with the batch grader (each against its own exercises only),
then merges the results into ``OUT/gradebook.json``, the one source of truth,
keyed by student, notebook and exercise.  A regrade of one student
(``students=``) or one exercise (``exercise_ids=``) replaces exactly those
entries and keeps everything else.  From that file it writes:

* ``gradebook.csv``: the instructor's table, one row per student (roster first,
  then those off it), per-notebook score, maximum, days late and penalty, the
  files not graded, copy flags and notes;
* the LMS imports (``exports.py``): ``lms.csv``, ``canvas.csv``, ``moodle.csv``
  and ``off_roster.csv``;
* ``feedback/<file>.html``: each student's page (never another student's name);
* ``item_analysis.json``/``.md`` over every graded notebook.

Text that came out of a kernel is made writable once, when it enters the state
(``clean``): a forged record with an unencodable character can cost nothing.
"""

import datetime as dt
import difflib
import json
import os
import shutil
import sys
from pathlib import Path

from autograd_lab import checking

from . import exports, feedback, reports
from .collect import collect, fold
from .submissions import UsageError, exercise_ids_marked, printable, read_notebook

STATE = "gradebook.json"


def notebook_exercises(number):
    return [e for e in checking.all_exercises() if e.id[:2] == number]


def batch_grader(base=None, stream=None, **fields):
    """The default way to grade one notebook's files: ``autograd-lab grade`` itself.

    ``base`` is the command line's ``batch.Options`` (every setting kept), ``fields``
    any to change (``jobs=2``, ``sandbox=...``); the output folder and notebook are set per call.
    """
    def grade(folder, number, out):
        import dataclasses

        from .batch import Options, grade_batch
        options = dataclasses.replace(base or Options(out=""), **fields, out=str(out), notebooks=(number,))
        graded = grade_batch([str(folder)], options, stream=stream)
        return {report["student"]: report for report in graded}
    return grade


def grade_assignment(assignment, folder, out, *, students=None, exercise_ids=None, grade=None, stream=None,
                     context=None):
    """Grade (or regrade part of) ``assignment`` from the submissions in ``folder`` into ``out``.

    ``context`` (Gradescope's) may set, per student, the due date that applies (an extension).
    """
    grade = grade or batch_grader(stream=stream)
    stream = stream or sys.stderr
    out = Path(out)
    _check_exercises(assignment, exercise_ids)
    found = collect(folder, assignment)
    chosen = _check_students(assignment, found, students)
    out.mkdir(parents=True, exist_ok=True)
    state = load_state(out)
    for number in _wanted_notebooks(assignment, exercise_ids):
        files = {student: path for (student, nb), path in found.files.items()
                 if nb == number and (chosen is None or student in chosen)}
        if not files:
            continue
        print(f"notebook {number}: grading {len(files)} file(s)", file=stream, flush=True)
        stage = out / ".stage" / number
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        stems = unique_stems(files)
        for student, path in files.items():
            shutil.copyfile(path, stage / f"{stems[student]}.ipynb")
        graded = grade(stage, number, out / "runs" / number)
        by_stem = {stem: student for student, stem in stems.items()}
        for stem, report in graded.items():
            student = by_stem.get(stem)
            if student is None:
                continue
            entry = _entry(report, number, files[student], found, (student, number), (context or {}).get(student))
            _merge(state, student, number, entry, exercise_ids)
        shutil.rmtree(stage, ignore_errors=True)
    state["ignored"] = [[clean(path), clean(why)] for path, why, student in found.ignored if student is None]
    state["not_graded"] = _not_graded(found)
    state["collisions"] = [clean(line) for line in found.collisions]
    save_state(out, state)
    return write_outputs(out, assignment, state)


def _check_exercises(assignment, exercise_ids):
    known = {e.id for n in assignment.notebooks for e in notebook_exercises(n)}
    for exercise_id in exercise_ids or ():
        if exercise_id not in known:
            close = difflib.get_close_matches(exercise_id, sorted(known), n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise UsageError(f"--exercise {exercise_id}: not an exercise of this assignment's notebooks "
                             f"({', '.join(assignment.notebooks)}).{hint}")


def _check_students(assignment, found, students):
    """The canonical ids of ``--student`` names (any case); an unknown one is a usage error."""
    if not students:
        return None
    known = {fold(s): s for s in [*(r.id for r in assignment.roster), *found.students()]}
    for r in assignment.roster:
        if r.email:
            known.setdefault(fold(r.email), r.id)
    chosen = set()
    for name in students:
        match = known.get(fold(name))
        if match is None:
            close = difflib.get_close_matches(name, sorted(known.values()), n=3)
            hint = f" Did you mean {', '.join(map(printable, close))}?" if close else ""
            raise UsageError(f"--student {printable(name)}: no such student on the roster or among the "
                             f"submissions.{hint}")
        chosen.add(match)
    return chosen


def _wanted_notebooks(assignment, exercise_ids):
    if not exercise_ids:
        return list(assignment.notebooks)
    return sorted({e[:2] for e in exercise_ids})


def unique_stems(students):
    """A file name per student, unique even where case does not count (``Victor`` and ``victor``)."""
    stems, taken = {}, set()
    for student in sorted(students, key=lambda s: (fold(s), s)):
        base = reports.file_stem(student)
        stem, number = base, 1
        while stem.casefold() in taken:
            number += 1
            stem = f"{base}-{number}"
        taken.add(stem.casefold())
        stems[student] = stem
    return stems


def _entry(report, number, path, found, key, due):
    from . import release

    notebook, _ = read_notebook(path)
    by_id = {e.id: e for e in notebook_exercises(number)}
    grades = feedback.renamed_answers([dict(g) for g in report["exercises"] if g["exercise_id"] in by_id],
                                      by_id, notebook)
    marked = exercise_ids_marked(notebook) if notebook is not None else set()
    stamp = release.read_stamp(notebook, release.release_key(create=False))
    absent = sorted(set(by_id) - marked) if marked else []
    lines = feedback.problems(report)
    notes = [found.renamed[key]] if key in found.renamed else []
    return clean({
        "submission": printable(path), "sha256": report.get("sha256", ""), "status": report["status"],
        "submitted_at": found.submitted[key].isoformat() if found.submitted.get(key) else None,
        "due": due.isoformat() if due else None,
        "exercises": {g["exercise_id"]: g for g in grades},
        "not_in_copy": absent,
        # Evidence that the copy predates an exercise: a signed release stamp that did not list it.
        "not_in_release": sorted(set(absent) - set(stamp["exercises"])) if stamp else [],
        "release": stamp["release"] if stamp else None,
        "problems": reports.for_student(lines),
        "flags": [line for line in lines if line.startswith(reports.FLAG)],
        "notes": notes,
        "graded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    })


def _not_graded(found):
    """student -> [[file, why]]: versions not graded and files that could not be placed."""
    listed = {}
    for (student, _), items in sorted(found.others.items()):
        listed.setdefault(student, []).extend([clean(shown), clean(why)] for shown, why in items)
    for shown, why, student in found.ignored:
        if student is not None:
            listed.setdefault(student, []).append([clean(shown), clean(why)])
    return listed


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


def clean(value):
    """``value`` with every string made encodable (lone surrogates written ``\\udc80``)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def load_state(out):
    path = Path(out) / STATE
    if path.exists():
        return clean(json.loads(path.read_text(encoding="utf-8")))
    return {"students": {}}


def save_state(out, state):
    path = Path(out) / STATE
    temporary = path.with_suffix(".part")
    temporary.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, path)


# --- scores -----------------------------------------------------------------------------

def notebook_maximum(assignment, number):
    """The notebook's points: the same for every student (an LMS compares them)."""
    scale_to = assignment.points.get(number)
    return scale_to if scale_to is not None else sum(e.points for e in notebook_exercises(number))


def notebook_score(assignment, number, entry):
    """The notebook's part of a row: score (after policy, scaling and late penalty) and its parts."""
    maximum = notebook_maximum(assignment, number)
    if entry is None:
        return {"status": "missing", "score": 0.0, "max": round(maximum, 2), "late_days": 0, "penalty": 0.0,
                "notes": [f"{number}: missing"], "exempt": []}
    absent = set(entry["not_in_copy"])
    listed = absent & set(assignment.added_later)
    proven = listed & set(entry.get("not_in_release", ()))
    exempt = proven if assignment.new_exercises == "exempt" else set()
    exercises = notebook_exercises(number)
    counted = [e for e in exercises if e.id not in exempt]
    grades = entry["exercises"]
    raw = sum(grades[e.id]["score"] for e in counted if e.id in grades)
    raw_max = sum(e.points for e in counted)
    scaled = raw * (maximum / raw_max) if raw_max else 0.0
    due = entry.get("due")
    when = entry.get("submitted_at")
    days = assignment.late_days(dt.datetime.fromisoformat(when) if when else None,
                                dt.datetime.fromisoformat(due) if due else None)
    factor = assignment.late_factor(days)
    notes = list(entry.get("notes", ()))
    if proven:
        counted_or_not = "not counted (the rest is scaled to the notebook's points)" if exempt else "counted"
        notes.append(f"{number}: {', '.join(sorted(proven))} not in your copy (added later), {counted_or_not}")
    if listed - proven:
        notes.append(f"{number}: the cell of {', '.join(sorted(listed - proven))} is missing from your copy, and "
                     "your copy's release stamp does not show it was added later; counted")
    if absent - listed:
        notes.append(f"{number}: the cell of {', '.join(sorted(absent - listed))} is missing from your copy; counted")
    if days:
        notes.append(f"{number}: {days} day(s) late, {assignment.describe_late()}: kept {factor:.0%}")
    if entry["problems"]:
        notes.append(f"{number}: {len(entry['problems'])} problem(s)")
    return {"status": entry["status"], "score": round(scaled * factor, 2), "max": round(maximum, 2),
            "late_days": days, "penalty": round(scaled - scaled * factor, 2), "notes": notes,
            "exempt": sorted(exempt)}


def rows(assignment, state):
    """One row per student: the roster in its order, then students not on it, alphabetically."""
    from .assignment import Student

    roster = {s.id: s for s in assignment.roster}
    order = [s.id for s in assignment.roster] + sorted(set(state["students"]) - set(roster), key=lambda s: (fold(s), s))
    stems = unique_stems(order)
    table = []
    for student in order:
        entries = state["students"].get(student, {})
        parts = {n: notebook_score(assignment, n, entries.get(n)) for n in assignment.notebooks}
        info = roster.get(student)
        submitted = [n for n in assignment.notebooks if n in entries]
        status = "missing" if not submitted else "partial" if len(submitted) < len(assignment.notebooks) else "graded"
        notes = [note for part in parts.values() for note in part["notes"]]
        not_graded = state.get("not_graded", {}).get(student, [])
        notes += [f"not graded: {path} ({why})" for path, why in not_graded]
        if assignment.roster and info is None:
            notes.append("not on the roster")
        table.append({
            "id": student, "name": info.name if info else "", "email": info.email if info else "",
            "student": info or Student(student), "on_roster": info is not None,
            "status": status, "notebooks": parts,
            "score": round(sum(p["score"] for p in parts.values()), 2),
            "max_score": round(sum(p["max"] for p in parts.values()), 2),
            "notes": notes, "files": [path for path, _ in not_graded],
            "flags": [f"{n}: {flag}" for n in assignment.notebooks for flag in entries.get(n, {}).get("flags", ())],
            "feedback_file": f"feedback/{stems[student]}.html",
        })
    return table


# --- files --------------------------------------------------------------------------------

def write_outputs(out, assignment, state):
    out = Path(out)
    table = rows(assignment, state)
    exports.write_csv(out / "gradebook.csv", _gradebook_header(assignment),
                      [_gradebook_row(assignment, row) for row in table])
    exports.write_all(out, assignment, table)
    for row in table:
        _write_feedback(out, assignment, row, state["students"].get(row["id"], {}))
    graded = [_as_report(student, entries) for student, entries in sorted(state["students"].items())]
    ids = [e.id for n in assignment.notebooks for e in notebook_exercises(n)]
    reports.write_item_analysis(str(out), graded, ids)
    return table


def _gradebook_header(assignment):
    columns = ["id", "name", "email", "on_roster", "status", "score", "max_score"]
    for number in assignment.notebooks:
        columns += [f"{number}_score", f"{number}_max", f"{number}_status", f"{number}_late_days", f"{number}_penalty"]
    return columns + ["not_graded", "flags", "notes", "feedback_file"]


def _gradebook_row(assignment, row):
    cells = [row["id"], row["name"], row["email"], "yes" if row["on_roster"] else "no", row["status"],
             f"{row['score']:g}", f"{row['max_score']:g}"]
    for number in assignment.notebooks:
        part = row["notebooks"][number]
        cells += [f"{part['score']:g}", f"{part['max']:g}", part["status"], part["late_days"], f"{part['penalty']:g}"]
    return cells + [" | ".join(row["files"]), " | ".join(row["flags"]), " | ".join(row["notes"]), row["feedback_file"]]


def _as_report(student, entries):
    grades = [g for number in sorted(entries) for g in entries[number]["exercises"].values()]
    return {"student": student, "exercises": grades}


def _write_feedback(out, assignment, row, entries):
    """The student's page: their grades, notes and problems; never a copy flag naming someone else."""
    pairs = [(n, g) for n in assignment.notebooks if n in entries for g in entries[n]["exercises"].values()]
    problem_lines = [f"notebook {n}: {line}" for n in assignment.notebooks if n in entries
                     for line in entries[n]["problems"]]
    summary = (f"{row['id']}: {row['score']:g} / {row['max_score']:g} points ({row['status']}). "
               + " ".join(note for note in row["notes"] if note != "not on the roster"))
    feedback.write_html(str(out / row["feedback_file"]),
                        f"{assignment.name}: feedback for {row['name'] or row['id']}", pairs, problem_lines, summary)


def summary(out, assignment, table, state):
    """What ``grade --assignment`` prints at the end: counts, then every error and file not graded."""
    on_roster = [r for r in table if r["on_roster"] or not assignment.roster]
    off = [r for r in table if assignment.roster and not r["on_roster"]]
    missing = [r["id"] for r in on_roster if r["status"] == "missing"]
    lines = [f"Gradebook of {len(on_roster)} student(s) in {out}/gradebook.csv, each out of "
             f"{exports.max_score(table) if table else 0:g} points ({len(missing)} missing"
             + (f": {', '.join(map(printable, missing))}" if missing else "") + ")."]
    lines.append(f"LMS imports: {out}/lms.csv, {out}/canvas.csv, {out}/moodle.csv; feedback pages in {out}/feedback/.")
    if off:
        lines.append(f"{len(off)} submitter(s) not on the roster, left out of the LMS files "
                     f"(see {out}/off_roster.csv): {', '.join(printable(r['id']) for r in off)}")
    errors = [f"  {printable(student)} notebook {n}: {entry['problems'][-1] if entry['problems'] else 'error'}"
              for student, entries in sorted(state["students"].items()) for n, entry in sorted(entries.items())
              if entry["status"] == "error"]
    if errors:
        lines += [f"{len(errors)} notebook(s) could not be graded:", *errors]
    problems = sum(bool(e["problems"]) for entries in state["students"].values() for e in entries.values())
    if problems:
        lines.append(f"{problems} graded notebook(s) met problems (cells that raised, timed out or were skipped); "
                     "see each feedback page.")
    not_graded = [(s, path, why) for s, items in sorted(state.get("not_graded", {}).items()) for path, why in items]
    ignored = state.get("ignored", [])
    if not_graded or ignored:
        lines.append(f"{len(not_graded) + len(ignored)} file(s) not graded:")
        lines += [f"  {printable(path)}: {why} ({printable(s)})" for s, path, why in not_graded]
        lines += [f"  {printable(path)}: {why}" for path, why in ignored]
    flags = [(r["id"], flag) for r in table for flag in r["flags"]]
    if flags:
        lines.append(f"{len(flags)} copy flag(s), in gradebook.csv only (never on a student's page):")
        lines += [f"  {printable(student)} {flag}" for student, flag in flags]
    for line in state.get("collisions", ()):
        lines.append(f"Names: {line}")
    return "\n".join(lines)


def main(args, options):
    """``autograd-lab grade --assignment``: grade, merge, write, and print what happened."""
    from . import assignment

    plan = assignment.load(args.assignment)
    if len(args.submissions) != 1:
        raise UsageError("with --assignment, give one folder of submissions.")
    grader = batch_grader(options)
    table = grade_assignment(plan, args.submissions[0], args.out, students=args.student,
                             exercise_ids=args.exercise, grade=grader)
    print(summary(args.out, plan, table, load_state(args.out)))
    return 0
