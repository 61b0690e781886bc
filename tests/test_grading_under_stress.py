"""The grader under stress: a saturated machine, no sandbox, no cgroups, and SIGTERM.

Each test grades a few real submissions (the hostile ones of ``fixtures/grading``
beside honest neighbours) under conditions a classroom machine meets: every
core busy, a container without cgroup delegation, no sandbox at all, the instructor's
Ctrl-C.  Their expected grades are the batch's in ``test_grading.py``; this file stands
apart so that the two pytest workers (``--dist loadfile``) share the kernels.
"""

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autograd_lab.grading.batch import grade_batch

sys.path.insert(0, str(Path(__file__).parent))
from fixtures.grading.attacks import DAEMON_ONLY, MARKER  # noqa: E402
from fixtures.grading.batch import ALL, CUBE, grades, options, processes_with  # noqa: E402
from fixtures.grading.red_team import RESOURCE_ATTACKS, write_red_team  # noqa: E402
from fixtures.grading.submissions import base_cells, write_submissions  # noqa: E402


# --- grades that do not depend on timing ------------------------------------------

SATURATED_CASES = {"correct": 2, "hostile_cells": 1}
LOAD = r"""
import multiprocessing, os, subprocess, sys, time
end = time.time() + float(sys.argv[1])
def burn():
    while time.time() < end:
        pass
def churn_memory():
    size = min(1 << 30, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 16)
    while time.time() < end:
        block = bytearray(size)
        del block
def churn_processes():
    while time.time() < end:
        subprocess.run(["true"])
workers = [multiprocessing.Process(target=burn) for _ in range(os.cpu_count())]
workers += [multiprocessing.Process(target=churn_memory), multiprocessing.Process(target=churn_processes)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
"""


def _resource_batch(folder):
    from fixtures.grading.attacks import FORK_MEMORY
    folder.mkdir()
    write_red_team(folder)
    for path in folder.iterdir():
        if path.stem not in RESOURCE_ATTACKS:
            path.unlink()
    for case, copies in SATURATED_CASES.items():
        write_submissions(folder, [case], copies=copies)
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    nbformat.write(new_notebook(cells=base_cells() + [new_code_cell(FORK_MEMORY)]),
                   str(folder / "attack_fork_memory.ipynb"))
    return folder


def test_grades_are_the_same_on_a_saturated_machine(tmp_path):
    """#25.1: the hostile fixtures and their honest neighbours, graded with the machine saturated on purpose.

    Their grades with the machine idle are the expected ones: ``test_grading.py``'s batch
    grades every one of these submissions and asserts exactly those (``ALL``).
    """
    folder = _resource_batch(tmp_path / "submissions")
    students = [path.stem for path in folder.iterdir()]
    expected = {student: ALL[student if student in ALL else student.rsplit("_", 1)[0]][:2] for student in students}
    # The load: CPU burners, memory and process churn, and a second batch of the same hostile submissions.
    seconds = 1200
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds)], start_new_session=True)
    beside = subprocess.Popen([sys.executable, "-m", "autograd_lab.course.cli", "grade", str(folder), "--out",
                               str(tmp_path / "beside"), "--notebook", "00", "--cell-timeout", "10", "--no-progress"],
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(5)
        assert load.poll() is None and _runnable() >= os.cpu_count(), "the machine is not saturated"
        busy = grades(grade_batch([str(folder)], options(tmp_path / "busy", progress=False)))
    finally:
        for process in (beside, load):
            try:
                os.killpg(process.pid, signal.SIGTERM if process is beside else signal.SIGKILL)
            except ProcessLookupError:
                pass
        beside.wait(timeout=300)
        load.wait(timeout=60)
    assert busy == expected


def _runnable():
    """Processes runnable right now (``/proc/loadavg``'s fourth field): the load average lags by a minute."""
    with open("/proc/loadavg") as file:
        return int(file.read().split()[3].split("/")[0])


# --- no sandbox: still nothing survives ---------------------------------------------------

def test_unsandboxed_grading_leaves_no_daemon_and_grades_hidden_checks(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    folder = tmp_path / "submissions"
    folder.mkdir()
    nbformat.write(new_notebook(cells=base_cells() + [new_code_cell(DAEMON_ONLY.replace("{marker}", MARKER))]),
                   str(folder / "daemon.ipynb"))
    graded = grade_batch([str(folder)], options(tmp_path / "out", sandbox="none", allow_unsandboxed=True,
                                                 progress=False))
    report = graded[0]
    assert report["score"] == 2 and report["problems"][0].startswith("UNSANDBOXED"), report
    cube = {g["exercise_id"]: g for g in report["exercises"]}["00.cube_grad"]
    assert cube["hidden_passed"] == cube["hidden_total"] == len(CUBE.hidden_seeds)
    assert "started" in report["cells"][-1]["output"]
    assert processes_with(MARKER) == []


# --- a host without cgroup delegation -------------------------------------------------------

def test_without_cgroups_the_limits_are_polled_and_every_report_says_so(tmp_path, monkeypatch):
    """The fallback (a container without a cgroup file system): watchdog, RLIMIT_NPROC, and the warning."""
    from autograd_lab.grading import sandbox
    monkeypatch.setattr(sandbox.Cgroups, "for_this_machine", classmethod(lambda cls: cls(problem="simulated")))
    folder = tmp_path / "submissions"
    folder.mkdir()
    write_red_team(folder)
    for path in folder.iterdir():
        if path.stem not in ("rt_thread_bomb", "rt_tmpfs_filler"):
            path.unlink()
    write_submissions(folder, ["correct", "hostile_cells"])
    stderr = io.StringIO()
    graded = grade_batch([str(folder)], options(tmp_path / "out", progress=False), stream=stderr)
    assert grades(graded) == {s: ALL[s][:2] for s in ("rt_thread_bomb", "rt_tmpfs_filler", "correct", "hostile_cells")}
    assert "limits NOT enforced by the kernel: simulated" in stderr.getvalue()
    for report in graded:
        assert report["problems"][0] == "LIMITS NOT ENFORCED BY THE KERNEL: simulated", report["problems"]
        assert "NOT ENFORCED BY THE KERNEL" in report["sandbox"]
    hostile = {r["student"]: r for r in graded}["hostile_cells"]
    assert any("more than 2048 MiB" in p for p in hostile["problems"]), hostile["problems"]


# --- SIGTERM ------------------------------------------------------------------------------

def test_sigterm_stops_the_batch_and_leaves_nothing_behind(tmp_path):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    folder = tmp_path / "submissions"
    folder.mkdir()
    write_submissions(folder, ["correct", "infinite_loop", "partly_wrong"])
    out = tmp_path / "out"
    grader = subprocess.Popen([sys.executable, "-m", "autograd_lab.course.cli", "grade", str(folder), "--out", str(out),
                               "--notebook", "00", "--jobs", "1", "--no-progress"],
                              env={**os.environ, "TMPDIR": str(temporary)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not list(temporary.glob("autograd-lab-grade-*/*/kernel1/spec/connection.json")):
        assert grader.poll() is None and time.monotonic() < deadline, grader.communicate()[0][-2000:]
        time.sleep(0.5)
    time.sleep(3)
    grader.send_signal(signal.SIGTERM)
    output = grader.communicate(timeout=300)[0]
    gradebook = (out / "gradebook.csv").read_text() if (out / "gradebook.csv").exists() else ""
    assert grader.returncode != 0 and "Terminated" in output, output + gradebook
    # torch keeps a cache of its own there (torchinductor_<user>); nothing of ours may stay.
    assert [p.name for p in temporary.iterdir() if p.name.startswith("autograd-lab")] == [], output
    assert processes_with(str(temporary)) == []
    from autograd_lab.grading.limits import _mounts, _own_paths
    mounts, own = _mounts(), _own_paths()
    bases = [mounts[k] + own[k] for k in mounts if k in own]
    assert [p for base in bases for p in Path(base).glob(f"autograd-lab-{grader.pid}-*")] == []
    assert (out / "gradebook.csv").exists()
