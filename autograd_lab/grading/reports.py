"""Everything the grader writes, always from its own in-memory results.

* ``students/<student>.json``: one per student, written as soon as it is graded
  (the instructor's record: copy flags included);
* ``feedback/<student>.html``: the student's offline feedback page (``feedback.py``);
* ``gradescope/<student>/results.json``: Gradescope's autograder format;
* ``gradebook.csv``: one row per student, one column per exercise;
* ``item_analysis.json`` and ``item_analysis.md``: per exercise, the pass rate
  and the most common misconception.

Copy flags (``FLAG: identical file (same SHA-256) as ...``) name other students:
they go to the instructor's files only, never to a page or result a student sees.
Every text file is written so that no character can stop it (a backslash escape instead).
"""

import csv
import json
import os
import re
from collections import Counter

from . import feedback

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_stem(student):
    """A file name for ``student`` with nothing but letters, digits, ``.``, ``_`` and ``-``."""
    return _UNSAFE.sub("_", student).lstrip(".") or "_"


FLAG = "FLAG:"


def for_student(lines):
    """``lines`` without the copy flags, which name other students."""
    return [line for line in lines if not line.startswith(FLAG)]


def _write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = path + ".part"
    with open(temporary, "w", encoding="utf-8") as file:  # json.dump escapes what UTF-8 cannot hold
        json.dump(data, file, indent=2, sort_keys=True)
        file.write("\n")
    os.replace(temporary, path)  # a reader never sees half a file


def write_student(out, report):
    """The student's JSON, Gradescope ``results.json`` and offline feedback page."""
    _name_renamed_answers(report)
    _write_feedback_page(out, report)
    stem = file_stem(report["student"])
    _write_json(os.path.join(out, "students", f"{stem}.json"), report)
    _write_json(os.path.join(out, "gradescope", stem, "results.json"), gradescope_results(report))


def _write_feedback_page(out, report):
    """``OUT/feedback/<student>.html`` for one report of ``autograd-lab grade``."""
    pairs = [(grade["exercise_id"][:2], grade) for grade in report["exercises"]]
    summary = f"{report['student']}: {report['score']:g} / {report['max_score']:g} points."
    return feedback.write_html(os.path.join(out, "feedback", f"{file_stem(report['student'])}.html"),
                               f"Feedback for {report['student']}", pairs, for_student(feedback.problems(report)),
                               summary)


def _name_renamed_answers(report):
    """"no `train` defined; found `train_fixed`" instead of a bare "not attempted"."""
    from autograd_lab import checking

    from .submissions import read_notebook

    if not any(g["status"] == "not attempted" for g in report["exercises"]):
        return
    notebook, _ = read_notebook(report["submission"])
    if notebook is None:   # an undecodable file name is shown escaped, and cannot be reopened by it
        return
    by_id = {e.id: e for e in checking.all_exercises()}
    feedback.renamed_answers(report["exercises"], by_id, notebook)


def gradescope_results(report):
    """Gradescope's format: one test per exercise; hidden cases are already summarised by ``judge``."""
    tests = []
    for number, grade in enumerate(report["exercises"], start=1):
        tests.append({
            "name": f"{grade['exercise_id']} · {grade['title']}",
            "number": str(number),
            "score": grade["score"],
            "max_score": grade["max_score"],
            "status": "passed" if grade["status"] == "passed" else "failed",
            "output": "\n".join([f"status: {grade['status']}"] + list(grade["messages"])),
            "output_format": "text",
            "visibility": "visible",
            "tags": [grade["misconception"]] if grade.get("misconception") else [],
        })
    return {
        "score": report["score"],
        "execution_time": round(report["execution_time"]),
        "output": "\n".join(for_student(report["problems"])) or "Graded by autograd-lab.",
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def write_gradebook(out, reports, exercise_ids):
    with open(os.path.join(out, "gradebook.csv"), "w", newline="", encoding="utf-8", errors="backslashreplace") as file:
        writer = csv.writer(file)
        writer.writerow(["student", "score", "max_score", "status", *exercise_ids, "problems", "sha256"])
        for report in sorted(reports, key=lambda r: r["student"]):
            scores = {grade["exercise_id"]: grade["score"] for grade in report["exercises"]}
            writer.writerow([report["student"], report["score"], report["max_score"], report["status"],
                             *[scores.get(exercise_id, 0) for exercise_id in exercise_ids],
                             " | ".join(report["problems"]), report["sha256"]])


def item_analysis(reports, exercise_ids):
    """Per exercise: how many passed, attempted, the mean score and the misconceptions seen."""
    items = []
    for exercise_id in exercise_ids:
        grades = [g for r in reports for g in r["exercises"] if g["exercise_id"] == exercise_id]
        statuses = Counter(g["status"] for g in grades)
        # Not attempted is not a misconception: counted apart, never "most common".
        tags = Counter(g["misconception"] for g in grades
                       if g.get("misconception") and g["misconception"] != "not_attempted")
        # Most frequent first; ties in alphabetical order, so the file is the same on every run.
        ranked = sorted(tags.items(), key=lambda item: (-item[1], item[0]))
        items.append({
            "exercise_id": exercise_id,
            "title": grades[0]["title"] if grades else "",
            "submissions": len(grades),
            "attempted": len(grades) - statuses["not attempted"],
            "not_attempted": statuses["not attempted"],
            "passed": statuses["passed"],
            "pass_rate": round(statuses["passed"] / len(grades), 4) if grades else 0.0,
            "mean_score": round(sum(g["score"] for g in grades) / len(grades), 4) if grades else 0.0,
            "statuses": dict(sorted(statuses.items())),
            "misconceptions": dict(ranked),
            "most_common_misconception": ranked[0][0] if ranked else None,
        })
    return items


def write_item_analysis(out, reports, exercise_ids):
    items = item_analysis(reports, exercise_ids)
    _write_json(os.path.join(out, "item_analysis.json"), {"exercises": items})
    lines = ["# Item analysis", "",
             f"{len(reports)} submissions.", "",
             "| exercise | pass rate | attempted | not attempted | mean score | most common misconception |",
             "|---|---|---|---|---|---|"]
    for item in items:
        tag = item["most_common_misconception"]
        common = f"`{tag}` ({item['misconceptions'][tag]} students)" if tag else "none"
        lines.append(f"| {item['exercise_id']} {item['title']} | {item['pass_rate']:.0%} "
                     f"({item['passed']}/{item['submissions']}) | {item['attempted']} | {item['not_attempted']} | "
                     f"{item['mean_score']:g} | {common} |")
    with open(os.path.join(out, "item_analysis.md"), "w", encoding="utf-8", errors="backslashreplace") as file:
        file.write("\n".join(lines) + "\n")
    return items
