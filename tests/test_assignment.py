"""Assignment grading: three notebooks, five roster students, one missing, one late, one regraded.

One grading run (11 kernels) and one regrade (1 kernel) are shared by every assertion.
"""

import csv
import datetime as dt
import json
import os

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograd_lab import checking
from autograd_lab.checking.source import solution_source
from autograd_lab.grading import assignment, gradebook
from autograd_lab.grading.submissions import UsageError

ASSIGNMENT = """
name: "HW1"
notebooks:
  - {notebook: "01"}
  - {notebook: "02", points: 10}
  - {notebook: "03"}
due: 2026-11-20T23:59:00Z
late: {policy: percent_per_day, percent: 10}
new_exercises: exempt
added_later: ["03.train"]
roster:
  - {id: alice, name: Alice A, email: alice@example.edu}
  - {id: bob, name: Bob B, email: bob@example.edu}
  - {id: carol, name: Carol C, email: carol@example.edu}
  - {id: dave, name: Dave D, email: dave@example.edu}
  - {id: erin, name: Erin E, email: erin@example.edu}
"""
ON_TIME = dt.datetime(2026, 11, 19, 12, tzinfo=dt.timezone.utc).timestamp()
LATE_1_5_DAYS = dt.datetime(2026, 11, 22, 11, 59, tzinfo=dt.timezone.utc).timestamp()


def _solution(exercise_id):
    return solution_source(checking.get(exercise_id))


def _stub(exercise_id):
    exercise = checking.get(exercise_id)
    if exercise.kind == "value":
        return f"{exercise.answer_name} = ..."
    return f"def {exercise.answer_name}(*args):\n    raise NotImplementedError"


def _notebook(number, answers, *, leave_out=(), extra=()):
    """A small copy of notebook ``number``: every exercise cell marked, ``answers`` filled in."""
    cells = [new_code_cell("import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn")]
    for exercise in gradebook.notebook_exercises(number):
        if exercise.id in leave_out:
            continue
        source = answers.get(exercise.id, _stub(exercise.id))
        cells.append(new_code_cell(source, metadata={"autograd_lab": {"exercise": exercise.id}}))
    cells += [new_code_cell(source) for source in extra]
    return new_notebook(cells=cells)


RIGHT = {"01.saved_bytes": "saved_bytes = 12288", "01.who_gets_grad": None,
         "02.pick_gradient": None, "03.train": None}


def _right(*ids):
    return {i: RIGHT[i] or _solution(i) for i in ids}


def _write(path, notebook, mtime=ON_TIME):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(path))
    os.utime(path, (mtime, mtime))


def _submissions(root):
    good = {"01": _right("01.saved_bytes", "01.who_gets_grad"), "02": _right("02.pick_gradient"),
            "03": _right("03.train")}
    names = {"01": "01_dynamic_graph.ipynb", "02": "02_vjp_scalar_loss.ipynb", "03": "03_accumulation.ipynb"}
    for number, answers in good.items():  # alice: folder layout, on time
        _write(root / "alice" / names[number], _notebook(number, answers))
    _write(root / "alice" / "05_amp.ipynb", _notebook("05", {}))  # not in the assignment: ignored
    for number, answers in good.items():  # carol: the same answers; notebook 01 1.5 days late
        _write(root / "carol" / names[number], _notebook(number, answers),
               LATE_1_5_DAYS if number == "01" else ON_TIME)
    # bob: flat layout; saved_bytes wrong, nothing in 02
    _write(root / "bob_01.ipynb", _notebook("01", {**good["01"], "01.saved_bytes": "saved_bytes = 4096"}))
    _write(root / "bob_02.ipynb", _notebook("02", {}))
    _write(root / "bob_03.ipynb", _notebook("03", good["03"]))
    # erin: renamed her tiny_tanh answer; no 02; her copy of 03 predates 03.train; one cell raises
    renamed = _solution("01.tiny_tanh").replace("def tiny_tanh_grads(", "def tiny_tanh_grads_fixed(")
    _write(root / "erin_01_dynamic_graph.ipynb",
           _notebook("01", {**_right("01.saved_bytes"), "01.tiny_tanh": renamed}))
    _write(root / "erin_03.ipynb", _notebook("03", {}, leave_out=("03.train",), extra=("1 / 0",)))
    # dave: nothing


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("gradebook")
    (root.parent / "hw1.yml").write_text(ASSIGNMENT)
    plan = assignment.load(root.parent / "hw1.yml")
    _submissions(root)
    grader = gradebook.batch_grader(jobs=2, cell_timeout=30)
    first = {row["id"]: row for row in gradebook.grade_assignment(plan, root, out, grade=grader)}
    first_state = json.loads((out / "gradebook.json").read_text())
    # bob fixes saved_bytes and (by mistake) breaks who_gets_grad; only saved_bytes is regraded.
    _write(root / "bob_01.ipynb", _notebook("01", {**_right("01.saved_bytes"),
                                                   "01.who_gets_grad": "who_gets_grad = {}"}))
    second = {row["id"]: row for row in gradebook.grade_assignment(
        plan, root, out, students=["bob"], exercise_ids=["01.saved_bytes"], grade=grader)}
    return {"first": first, "second": second, "out": out, "plan": plan, "first_state": first_state}


def _scores(row):
    return {n: part["score"] for n, part in row["notebooks"].items()}


def test_every_row_and_score(graded):
    rows = graded["first"]
    assert list(rows) == ["alice", "bob", "carol", "dave", "erin"]  # the roster's order
    assert _scores(rows["alice"]) == {"01": 2, "02": 2.5, "03": 1}   # 02 scaled: 1 of 4 points -> 2.5 of 10
    assert (rows["alice"]["score"], rows["alice"]["max_score"], rows["alice"]["status"]) == (5.5, 17, "graded")
    assert _scores(rows["bob"]) == {"01": 1, "02": 0, "03": 1}
    assert rows["bob"]["score"] == 2
    # carol: 1.5 days late counts as 2 days, 10% a day: 2 points -> 1.6
    assert rows["carol"]["notebooks"]["01"]["late_days"] == 2
    assert rows["carol"]["notebooks"]["01"]["penalty"] == 0.4
    assert _scores(rows["carol"]) == {"01": 1.6, "02": 2.5, "03": 1}
    assert rows["carol"]["score"] == 5.1
    assert any("2 day(s) late" in note for note in rows["carol"]["notes"])
    assert all(part["late_days"] == 0 for n, part in rows["alice"]["notebooks"].items())
    # dave: on the roster, nothing submitted
    assert (rows["dave"]["status"], rows["dave"]["score"], rows["dave"]["max_score"]) == ("missing", 0, 17)
    # erin: 02 missing; 03.train was added after her copy, so 03 is out of 2, not 3
    assert rows["erin"]["status"] == "partial"
    assert _scores(rows["erin"]) == {"01": 1, "02": 0, "03": 0}
    assert rows["erin"]["notebooks"]["03"]["max"] == 2 and rows["erin"]["max_score"] == 16
    assert rows["erin"]["notebooks"]["02"]["status"] == "missing"
    assert any("03.train not in your copy" in note for note in rows["erin"]["notes"])


def test_each_notebook_is_scored_only_against_its_own_exercises(graded):
    state = graded["first_state"]["students"]
    for student, notebooks in state.items():
        for number, entry in notebooks.items():
            assert {i[:2] for i in entry["exercises"]} == {number}, (student, number)


def test_a_regrade_merges_into_the_gradebook_and_never_overwrites_it(graded):
    first, second = graded["first"], graded["second"]
    assert list(second) == list(first)
    for student in ("alice", "carol", "dave", "erin"):
        assert second[student] == first[student]
    # saved_bytes regraded (now right); who_gets_grad kept from the first run (not regraded)
    assert _scores(second["bob"]) == {"01": 2, "02": 0, "03": 1} and second["bob"]["score"] == 3
    state = json.loads((graded["out"] / "gradebook.json").read_text())["students"]["bob"]["01"]
    assert state["exercises"]["01.saved_bytes"]["status"] == "passed"
    assert state["exercises"]["01.who_gets_grad"]["status"] == "passed"
    assert state["regraded"] == ["01.saved_bytes"]


def test_gradebook_and_lms_csv(graded):
    with open(graded["out"] / "lms.csv") as file:
        lms = list(csv.DictReader(file))
    assert [(r["id"], r["email"], r["score"], r["max_score"]) for r in lms] == [
        ("alice", "alice@example.edu", "5.5", "17"), ("bob", "bob@example.edu", "3", "17"),
        ("carol", "carol@example.edu", "5.1", "17"), ("dave", "dave@example.edu", "0", "17"),
        ("erin", "erin@example.edu", "1", "16")]
    with open(graded["out"] / "gradebook.csv") as file:
        book = {r["id"]: r for r in csv.DictReader(file)}
    assert book["carol"]["01_late_days"] == "2" and book["carol"]["01_penalty"] == "0.4"
    assert book["dave"]["status"] == "missing" and book["dave"]["01_status"] == "missing"


def test_feedback_names_the_rename_and_the_problems(graded):
    state = graded["first_state"]["students"]["erin"]
    tanh = state["01"]["exercises"]["01.tiny_tanh"]
    assert tanh["status"] == "not attempted"
    assert tanh["messages"][0].startswith("no `tiny_tanh_grads` defined; found `tiny_tanh_grads_fixed`: did you rename it?")
    assert any("raised an error: ZeroDivisionError" in line for line in state["03"]["problems"])
    page = (graded["out"] / "feedback" / "erin.html").read_text()
    assert "did you rename it?" in page and "ZeroDivisionError" in page
    assert "<script" not in page and "http" not in page  # offline, self-contained
    assert (graded["out"] / "feedback" / "dave.html").exists()


def test_item_analysis_counts_not_attempted_apart(graded):
    items = {i["exercise_id"]: i for i in json.loads((graded["out"] / "item_analysis.json").read_text())["exercises"]}
    assert items["01.count_nodes"]["most_common_misconception"] is None
    assert items["01.count_nodes"]["not_attempted"] == 4
    assert items["01.saved_bytes"]["passed"] == 4


def test_ignored_files_and_bad_assignments_are_explained(graded, tmp_path):
    ignored = json.loads((graded["out"] / "gradebook.json").read_text())["ignored"]
    assert any(path.endswith("05_amp.ipynb") and "not part of this assignment" in why for path, why in ignored)
    with pytest.raises(UsageError, match="late.policy"):
        assignment.from_dict({"notebooks": ["01"], "late": {"policy": "sometimes"}})
    with pytest.raises(UsageError, match="not in this assignment"):
        gradebook.grade_assignment(graded["plan"], tmp_path, tmp_path / "out", exercise_ids=["05.amp_step_order"])


def test_toml_and_a_hard_cutoff(tmp_path):
    path = tmp_path / "hw.toml"
    path.write_text('name = "HW"\ndue = 2026-11-20T23:59:00Z\nnotebooks = [{notebook = "01"}]\n'
                    'late = {policy = "cutoff", grace_minutes = 10}\n'
                    'roster = [{id = "alice", email = "alice@example.edu"}]\n')
    plan = assignment.load(path)
    assert plan.notebooks == ("01",) and plan.roster[0].email == "alice@example.edu"
    assert plan.late_days(plan.due + dt.timedelta(minutes=9)) == 0
    assert plan.late_days(plan.due + dt.timedelta(minutes=11)) == 1 and plan.late_factor(1) == 0


def test_only_exercises_listed_as_added_later_can_be_exempted():
    plan = assignment.from_dict({"notebooks": ["03"], "added_later": ["03.train"]})
    grades = {i: {"score": 1.0 if i == "03.micro_batch_losses" else 0.0} for i in
              ("03.accumulated_grad", "03.micro_batch_losses", "03.train")}
    entry = {"exercises": grades, "not_in_copy": ["03.accumulated_grad", "03.train"], "problems": [],
             "status": "graded", "submitted_at": None}
    part = gradebook.notebook_score(plan, "03", entry)
    assert (part["score"], part["max"]) == (1, 2)  # 03.train exempt; the deleted 03.accumulated_grad counts
    assert "the cell of 03.accumulated_grad is missing from your copy; counted" in part["notes"][1]
    counted = gradebook.notebook_score(assignment.from_dict({"notebooks": ["03"], "added_later": ["03.train"],
                                                             "new_exercises": "count"}), "03", entry)
    assert (counted["score"], counted["max"]) == (1, 3)
