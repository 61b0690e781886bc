"""The batch grader: fixture submissions graded end to end, and its parts one by one.

The end-to-end batch (one run, module-scoped) starts real kernels, so it takes a
while on a busy 2-core machine; every other test here runs without a kernel.
"""

import base64
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from autograd_lab import exercises
from autograd_lab.cli import build_parser
from autograd_lab.grading import main as grade_main
from autograd_lab.grading import reports, scoring
from autograd_lab.grading.batch import Options, grade_batch
from autograd_lab.grading.execute import defined_names
from autograd_lab.grading.progress import ProgressBar
from autograd_lab.grading.submissions import UsageError, find_submissions, read_notebook, sha256

sys.path.insert(0, str(Path(__file__).parent))
from fixtures.grading.submissions import EXPECTED, base_cells, write_submissions  # noqa: E402

CUBE = exercises.get("00.cube_grad")
SEEDS = [*CUBE.public_seeds, *CUBE.hidden_seeds]


# --- the whole batch, once -------------------------------------------------

@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    paths = write_submissions(folder)
    hashes = {student: sha256(path) for student, path in paths.items()}
    out = tmp_path_factory.mktemp("graded")
    stderr = io.StringIO()
    graded = grade_batch([str(folder)], Options(out=str(out), jobs=2, cell_timeout=10), stream=stderr)
    return {"reports": {r["student"]: r for r in graded}, "out": out, "paths": paths,
            "hashes": hashes, "stderr": stderr.getvalue()}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_fixture_gets_its_expected_grade(batch, case):
    score, statuses, problem = EXPECTED[case]
    report = batch["reports"][case]
    assert report["score"] == score, report
    assert {g["exercise_id"]: g["status"] for g in report["exercises"]} == statuses, report
    if problem:
        assert any(problem in line for line in report["problems"]), report["problems"]


def test_misconceptions_are_named_not_just_wrong(batch):
    grades = {g["exercise_id"]: g for g in batch["reports"]["partly_wrong"]["exercises"]}
    assert grades["00.cube_grad"]["misconception"] == "doubled"
    assert grades["00.needs_grad"]["misconception"] == "non_leaf"


def test_hidden_checks_run_but_their_inputs_never_appear(batch):
    grade = batch["reports"]["correct"]["exercises"][0]
    assert grade["hidden_total"] == len(CUBE.hidden_seeds) and grade["hidden_passed"] == grade["hidden_total"]
    failing = batch["reports"]["partly_wrong"]["exercises"][0]
    text = json.dumps(failing["messages"])
    assert "hidden" in text
    assert "(7,)" not in text and "[7]" not in text  # hidden inputs have shape (7,); never shown


def test_forged_records_are_refused_not_believed(batch):
    for grade in batch["reports"]["patches_checker"]["exercises"]:
        assert grade["score"] == 0 and "status 'passed'" in grade["messages"][0]


def test_hostile_cells_are_contained_and_reported(batch):
    cells = batch["reports"]["hostile_cells"]["cells"]
    hog, flood, reuse, overwrite = cells[-4:]
    assert hog["status"] == "error" and "can't allocate memory" in hog["error"], hog
    assert flood["output_truncated"] and len(flood["output"]) == 100_000, flood["status"]
    assert reuse["status"] == overwrite["status"] == "ok"


def test_submissions_are_never_modified(batch):
    assert {s: sha256(p) for s, p in batch["paths"].items()} == batch["hashes"]


def test_gradebook_has_one_row_per_student_and_a_column_per_exercise(batch):
    lines = (batch["out"] / "gradebook.csv").read_text().splitlines()
    assert lines[0].startswith("student,score,max_score,status,00.cube_grad,00.needs_grad")
    assert len(lines) == 1 + len(EXPECTED)
    assert any(line.startswith("correct,2.0,2,graded,1.0,1.0") for line in lines)


def test_gradescope_results_have_every_required_field(batch):
    results = json.loads((batch["out"] / "gradescope" / "partly_wrong" / "results.json").read_text())
    assert {"score", "execution_time", "tests"} <= set(results)
    for test in results["tests"]:
        assert set(test) == {"name", "number", "score", "max_score", "status", "output",
                             "output_format", "visibility", "tags"}
        assert test["status"] == "failed" and test["tags"]


def test_item_analysis_reports_pass_rates_and_the_most_common_misconception(batch):
    items = {i["exercise_id"]: i for i in json.loads((batch["out"] / "item_analysis.json").read_text())["exercises"]}
    needs = items["00.needs_grad"]
    assert needs["submissions"] == len(EXPECTED)
    assert needs["most_common_misconception"] == "non_leaf"  # partly_wrong and redefines_check
    assert "| 00.needs_grad" in (batch["out"] / "item_analysis.md").read_text()


def test_progress_goes_to_the_stream_one_line_per_submission(batch):
    assert batch["stderr"].count("\n") == len(EXPECTED)
    assert f"[{len(EXPECTED)}/{len(EXPECTED)}]" in batch["stderr"]


# --- the parts, without kernels ---------------------------------------------

def _payload(records):
    buffer = io.BytesIO()
    torch.save(records, buffer)
    return base64.b64encode(buffer.getvalue()).decode()


def _observed(answer):
    return {seed: exercises.observe(CUBE, answer, seed) for seed in SEEDS}


def test_scoring_judges_honest_records_like_check_does():
    assert scoring.grade_from_payload(CUBE, _payload(_observed(CUBE.reference)), SEEDS)["status"] == "passed"
    grade = scoring.grade_from_payload(CUBE, _payload(_observed(lambda x: -3 * x ** 2)), SEEDS)
    assert grade["status"] == "failed" and grade["misconception"] == "sign_flipped"


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/autograd-lab-pwned",))


def test_a_pickle_that_runs_code_is_refused_and_never_runs():
    if os.path.exists("/tmp/autograd-lab-pwned"):
        os.remove("/tmp/autograd-lab-pwned")
    evil = base64.b64encode(pickle.dumps({0: _Boom()}, protocol=2)).decode()
    grade = scoring.grade_from_payload(CUBE, evil, SEEDS)
    assert grade["status"] == "error" and grade["score"] == 0
    assert not os.path.exists("/tmp/autograd-lab-pwned")


@pytest.mark.parametrize("records, why", [
    ({0: {"seed": 0, "status": "ok"}}, "one record per requested seed"),
    ({seed: {"seed": seed + 1, "status": "ok"} for seed in SEEDS}, "does not belong"),
    ({seed: {"seed": seed, "status": "passed"} for seed in SEEDS}, "status 'passed'"),
])
def test_malformed_or_forged_records_are_an_error_grade(records, why):
    grade = scoring.grade_from_payload(CUBE, _payload(records), SEEDS)
    assert grade["status"] == "error" and why in grade["messages"][0]


def test_records_with_missing_fields_are_an_error_not_a_crash():
    grade = scoring.grade_from_payload(CUBE, _payload({s: {"seed": s, "status": "ok"} for s in SEEDS}), SEEDS)
    assert grade["status"] == "error" and grade["score"] == 0


def test_defined_names_sees_top_level_definitions_only():
    source = ("%matplotlib inline\nimport torch as T\ndef cube_grad(x):\n    inner = 1\n"
              "needs_grad, other = {}, 2\nfor loop_var in range(3):\n    pass\nclass K: pass")
    assert defined_names(source) == {"T", "cube_grad", "needs_grad", "other", "K"}
    assert defined_names("%%time\ncube_grad = 1") == set()
    assert defined_names("def broken(:") == set()


def test_student_ids_come_from_paths_and_must_be_unique(tmp_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "hw.ipynb").write_text("{}")
    (tmp_path / "bob.ipynb").write_text("{}")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "bob-checkpoint.ipynb").write_text("{}")
    assert [s.student for s in find_submissions([tmp_path])] == ["alice__hw", "bob"]
    with pytest.raises(UsageError, match="Rename one"):
        find_submissions([tmp_path / "bob.ipynb", tmp_path / "bob.ipynb"])
    with pytest.raises(UsageError, match="no such file"):
        find_submissions([tmp_path / "missing"])


@pytest.mark.parametrize("content", [
    "", "{not json", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": "nope"}),
    json.dumps({"nbformat": 4})])
def test_malformed_notebooks_are_reported_not_raised(tmp_path, content):
    path = tmp_path / "bad.ipynb"
    path.write_text(content)
    notebook, problem = read_notebook(path)
    assert notebook is None and problem.startswith("not a valid Jupyter notebook")


def test_usage_errors_say_what_to_do(tmp_path, capsys):
    write_submissions(tmp_path, ["malformed"])
    args = build_parser().parse_args(["grade", str(tmp_path), "--out", str(tmp_path / "out")])
    assert grade_main(args) == 2
    assert "--notebook" in capsys.readouterr().err
    assert grade_main(Namespace(**{**vars(args), "jobs": 0})) == 2


def test_report_file_names_cannot_escape_the_output_folder():
    assert reports.file_stem("../../etc/passwd") == "_.._etc_passwd"
    assert "/" not in reports.file_stem("a/b") and reports.file_stem("") == "_"


def test_progress_bar_redraws_in_place_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    stream = Terminal()
    bar = ProgressBar(2, stream=stream)
    bar.advance("alice", "2/2")
    bar.advance("bob", "0/2", problem=True)
    text = stream.getvalue()
    assert text.count("\r") == 2 and "2/2" in text and "problems: 1" in text and text.endswith("\n")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("id"), reason="dropping privileges needs root")
def test_launcher_applies_limits_then_drops_to_the_sandbox_user(tmp_path):
    connection = tmp_path / "connection.json"
    connection.write_text("{}")
    script = "ulimit -v; id -u; id -g"
    result = subprocess.run([sys.executable, "-m", "autograd_lab.grading.launcher", "--memory-mb", "512",
                             "--file-mb", "8", "--uid", "231999", "--gid", "231999", "--",
                             "/bin/sh", "-c", script, "-f", str(connection)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(512 * 1024), "231999", "231999"]
    assert connection.stat().st_uid == 231999  # the kernel must be able to read its connection file


# --- the sandbox user (needs root and a Python that other users may run) ----

def test_a_kernel_without_sandbox_user_cannot_leave_another_students_report_changed(tmp_path):
    # One job, in name order: the attacker runs after the victim's files are written.
    import nbformat
    folder, out = tmp_path / "submissions", tmp_path / "out"
    folder.mkdir()
    write_submissions(folder, ["partly_wrong"])["partly_wrong"].rename(folder / "a_victim.ipynb")
    victim_files = [out / "students" / "a_victim.json", out / "gradescope" / "a_victim" / "results.json"]
    tamper = (f"for path in {[str(p) for p in victim_files]!r}:\n"
              "    open(path, 'w').write('{\"score\": 999}')")
    nbformat.write(nbformat.v4.new_notebook(cells=base_cells() + [nbformat.v4.new_code_cell(tamper)]),
                   str(folder / "b_attacker.ipynb"))
    graded = grade_batch([str(folder)], Options(out=str(out), jobs=1, cell_timeout=30, progress=False))
    reports_by_student = {r["student"]: r for r in graded}
    assert reports_by_student["b_attacker"]["cells"][-1]["status"] == "ok"  # the write itself succeeded
    for path in victim_files:
        assert json.loads(path.read_text())["score"] == reports_by_student["a_victim"]["score"] != 999


SANDBOX_PYTHON = os.environ.get("AUTOGRAD_LAB_TEST_KERNEL_PYTHON")


@pytest.mark.skipif(os.geteuid() != 0 or not SANDBOX_PYTHON,
                    reason="set AUTOGRAD_LAB_TEST_KERNEL_PYTHON to a world-readable Python with the course "
                           "installed, and run as root")
def test_a_sandboxed_kernel_cannot_touch_outputs_or_submissions(tmp_path):
    import nbformat
    folder, out = tmp_path / "submissions", tmp_path / "out"
    folder.mkdir()
    victim = write_submissions(folder, ["partly_wrong"])["partly_wrong"]
    attacker = folder / "attacker.ipynb"
    targets = [str(out / "pwned.txt"), str(victim), str(attacker), str(folder / "new.ipynb")]
    tamper = (f"for path in {targets!r}:\n    try:\n        open(path, 'w').write('{{}}')\n"
              "        print('WROTE', path)\n    except OSError as error:\n        print('denied', type(error).__name__)")
    nbformat.write(nbformat.v4.new_notebook(cells=base_cells() + [nbformat.v4.new_code_cell(tamper)]), str(attacker))
    hashes = {path: sha256(path) for path in (victim, attacker)}
    graded = grade_batch([str(folder)], Options(out=str(out), jobs=2, cell_timeout=30, progress=False,
                                                kernel_python=SANDBOX_PYTHON))
    report = {r["student"]: r for r in graded}["attacker"]
    assert "numeric user of its own" in report["sandbox"]
    assert report["cells"][-1]["output"].count("denied") == len(targets), report["cells"][-1]
    assert report["score"] == 2
    assert {path: sha256(path) for path in hashes} == hashes
    assert not (out / "pwned.txt").exists() and not (folder / "new.ipynb").exists()
