"""The second ``make lab``: seconds from the command to a JupyterLab that answers.

Set-up is done by then (``.venv/.installed`` is up to date), so this is what a student
waits for every day.  Side by side in one run, alternating:

- ``make lab``: the quick doctor (no torch import), ``autograd-lab lab`` (workspace,
  then JupyterLab with the course's extension);
- the peer, 397ff6f's recipe: the full doctor (imports torch, autocasts on the CPU),
  ``autograd-lab workspace``, then ``jupyter lab``.

Run from a clone whose set-up is done (``make setup``)::

    .venv/bin/python benchmarks/lab_start.py [--runs 5]

It prints a Markdown table for ``docs/benchmarks.md``.  Each start ends when
``/api/status`` answers; the server is then stopped.  Both use the clone's ``work/``.
"""

import argparse
import datetime
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "lab-start-benchmark"
TIMEOUT_S = 300


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def commands(port):
    server = f"--no-browser --ServerApp.ip=127.0.0.1 --port={port} --IdentityProvider.token={TOKEN}"
    root = " --allow-root" if os.geteuid() == 0 else ""
    return {
        "make lab": f'make lab LAB_ARGS="{server}"',
        "397ff6f: full doctor, then jupyter lab": (
            ".venv/bin/autograd-lab doctor || true; "
            ".venv/bin/autograd-lab workspace --course notebooks --work work; "
            f".venv/bin/jupyter lab --notebook-dir=work --KernelManager.transport=ipc{root} {server}"),
    }


def time_start(command, port):
    """Seconds until the server answers; the server is stopped before returning."""
    start = time.monotonic()
    process = subprocess.Popen(["bash", "-c", command], cwd=ROOT, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api/status?token={TOKEN}"
    try:
        while time.monotonic() - start < TIMEOUT_S:
            if process.poll() is not None:
                raise RuntimeError(f"{command!r} exited with {process.returncode} before the server answered")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return time.monotonic() - start
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"no answer within {TIMEOUT_S} s")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if not (ROOT / ".venv" / ".installed").exists():
        sys.exit("run `make setup` first: this measures the start after set-up")
    load_before = os.getloadavg()[0]
    seconds = {name: [] for name in commands(0)}
    for run in range(args.runs):
        for name in seconds:  # alternate, so a busy minute hits both
            port = free_port()
            seconds[name].append(time_start(commands(port)[name], port))
            print(f"run {run + 1}: {name}: {seconds[name][-1]:.1f} s", file=sys.stderr)
    print("| start | median s | min s | max s |\n|---|---|---|---|")
    for name, values in seconds.items():
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} | {max(values):.1f} |")
    print(f"\n{args.runs} runs each, alternating. Measured {datetime.date.today()} on {platform.machine()}, "
          f"{os.cpu_count()} CPU cores; 1-minute load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after.")


if __name__ == "__main__":
    main()
