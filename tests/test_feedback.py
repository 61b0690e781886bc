"""What students get back: every problem met, renamed answers spotted, a safe offline page; honest item analysis."""

from nbformat.v4 import new_code_cell, new_notebook

from autograd_lab import checking
from autograd_lab.grading import feedback, reports


def _grade(exercise_id, status, misconception=None):
    return {"exercise_id": exercise_id, "title": "t", "status": status, "score": 1.0 if status == "passed" else 0.0,
            "max_score": 1.0, "misconception": misconception, "messages": ["m"]}


def test_every_cell_that_did_not_finish_is_a_problem():
    report = {"problems": ["cell 4 killed the kernel; it was skipped and the notebook re-run in a fresh kernel"],
              "cells": [{"cell": 1, "status": "ok"},
                        {"cell": 2, "status": "error", "error": "SyntaxError: invalid syntax"},
                        {"cell": 3, "status": "timed out", "error": None},
                        {"cell": 4, "status": "dead"}]}
    lines = feedback.problems(report)
    assert lines == [report["problems"][0], "cell 2 raised an error: SyntaxError: invalid syntax",
                     "cell 3 ran past its time limit and was interrupted", "cell 4 killed the kernel"]


def test_a_renamed_answer_is_named_once_and_a_far_name_is_not():
    notebook = new_notebook(cells=[new_code_cell("def train_fixed(w0, x, y, lr, steps):\n    return w0"),
                                   new_code_cell("def plot_losses():\n    pass")])
    by_id = {"03.train": checking.get("03.train"), "03.accumulated_grad": checking.get("03.accumulated_grad")}
    grades = [_grade("03.train", "not attempted"), _grade("03.accumulated_grad", "not attempted")]
    feedback.renamed_answers(grades, by_id, notebook)
    feedback.renamed_answers(grades, by_id, notebook)  # idempotent: reports are written twice
    assert grades[0]["messages"][0] == ("no `train` defined; found `train_fixed`: did you rename it? "
                                       "The grader calls `train`.")
    assert len(grades[0]["messages"]) == 2
    assert grades[1]["messages"] == ["m"]


def test_the_page_escapes_student_text_and_needs_nothing_online():
    grade = dict(_grade("00.cube_grad", "failed"), messages=["<script>alert(1)</script> in `x.grad`"])
    page = feedback.render_html("HW <1>", [("00", grade)], ["cell 2 raised an error: <b>"], "s")
    assert "<script>" not in page and "&lt;script&gt;" in page and "<code>x.grad</code>" in page
    assert "HW &lt;1&gt;" in page and "&lt;b&gt;" in page
    assert "http" not in page and "src=" not in page


def test_not_attempted_is_never_the_most_common_misconception():
    graded = [{"student": s, "exercises": [_grade("00.cube_grad", "not attempted", "not_attempted")]} for s in "abc"]
    graded.append({"student": "d", "exercises": [_grade("00.cube_grad", "failed", "doubled")]})
    item = reports.item_analysis(graded, ["00.cube_grad"])[0]
    assert item["most_common_misconception"] == "doubled" and item["misconceptions"] == {"doubled": 1}
    assert item["not_attempted"] == 3 and item["attempted"] == 1


def test_copy_flags_reach_the_instructors_files_only(tmp_path):
    """A flag names other students (FERPA): in students/*.json and gradebook.csv, never on the page or in results.json."""
    import json

    flag = "FLAG: identical file (same SHA-256) as victor, alice"
    report = {"student": "bob", "submission": str(tmp_path / "bob.ipynb"), "sha256": "x", "status": "graded",
              "score": 1.0, "max_score": 1.0, "exercises": [_grade("00.cube_grad", "passed")],
              "problems": [flag, "cell 3 raised an error: ValueError"], "cells": [], "execution_time": 1.0}
    reports.write_student(str(tmp_path), report)
    reports.write_gradebook(str(tmp_path), [report], ["00.cube_grad"])
    page = (tmp_path / "feedback" / "bob.html").read_text()
    results = (tmp_path / "gradescope" / "bob" / "results.json").read_text()
    assert "victor" not in page and "identical" not in page and "ValueError" in page
    assert "victor" not in results and "ValueError" in json.loads(results)["output"]
    assert flag in json.loads((tmp_path / "students" / "bob.json").read_text())["problems"]
    assert flag in (tmp_path / "gradebook.csv").read_text()
