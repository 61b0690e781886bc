"""Grade a batch: ``--jobs`` submissions at a time, each in a worker process of its own.

For each submission the grader, in its own process:

1. hashes the file and reads it as nbformat (a malformed file is an ``error``
   report, never a crash);
2. copies it into a private work folder (owned by the sandbox user when there is
   one) and starts ``worker.py`` there, in a new process group, with a wall-clock
   limit;
3. kills whatever the worker and its kernels left running;
4. judges the records that came back (``scoring.py``) and writes the student's
   reports at once (``reports.py``), so partial results survive an interrupted batch;
5. checks that the submission's hash did not change.
"""

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

from autograd_lab import exercises

from . import reports, scoring
from .execute import code_cells
from .progress import ProgressBar
from .sandbox import Sandbox, kill_processes_of
from .submissions import UsageError, exercise_ids_marked, find_submissions, read_notebook, sha256


@dataclass(frozen=True)
class Options:
    out: str
    jobs: int = 2
    cell_timeout: float = 60.0
    check_timeout: float = 10.0
    submission_timeout: float = 900.0
    notebooks: tuple = ()         # notebook numbers ("00") whose exercises are graded; () = infer
    memory_mb: int = 2048
    output_limit: int = 100_000   # characters of printed output kept per cell
    progress: bool = True
    kernel_python: str = sys.executable   # needs torch, ipykernel and autograd_lab


def choose_exercises(notebooks, numbers):
    """The exercises graded: those of the notebooks named, or of every notebook marked in a submission."""
    if not numbers:
        marked = set().union(*(exercise_ids_marked(nb) for nb in notebooks if nb is not None))
        numbers = sorted({exercise_id.split(".")[0] for exercise_id in marked})
    if not numbers:
        raise UsageError("No submission has a cell marked with an exercise id, so the notebook to grade "
                         "is unknown. Say which with --notebook NN (for example --notebook 00).")
    chosen = [e for e in exercises.all_exercises() if e.id.split(".")[0] in numbers]
    if not chosen:
        raise UsageError(f"No registered exercise belongs to notebook(s) {', '.join(numbers)}.")
    return chosen


def grade_batch(arguments, options, stream=None):
    """Grade every submission; return the student reports (also written under ``options.out``)."""
    submissions = find_submissions(arguments)
    notebooks = {s.student: read_notebook(s.path) for s in submissions}
    chosen = choose_exercises([nb for nb, _ in notebooks.values()], options.notebooks)
    sandbox = Sandbox.for_this_machine(memory_mb=options.memory_mb, python=options.kernel_python)
    os.makedirs(options.out, exist_ok=True)
    workroot = tempfile.mkdtemp(prefix="autograd-lab-grade-")
    os.chmod(workroot, 0o711)  # sandbox users may reach their own folder, not list the others
    bar = ProgressBar(len(submissions), stream=stream, enabled=options.progress)
    done = []
    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    try:
        futures = [pool.submit(_grade_one, slot, submission, notebooks[submission.student],
                               chosen, sandbox, workroot, options)
                   for slot, submission in enumerate(submissions)]
        for future in as_completed(futures):
            report = future.result()
            reports.write_student(options.out, report)
            done.append(report)
            bar.advance(report["student"], f"{report['score']:g}/{report['max_score']:g}",
                        problem=bool(report["problems"]))
    finally:
        # On Ctrl-C: start nothing new, let the running submissions finish, keep what is done.
        pool.shutdown(wait=True, cancel_futures=True)
        # Every kernel is dead now. Without a sandbox user a hostile kernel could have
        # rewritten the files of students graded before it: write them all again.
        for report in done:
            reports.write_student(options.out, report)
        ids = [exercise.id for exercise in chosen]
        reports.write_gradebook(options.out, done, ids)
        reports.write_item_analysis(options.out, done, ids)
        shutil.rmtree(workroot, ignore_errors=True)
    return sorted(done, key=lambda report: report["student"])


def _grade_one(slot, submission, read, chosen, sandbox, workroot, options):
    started = time.monotonic()
    digest = sha256(submission.path)
    notebook, problem = read
    problems, execution = [], None
    if notebook is None:
        problems.append(problem)
    else:
        try:
            execution = _execute(slot, submission, code_cells(notebook), chosen, sandbox, workroot, options)
        except Exception as error:  # one broken submission never stops the batch
            problems.append(f"grading failed: {type(error).__name__}: {error}")
        if execution is not None:
            problems += execution["events"]
    if sha256(submission.path) != digest:
        problems.append("the submission file changed while it was graded; grade it again")
    grades = [_grade(exercise, execution, notebook is None) for exercise in chosen]
    return {
        "student": submission.student,
        "submission": str(submission.path),
        "sha256": digest,
        "status": "error" if notebook is None or execution is None else "graded",
        "score": round(sum(g["score"] for g in grades), 4),
        "max_score": round(sum(g["max_score"] for g in grades), 4),
        "exercises": grades,
        "problems": problems,
        "cells": execution["cells"] if execution else [],
        "kernels_started": execution["kernels"] if execution else 0,
        "execution_time": round(time.monotonic() - started, 2),
        "sandbox": sandbox.describe(),
    }


def _grade(exercise, execution, malformed):
    if malformed:
        return scoring.error_grade(exercise, "the submission is not a valid notebook, so nothing ran")
    if execution is None:
        return scoring.error_grade(exercise, "the submission could not be run")
    if exercise.id in execution["records"]:
        return scoring.grade_from_payload(exercise, execution["records"][exercise.id], _seeds(exercise))
    why = execution["failures"].get(exercise.id, "no records came back")
    return scoring.error_grade(exercise, f"the answer could not be observed: {why}")


def _seeds(exercise):
    return [*exercise.public_seeds, *exercise.hidden_seeds]


def _execute(slot, submission, cells, chosen, sandbox, workroot, options):
    """Run the worker for one submission; its Execution as a dict."""
    folder = os.path.join(workroot, str(slot))
    home = os.path.join(folder, "home")
    os.makedirs(home)
    os.chmod(folder, 0o711)
    notebook_copy = os.path.join(home, "submission.ipynb")
    shutil.copyfile(submission.path, notebook_copy)
    uid = sandbox.uid_for(slot)
    if uid is not None:
        for path in (home, notebook_copy):
            os.chown(path, uid, uid)
        os.chmod(home, 0o700)
    job = {
        "cells": cells, "home": home, "spec_folder": os.path.join(folder, "kernels"),
        "uid": uid, "result_path": os.path.join(folder, "result.json"),
        "pgid_log": os.path.join(folder, "kernels.pgid"),
        "sandbox": {"memory_mb": sandbox.memory_mb, "file_mb": sandbox.file_mb,
                    "drop_privileges": sandbox.drop_privileges, "python": sandbox.python},
        "plan": [{"id": e.id, "answer_name": e.answer_name, "seeds": _seeds(e)} for e in chosen],
        "cell_timeout": options.cell_timeout, "check_timeout": min(options.check_timeout, options.cell_timeout),
        "output_limit": options.output_limit,
    }
    job_path = os.path.join(folder, "job.json")
    with open(job_path, "w") as file:
        json.dump(job, file)
    return _run_worker(job, job_path, uid, options.submission_timeout)


def _run_worker(job, job_path, uid, timeout):
    log_path = os.path.join(os.path.dirname(job_path), "worker.log")
    with open(log_path, "w") as log:
        worker = subprocess.Popen([sys.executable, "-m", "autograd_lab.grading.worker", job_path],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        try:
            worker.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"grading this submission took over {timeout:g} s and was stopped") from None
        finally:
            _kill_leftovers(worker.pid, job["pgid_log"], uid)
            worker.wait()
    try:
        with open(job["result_path"]) as file:
            return json.load(file)
    except (OSError, ValueError):
        with open(log_path) as file:
            lines = file.read().strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"the worker exited with status {worker.returncode}")


def _kill_leftovers(worker_pid, pgid_log, uid):
    groups = {worker_pid}
    if os.path.exists(pgid_log):
        with open(pgid_log) as file:
            groups |= {int(line) for line in file if line.strip().isdigit()}
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if uid is not None:
        kill_processes_of(uid)
