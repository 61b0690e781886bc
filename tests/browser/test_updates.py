"""A course update as a student meets it, in a real JupyterLab and Chromium (issue 26).

Before JupyterLab started (conftest.py), the course changed 01, which the student had
edited, and 02, which they never touched.  The notice must be where the student looks:
the last lines of the terminal and a page that JupyterLab opens by itself; 02 must be
refreshed without a word from the student; the reset command must work as printed; and
a reset while 01 is open in a tab must not be undone by that tab's next save.
"""

import html
import json
import re
import subprocess
import time
from urllib.parse import urlparse

import pytest

from test_lab import open_notebook, type_new_cell, wait_until

MARK = "autograd_lab_workspace"


@pytest.fixture(scope="module")
def names(course_update):
    return course_update


def log_lines(lab_log):
    return lab_log.read_text().splitlines()


def printed_reset_command(lab_log):
    lines = [line for line in log_lines(lab_log) if "to start over with it" in line]
    assert lines, "no reset command in JupyterLab's output"
    return lines[-1].split(":  ", 1)[1].strip()


def test_the_update_notice_comes_after_jupyterlabs_start_up_lines(lab, lab_log, names):
    lines = log_lines(lab_log)
    # JupyterLab's last start-up lines: "Use Control-C ...", then (with a generated token) the URLs.
    banner = max(i for i, line in enumerate(lines)
                 if "Use Control-C to stop this server" in line or "Or copy and paste one of these URLs" in line)
    notice = next(i for i, line in enumerate(lines) if line.startswith(f"Course update: {names['edited']}"))
    assert notice > banner
    # Nothing of JupyterLab's own start-up comes after it (later lines are the student's activity).
    startup = ("extension was successfully", "Skipped non-installed server", "Serving notebooks", "is running at")
    assert not [line for line in lines[notice:] if any(s in line for s in startup)]
    command = printed_reset_command(lab_log)
    assert re.fullmatch(r"/\S+/bin/autograd-lab reset 01", command), command  # the venv's, by its full path


def test_an_untouched_copy_was_refreshed_without_a_word(lab, lab_log, names):
    _, _, work = lab
    copy = json.loads((work / names["untouched"]).read_text())
    assert names["course_fix"] in "".join(copy["cells"][-1]["source"])
    assert copy["metadata"][MARK]["why"] == "a course update"
    assert any(line.startswith("refreshed ") and names["untouched"] in line for line in log_lines(lab_log))
    assert not (work / "updates" / names["untouched"]).exists()


def test_jupyterlab_opens_the_notice_by_itself(browser_context, lab, lab_home, artifacts, names):
    # What the student's browser is sent to: JupyterLab's "open this file" page for the notice.
    opener = next((lab_home / "runtime").glob("jpserver-file-to-run-*-open.html"))
    target = html.unescape(re.search(r'url=([^"]+)"', opener.read_text()).group(1))
    assert urlparse(target).path.endswith("/lab/tree/COURSE-UPDATES.md"), target
    page = browser_context.new_page()
    page.goto(target)
    preview = page.locator(".jp-MarkdownViewer .jp-RenderedMarkdown").first  # a document, not a notebook cell
    wait_until(lambda: preview.count() and "Course updates" in preview.inner_text(), 60, "the rendered notice")
    assert preview.locator("h1", has_text="Course updates").count() == 1  # rendered, not Markdown source
    text = preview.inner_text()
    assert names["edited"] in text and "reset 01" in text and names["untouched"] not in text
    page.screenshot(path=artifacts / "update-notice.png")
    page.close()


def test_a_reset_while_the_notebook_is_open_cannot_be_undone_by_its_tab(browser_context, lab, lab_log, artifacts,
                                                                        names):
    _, _, work = lab
    edited, note, fix = names["edited"], names["student_note"], names["course_fix"]
    page = open_notebook(browser_context, lab, edited)
    # The student types in the open notebook...
    type_new_cell(page, "typed_after_the_reset = 1")
    # ...and, in a terminal in work/ (where JupyterLab's terminal opens), runs the printed command.
    result = subprocess.run(printed_reset_command(lab_log), shell=True, cwd=work, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    backup = next((work / "backups").glob(edited.replace(".ipynb", "-*.ipynb")))
    assert note in backup.read_text()
    fresh = (work / edited).read_text()
    assert MARK in fresh and fix in fresh and note not in fresh
    time.sleep(1.5)  # the fresh copy is newer than what the tab loaded, by more than the clock's grain

    # Saving the stale tab: JupyterLab asks; "Overwrite" is refused with a message that says why.
    page.keyboard.press("Control+s")
    dialog = page.locator(".jp-Dialog")
    wait_until(lambda: dialog.locator(".jp-Dialog-header", has_text="File Changed").count(), 30, "File Changed")
    dialog.locator(".jp-Dialog-button", has_text="Overwrite").click()
    wait_until(lambda: dialog.locator(".jp-Dialog-header", has_text="File Save Error").count(), 30,
               "the refusal")
    message = dialog.inner_text()
    assert "Not saved" in message and backup.name in message and "Save Notebook As" in message, message
    page.screenshot(path=artifacts / "reset-stale-save-refused.png")
    dialog.locator(".jp-Dialog-button").last.click()
    assert (work / edited).read_text() == fresh  # the fresh copy survived the stale save
    page.close()

    # Opened again, the fresh copy saves as usual.
    page = open_notebook(browser_context, lab, edited)
    assert "typed_after_the_reset" not in page.inner_text(".jp-Notebook")
    type_new_cell(page, "typed_in_the_fresh_copy = 2")
    page.keyboard.press("Control+s")
    wait_until(lambda: "typed_in_the_fresh_copy" in (work / edited).read_text(), 30, "the fresh copy to save")
    assert MARK in (work / edited).read_text()
    page.close()
