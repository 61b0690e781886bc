"""The student's workspace (docs/contracts.md §2): copies in work/, never overwritten."""

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from autograd_lab.course.cli import main as cli
from autograd_lab.course.workspace import WorkspaceError, reset, sha256, sync

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def course(tmp_path):
    course = tmp_path / "notebooks"
    course.mkdir()
    (course / "00_start.ipynb").write_text('{"cells": "shipped 00"}')
    (course / "01_graph.ipynb").write_text('{"cells": "shipped 01"}')
    return course


def test_first_run_copies_every_notebook_and_records_its_hash(course, tmp_path):
    work = tmp_path / "work"
    notices = sync(course, work)
    assert sorted(p.name for p in work.glob("*.ipynb")) == ["00_start.ipynb", "01_graph.ipynb"]
    assert (work / "01_graph.ipynb").read_text() == '{"cells": "shipped 01"}'
    manifest = json.loads((work / ".course-manifest.json").read_text())
    assert manifest == {name: sha256(course / name) for name in ("00_start.ipynb", "01_graph.ipynb")}
    assert len(notices) == 2


def test_a_second_run_never_overwrites_the_students_work(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    (work / "01_graph.ipynb").write_text("my answers")
    assert sync(course, work) == []  # nothing changed in the course: silent
    assert (work / "01_graph.ipynb").read_text() == "my answers"


def test_a_deleted_copy_comes_back(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    (work / "00_start.ipynb").unlink()
    sync(course, work)
    assert (work / "00_start.ipynb").read_text() == '{"cells": "shipped 00"}'


def test_a_course_update_is_written_beside_the_copy_with_a_notice(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    (work / "01_graph.ipynb").write_text("my answers")
    (course / "01_graph.ipynb").write_text('{"cells": "shipped 01, fixed"}')

    notices = sync(course, work)

    assert (work / "01_graph.ipynb").read_text() == "my answers"
    assert (work / "updates" / "01_graph.ipynb").read_text() == '{"cells": "shipped 01, fixed"}'
    assert len(notices) == 1 and "updated 01_graph.ipynb" in notices[0] and "reset 01" in notices[0]
    # The student is told every time until they take the update.
    assert len(sync(course, work)) == 1


def test_reset_keeps_a_backup_and_takes_the_update(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    (work / "01_graph.ipynb").write_text("my answers")
    (course / "01_graph.ipynb").write_text('{"cells": "shipped 01, fixed"}')
    sync(course, work)

    backup = reset(course, work, "01", now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))

    assert backup == work / "backups" / "01_graph-20260102T030405Z.ipynb"
    assert backup.read_text() == "my answers"
    assert (work / "01_graph.ipynb").read_text() == '{"cells": "shipped 01, fixed"}'
    assert not (work / "updates" / "01_graph.ipynb").exists()  # taken
    assert sync(course, work) == []  # and no longer announced


def test_reset_of_an_unknown_notebook_says_so(course, tmp_path):
    with pytest.raises(WorkspaceError, match="no notebook 7"):
        reset(course, tmp_path / "work", "7")


def test_the_cli_never_writes_into_the_shipped_notebooks(course, tmp_path, capsys):
    before = {p.name: p.read_bytes() for p in course.iterdir()}
    work = tmp_path / "work"
    assert cli(["workspace", "--course", str(course), "--work", str(work)]) == 0
    (work / "00_start.ipynb").write_text("edited")
    assert cli(["reset", "00", "--course", str(course), "--work", str(work)]) == 0
    assert "previous copy is" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in course.iterdir()} == before
    assert cli(["reset", "42", "--course", str(course), "--work", str(work)]) == 1


def test_work_is_ignored_by_git():
    result = subprocess.run(["git", "check-ignore", "-q", "work/01_dynamic_graph.ipynb"], cwd=ROOT)
    assert result.returncode == 0


def test_make_lab_opens_the_workspace_not_the_shipped_notebooks():
    makefile = (ROOT / "Makefile").read_text()
    lab = makefile.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "autograd-lab workspace" in lab and "--notebook-dir=work" in lab
    assert "--notebook-dir=notebooks" not in makefile


def test_solve_reads_the_workspace_it_is_pointed_at(tmp_path):
    # The student's copy (any folder) works as input: nothing assumes notebooks/.
    from autograd_lab.course.solve import solve

    work = tmp_path / "work"
    sync(ROOT / "notebooks", work)
    written = solve([str(work / "00_start_here.ipynb")], tmp_path / "solved")
    assert [p.name for p in written] == ["00_start_here.ipynb"]
    assert "NotImplementedError" not in Path(written[0]).read_text()
