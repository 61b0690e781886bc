"""Every exercise's reference gets full marks through ``autograd-lab grade`` (issue 21.1).

The solved notebooks (``autograd-lab solve``, as an instructor makes them) are graded
end to end, each notebook a batch of its own: in the bubblewrap sandbox every exercise
of the course, and without a sandbox (``--allow-unsandboxed``) the notebooks whose
exercises cover each way an input reaches the kernel: plain tensors and predictions
(00), a graph replayed from its recipe (01), objects rebuilt from their source (07's
expressions, 08's DDP model and ranks).  What differs between the two modes is the
sandbox around the kernel, not how an exercise is graded, so the second run proves the
mode, and the first every reference.  This file stands apart from test_grading.py so
that the two pytest workers share the grading (``--dist loadfile``).
"""

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograd_lab import checking
from autograd_lab.grading.batch import Options, grade_batch

sys.path.insert(0, str(Path(__file__).parent))
from fixtures.grading.solved import short_of_full_marks, solved_notebooks  # noqa: E402

KERNEL_PYTHON = os.environ.get("AUTOGRAD_LAB_KERNEL_PYTHON", sys.executable)
UNSANDBOXED = ("00", "01", "07", "08")


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    return solved_notebooks(tmp_path_factory.mktemp("solved"))


def _grade_each(solved, out, mode):
    def grade(item):
        number, path = item
        options = Options(out=str(out / number), jobs=1, cell_timeout=120, notebooks=(number,), progress=False,
                          kernel_python=KERNEL_PYTHON, sandbox=mode, allow_unsandboxed=mode == "none")
        return number, grade_batch([str(path)], options)[0]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(grade, sorted(solved.items())))


def test_every_exercise_of_the_solved_notebooks_gets_full_marks_in_the_sandbox(solved, tmp_path):
    graded = _grade_each(solved, tmp_path, "bubblewrap")
    assert {number: short_of_full_marks(report) for number, report in graded.items()} == \
        {number: [] for number in solved}
    assert sum(len(report["exercises"]) for report in graded.values()) == len(checking.all_exercises())


def test_unsandboxed_grading_gives_the_same_full_marks(solved, tmp_path):
    graded = _grade_each({number: solved[number] for number in UNSANDBOXED}, tmp_path, "none")
    assert {number: short_of_full_marks(report) for number, report in graded.items()} == \
        {number: [] for number in UNSANDBOXED}
