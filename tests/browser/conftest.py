"""A real JupyterLab and a real Chromium for the browser tests (``make test-browser``).

The browser is Debian's ``chromium`` (``scripts/ensure-system-packages chromium``), driven
by the ``playwright`` package: no browser is downloaded, so the test runs offline.
JupyterLab starts the way ``make lab`` starts it (``autograd-lab lab``: the workspace, the
course's JupyterLab settings and server extension, IPC kernels), but on a temporary
course and workspace, on loopback, with a token and a free port, so a developer's own
``work/`` is never touched.  The course is a copy of ``notebooks/`` that receives an
update before the start, as after a ``git pull``: the student had edited 01 (which gets
a notice) and never touched 02 (which is refreshed).  Every wait is bounded; the server
and the browser are stopped even when a test fails.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "browser-artifacts"
CHROMIUM = os.environ.get("AUTOGRAD_LAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_S = 90
BIN = Path(sys.executable).parent
EDITED, UNTOUCHED = "01_dynamic_graph.ipynb", "02_vjp_scalar_loss.ipynb"
STUDENT_NOTE = "My notes on the dynamic graph."
COURSE_FIX = "A course fix, shipped after the student's copy was made."


def _missing(why):
    """Fail under ``make test-browser``, which provides everything; skip for ``pytest tests`` typed by hand."""
    if os.environ.get("AUTOGRAD_LAB_BROWSER_REQUIRED"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def missing():
    return _missing


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_server(url, process, log):
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"autograd-lab lab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"jupyter lab did not answer within {SERVER_START_S} s:\n{log.read_text()[-3000:]}")


def stop(process):
    """Stop a process group we started: politely, then for sure."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def append_markdown(path, text):
    notebook = json.loads(path.read_text())
    notebook["cells"].append({"cell_type": "markdown", "id": f"added-{len(notebook['cells'])}",
                              "metadata": {}, "source": text})
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


@pytest.fixture(scope="session")
def artifacts():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def lab_home(tmp_path_factory):
    """The folder of the test's course (``course/``), workspace (``work/``) and Jupyter state."""
    home = tmp_path_factory.mktemp("lab")
    course, work = home / "course", home / "work"
    shutil.copytree(ROOT / "notebooks", course)
    # The first `make lab`: the copies are made.
    subprocess.run([BIN / "autograd-lab", "workspace", "--course", course, "--work", work],
                   check=True, timeout=60, capture_output=True)
    append_markdown(work / EDITED, STUDENT_NOTE)   # the student's own work
    for name in (EDITED, UNTOUCHED):               # then `git pull` brings fixes
        append_markdown(course / name, COURSE_FIX)
    return home


@pytest.fixture(scope="session")
def course_update():
    """What changed before JupyterLab started (see ``lab_home``)."""
    return {"edited": EDITED, "untouched": UNTOUCHED, "student_note": STUDENT_NOTE, "course_fix": COURSE_FIX}


@pytest.fixture(scope="session")
def lab_log(artifacts):
    return artifacts / "jupyterlab.log"


@pytest.fixture(scope="session")
def lab(lab_home, lab_log):
    """JupyterLab started as `make lab` starts it; yields (base URL, token, workspace folder)."""
    home = lab_home
    work, settings = home / "work", home / "settings"
    # The test's only own setting: render every cell, not only those in view, so it can
    # see all outputs.  The course's settings (no news pop-up) come from `autograd-lab lab`.
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text('{"windowingMode": "none"}')
    # A student's JupyterLab: never strict mode (CI sets CI=true, which would make check() raise).
    env = {name: value for name, value in os.environ.items() if name not in ("CI", "AUTOGRAD_LAB_STRICT")}
    env.update(OMP_NUM_THREADS="1", JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"))
    port, token = free_port(), secrets.token_hex(16)
    command = [BIN / "autograd-lab", "lab", "--course", home / "course", "--work", work, "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}"]
    with open(lab_log, "w") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=home,
                                   start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_server(f"{base}/api/status?token={token}", process, lab_log)
        yield base, token, work
    finally:
        stop(process)


@pytest.fixture(scope="session")
def browser_context(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        _missing(f"{CHROMIUM} is missing: run scripts/ensure-system-packages chromium (make test-browser does)")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, args=CHROMIUM_FLAGS,
            headless=True, viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()  # also ends the Chromium processes
