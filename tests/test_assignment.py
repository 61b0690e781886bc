"""A simulated term, graded end to end: three notebooks, a roster with any characters in its ids.

One grading run and one regrade through the command line (about 16 kernels) are
shared by the assertions of ``term``.  The class has: folder and flat layouts, a
late student with two versions of a notebook, a missing student, a renamed
answer, an exercise added after a student's release (stamped, so exempt) and one
whose cell a student deleted (counted), a Moodle folder, accents and spaces, an
email id, two folders that differ only by case, a student off the roster, a copy
of another's file, a renamed file told by its cells, an unplaceable file and a
broken notebook.  The faster tests below check the same rules without kernels.
"""

import csv
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograd_lab import checking
from autograd_lab.checking.source import solution_source
from autograd_lab.grading import assignment, collect, gradebook, release
from autograd_lab.grading.submissions import UsageError

ROSTER = """
roster:
  - {id: alice, name: Alice A, email: alice@example.edu, section: A, sis_user_id: "1001"}
  - {id: bob, name: Bob B, email: bob@example.edu}
  - {id: carol, name: Carol C, email: carol@example.edu}
  - {id: dave, name: Dave D, email: dave@example.edu}
  - {id: erin, name: Erin E, email: erin@example.edu}
  - {id: frank, name: Frank F, email: frank@example.edu}
  - {id: grace, name: Grace G, email: grace@example.edu}
  - {id: jane.doe@example.edu, name: Jane Doe, email: jane.doe@example.edu, moodle_id: "123"}
  - {id: "José García", name: José García, email: jose@example.edu}
"""
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
canvas: {assignment_id: 4242}
""" + ROSTER
ON_TIME = dt.datetime(2026, 11, 19, 12, tzinfo=dt.timezone.utc).timestamp()
EARLIER = dt.datetime(2026, 11, 18, 12, tzinfo=dt.timezone.utc).timestamp()
LATE_1_5_DAYS = dt.datetime(2026, 11, 22, 11, 59, tzinfo=dt.timezone.utc).timestamp()
MAX = 4 + 10 + 3   # notebook 01: its 4 exercises' points; 02 scaled to 10; 03: 3


def _solution(exercise_id):
    return solution_source(checking.get(exercise_id))


def _stub(exercise_id):
    exercise = checking.get(exercise_id)
    if exercise.kind == "value":
        return f"{exercise.answer_name} = ..."
    return f"def {exercise.answer_name}(*args):\n    raise NotImplementedError"


def _notebook(number, answers, *, leave_out=(), extra=(), stamp=None):
    """A small copy of notebook ``number``: every exercise cell marked, ``answers`` filled in.

    ``stamp``: the exercises the release this copy came from had (signed with the test key).
    """
    cells = [new_code_cell("import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn")]
    for exercise in gradebook.notebook_exercises(number):
        if exercise.id in leave_out:
            continue
        source = answers.get(exercise.id, _stub(exercise.id))
        cells.append(new_code_cell(source, metadata={"autograd_lab": {"exercise": exercise.id}}))
    cells += [new_code_cell(source) for source in extra]
    notebook = new_notebook(cells=cells)
    if stamp is not None:
        release.stamp(notebook, number, stamp, "test-release", release.release_key())
    return notebook


RIGHT = {"01.saved_bytes": "saved_bytes = 14336", "01.who_gets_grad": None,
         "02.pick_gradient": None, "03.train": None}


def _right(*ids):
    return {i: RIGHT[i] or _solution(i) for i in ids}


def _write(path, notebook, mtime=ON_TIME):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(notebook, str):
        path.write_text(notebook)
    else:
        nbformat.write(notebook, str(path))
    os.utime(path, (mtime, mtime))


GOOD = {"01": ("01.saved_bytes", "01.who_gets_grad"), "02": ("02.pick_gradient",), "03": ("03.train",)}
NAMES = {"01": "01_dynamic_graph.ipynb", "02": "02_vjp_scalar_loss.ipynb", "03": "03_accumulation.ipynb"}


def _submissions(root):
    ids_03 = [e.id for e in gradebook.notebook_exercises("03")]
    for number, ids in GOOD.items():  # alice: folder layout, on time
        _write(root / "alice" / NAMES[number], _notebook(number, _right(*ids)))
    _write(root / "alice" / "05_amp.ipynb", _notebook("05", {}))  # not in the assignment: listed for alice
    # bob: flat layout; saved_bytes wrong, nothing in 02
    _write(root / "bob_01.ipynb", _notebook("01", {**_right(*GOOD["01"]), "01.saved_bytes": "saved_bytes = 4096"}))
    _write(root / "bob_02.ipynb", _notebook("02", {}))
    _write(root / "bob_03.ipynb", _notebook("03", _right(*GOOD["03"])))
    # carol: notebook 01 only, 1.5 days late; an older, wrong version beside it (carol-01 vs carol_01)
    _write(root / "carol_01.ipynb", _notebook("01", _right(*GOOD["01"])), LATE_1_5_DAYS)
    _write(root / "carol-01.ipynb", _notebook("01", {}), EARLIER)
    # erin: renamed her tiny_tanh answer; no 02; her 03 came from a release before 03.train; one cell raises
    renamed = _solution("01.tiny_tanh").replace("def tiny_tanh(", "def tiny_tanh_fixed(")
    _write(root / "erin_01_dynamic_graph.ipynb", _notebook("01", {**_right("01.saved_bytes"), "01.tiny_tanh": renamed}))
    older = [i for i in ids_03 if i != "03.train"]
    _write(root / "erin_03.ipynb", _notebook("03", {}, leave_out=("03.train",), extra=("1 / 0",), stamp=older))
    # frank: deleted the cell of 03.train from a copy whose release had it: counted, not exempt
    _write(root / "frank" / NAMES["03"], _notebook("03", {}, leave_out=("03.train",), stamp=ids_03))
    # grace: a renamed file, told by its cells
    _write(root / "grace" / "homework final.ipynb", _notebook("02", _right("02.pick_gradient")))
    # Moodle's folder for Jane Doe (participant 123), an id with accents and a space
    _write(root / "Jane Doe_123_assignsubmission_file_" / NAMES["01"], _notebook("01", _right("01.saved_bytes")))
    _write(root / "José García" / NAMES["01"], _notebook("01", _right("01.who_gets_grad")))
    # off the roster: Victor/victor (one student, two spellings), zed (a copy of alice's 01, a broken 02)
    _write(root / "Victor" / NAMES["01"], _notebook("01", {}), EARLIER)
    _write(root / "victor" / "01_dynamic_graph_v2.ipynb", _notebook("01", _right("01.saved_bytes")))
    _write(root / "zed_01.ipynb", (root / "alice" / NAMES["01"]).read_text())
    _write(root / "zed_02.ipynb", "{not json")
    _write(root / "notes.ipynb", _notebook("01", {}))  # no student can be told: ignored, listed
    # dave: nothing


def _cli(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "autograd_lab.course.cli", "grade", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "release.key"
    previous = os.environ.get(release.KEY_ENV)
    os.environ[release.KEY_ENV] = str(path)
    release.release_key()
    yield path
    if previous is None:
        os.environ.pop(release.KEY_ENV, None)
    else:
        os.environ[release.KEY_ENV] = previous


@pytest.fixture(scope="module")
def term(tmp_path_factory, key):
    root = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("gradebook")
    path = root.parent / "hw1.yml"
    path.write_text(ASSIGNMENT)
    plan = assignment.load(path)
    _submissions(root)
    grader = gradebook.batch_grader(jobs=2, cell_timeout=30, progress=False)
    first = {row["id"]: row for row in gradebook.grade_assignment(plan, root, out, grade=grader)}
    first_state = json.loads((out / "gradebook.json").read_text())
    # bob fixes saved_bytes and (by mistake) breaks who_gets_grad; only saved_bytes is regraded, through the CLI
    _write(root / "bob_01.ipynb", _notebook("01", {**_right("01.saved_bytes"), "01.who_gets_grad": "who_gets_grad = {}"}))
    regrade = _cli(root, "--assignment", path, "--out", out, "--student", "BOB", "--exercise", "01.saved_bytes",
                   "--jobs", "1", "--cell-timeout", "30")
    second = {row["id"]: row for row in gradebook.rows(plan, gradebook.load_state(out))}
    return {"first": first, "second": second, "out": out, "plan": plan, "first_state": first_state,
            "regrade": regrade, "root": root, "path": path}


def _scores(row):
    return {n: part["score"] for n, part in row["notebooks"].items()}


def _csv(path):
    with open(path, encoding="utf-8", newline="") as file:
        return list(csv.reader(file))


def test_every_row_and_score(term):
    rows = term["first"]
    roster = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "jane.doe@example.edu", "José García"]
    assert list(rows)[:len(roster)] == roster and list(rows)[len(roster):] == ["Victor", "zed"]
    assert {row["max_score"] for row in rows.values()} == {MAX}   # the same maximum for every row
    assert _scores(rows["alice"]) == {"01": 2, "02": 2.5, "03": 1}  # 02 scaled: 1 of 4 points -> 2.5 of 10
    assert (rows["alice"]["score"], rows["alice"]["status"]) == (5.5, "graded")
    assert _scores(rows["bob"]) == {"01": 1, "02": 0, "03": 1}
    # carol: the newest version graded (1.5 days late counts as 2 days, 10% a day: 2 points -> 1.6)
    assert rows["carol"]["notebooks"]["01"]["late_days"] == 2 and rows["carol"]["notebooks"]["01"]["penalty"] == 0.4
    assert _scores(rows["carol"]) == {"01": 1.6, "02": 0, "03": 0} and rows["carol"]["status"] == "partial"
    assert any("2 day(s) late" in note for note in rows["carol"]["notes"])
    assert (rows["dave"]["status"], rows["dave"]["score"], rows["dave"]["max_score"]) == ("missing", 0, MAX)
    # erin: 03.train was added after her release (its signed stamp says so): exempt, the rest scaled to 3
    assert rows["erin"]["notebooks"]["03"]["max"] == 3 and rows["erin"]["notebooks"]["03"]["exempt"] == ["03.train"]
    assert _scores(rows["erin"]) == {"01": 1, "02": 0, "03": 0}
    assert any("03.train not in your copy (added later), not counted" in note for note in rows["erin"]["notes"])
    # frank deleted the cell from a copy whose release had it: counted
    assert rows["frank"]["notebooks"]["03"]["exempt"] == []
    assert any("release stamp does not show it was added later; counted" in n for n in rows["frank"]["notes"])
    assert _scores(rows["grace"])["02"] == 2.5 and rows["jane.doe@example.edu"]["score"] == 1
    assert rows["José García"]["score"] == 1
    assert rows["Victor"]["score"] == 1  # the newer of Victor/ and victor/
    assert rows["zed"]["notebooks"]["02"]["status"] == "error" and not rows["zed"]["on_roster"]


def test_each_notebook_is_scored_only_against_its_own_exercises(term):
    for student, notebooks in term["first_state"]["students"].items():
        for number, entry in notebooks.items():
            assert {i[:2] for i in entry["exercises"]} == {number}, (student, number)


def test_a_regrade_through_the_command_line_merges_and_prints_progress_and_a_summary(term):
    regrade = term["regrade"]
    assert regrade.returncode == 0, regrade.stderr
    assert "notebook 01: grading 1 file(s)" in regrade.stderr and "[1/1] bob" in regrade.stderr  # progress
    first, second = term["first"], term["second"]
    for student in first:
        if student != "bob":
            assert second[student]["score"] == first[student]["score"], student
    # saved_bytes regraded (now right); who_gets_grad kept from the first run (not regraded)
    assert _scores(second["bob"]) == {"01": 2, "02": 0, "03": 1}
    state = json.loads((term["out"] / "gradebook.json").read_text())["students"]["bob"]["01"]
    assert state["exercises"]["01.who_gets_grad"]["status"] == "passed" and state["regraded"] == ["01.saved_bytes"]
    text = regrade.stdout
    assert f"each out of {MAX} points (1 missing: dave)" in text
    assert "1 notebook(s) could not be graded:" in text and "zed notebook 02" in text
    assert "notes.ipynb: no student could be told" in text
    assert "carol-01.ipynb: an older version; graded carol_01.ipynb (carol)" in text
    assert "alice/05_amp.ipynb: notebook 05 is not part of this assignment (alice)" in text
    assert "off_roster.csv): Victor, zed" in text
    assert "Victor, victor differ only by case: graded as one student, Victor" in text


def _usage_error(*args, capsys):
    """``autograd-lab grade ARGS`` run in this process (a usage error stops before any kernel): code, stderr.

    The command line's own process is exercised by the regrade above; these only need its answer,
    without paying for a fresh interpreter and a torch import each (CI's time limit).
    """
    from autograd_lab.course import cli
    capsys.readouterr()
    code = cli.main(["grade", *map(str, args)])
    return code, capsys.readouterr().err


def test_unknown_students_and_exercises_are_usage_errors(term, capsys):
    for args, said in ((("--student", "bobby"), "--student bobby: no such student"),
                       (("--exercise", "01.saved_byte"), "Did you mean 01.saved_bytes"),
                       (("--exercise", "05.amp_step_order"), "not an exercise of this assignment")):
        code, stderr = _usage_error(term["root"], "--assignment", term["path"], "--out", term["out"], *args,
                                    capsys=capsys)
        assert code == 2 and said in stderr, stderr
    code, stderr = _usage_error(term["root"], "--notebook", "01", "--out", term["out"] / "plain", "--student", "bob",
                                capsys=capsys)
    assert code == 2 and "give --assignment FILE" in stderr


def test_lms_exports_have_roster_rows_only_and_one_maximum(term):
    out = term["out"]
    lms = _csv(out / "lms.csv")
    assert lms[0] == ["id", "email", "name", "score", "max_score"]
    assert [r[0] for r in lms[1:]] == ["alice", "bob", "carol", "dave", "erin", "frank", "grace",
                                       "jane.doe@example.edu", "José García"]
    assert {r[4] for r in lms[1:]} == {str(MAX)}
    canvas = _csv(out / "canvas.csv")
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW1 (4242)"]
    assert canvas[1] == ["Points Possible", "", "", "", "", str(MAX)]
    assert canvas[2] == ["Alice A", "", "1001", "", "A", "5.5"]       # matched by SIS User ID
    assert canvas[3][:4] == ["Bob B", "", "", "bob"]                   # by SIS Login ID
    moodle = _csv(out / "moodle.csv")
    assert moodle[0] == ["Email address", "Full name", "HW1"] and moodle[8] == ["jane.doe@example.edu", "Jane Doe", "1"]
    off = _csv(out / "off_roster.csv")
    assert [r[0] for r in off[1:]] == ["Victor", "zed"]


def test_the_gradebook_lists_versions_files_and_copy_flags_for_the_instructor_only(term):
    book = {r["id"]: r for r in csv.DictReader(open(term["out"] / "gradebook.csv", encoding="utf-8"))}
    assert book["carol"]["not_graded"] == "carol-01.ipynb"
    assert book["alice"]["not_graded"] == "alice/05_amp.ipynb"
    assert "identical file (same SHA-256) as zed" in book["alice"]["flags"]
    assert "identical file" in book["zed"]["flags"] and book["zed"]["on_roster"] == "no"
    assert "grace/homework final.ipynb was graded as notebook 02 (told by its exercise cells)" in book["grace"]["notes"]
    pages = {row["id"]: (term["out"] / row["feedback_file"]).read_text(encoding="utf-8")
             for row in term["first"].values()}
    assert "carol-01.ipynb" in pages["carol"] and "an older version" in pages["carol"]
    assert "zed" not in pages["alice"] and "identical" not in pages["alice"]
    assert "alice" not in pages["zed"] and "identical" not in pages["zed"]
    # ids with any character get pages of their own; Victor's one page
    assert book["José García"]["feedback_file"] == "feedback/Jos__Garc_a.html"
    assert sorted(p.name for p in (term["out"] / "feedback").iterdir() if p.name.lower().startswith("v")) == ["Victor.html"]


def test_feedback_names_the_rename_and_the_problems(term):
    state = term["first_state"]["students"]["erin"]
    tanh = state["01"]["exercises"]["01.tiny_tanh"]
    assert tanh["messages"][0].startswith("no `tiny_tanh` defined; found `tiny_tanh_fixed`: did you rename it?")
    assert any("raised an error: ZeroDivisionError" in line for line in state["03"]["problems"])
    page = (term["out"] / "feedback" / "erin.html").read_text()
    assert "did you rename it?" in page and "ZeroDivisionError" in page
    assert "<script" not in page and "http" not in page  # offline, self-contained
    assert (term["out"] / "feedback" / "dave.html").exists()


def test_item_analysis_counts_not_attempted_apart(term):
    items = {i["exercise_id"]: i for i in json.loads((term["out"] / "item_analysis.json").read_text())["exercises"]}
    assert items["01.count_nodes"]["most_common_misconception"] is None
    assert items["01.saved_bytes"]["passed"] >= 5


# --- without kernels ----------------------------------------------------------------------

def _plan(**extra):
    return assignment.from_dict({"notebooks": ["01", "02"], **extra})


def test_collect_matches_names_without_regard_to_case_and_lists_every_file(tmp_path):
    plan = assignment.from_dict({"notebooks": ["01"], "roster": [{"id": "Alice", "email": "a@x.edu"},
                                                               {"id": "p", "moodle_id": "7"}]})
    _write(tmp_path / "ALICE" / "01.ipynb", _notebook("01", {}))
    _write(tmp_path / "a@x.edu_01.ipynb", _notebook("01", {}), EARLIER)
    _write(tmp_path / "Pat Q_7_assignsubmission_file_" / "anything.ipynb", _notebook("01", {}))
    found = collect.collect(tmp_path, plan)
    assert set(found.files) == {("Alice", "01"), ("p", "01")}
    assert found.files[("Alice", "01")].name == "01.ipynb"          # the newer of the two
    assert found.others[("Alice", "01")] == [("a@x.edu_01.ipynb", "an older version; graded ALICE/01.ipynb")]
    assert "told by its exercise cells" in found.renamed[("p", "01")]
    first = collect.collect(tmp_path, dataclass_replace(plan, several_files="first_by_name"))
    assert first.files[("Alice", "01")].name == "01.ipynb"          # ALICE/ sorts before a@x.edu_


def dataclass_replace(plan, **changes):
    import dataclasses
    return dataclasses.replace(plan, **changes)


def test_roster_ids_that_differ_only_by_case_are_refused():
    with pytest.raises(UsageError, match="differ only by case"):
        assignment.from_dict({"notebooks": ["01"], "roster": [{"id": "Victor"}, {"id": "victor"}]})


def test_a_forged_unencodable_text_never_stops_the_gradebook_pages_or_regrades(tmp_path):
    bad = "\udc80\ud800 forged"
    plan = _plan(roster=[{"id": "other"}])

    def grade(folder, number, out):
        reports = {}
        for path in Path(folder).glob("*.ipynb"):
            grades = [{"exercise_id": e.id, "title": bad, "status": "failed", "score": 0.0, "max_score": e.points,
                       "misconception": bad, "messages": [bad]} for e in gradebook.notebook_exercises(number)]
            reports[path.stem] = {"student": path.stem, "exercises": grades, "status": "graded", "sha256": bad,
                                  "problems": [bad, "FLAG: " + bad], "cells": [{"cell": 1, "status": bad, "error": bad}]}
        return reports

    _write(tmp_path / "subs" / os.fsdecode(b"s\xff_01.ipynb"), _notebook("01", {}))   # not UTF-8: off the roster
    _write(tmp_path / "subs" / "other_02.ipynb", _notebook("02", {}))
    out = tmp_path / "out"
    for _ in range(2):  # the second round regrades over a state that holds the forged text
        table = gradebook.grade_assignment(plan, tmp_path / "subs", out, grade=grade)
        table = gradebook.grade_assignment(plan, tmp_path / "subs", out, grade=grade, exercise_ids=["01.saved_bytes"])
    assert [row["id"] for row in table] == ["other", "s\\xff"]
    assert (out / "lms.csv").exists() and (out / "feedback" / "s_xff.html").exists()
    assert gradebook.summary(out, plan, table, gradebook.load_state(out)).encode("utf-8")
    assert "\\udc80" in (out / "item_analysis.md").read_text(encoding="utf-8")


def test_a_stamp_is_trusted_only_with_its_signature(key):
    ids = [e.id for e in gradebook.notebook_exercises("03")]
    notebook = _notebook("03", {}, stamp=[i for i in ids if i != "03.train"])
    assert release.read_stamp(notebook, release.release_key())["exercises"] == sorted(set(ids) - {"03.train"})
    notebook.metadata["autograd_lab"]["exercises"] = ids[:1]          # a student edits the list
    assert release.read_stamp(notebook, release.release_key()) is None
    assert release.read_stamp(notebook, b"another instructor's key") is None


def test_toml_and_a_hard_cutoff(tmp_path):
    path = tmp_path / "hw.toml"
    path.write_text('name = "HW"\ndue = 2026-11-20T23:59:00Z\nnotebooks = [{notebook = "01"}]\n'
                    'late = {policy = "cutoff", grace_minutes = 10}\n'
                    'roster = [{id = "alice", email = "alice@example.edu"}]\n')
    plan = assignment.load(path)
    assert plan.notebooks == ("01",) and plan.roster[0].email == "alice@example.edu"
    assert plan.late_days(plan.due + dt.timedelta(minutes=9)) == 0
    assert plan.late_days(plan.due + dt.timedelta(minutes=11)) == 1 and plan.late_factor(1) == 0
    with pytest.raises(UsageError, match="late.policy"):
        assignment.from_dict({"notebooks": ["01"], "late": {"policy": "sometimes"}})
    with pytest.raises(UsageError, match="gradescope.visibility"):
        assignment.from_dict({"notebooks": ["01"], "gradescope": {"visibility": "tomorrow"}})


def test_gradescope_times_parse_on_every_python():
    assert assignment.parse_time("2018-07-01T14:22:32.365935-07:00").utcoffset() == dt.timedelta(hours=-7)
    assert assignment.parse_time("2026-11-20T23:59:00.5Z") == dt.datetime(2026, 11, 20, 23, 59, 0, 500000,
                                                                           tzinfo=dt.timezone.utc)


def test_only_exercises_listed_as_added_later_and_proven_by_a_stamp_are_exempted():
    plan = assignment.from_dict({"notebooks": ["03"], "added_later": ["03.train"]})
    grades = {i: {"score": 1.0 if i == "03.micro_batch_losses" else 0.0} for i in
              ("03.accumulated_grad", "03.micro_batch_losses", "03.train")}
    entry = {"exercises": grades, "not_in_copy": ["03.accumulated_grad", "03.train"], "not_in_release": ["03.train"],
             "problems": [], "status": "graded", "submitted_at": None}
    part = gradebook.notebook_score(plan, "03", entry)
    assert (part["score"], part["max"]) == (1.5, 3)  # 03.train exempt: 1 of 2 scaled to 3; the deleted cell counts
    assert "the cell of 03.accumulated_grad is missing from your copy; counted" in part["notes"][1]
    unproven = gradebook.notebook_score(plan, "03", dict(entry, not_in_release=[]))
    assert (unproven["score"], unproven["max"]) == (1, 3) and "release stamp does not show" in unproven["notes"][0]
    counted = gradebook.notebook_score(dataclass_replace(plan, new_exercises="count"), "03", entry)
    assert (counted["score"], counted["max"]) == (1, 3)


def test_every_command_and_option_in_the_grading_docs_is_real():
    """The docs match the commands: each command line parses, each option of `grade` is in the table and back."""
    import re
    import shlex

    from autograd_lab.course.cli import build_parser

    parser = build_parser()
    docs = [Path(__file__).resolve().parents[1] / "docs" / name for name in ("grading.md", "instructors.md")]
    commands = []
    for doc in docs:
        text = doc.read_text()
        commands += [line.strip() for line in re.findall(r"^\s*(?:\.venv/bin/)?(autograd-lab [^\n`]+)$", text, re.M)]
        commands += re.findall(r"`(?:\.venv/bin/)?(autograd-lab [^`]+)`", text)
    commands = [c for c in commands if "..." not in c and "NN" not in c and "--out" in c]   # names alone are prose
    assert len(commands) >= 10
    for command in commands:
        try:
            parser.parse_args(shlex.split(command, comments=True)[1:])
        except SystemExit:
            raise AssertionError(f"the docs show a command that does not parse: {command}") from None
    grade = parser._subparsers._group_actions[0].choices["grade"]
    options = {o for action in grade._actions for o in action.option_strings if o.startswith("--")} - {"--help"}
    table = set(re.findall(r"^\| `(--[a-z-]+)", docs[0].read_text(), re.M)) | \
        set(re.findall(r"^\| `--[a-z-]+ [A-Z]+`, `(--[a-z-]+)", docs[0].read_text(), re.M))
    assert table == options, (sorted(options - table), sorted(table - options))
