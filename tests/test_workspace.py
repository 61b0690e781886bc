"""The student's workspace (docs/contracts.md §2): copies in work/, never overwritten."""

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from autograd_lab.course.cli import main as cli
from autograd_lab.course.workspace import MARK, WorkspaceError, reset, sha256, sync

ROOT = Path(__file__).resolve().parent.parent


def notebook(text):
    """A small notebook whose one cell says ``text``."""
    return json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": text}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def with_outputs(path):
    """``path`` as JupyterLab leaves it after a run: the same cells, new metadata."""
    data = json.loads(path.read_text())
    data["metadata"]["kernelspec"] = {"name": "python3"}
    data["cells"][0]["metadata"]["trusted"] = True
    path.write_text(json.dumps(data))


@pytest.fixture
def course(tmp_path):
    course = tmp_path / "notebooks"
    course.mkdir()
    (course / "00_start.ipynb").write_text(notebook("shipped 00"))
    (course / "01_graph.ipynb").write_text(notebook("shipped 01"))
    return course


def cell(path):
    return json.loads(path.read_text())["cells"][0]["source"]


def test_first_run_copies_every_notebook_and_records_its_hash(course, tmp_path):
    work = tmp_path / "work"
    events = sync(course, work)
    assert sorted(p.name for p in work.glob("*.ipynb")) == ["00_start.ipynb", "01_graph.ipynb"]
    assert (work / "01_graph.ipynb").read_bytes() == (course / "01_graph.ipynb").read_bytes()
    manifest = json.loads((work / ".course-manifest.json").read_text())
    assert {name: entry["shipped"] for name, entry in manifest["notebooks"].items()} == \
        {name: sha256(course / name) for name in ("00_start.ipynb", "01_graph.ipynb")}
    assert manifest["course"] == str(course.resolve())
    assert [e.kind for e in events] == ["created", "created"]
    assert not (work / "COURSE-UPDATES.md").exists()


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
    assert cell(work / "00_start.ipynb") == "shipped 00"


def test_an_edited_copy_gets_the_update_beside_it_with_a_notice(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    (work / "01_graph.ipynb").write_text(notebook("my answers"))
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed"))

    events = sync(course, work)

    assert cell(work / "01_graph.ipynb") == "my answers"
    assert cell(work / "updates" / "01_graph.ipynb") == "shipped 01, fixed"
    assert [(e.kind, e.new) for e in events] == [("update", True)]
    text = events[0].message()
    assert "01_graph.ipynb changed" in text and f"{sys.executable.rsplit('/', 1)[0]}/autograd-lab reset 01" in text
    notice = (work / "COURSE-UPDATES.md").read_text()
    assert "01_graph.ipynb" in notice and "reset 01" in notice and "delete `updates/01_graph.ipynb`" in notice
    # Still waiting at the next start (a reminder, not news), until taken or dismissed.
    assert [(e.kind, e.new) for e in sync(course, work)] == [("update", False)]
    (work / "updates" / "01_graph.ipynb").unlink()  # dismissed
    assert sync(course, work) == [] and not (work / "COURSE-UPDATES.md").exists()
    # A later change of the course is news again.
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed twice"))
    assert [(e.kind, e.new) for e in sync(course, work)] == [("update", True)]


def test_an_untouched_copy_is_refreshed_and_marked(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed"))

    events = sync(course, work)

    assert [(e.kind, e.backup) for e in events] == [("refreshed", None)]
    assert cell(work / "01_graph.ipynb") == "shipped 01, fixed"
    mark = json.loads((work / "01_graph.ipynb").read_text())["metadata"][MARK]
    assert mark["why"] == "a course update" and mark["previous"] is None
    assert not (work / "updates").exists() and sync(course, work) == []


def test_a_copy_only_run_is_refreshed_and_kept_in_backups(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    with_outputs(work / "01_graph.ipynb")
    ran = (work / "01_graph.ipynb").read_text()
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed"))

    [event] = sync(course, work)

    assert event.kind == "refreshed" and event.backup.read_text() == ran
    assert cell(work / "01_graph.ipynb") == "shipped 01, fixed"
    assert json.loads((work / "01_graph.ipynb").read_text())["metadata"][MARK]["previous"] == f"backups/{event.backup.name}"


def test_a_workspace_of_the_first_format_is_read(course, tmp_path):
    # Before the mark and the cells' hash: {name: sha of the shipped version}, byte copies.
    work = tmp_path / "work"
    work.mkdir()
    for p in course.iterdir():
        (work / p.name).write_bytes(p.read_bytes())
    (work / ".course-manifest.json").write_text(json.dumps({p.name: sha256(p) for p in course.iterdir()}))
    (work / "00_start.ipynb").write_text(notebook("my answers"))
    (course / "00_start.ipynb").write_text(notebook("shipped 00, fixed"))
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed"))
    assert sorted((e.kind, e.name) for e in sync(course, work)) == [("refreshed", "01_graph.ipynb"),
                                                                    ("update", "00_start.ipynb")]


def test_reset_keeps_a_backup_and_takes_the_update(course, tmp_path):
    work = tmp_path / "work"
    sync(course, work)
    (work / "01_graph.ipynb").write_text("my answers")
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed"))
    sync(course, work)

    backup = reset(course, work, "01", now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))

    assert backup == work / "backups" / "01_graph-20260102T030405Z.ipynb"
    assert backup.read_text() == "my answers"
    assert cell(work / "01_graph.ipynb") == "shipped 01, fixed"
    assert json.loads((work / "01_graph.ipynb").read_text())["metadata"][MARK] == {
        "copy": "2026-01-02 03:04:05 UTC", "why": "autograd-lab reset", "previous": "backups/01_graph-20260102T030405Z.ipynb"}
    assert not (work / "updates" / "01_graph.ipynb").exists()  # taken
    assert not (work / "COURSE-UPDATES.md").exists()
    assert sync(course, work) == []  # and no longer announced


@pytest.mark.parametrize("which", ["1", "01", "01_graph", "01_graph.ipynb", "work/01_graph.ipynb"])
def test_reset_takes_a_number_or_a_file_name(course, tmp_path, which):
    work = tmp_path / "work"
    sync(course, work)
    (work / "01_graph.ipynb").write_text("my answers")
    assert reset(course, work, which).read_text() == "my answers"
    assert cell(work / "01_graph.ipynb") == "shipped 01"


@pytest.mark.parametrize("which", ["7", "01_other.ipynb", "graph", ""])
def test_reset_of_an_unknown_notebook_says_what_exists(course, tmp_path, which):
    with pytest.raises(WorkspaceError, match=f"no notebook {which} .*it has: 00_start, 01_graph"):
        reset(course, tmp_path / "work", which)


def test_two_resets_in_one_second_keep_both_backups(course, tmp_path):
    work, now = tmp_path / "work", datetime(2026, 1, 2, tzinfo=timezone.utc)
    sync(course, work)
    first, second = reset(course, work, "00", now=now), reset(course, work, "00", now=now)
    assert first != second and first.exists() and second.exists()


def test_the_cli_never_writes_into_the_shipped_notebooks(course, tmp_path, capsys):
    before = {p.name: p.read_bytes() for p in course.iterdir()}
    work = tmp_path / "work"
    assert cli(["workspace", "--course", str(course), "--work", str(work)]) == 0
    (work / "00_start.ipynb").write_text("edited")
    assert cli(["reset", "00", "--course", str(course), "--work", str(work)]) == 0
    assert "previous copy is" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in course.iterdir()} == before
    assert cli(["reset", "42", "--course", str(course), "--work", str(work)]) == 1


@pytest.mark.parametrize("where", ["root", "work", "work/backups"])
def test_the_printed_reset_command_works_from_the_course_folder_and_from_work(course, tmp_path, where):
    # The notice prints the command with the venv's absolute path (.venv is never activated);
    # the command finds the workspace and the course from where a student runs it.
    work = tmp_path / "work"
    sync(course, work)
    (work / "01_graph.ipynb").write_text(notebook("my answers"))
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed"))
    [event] = sync(course, work)
    command = event.message().split("to start over with it (your copy goes to backups/):")[1].split("\n")[0].strip()
    (work / "backups").mkdir(exist_ok=True)
    cwd = {"root": tmp_path, "work": work, "work/backups": work / "backups"}[where]
    result = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert cell(work / "01_graph.ipynb") == "shipped 01, fixed"


def test_a_workspace_without_a_course_says_where_to_run_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli(["workspace"]) == 1 and cli(["lab"]) == 1
    assert "no course notebooks (NN_*.ipynb) in notebooks: run this from the course folder" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


def test_reset_outside_any_workspace_says_where_to_run_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli(["reset", "01"]) == 1
    assert "no workspace in work: run this from the course folder or from its work/ folder" in capsys.readouterr().err


def test_work_is_ignored_by_git():
    result = subprocess.run(["git", "check-ignore", "-q", "work/01_dynamic_graph.ipynb"], cwd=ROOT)
    assert result.returncode == 0


def test_make_lab_opens_the_workspace_not_the_shipped_notebooks():
    makefile = (ROOT / "Makefile").read_text()
    lab = makefile.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "autograd-lab lab --course notebooks --work work" in lab
    assert "--notebook-dir=notebooks" not in makefile
    assert "doctor --quick" in lab  # no torch import before the server starts


def test_solve_reads_the_workspace_it_is_pointed_at(tmp_path):
    # The student's copy (any folder) works as input: nothing assumes notebooks/.
    from autograd_lab.course.solve import solve

    work = tmp_path / "work"
    sync(ROOT / "notebooks", work)
    written = solve([str(work / "00_start_here.ipynb")], tmp_path / "solved")
    assert [p.name for p in written] == ["00_start_here.ipynb"]
    assert "NotImplementedError" not in Path(written[0]).read_text()


# ---- autograd-lab lab: the server extension and the command line ----------------------

class FakeContents:
    def __init__(self, root):
        self.root_dir = str(root)


def test_a_stale_tab_cannot_save_over_a_fresh_copy(course, tmp_path):
    from tornado.web import HTTPError

    from autograd_lab.course.lab import refuse_stale_save

    work = tmp_path / "work"
    sync(course, work)
    opened = json.loads((work / "01_graph.ipynb").read_text())  # what a tab holds
    save = lambda content: refuse_stale_save({"type": "notebook", "content": content}, "01_graph.ipynb",
                                             FakeContents(work))
    save(opened)  # nothing was replaced: saving is as usual
    backup = reset(course, work, "01")
    with pytest.raises(HTTPError) as refused:
        save(opened)
    assert refused.value.status_code == 409
    message = refused.value.log_message
    assert "Not saved: 01_graph.ipynb was replaced by a fresh copy (autograd-lab reset" in message
    assert f"backups/{backup.name}" in message and "Save Notebook As" in message
    save(json.loads((work / "01_graph.ipynb").read_text()))  # a tab opened after the reset saves
    refuse_stale_save({"type": "notebook", "content": opened}, "new.ipynb", FakeContents(work))  # a new file


def test_lab_command_line_gives_jupyter_the_course_settings(tmp_path):
    from autograd_lab.course.lab import jupyter_command

    command = jupyter_command(tmp_path, ["--no-browser"], open_file=tmp_path / "COURSE-UPDATES.md")
    assert command[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={tmp_path}" in command and "--KernelManager.transport=ipc" in command
    assert "--ServerApp.jpserver_extensions=autograd_lab.course.lab=True" in command
    assert command[-2:] == ["--no-browser", str(tmp_path / "COURSE-UPDATES.md")]


def test_lab_settings_turn_the_news_pop_up_off(tmp_path, monkeypatch):
    from autograd_lab.course import lab

    monkeypatch.setenv("JUPYTERLAB_DIR", str(tmp_path))
    path = lab.install_settings()
    assert path == tmp_path / "settings" / "overrides.d" / "autograd-lab.json"
    settings = json.loads(path.read_text())
    assert settings["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}


def test_the_waiting_updates_are_printed_after_jupyterlabs_start(course, tmp_path, capsys):
    from autograd_lab.course.lab import print_waiting_updates

    work = tmp_path / "work"
    sync(course, work)
    print_waiting_updates(work)
    assert capsys.readouterr().out == ""
    (work / "01_graph.ipynb").write_text(notebook("my answers"))
    (course / "01_graph.ipynb").write_text(notebook("shipped 01, fixed"))
    sync(course, work)
    print_waiting_updates(work)
    out = capsys.readouterr().out
    assert "Course update: 01_graph.ipynb changed" in out and "COURSE-UPDATES.md" in out


def test_only_lab_passes_unknown_arguments_on(capsys):
    with pytest.raises(SystemExit):
        cli(["workspace", "--no-browser"])
    assert "unrecognized arguments: --no-browser" in capsys.readouterr().err
