"""The Gradescope autograder zip, run as Gradescope would, for zero, one, several and wrong uploads.

Each case unpacks the zip into a temporary ``/autograder`` (``AUTOGRADER_ROOT``),
puts the upload in ``submission/`` and runs ``run_autograder`` with bash, then
validates every field of ``results/results.json`` against Gradescope's spec.
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograd_lab.grading import gradescope
from autograd_lab.grading import gradebook

ASSIGNMENT = """
name: HW0
notebooks:
  - {notebook: "00"}
  - {notebook: "01", points: 8}
"""
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}
TEST_FIELDS = {"name", "number", "score", "max_score", "status", "output", "output_format", "visibility", "tags"}


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zip")
    (folder / "hw0.yml").write_text(ASSIGNMENT)
    return Path(gradescope.build_zip(folder / "hw0.yml", folder / "autograder.zip"))


def _notebook(number, answers):
    cells = [new_code_cell("import torch")]
    for exercise in gradebook.notebook_exercises(number):
        source = answers.get(exercise.id) or (f"{exercise.answer_name} = ..." if exercise.kind == "value"
                                              else f"def {exercise.answer_name}(*a):\n    raise NotImplementedError")
        cells.append(new_code_cell(source, metadata={"autograd_lab": {"exercise": exercise.id}}))
    return nbformat.writes(new_notebook(cells=cells))


CUBE = "def cube_grad(x):\n    x = x.detach().requires_grad_()\n    (x ** 3).sum().backward()\n    return x.grad"
NEEDS = 'needs_grad = {"w": True, "x": False, "b": True, "h": False}'


def _run(autograder_zip, tmp_path, uploads):
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    for name, text in uploads.items():
        (root / "submission" / name).write_text(text)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    _validate(results)
    return results


def _validate(results):
    """Every field Gradescope reads, with its type and allowed values."""
    assert isinstance(results["score"], (int, float)) and results["score"] >= 0
    assert isinstance(results["execution_time"], int) and results["execution_time"] >= 0
    assert isinstance(results["output"], str) and results["output"].strip()
    assert results["output_format"] in FORMATS
    assert results["visibility"] in VISIBILITIES and results["stdout_visibility"] in VISIBILITIES
    numbers = [test["number"] for test in results["tests"]]
    assert len(numbers) == len(set(numbers))
    for test in results["tests"]:
        assert set(test) == TEST_FIELDS, test
        assert isinstance(test["name"], str) and test["name"] and isinstance(test["number"], str)
        assert 0 <= test["score"] <= test["max_score"] + 1e-9
        assert test["status"] in ("passed", "failed")
        assert isinstance(test["output"], str) and test["output_format"] in FORMATS
        assert test["visibility"] in VISIBILITIES and all(isinstance(t, str) for t in test["tags"])
    assert abs(results["score"] - sum(t["score"] for t in results["tests"])) < 0.01


def test_the_zip_holds_setup_and_run_autograder(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    assert {"setup.sh", "run_autograder", "assignment.yml", "requirements.txt"} <= names
    assert "package/autograd_lab/grading/gradescope.py" in names and "package/pyproject.toml" in names
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111


def test_no_upload(autograder_zip, tmp_path):
    results = _run(autograder_zip, tmp_path, {})
    assert results["score"] == 0 and "No file was uploaded" in results["output"]
    assert [t["max_score"] for t in results["tests"]] == [2, 8]


def test_a_wrong_file(autograder_zip, tmp_path):
    results = _run(autograder_zip, tmp_path, {"answers.py": "print('hi')", "05_amp.ipynb": _notebook("05", {}),
                                              "broken.ipynb": "{not json"})
    assert results["score"] == 0
    assert "None of the uploaded files is a notebook of this assignment" in results["output"]
    assert "answers.py: not a notebook" in results["output"]
    assert "05_amp.ipynb: this is not a notebook of this assignment" in results["output"]
    assert "broken.ipynb: not a valid Jupyter notebook" in results["output"]


def test_one_notebook_and_several(autograder_zip, tmp_path):
    one = _run(autograder_zip, tmp_path / "one", {"00_start_here.ipynb": _notebook("00", {"00.cube_grad": CUBE})})
    assert one["score"] == 1 and "Graded 00_start_here.ipynb as notebook 00: 1 / 10 points" in one["output"]
    by_name = {t["name"].split(" ")[0]: t for t in one["tests"]}
    assert by_name["00.cube_grad"]["score"] == 1 and by_name["00.cube_grad"]["status"] == "passed"
    assert by_name["00.needs_grad"]["score"] == 0
    assert by_name["notebook"]["output"] == "Notebook 01 was not uploaded." and by_name["notebook"]["max_score"] == 8

    several = _run(autograder_zip, tmp_path / "several", {
        "mine.ipynb": _notebook("00", {"00.cube_grad": CUBE, "00.needs_grad": NEEDS}),    # found by its cells
        "01_dynamic_graph.ipynb": _notebook("01", {"01.saved_bytes": "saved_bytes = 12288"}),
        "old_copy.ipynb": _notebook("00", {}),  # the first in name order is graded
        "notes.txt": "scratch"})
    # 00: 2 of 2; 01: 1 of its 4 points, scaled to 8 -> 2
    assert several["score"] == 4 and "4 / 10 points" in several["output"]
    assert "old_copy.ipynb: a second file for notebook 00; graded mine.ipynb only" in several["output"] and "notes.txt: not a notebook" in several["output"]
    saved = next(t for t in several["tests"] if t["name"].startswith("01.saved_bytes"))
    assert (saved["score"], saved["max_score"]) == (2, 2)


def test_a_broken_autograder_still_writes_a_result(autograder_zip, tmp_path):
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": "/nonexistent/python"}
    subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, timeout=60)
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and "could not start" in results["output"]
