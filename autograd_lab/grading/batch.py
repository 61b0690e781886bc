"""Grade a batch: ``--jobs`` submissions at a time, each in a worker process of its own.

For each submission the grader:

1. hashes the file and reads it as nbformat (a malformed file is an ``error``
   report, never a crash);
2. copies it into a private work folder and starts ``worker.py`` there, in a new
   process group, under a wall-clock limit and a memory watchdog over the
   worker's whole process tree; the worker runs the notebook in a bubblewrap
   sandbox (``sandbox.py``) and judges the records in its own process, so a
   hostile record costs that worker, never the batch or another submission;
3. kills whatever the worker and its kernels left running;
4. writes the student's reports at once (``reports.py``), so partial results
   survive an interrupted batch;
5. checks that the submission's hash did not change.

Whatever goes wrong with one submission becomes that submission's ``error``
report; the gradebook is always written.
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from autograd_lab import checking

from . import reports, scoring
from .execute import code_cells
from .progress import ProgressBar
from .sandbox import UNSANDBOXED_WARNING, Sandbox, SandboxUnavailable
from .submissions import UsageError, find_submissions, flag_shared_files, read_notebook, sha256
from .watchdog import Watchdog, kill_tree

# The worker judges records in its own process: this much memory on top of its kernels.
JUDGE_MEMORY_MB = 2048
MAX_PROBLEM_CHARS = 2000


@dataclass(frozen=True)
class Options:
    out: str
    jobs: int = 2
    cell_timeout: float = 60.0
    check_timeout: float = 10.0
    submission_timeout: float = 900.0
    notebooks: tuple = ()         # notebook numbers ("00") whose exercises are graded
    memory_mb: int = 2048         # resident memory of each submission's sandbox, all processes together
    output_limit: int = 100_000   # characters of printed output kept per cell
    progress: bool = True
    kernel_python: str = sys.executable   # needs torch, ipykernel and autograd_lab
    allow_unsandboxed: bool = False
    release: str = ""             # a student build (autograd-lab release) for the kernels; "" = build one


def choose_exercises(numbers):
    """The exercises of the notebooks named: never inferred from what a student's file says."""
    if not numbers:
        raise UsageError("Say which notebook's exercises to grade with --notebook NN (for example --notebook 00), "
                         "or grade an assignment with --assignment FILE.")
    chosen = [e for e in checking.all_exercises() if e.id.split(".")[0] in numbers]
    if not chosen:
        raise UsageError(f"No registered exercise belongs to notebook(s) {', '.join(numbers)}.")
    return chosen


def make_sandbox(options, workroot, stream=None):
    """The batch's sandbox, with kernels importing a student build; refuses unless it can contain them."""
    release = options.release or student_build(workroot)
    try:
        sandbox = Sandbox.for_this_machine(memory_mb=options.memory_mb, python=options.kernel_python,
                                           package_root=release, allow_unsandboxed=options.allow_unsandboxed)
    except SandboxUnavailable as error:
        raise UsageError(str(error)) from None
    if not sandbox.enabled:
        print(f"WARNING: {UNSANDBOXED_WARNING}. Every report says so.", file=stream or sys.stderr)
    return sandbox


_BUILDS = {}


def student_build(workroot):
    """A student build (no solutions) for the kernels, made once per grader process."""
    from autograd_lab.grading import release

    if "path" not in _BUILDS or not os.path.isdir(_BUILDS["path"]):
        folder = tempfile.mkdtemp(prefix="autograd-lab-release-")
        # Reused by every batch of this process, so removed when the process ends, not per batch.
        atexit.register(shutil.rmtree, folder, True)
        _BUILDS["path"] = release.build(folder)
    return _BUILDS["path"]


def grade_batch(arguments, options, stream=None):
    """Grade every submission; return the student reports (also written under ``options.out``)."""
    submissions = find_submissions(arguments)
    chosen = choose_exercises(options.notebooks)
    os.makedirs(options.out, exist_ok=True)
    workroot = tempfile.mkdtemp(prefix="autograd-lab-grade-")
    os.chmod(workroot, 0o700)
    done = []
    try:
        sandbox = make_sandbox(options, workroot, stream)
        shared = flag_shared_files(submissions)
        bar = ProgressBar(len(submissions), stream=stream, enabled=options.progress)
        with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            futures = {pool.submit(_grade_one, slot, submission, chosen, sandbox, workroot, options,
                                   shared.get(submission.student, [])): submission
                       for slot, submission in enumerate(submissions)}
            try:
                for future in as_completed(futures):
                    report = _report_of(future, futures[future], chosen, sandbox)
                    _write(options.out, report)
                    done.append(report)
                    bar.advance(report["student"], f"{report['score']:g}/{report['max_score']:g}",
                                problem=bool(report["problems"]))
            except BaseException:
                # On Ctrl-C: start nothing new, let the running submissions finish, keep what is done.
                for future in futures:
                    future.cancel()
                raise
    finally:
        ids = [exercise.id for exercise in chosen]
        reports.write_gradebook(options.out, done, ids)
        reports.write_item_analysis(options.out, done, ids)
        shutil.rmtree(workroot, ignore_errors=True)
    return sorted(done, key=lambda report: report["student"])


def _report_of(future, submission, chosen, sandbox):
    try:
        return future.result()
    except Exception as error:  # a bug of ours: still one report, and the batch goes on
        return _error_report(submission, chosen, sandbox, f"grading failed: {type(error).__name__}: {error}")


def _write(out, report):
    try:
        reports.write_student(out, report)
    except Exception as error:
        report["problems"].append(f"its report files could not be written ({type(error).__name__}: {error})")


def _error_report(submission, chosen, sandbox, problem, digest=""):
    grades = [scoring.error_grade(exercise, problem) for exercise in chosen]
    return _report(submission, digest, grades, [problem], None, sandbox, 0.0, "error")


def _report(submission, digest, grades, problems, execution, sandbox, seconds, status):
    if not sandbox.enabled:
        problems = [UNSANDBOXED_WARNING, *problems]
    return {
        "student": submission.student,
        "submission": submission.display,
        "sha256": digest,
        "status": status,
        "score": round(sum(g["score"] for g in grades), 4),
        "max_score": round(sum(g["max_score"] for g in grades), 4),
        "exercises": grades,
        "problems": [p[:MAX_PROBLEM_CHARS] for p in problems],
        "cells": execution["cells"] if execution else [],
        "kernels_started": execution["kernels"] if execution else 0,
        "execution_time": round(seconds, 2),
        "sandbox": sandbox.describe(),
    }


def _grade_one(slot, submission, chosen, sandbox, workroot, options, flags):
    started = time.monotonic()
    digest = sha256(submission.path)
    notebook, problem = read_notebook(submission.path)
    problems, outcome = list(flags), None
    if notebook is None:
        problems.append(problem)
    else:
        try:
            outcome = _execute(slot, submission, code_cells(notebook), chosen, sandbox, workroot, options)
        except Exception as error:  # one broken submission never stops the batch
            problems.append(f"grading failed: {type(error).__name__}: {error}")
    if outcome is not None:
        problems += outcome["execution"]["events"]
    if sha256(submission.path) != digest:
        problems.append("the submission file changed while it was graded; grade it again")
    why = problems[-1] if problems else "the submission could not be run"
    grades = [_grade(exercise, outcome, why) for exercise in chosen]
    execution = outcome["execution"] if outcome else None
    status = "graded" if outcome is not None else "error"
    return _report(submission, digest, grades, problems, execution, sandbox, time.monotonic() - started, status)


def _grade(exercise, outcome, why):
    if outcome is None:
        return scoring.error_grade(exercise, f"not graded: {why}")
    grade = outcome["grades"].get(exercise.id)
    return grade if grade is not None else scoring.error_grade(exercise, "no grade came back")


def _execute(slot, submission, cells, chosen, sandbox, workroot, options):
    """Run the worker for one submission; its execution and grades as a dict."""
    folder = os.path.join(workroot, str(slot))
    home = os.path.join(folder, "work")
    os.makedirs(home)
    shutil.copyfile(submission.path, os.path.join(home, "submission.ipynb"))
    job = {
        "cells": cells, "home": home, "spec_folder": os.path.join(folder, "kernels"),
        "result_path": os.path.join(folder, "result.json"),
        "pgid_log": os.path.join(folder, "kernels.pgid"),
        "sandbox": {"memory_mb": sandbox.memory_mb, "file_mb": sandbox.file_mb, "python": sandbox.python,
                    "package_root": sandbox.package_root, "read_only": list(sandbox.read_only),
                    "enabled": sandbox.enabled},
        "plan": [{"id": e.id, "answer_name": e.answer_name, "seeds": _seeds(e),
                  "hidden_seeds": list(e.hidden_seeds)} for e in chosen],
        "cell_timeout": options.cell_timeout, "check_timeout": min(options.check_timeout, options.cell_timeout),
        "output_limit": options.output_limit,
    }
    job_path = os.path.join(folder, "job.json")
    with open(job_path, "w") as file:
        json.dump(job, file)
    return _run_worker(job, job_path, options.submission_timeout, sandbox.memory_mb + JUDGE_MEMORY_MB)


def _seeds(exercise):
    return [*exercise.public_seeds, *exercise.hidden_seeds]


def _run_worker(job, job_path, timeout, memory_mb):
    log_path = os.path.join(os.path.dirname(job_path), "worker.log")
    with open(log_path, "w") as log:
        worker = subprocess.Popen([sys.executable, "-m", "autograd_lab.grading.worker", job_path],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        watchdog = Watchdog(worker.pid, memory_mb, max_processes=4096)
        try:
            with watchdog:
                worker.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"grading this submission took over {timeout:g} s and was stopped") from None
        finally:
            _kill_leftovers(worker.pid, job["pgid_log"])
            worker.wait()
    if watchdog.reason:
        raise RuntimeError(f"grading this submission was stopped because {watchdog.reason}")
    try:
        with open(job["result_path"]) as file:
            return json.load(file)
    except (OSError, ValueError):
        with open(log_path, errors="replace") as file:
            lines = file.read().strip().splitlines()
        raise RuntimeError(lines[-1][:500] if lines else f"the worker exited with status {worker.returncode}")


def _kill_leftovers(worker_pid, pgid_log):
    kill_tree(worker_pid)
    groups = {worker_pid}
    if os.path.exists(pgid_log):
        with open(pgid_log) as file:
            groups |= {int(line) for line in file if line.strip().isdigit()}
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

