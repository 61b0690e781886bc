"""A real JupyterLab and a real Chromium for the browser tests (``make test-browser``).

The browser is Debian's ``chromium`` (``scripts/ensure-system-packages chromium``), driven
by the ``playwright`` package: no browser is downloaded, so the test runs offline.
JupyterLab starts the way ``make lab`` starts it (``autograd-lab workspace``, then
``jupyter lab`` on the workspace with IPC kernels), but on a temporary workspace, on
loopback, with a token and a free port, so a developer's own ``work/`` is never touched.
Every wait is bounded; the server and the browser are stopped even when a test fails.
"""

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


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_server(url, process, log):
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
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


@pytest.fixture(scope="session")
def artifacts():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def lab(tmp_path_factory, artifacts):
    """A running JupyterLab on a fresh workspace; yields (base URL, token, workspace folder)."""
    home = tmp_path_factory.mktemp("lab")
    work = home / "work"
    subprocess.run([BIN / "autograd-lab", "workspace", "--course", ROOT / "notebooks", "--work", work],
                   check=True, timeout=60, capture_output=True)
    settings = home / "settings"
    # Render every cell, not only those in view, so the test can see all outputs.
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text('{"windowingMode": "none"}')
    # No "get notified about Jupyter news?" pop-up over the screenshots (and no network).
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env = dict(os.environ, OMP_NUM_THREADS="1", JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"))
    port, token = free_port(), secrets.token_hex(16)
    command = [BIN / "jupyter", "lab", "--no-browser", f"--notebook-dir={work}", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               "--KernelManager.transport=ipc"]  # as in the Makefile's LAB_FLAGS
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = artifacts / "jupyterlab.log"
    with open(log, "w") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=home,
                                   start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_server(f"{base}/api/status?token={token}", process, log)
        yield base, token, work
    finally:
        stop(process)


@pytest.fixture(scope="session")
def browser_context(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure-system-packages chromium")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, args=CHROMIUM_FLAGS,
            headless=True, viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()  # also ends the Chromium processes
