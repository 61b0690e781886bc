"""Grade a batch: ``--jobs`` submissions at a time, each in a worker process of its own.

Before anything is written, the grader makes sure it can contain student code:
the sandbox and the cgroups are probed (``sandbox.py``, ``limits.py``); a
refusal leaves ``--out`` untouched.  What is and is not enforced is printed, and
is in every report.  Then, for each submission, the grader:

1. refuses a file that is not a regular file (a link to ``/dev/zero``, a FIFO)
   with an ``error`` report, hashes the file and reads it as nbformat (a
   malformed file is an ``error`` report, never a crash);
2. copies it into a private folder and starts ``worker.py`` there, in a new
   process group and a cgroup of its own (memory of its kernels plus judging),
   under a wall-clock limit; the worker runs the notebook in a sandbox
   and judges the records in its own process, so a hostile record costs that
   worker, never the batch or another submission;
3. kills whatever the worker and its kernels left running (the whole cgroup);
4. writes the student's reports at once (``reports.py``), so partial results
   survive an interrupted batch;
5. checks that the submission's hash did not change.

Whatever goes wrong with one submission becomes that submission's ``error``
report; once grading has started the gradebook is always written.  SIGTERM
stops the batch like Ctrl-C, but kills the submissions in progress: the
gradebook of what was finished is written and every temporary folder and cgroup
is removed.
"""

import atexit
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from autograd_lab import checking

from . import reports, scoring
from .execute import code_cells
from .limits import Group
from .progress import ProgressBar
from .sandbox import UNSANDBOXED_WARNING, Sandbox, SandboxUnavailable
from .submissions import UsageError, find_submissions, flag_shared_files, read_notebook, sha256
from .watchdog import Watchdog, kill_tree
from .worker import Factory

# The worker judges records in its own process: this much memory on top of its kernels.
JUDGE_MEMORY_MB = 2048
WORKER_TASKS = 256       # the worker's own threads and processes, on top of its kernel's
MAX_PROBLEM_CHARS = 2000


@dataclass(frozen=True)
class Options:
    out: str
    jobs: int = 2
    cell_timeout: float = 60.0    # CPU seconds of the sandbox per cell (3 times that of wall clock if idle)
    check_timeout: float = 10.0   # CPU seconds per call of an answer
    submission_timeout: float = 900.0
    notebooks: tuple = ()         # notebook numbers ("00") whose exercises are graded
    memory_mb: int = 2048         # memory of each submission's sandbox, all processes and tmpfs together
    disk_mb: int = 512            # each tmpfs of the sandbox (home and work folder, /tmp, /dev/shm)
    max_processes: int = 512      # processes and threads of each sandbox together
    output_limit: int = 100_000   # characters of printed output kept per cell
    progress: bool = True
    kernel_python: str = sys.executable   # needs torch, ipykernel and autograd_lab
    allow_unsandboxed: bool = False
    sandbox: str = "bubblewrap"   # or "container": the machine is a disposable container (Gradescope)
    release: str = ""             # a student build (autograd-lab release) for the kernels; "" = build one


class Terminated(BaseException):
    """SIGTERM arrived: stop now, keep what is finished, leave nothing behind."""


def choose_exercises(numbers):
    """The exercises of the notebooks named: never inferred from what a student's file says."""
    if not numbers:
        raise UsageError("Say which notebook's exercises to grade with --notebook NN (for example --notebook 00), "
                         "or grade an assignment with --assignment FILE.")
    chosen = [e for e in checking.all_exercises() if e.id.split(".")[0] in numbers]
    if not chosen:
        raise UsageError(f"No registered exercise belongs to notebook(s) {', '.join(numbers)}.")
    return chosen


def make_sandbox(options, stream=None):
    """The batch's sandbox, with kernels importing a student build; refuses unless it can contain them."""
    # A kernel of the container kind runs as another uid without bwrap's binds: it must reach the build
    # through the file system, so the build goes to a temporary folder rather than the grader's cache.
    release = options.release or student_build(cache=options.sandbox != "container")
    try:
        sandbox = Sandbox.for_this_machine(memory_mb=options.memory_mb, python=options.kernel_python,
                                           package_root=release, allow_unsandboxed=options.allow_unsandboxed,
                                           kind=options.sandbox, disk_mb=options.disk_mb)
    except SandboxUnavailable as error:
        raise UsageError(str(error)) from None
    sandbox = _with_processes(sandbox, options.max_processes)
    for warning in sandbox.warnings():
        print(f"WARNING: {warning}", file=stream or sys.stderr)
    return sandbox


def _with_processes(sandbox, count):
    from dataclasses import replace
    return replace(sandbox, max_processes=count)


_BUILDS = {}


def student_build(cache=True):
    """A student build (no solutions) for the kernels, made once per version of the course and torch.

    Kept in ``$AUTOGRAD_LAB_CACHE/builds/<hash of the package, solutions, notebooks and torch>``
    (``~/.cache/autograd-lab``), so a second batch does not pay for the reference records
    again; with ``cache=False`` (or no writable cache), one per grader process in a
    temporary folder, removed when the process ends.
    """
    from autograd_lab.grading import release

    if "path" in _BUILDS and os.path.isdir(_BUILDS["path"]):
        return _BUILDS["path"]
    try:
        cached = _cached_build_folder() if cache else None
    except (ImportError, OSError, AttributeError):   # no cache: a build of our own, as before
        cached = None
    if cached is not None and os.path.exists(os.path.join(cached, ".complete")):
        _BUILDS["path"] = cached
        return cached
    folder = tempfile.mkdtemp(prefix="autograd-lab-release-")
    release.build(folder)
    _open_to_all(folder)
    if cached is not None:
        try:
            open(os.path.join(folder, ".complete"), "w").close()
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            os.rename(folder, cached)   # atomic: a build is complete or absent
            folder = cached
            _prune(os.path.dirname(cached), keep=3)
        except OSError:
            pass
    if folder != cached:
        # Reused by every batch of this process, so removed when the process ends, not per batch.
        atexit.register(shutil.rmtree, folder, True)
    _BUILDS["path"] = folder
    return folder


def _cached_build_folder():
    import hashlib

    import torch

    from .release import NOTEBOOKS, PACKAGE, SOLUTIONS

    digest = hashlib.sha256(f"{torch.__version__} {sys.version}".encode())
    for root in (PACKAGE, SOLUTIONS, NOTEBOOKS):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and "public" not in path.parts \
                    and path.suffix != ".pyc":
                digest.update(str(path.relative_to(root.parent)).encode())
                digest.update(path.read_bytes())
    base = os.environ.get("AUTOGRAD_LAB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "autograd-lab")
    return os.path.join(base, "builds", digest.hexdigest()[:24])


def _prune(builds, keep):
    """Remove all but the ``keep`` newest builds (each change of the course makes a new one)."""
    entries = sorted(os.scandir(builds), key=lambda entry: entry.stat().st_mtime, reverse=True)
    for entry in entries[keep:]:
        shutil.rmtree(entry.path, ignore_errors=True)


def _open_to_all(folder):
    """The kernels may run as an unprivileged uid: they must be able to read the build."""
    for root, folders, files in os.walk(folder):
        for name in folders:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    os.chmod(folder, 0o755)


def grade_batch(arguments, options, stream=None):
    """Grade every submission; return the student reports (also written under ``options.out``)."""
    submissions = find_submissions(arguments)
    chosen = choose_exercises(options.notebooks)
    workroot = tempfile.mkdtemp(prefix="autograd-lab-grade-")
    os.chmod(workroot, 0o711)   # kernels that run as another uid reach their own folder, list nothing
    ipc_root = _short_folder()
    done, sandbox, running, factory = [], None, _Running(), None
    previous = _on_sigterm()
    try:
        sandbox = make_sandbox(options, stream)
        os.makedirs(options.out, exist_ok=True)
        regular = [s for s in submissions if _not_regular(s.path) is None]
        shared = flag_shared_files(regular)
        if sandbox.cgroups.kind != "systemd-run":   # a forked worker enters its cgroup itself
            factory = Factory()
        bar = ProgressBar(len(submissions), stream=stream, enabled=options.progress)
        with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            futures = {pool.submit(_grade_one, slot, submission, chosen, sandbox, (workroot, ipc_root), options,
                                   shared.get(submission.student, []), running, factory): submission
                       for slot, submission in enumerate(submissions)}
            try:
                for future in as_completed(futures):
                    report = _report_of(future, futures[future], chosen, sandbox)
                    _write(options.out, report)
                    done.append(report)
                    bar.advance(report["student"], f"{report['score']:g}/{report['max_score']:g}",
                                problem=bool(report["problems"]))
            except BaseException as error:
                # Ctrl-C: start nothing new, let the running submissions finish, keep what is done.
                # SIGTERM: the same, but the running submissions are stopped now.
                for future in futures:
                    future.cancel()
                if isinstance(error, Terminated):
                    running.stop_all()
                raise
    finally:
        if sandbox is not None:
            ids = [exercise.id for exercise in chosen]
            reports.write_gradebook(options.out, done, ids)
            reports.write_item_analysis(options.out, done, ids)
            sandbox.cgroups.remove()
        if factory is not None:
            factory.close()
        shutil.rmtree(workroot, ignore_errors=True)
        shutil.rmtree(ipc_root, ignore_errors=True)
        _restore_sigterm(previous)
    return sorted(done, key=lambda report: report["student"])


def _on_sigterm():
    """Make SIGTERM raise ``Terminated`` in the main thread, so every ``finally`` runs."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise Terminated()
    return signal.signal(signal.SIGTERM, terminate)


def _restore_sigterm(previous):
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


class _Running:
    """The workers in progress, so SIGTERM can stop them all."""

    def __init__(self):
        self._lock = threading.Lock()
        self._stops = {}
        self.stopping = False

    def add(self, key, stop):
        with self._lock:
            self._stops[key] = stop
            if self.stopping:
                stop()

    def remove(self, key):
        with self._lock:
            self._stops.pop(key, None)

    def stop_all(self):
        with self._lock:
            self.stopping = True
            stops = list(self._stops.values())
        for stop in stops:
            stop()


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
    if not sandbox.cgroups.enabled:
        problems = [f"LIMITS NOT ENFORCED BY THE KERNEL: {sandbox.cgroups.problem}", *problems]
    if not sandbox.enabled:
        problems = [UNSANDBOXED_WARNING, *problems]
    return scoring.clean({
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
    })


def _short_folder():
    """A private folder for the kernels' sockets, short enough for a unix socket's path (107 bytes)."""
    folder = tempfile.mkdtemp(prefix="autograd-lab-ipc-")
    if len(folder) > 60:   # a long TMPDIR: /tmp itself is short on every Linux
        os.rmdir(folder)
        folder = tempfile.mkdtemp(prefix="autograd-lab-ipc-", dir="/tmp")
    os.chmod(folder, 0o711)
    return folder


def _not_regular(path):
    """Why ``path`` cannot be a submission (a device, a FIFO, a folder), or None for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return f"it could not be read ({type(error).__name__})"
    if stat.S_ISREG(mode):
        return None
    return "it is not a regular file (a device, a FIFO or a socket, or a link to one); it was not read"


def _grade_one(slot, submission, chosen, sandbox, roots, options, flags, running, factory=None):
    started = time.monotonic()
    refused = _not_regular(submission.path)
    if refused:
        return _error_report(submission, chosen, sandbox, f"{submission.display}: {refused}")
    digest = sha256(submission.path)
    notebook, problem = read_notebook(submission.path)
    problems, outcome = list(flags), None
    if notebook is None:
        problems.append(problem)
    else:
        try:
            outcome = _execute(slot, submission, code_cells(notebook), chosen, sandbox, roots, options, running,
                               factory)
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


def _execute(slot, submission, cells, chosen, sandbox, roots, options, running, factory=None):
    """Run the worker for one submission; its execution and grades as a dict."""
    workroot, ipc_root = roots
    folder = os.path.join(workroot, str(slot))
    os.makedirs(folder)
    os.chmod(folder, 0o711)
    copy = os.path.join(folder, "submission.ipynb")   # the grader's own copy: read-only in the sandbox
    shutil.copyfile(submission.path, copy)
    os.chmod(copy, 0o644)
    job = {
        "cells": cells, "folder": folder, "submission": copy, "slot": slot, "ipc_root": ipc_root,
        "result_path": os.path.join(folder, "result.json"),
        "pgid_log": os.path.join(folder, "kernels.pgid"),
        "sandbox": sandbox.to_json(),
        "plan": [{"id": e.id, "answer_name": e.answer_name, "public_seeds": list(e.public_seeds),
                  "hidden_seeds": list(e.hidden_seeds), "gradcheck": bool(e.gradcheck)} for e in chosen],
        "cell_timeout": options.cell_timeout, "check_timeout": min(options.check_timeout, options.cell_timeout),
        "output_limit": options.output_limit,
    }
    group = leaf = None
    if sandbox.cgroups.enabled and sandbox.cgroups.kind != "systemd-run":
        group = sandbox.cgroups.group(f"slot{slot}", memory_mb=sandbox.memory_mb + JUDGE_MEMORY_MB,
                                      tasks=sandbox.max_processes + WORKER_TASKS, leaf=False)
        leaf = Group.create(dict(group.dirs), "worker")   # cgroup v2 keeps processes in leaves only
        job["cgroup"] = [list(item) for item in group.dirs]
        job["enter"] = [os.path.join(path, "cgroup.procs") for _, path in leaf.dirs]
    job["log_path"] = os.path.join(folder, "worker.log")
    job_path = os.path.join(folder, "job.json")
    with open(job_path, "w") as file:
        json.dump(job, file)
    try:
        return _run_worker(job, job_path, options.submission_timeout, sandbox.memory_mb + JUDGE_MEMORY_MB,
                           group, leaf, running, factory)
    finally:
        if group is not None:
            group.remove()


def _start_worker(job_path, leaf, factory):
    """A worker for the job: forked by the factory (already has torch imported), else a new process."""
    if factory is not None:
        try:
            return _Forked(factory, factory.start(job_path))
        except OSError:
            pass   # the factory is gone: a process of its own does the same work, a little slower
    argv = [sys.executable, "-m", "autograd_lab.grading.worker", job_path]
    with open(os.path.join(os.path.dirname(job_path), "worker.log"), "w") as log:
        return _Spawned(subprocess.Popen(leaf.wrap(argv) if leaf is not None else argv, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, start_new_session=True))


class _Spawned:
    def __init__(self, process):
        self.process, self.pid = process, process.pid

    def wait(self, timeout=None):
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(self.pid) from None


class _Forked:
    def __init__(self, factory, pid):
        self.factory, self.pid, self.status = factory, pid, None

    def wait(self, timeout=None):
        if self.status is None:
            self.status = self.factory.wait(self.pid, timeout)
        return self.status


def _run_worker(job, job_path, timeout, memory_mb, group, leaf, running, factory):
    worker = _start_worker(job_path, leaf, factory)

    def stop():
        _kill_leftovers(worker.pid, job["pgid_log"], group)
    running.add(worker.pid, stop)
    # Where no cgroup limits the worker, a watchdog polls its tree (see watchdog.py).
    watchdog = Watchdog(worker.pid, memory_mb, max_processes=4096) if group is None else None
    status = None
    try:
        if watchdog:
            watchdog.__enter__()
        status = worker.wait(timeout=timeout)
    except TimeoutError:
        raise RuntimeError(f"grading this submission took over {timeout:g} s and was stopped") from None
    finally:
        if watchdog:
            watchdog.__exit__(None, None, None)
        stop()
        if status is None:
            try:
                worker.wait(timeout=60)
            except TimeoutError:
                pass
        running.remove(worker.pid)
    if running.stopping:
        raise RuntimeError("the grader was stopped (SIGTERM) while this submission was graded")
    if watchdog and watchdog.reason:
        raise RuntimeError(f"grading this submission was stopped because {watchdog.reason}")
    try:
        with open(job["result_path"]) as file:
            return json.load(file)
    except (OSError, ValueError):
        if group is not None and group.events().oom_kills:
            raise RuntimeError(f"grading this submission was stopped because judging it needed more than "
                               f"{memory_mb} MiB of memory") from None
        with open(job["log_path"], errors="replace") as file:
            lines = file.read().strip().splitlines()
        raise RuntimeError(lines[-1][:500] if lines else f"the worker exited with status {status}")


def _kill_leftovers(worker_pid, pgid_log, group=None):
    if group is not None:
        group.kill()   # everything the submission started, wherever it went
    kill_tree(worker_pid)
    groups = {worker_pid}
    if os.path.exists(pgid_log):
        with open(pgid_log) as file:
            groups |= {int(line) for line in file if line.strip().isdigit()}
    for number in groups:
        try:
            os.killpg(number, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
